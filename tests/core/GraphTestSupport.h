// Helpers shared by the suites that run a model graph on the CPU backend directly (tst_unetcond,
// tst_sdxlunet): seeded inputs for every graph input, one CPU run, ops by name.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"

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

inline const GraphOp* opNamed(const ModelGraph& g, const std::string& name) {
    for (const GraphOp& op : g.ops())
        if (op.name == name) return &op;
    return nullptr;
}

}  // namespace tessera::graphtest
