// tessera-cuda-bench: times CudaBackend's UNet forward on random weights for the DDPM
// architectures (no Qt, so it runs on a bare GPU machine). Prints one line per case:
//   model precision tile batch | prepare ms | forward median/min ms | tiles/s | TFLOP/s | arena MiB
// Usage: tessera-cuda-bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/ModelConfig.h"
#include "core/UNetModel.h"
#include "kernels/CudaBackend.h"
#include "kernels/CudaCheck.h"

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

void runCase(const char* modelName, const UNetModel& m, Precision p, int tile, int batch, int iters) {
    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend gpu(p);
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
    std::printf("%-8s %s tile %3d batch %2d | prepare %7.0f ms | forward median %8.3f min %8.3f ms | enqueue %6.3f ms | "
                "%8.1f tiles/s | %6.1f TFLOP/s | arena %7.1f MiB (w %.1f a %.1f/%.1f ws %.1f)\n",
                modelName, name(p), tile, batch, prepMs, med, ms.front(), hostMs / iters, batch * 1000.0 / med,
                flops / med * 1e-9, plan.totalBytes / 1048576.0, plan.weightsBytes / 1048576.0,
                plan.activationsBytes / 1048576.0, plan.unsharedActivationsBytes / 1048576.0,
                plan.workspaceBytes / 1048576.0);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    std::string why;
    if (!cudaDeviceAvailable(&why)) {
        std::printf("%s\n", why.c_str());
        return 2;
    }
    try {
        const UNetModel c = UNetModel::random(cifar(), 1);
        const UNetModel l = UNetModel::random(lsun256(), 1);
        {
            CudaBackend probe(Precision::FP16);
            std::printf("%s\n", probe.info().device.c_str());
        }
        const int iters = quick ? 10 : 30;
        for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32}) runCase("cifar10", c, p, 64, 8, iters);
        runCase("cifar10", c, Precision::FP16, 32, 1, iters);
        runCase("cifar10", c, Precision::FP16, 32, 16, iters);
        runCase("cifar10", c, Precision::FP16, 128, 4, iters);
        runCase("lsun256", l, Precision::FP16, 128, 4, iters);
        runCase("lsun256", l, Precision::FP16, 256, 1, iters);
        runCase("lsun256", l, Precision::FP16, 256, 4, iters);
        runCase("lsun256", l, Precision::BF16, 256, 4, iters);
        {
            CudaBackend gpu(Precision::FP16);
            gpu.prepare(c, 2, 64, 64);
            std::printf("%s", gpu.planSummary().c_str());
        }
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
    return 0;
}
