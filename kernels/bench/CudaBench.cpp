// tessera-cuda-bench: times CudaBackend's UNet forward on random weights for the DDPM
// architectures (no Qt, so it runs on a bare GPU machine). Prints one line per case:
//   model precision tile batch | prepare ms | forward median/min ms | tiles/s | TFLOP/s | arena MiB
// Usage: tessera-cuda-bench [--quick] | --profile cifar|church TILE BATCH
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/ModelConfig.h"
#include "core/UNetModel.h"
#include "kernels/CudaBackend.h"
#include "kernels/CudaCheck.h"
#include "kernels/CudaEngine.h"

using namespace tessera;

namespace {

ModelConfig cifar() {
    ModelConfig c;
    c.blockOutChannels = {128, 256, 256, 256};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::Down, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up};
    c.attentionHeadDim = std::nullopt;
    c.downsamplePadding = 0;
    c.normEps = 1e-6f;
    c.freqShift = 1;
    c.flipSinToCos = false;
    return c;
}

ModelConfig lsun256() {
    ModelConfig c = cifar();
    c.blockOutChannels = {128, 128, 256, 256, 512, 512};
    c.downBlocks = {DownBlockType::Down, DownBlockType::Down, DownBlockType::Down, DownBlockType::Down,
                    DownBlockType::AttnDown, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up, UpBlockType::Up, UpBlockType::Up,
                  UpBlockType::Up};
    return c;
}

const char* name(Precision p) { return p == Precision::FP32 ? "fp32" : (p == Precision::FP16 ? "fp16" : "bf16"); }

void runCase(const char* modelName, const UNetModel& m, Precision p, int tile, int batch, int iters, bool graphs = false) {
    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend gpu(p);
    gpu.setGraphs(graphs);
    try {
        gpu.prepare(m, batch, tile, tile);
    } catch (const CudaOutOfMemory& e) {
        std::printf("%-8s %s tile %d batch %d: %s\n", modelName, name(p), tile, batch, e.what());
        return;
    }
    const double prepMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // Real inputs (not zeros) through the host path once, then the device path timed.
    std::vector<float> x(static_cast<std::size_t>(batch) * 3 * tile * tile), out(x.size());
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    std::vector<float> ts(static_cast<std::size_t>(batch), 500.0f);
    gpu.forward(x.data(), ts.data(), batch, out.data());
    cudaStream_t s = gpu.stream();
    cudaEvent_t a, b;
    TESSERA_CHECK(cudaEventCreate(&a));
    TESSERA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) gpu.enqueue(batch);
    std::vector<float> ms;
    double hostMs = 0;
    for (int i = 0; i < iters; ++i) {
        TESSERA_CHECK(cudaEventRecord(a, s));
        const auto h0 = std::chrono::steady_clock::now();
        gpu.enqueue(batch);
        hostMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
        TESSERA_CHECK(cudaEventRecord(b, s));
        TESSERA_CHECK(cudaEventSynchronize(b));
        float e = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&e, a, b));
        ms.push_back(e);
    }
    TESSERA_CHECK(cudaEventDestroy(a));
    TESSERA_CHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double flops = m.flopsPerEvaluation(tile, tile) * batch;
    const CudaMemoryPlan plan = gpu.memoryPlan();
    const GraphStats gs = gpu.graphStats();
    std::printf("%-8s %s %-5s tile %3d batch %2d | prepare %7.0f ms | forward median %8.3f min %8.3f ms | enqueue %6.3f ms | "
                "%8.1f tiles/s | %6.1f TFLOP/s | arena %7.1f MiB (w %.1f a %.1f/%.1f ws %.1f)\n",
                modelName, name(p), graphs ? (gs.fallbackReason.empty() ? "graph" : "FAIL") : "eager", tile, batch, prepMs, med, ms.front(), hostMs / iters, batch * 1000.0 / med,
                flops / med * 1e-9, plan.totalBytes / 1048576.0, plan.weightsBytes / 1048576.0,
                plan.activationsBytes / 1048576.0, plan.unsharedActivationsBytes / 1048576.0,
                plan.workspaceBytes / 1048576.0);
    if (!gs.fallbackReason.empty()) std::printf("  graph fallback: %s\n", gs.fallbackReason.c_str());
    std::fflush(stdout);
}

// A whole tiled run on the device engine: image, tile, batch, steps, graphs.
void runEngine(const char* modelName, std::shared_ptr<const UNetModel> m, int size, int tile, int overlap, int batch,
               int steps, GraphMode graphs) {
    RunConfig r;
    r.width = r.height = size;
    r.tile = tile;
    r.overlapPx = overlap;
    r.tileBatch = batch;
    r.steps = steps;
    r.scheduler = SchedulerKind::DDIM;
    r.precision = Precision::FP16;
    r.graphs = graphs;
    r.previewEvery = 0;
    CudaEngine engine;
    engine.setModel(m);
    RunObserver quiet;
    engine.run(r, quiet);   // warm-up: prepare, algorithm search, graph capture
    const RunResult res = engine.run(r, quiet);
    std::vector<double> stepGpu;
    double enqueue = 0;
    for (const StepTiming& s : res.record.steps) {
        stepGpu.push_back(s.gpuMs);
        enqueue += s.hostEnqueueMs;
    }
    std::sort(stepGpu.begin(), stepGpu.end());
    std::printf("engine %-8s %dx%d tile %d overlap %d batch %d, %d tiles, %d steps, graphs %-4s | total %8.1f ms | step gpu "
                "median %7.3f ms | enqueue %7.3f ms/step | %.0f tiles/s | peak %.0f MiB%s%s\n",
                modelName, size, size, tile, overlap, batch, res.record.tileCount, steps, res.record.graphs.mode.c_str(),
                res.record.totalMs, stepGpu[stepGpu.size() / 2], enqueue / steps,
                res.record.tileCount * steps * 1000.0 / res.record.totalMs, res.record.peakDeviceMiB,
                res.record.graphs.fallbackReason.empty() ? "" : " fallback: ",
                res.record.graphs.fallbackReason.c_str());
    std::fflush(stdout);
}

