// Helpers shared by the suites that run a model graph on the CPU backend directly (tst_unetcond,
// tst_sdxlunet): seeded inputs for every graph input, one CPU run, ops by name.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "tests/core/NumericCompare.h"

namespace tessera::graphtest {

// n values from N(0, 1), seeded.
inline std::vector<float> randomVector(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// Runs `g` on the CPU with `in` (one host buffer per graph input, in order); returns every output,
// each poisoned with NaN before the run.
inline std::vector<std::vector<float>> runCpu(const ModelGraph& g, const TensorMap& w, int batch, int h, int wd,
                                              const std::vector<std::vector<float>>& in) {
    CpuBackend cpu(2);
    cpu.prepareGraph(g, w, batch, h, wd);
    std::vector<const float*> ptrs;
    for (const auto& x : in) ptrs.push_back(x.data());
    std::vector<std::vector<float>> out;
    for (int v : g.outputs()) out.emplace_back(static_cast<std::size_t>(g.elements(v, batch, h, wd)), NAN);
    std::vector<float*> outPtrs;
    for (auto& o : out) outPtrs.push_back(o.data());
    cpu.run(ptrs, batch, outPtrs);
    return out;
}

// Seeded random values for every input of `g` (timesteps made positive, up to ~1000).
inline std::vector<std::vector<float>> inputsFor(const ModelGraph& g, int batch, int h, int w, std::uint32_t seed) {
    std::vector<std::vector<float>> in;
    for (int v : g.inputs()) {
        auto x = randomVector(static_cast<std::size_t>(g.elements(v, batch, h, w)), seed++);
        if (g.value(v).name == "timestep")
            for (float& t : x) t = std::fabs(t) * 300.0f;
        in.push_back(std::move(x));
    }
    return in;
}

// What fusing for execution must keep, checked on `in` (a batch of `batch` samples): the primitive
// graph's FLOPs and outputs (relative L2 below 1e-5), each sample of the batch the bits it gets
// alone, and an effect of input `perturbed` (negated) on the output. Empty when all hold, else
// what failed.
inline QString fusedForwardMismatch(const ModelGraph& prim, const ModelGraph& fused, const TensorMap& w, int batch,
                                    int h, int wd, const std::vector<std::vector<float>>& in, std::size_t perturbed) {
    if (fused.flops(h, wd) != prim.flops(h, wd)) return QStringLiteral("fusing changed the FLOP count");
    const auto a = runCpu(prim, w, batch, h, wd, in);
    const auto b = runCpu(fused, w, batch, h, wd, in);
    if (!(relativeL2(b[0], a[0]) < 1e-5))
        return QStringLiteral("fused against primitive: relative L2 %1").arg(relativeL2(b[0], a[0]));
    std::vector<std::vector<float>> first;
    for (const auto& x : in) first.emplace_back(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / batch));
    const auto alone = runCpu(fused, w, 1, h, wd, first);
    if (!std::equal(alone[0].begin(), alone[0].end(), b[0].begin()))
        return QStringLiteral("the batch's first sample differs from the same sample alone");
    auto other = in;
    for (float& v : other[perturbed]) v = -v;
    if (!(relativeL2(runCpu(fused, w, batch, h, wd, other)[0], b[0]) > 1e-3))
        return QStringLiteral("input %1 does not reach the output").arg(perturbed);
    return {};
}

inline const GraphOp* opNamed(const ModelGraph& g, const std::string& name) {
    for (const GraphOp& op : g.ops())
        if (op.name == name) return &op;
    return nullptr;
}

}  // namespace tessera::graphtest
