#include "app/cli/ForwardProfile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#if TESSERA_FORWARD_PROFILE_CUDA
#include "core/formats/TuningCache.h"
#endif

namespace tessera {

namespace {

std::string format(const char* pattern, auto... values) {
    char text[256];
    std::snprintf(text, sizeof text, pattern, values...);
    return text;
}

}  // namespace

std::string opKind(const std::string& opName) {
    // Stable Diffusion's transformer blocks by their part: attn1 (self), attn2 (cross),
    // norm1..3 (LayerNorm), ff.net.0 (GEGLU), ff.net.2 (the second linear, + residual).
    const std::string block = ".transformer_blocks.";
    if (const auto at = opName.find(block); at != std::string::npos) {
        const auto part = opName.find('.', at + block.size());
        if (part != std::string::npos) return "transformer." + opName.substr(part + 1);
    }
    // FLUX.1's blocks by their part, the block's index dropped: "double_blocks.7.img_attn.qkv" ->
    // "double_blocks.img_attn.qkv", "single_blocks.30.linear1" -> "single_blocks.linear1".
    for (const char* stack : {"double_blocks.", "single_blocks."}) {
        const std::string prefix = stack;
        if (opName.rfind(prefix, 0) != 0) continue;
        const auto part = opName.find('.', prefix.size());
        if (part != std::string::npos) return prefix + opName.substr(part + 1);
    }
    if (opName.find("attentions") != std::string::npos || opName.find("attn") != std::string::npos)
        return opName.find("group_norm") != std::string::npos ? "attention.group_norm" : "attention";
    return opName.substr(opName.rfind('.') + 1);
}

std::vector<OpKindTime> opTimesByKind(const std::vector<OpTiming>& ops) {
    std::map<std::string, OpKindTime> kinds;
    for (const OpTiming& op : ops) {
        OpKindTime& kind = kinds[opKind(op.name)];
        kind.ms += op.ms;
        kind.ops += 1;
    }
    std::vector<OpKindTime> sorted;
    for (auto& [name, kind] : kinds) {
        kind.kind = name;
        sorted.push_back(kind);
    }
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const OpKindTime& a, const OpKindTime& b) { return a.ms > b.ms; });
    return sorted;
}

void printOpProfile(std::ostream& out, const std::string& title, const std::vector<OpTiming>& ops, double gflop,
                    std::size_t top) {
    double total = 0;
    for (const OpTiming& op : ops) total += op.ms;
    out << title << ": " << ops.size() << " ops, sum of op times " << format("%.3f", total) << " ms ("
        << format("%.1f", total > 0 ? gflop / total : 0.0) << " TFLOP/s)\n";
    for (const OpKindTime& kind : opTimesByKind(ops))
        out << format("  kind %-22s %3d ops %8.3f ms %5.1f%%\n", kind.kind.c_str(), kind.ops, kind.ms,
                      total > 0 ? 100.0 * kind.ms / total : 0.0);
    std::vector<OpTiming> slowest(ops);
    std::stable_sort(slowest.begin(), slowest.end(), [](const OpTiming& a, const OpTiming& b) { return a.ms > b.ms; });
    for (std::size_t i = 0; i < std::min(top, slowest.size()); ++i)
        out << format("  op %-45s %8.4f ms\n", slowest[i].name.c_str(), slowest[i].ms);
}

#if TESSERA_FORWARD_PROFILE_CUDA

void runForwardOnRandomInputs(CudaBackend& gpu, const ModelGraph& graph, int batch, int tileH, int tileW,
                              std::uint64_t seed) {
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> inputs;
    std::vector<const float*> in;
    for (int v : graph.inputs()) {
        inputs.emplace_back(static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)));
        for (float& x : inputs.back()) x = graph.value(v).name == "timestep" ? 500.0f : normal(rng);
        in.push_back(inputs.back().data());
    }
    std::vector<std::vector<float>> outputs;
    std::vector<float*> outs;
    for (int v : graph.outputs()) {
        outputs.emplace_back(static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)));
        outs.push_back(outputs.back().data());
    }
    gpu.run(in, batch, outs);
}

namespace {

double mib(std::size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

// The forward timed as enqueue() runs it: with graphs on, one captured graph per forward.
void printForwardTimes(std::ostream& out, CudaBackend& gpu, const ForwardProfileSettings& s, bool graphs,
                       double gflop) {
    gpu.setGraphs(graphs);
    CudaBackend::ForwardTimes times = gpu.timeForwards(s.batch, s.warmup, s.repeats);
    std::sort(times.gpuMs.begin(), times.gpuMs.end());
    double enqueue = 0;
    for (double ms : times.hostEnqueueMs) enqueue += ms;
    const double median = times.gpuMs[times.gpuMs.size() / 2];
    const GraphStats stats = gpu.graphStats();
    const char* mode = !graphs ? "eager" : (stats.fallbackReason.empty() ? "graph" : "FAIL");
    out << format("  forward %-5s median %8.3f min %8.3f ms | enqueue %6.3f ms | %8.1f tiles/s | %6.1f TFLOP/s\n", mode,
                  median, times.gpuMs.front(), enqueue / static_cast<double>(times.hostEnqueueMs.size()),
                  s.batch * 1000.0 / median, gflop / median);
    if (!stats.fallbackReason.empty()) out << "  graph fallback: " << stats.fallbackReason << "\n";
}

}  // namespace

void printForwardProfile(std::ostream& out, const ModelGraph& graph, const TensorMap& weights,
                         const ForwardProfileSettings& s) {
    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend gpu(s.precision);
    TuningCache cache(TuningCache::resolvePath(s.tuningCache));
    gpu.setTuningCache(&cache);
    gpu.prepareGraph(graph, weights, s.batch, s.tileH, s.tileW);
    gpu.setTuningCache(nullptr);
    cache.save();
    const double prepareMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    runForwardOnRandomInputs(gpu, graph, s.batch, s.tileH, s.tileW, s.seed);
    const std::string what = s.name + " " + std::string(toString(s.precision)) + " tile " + std::to_string(s.tileW) +
                             "x" + std::to_string(s.tileH) + " batch " + std::to_string(s.batch);
    out << "\n== profile " << what << " on " << gpu.info().device << " (prepare " << format("%.0f", prepareMs)
        << " ms)\n"
        << gpu.planSummary();
    std::vector<OpTiming> ops;
    for (const CudaBackend::OpTime& op : gpu.profileOps(s.batch, s.repeats, true)) ops.push_back({op.name, op.ms});
    const double gflop = graph.flops(s.tileH, s.tileW) * s.batch / 1e9;
    printOpProfile(out, "profile (graph, event nodes) " + what, ops, gflop);
    for (bool graphs : {false, true}) printForwardTimes(out, gpu, s, graphs, gflop);
    const CudaMemoryPlan plan = gpu.memoryPlan();
    out << format("  arena %.1f MiB (weights %.1f, activations %.1f planned / %.1f unshared, workspace %.1f)\n",
                  mib(plan.totalBytes), mib(plan.weightsBytes), mib(plan.activationsBytes),
                  mib(plan.unsharedActivationsBytes), mib(plan.workspaceBytes));
    for (const std::string& w : gpu.tuningWarnings()) out << "  note: " << w << "\n";
    for (const std::string& w : cache.warnings()) out << "  note: " << w << "\n";
}

#endif

}  // namespace tessera