// Per-op GPU time of one forward (eager, events around every op), grouped by kind, beside
// the forward as one captured graph: where a tile evaluation's time goes.
void profile(const char* modelName, const UNetModel& m, int tile, int batch) {
    CudaBackend gpu(Precision::FP16);
    gpu.prepare(m, batch, tile, tile);
    std::printf("%s", gpu.planSummary().c_str());
    const std::vector<CudaBackend::OpTime> ops = gpu.profileOps(batch, 20, true);
    double total = 0;
    std::map<std::string, std::pair<double, int>> kinds;
    for (const auto& op : ops) {
        total += op.ms;
        std::string kind = op.name.substr(op.name.rfind('.') + 1);
        if (op.name.find("attentions") != std::string::npos || op.name.find("attn") != std::string::npos)
            kind = op.name.find("group_norm") != std::string::npos ? "attention.group_norm" : "attention";
        auto& k = kinds[kind];
        k.first += op.ms;
        k.second += 1;
    }
    const double flops = m.flopsPerEvaluation(tile, tile) * batch;
    std::printf("profile (graph, event nodes) %s fp16 tile %d batch %d: %zu ops, sum of op times %.3f ms (%.1f TFLOP/s)\n", modelName, tile,
                batch, ops.size(), total, flops / total * 1e-9);
    std::vector<std::pair<std::string, std::pair<double, int>>> sorted(kinds.begin(), kinds.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    for (const auto& [kind, v] : sorted)
        std::printf("  kind %-22s %3d ops %8.3f ms %5.1f%%\n", kind.c_str(), v.second, v.first, 100.0 * v.first / total);
    std::vector<CudaBackend::OpTime> top(ops);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
    for (std::size_t i = 0; i < std::min<std::size_t>(25, top.size()); ++i)
        std::printf("  op %-45s %8.4f ms\n", top[i].name.c_str(), top[i].ms);
    std::fflush(stdout);
    runCase(modelName, m, Precision::FP16, tile, batch, 30, false);
    runCase(modelName, m, Precision::FP16, tile, batch, 30, true);
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    std::string why;
    if (!cudaDeviceAvailable(&why)) {
        std::printf("%s\n", why.c_str());
        return 2;
    }
    if (argc == 5 && std::strcmp(argv[1], "--profile") == 0) {   // --profile cifar|church TILE BATCH
        try {
            const bool church = std::strcmp(argv[2], "church") == 0;
            const UNetModel m = UNetModel::random(church ? lsun256() : cifar(), 1);
            profile(argv[2], m, std::atoi(argv[3]), std::atoi(argv[4]));
        } catch (const std::exception& e) {
            std::printf("FAILED: %s\n", e.what());
            return 1;
        }
        return 0;
    }
    try {
        const UNetModel c = UNetModel::random(cifar(), 1);
        const UNetModel l = UNetModel::random(lsun256(), 1);
        {
            CudaBackend probe(Precision::FP16);
            std::printf("%s\n", probe.info().device.c_str());
        }
        const int iters = quick ? 10 : 30;
        for (bool g : {false, true}) {
            for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32}) runCase("cifar10", c, p, 64, 8, iters, g);
            runCase("cifar10", c, Precision::FP16, 32, 1, iters, g);
            runCase("cifar10", c, Precision::FP16, 32, 16, iters, g);
            runCase("cifar10", c, Precision::FP16, 64, 32, iters, g);
            runCase("cifar10", c, Precision::FP16, 128, 4, iters, g);
            runCase("lsun256", l, Precision::FP16, 64, 16, iters, g);
            runCase("lsun256", l, Precision::FP16, 128, 4, iters, g);
            runCase("lsun256", l, Precision::FP16, 256, 1, iters, g);
            runCase("lsun256", l, Precision::FP16, 256, 4, iters, g);
            runCase("lsun256", l, Precision::BF16, 256, 4, iters, g);
        }
        {
            auto cm = std::make_shared<const UNetModel>(UNetModel::random(cifar(), 2));
            auto lm = std::make_shared<const UNetModel>(UNetModel::random(lsun256(), 2));
            for (GraphMode g : {GraphMode::Off, GraphMode::Tile}) {
                runEngine("cifar10", cm, 512, 64, 16, 8, 10, g);
                runEngine("cifar10", cm, 256, 32, 8, 16, 10, g);
                runEngine("lsun256", lm, 1024, 256, 64, 4, 5, g);
            }
        }
        {
            CudaBackend gpu(Precision::FP16);
            gpu.prepare(c, 2, 64, 64);
            std::printf("%s", gpu.planSummary().substr(0, gpu.planSummary().find('\n') + 1).c_str());
        }
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
    return 0;
}
