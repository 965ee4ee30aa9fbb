// How torch.randn on a CUDA generator lays a float32 tensor over curand's Philox streams, shared
// by the device kernel (kernels/ops/TorchCudaRandn.cuh) and the CPU emulation
// (core/sampling/CudaGeneratorEmulation.h). Header-only, C++17 (nvcc includes it).
//
// Sources (pytorch/pytorch): aten/src/ATen/native/cuda/DistributionTemplates.h
// calc_execution_policy, distribution_elementwise_grid_stride_kernel, normal_and_transform
// (float: curand_normal4, 4 values per Philox block); aten/src/ATen/cuda/CUDAGeneratorImpl.cpp
// philox_cuda_state (the offset handed to the launch, then advanced).
//
// A launch has `blocks` blocks of 256 threads, blocks = min(ceil(count / 256), the GPU's
// resident blocks = multiProcessorCount * (maxThreadsPerMultiProcessor / 256)); T = blocks * 256.
// Thread t runs curand_init(seed, subsequence t, offset) and, for base = t, t + 4T, t + 8T, ...
// below count rounded up to a multiple of 4T, draws one curand_normal4 and writes its component c
// (0..3) to element base + c T where that is below count. So element i < T is component .x of
// thread i's first block (what A1111's NV source models), T <= i < 2T takes .y, and so on. The
// generator's offset then grows by 4 per grid-stride iteration: ((count - 1) / (4T) + 1) * 4.
// The layout, and so the noise of a tensor larger than T, depends on the GPU.
#pragma once

#include <cstdint>

namespace tessera {

constexpr std::uint32_t kTorchCudaRandnBlock = 256;

// The most threads torch launches for one randn on a GPU: multiProcessorCount * (maxThreads-
// PerMultiProcessor / 256) * 256 (an H200: 132 SMs * 2048 = 270,336; 28 SMs * 1536 = 43,008).
constexpr std::uint64_t torchCudaThreadCap(int multiProcessorCount, int maxThreadsPerMultiProcessor) {
    return static_cast<std::uint64_t>(multiProcessorCount) *
           static_cast<std::uint64_t>(maxThreadsPerMultiProcessor / static_cast<int>(kTorchCudaRandnBlock)) *
           kTorchCudaRandnBlock;
}

struct TorchCudaRandnLaunch {
    std::uint64_t blocks = 0;           // of kTorchCudaRandnBlock threads
    std::uint64_t threads = 0;          // T
    std::uint64_t offsetIncrement = 0;  // what the call adds to the generator's Philox offset
};

// The launch of torch.randn over `count` > 0 elements on a GPU whose thread cap is `threadCap`
// (torchCudaThreadCap; at least one block).
constexpr TorchCudaRandnLaunch torchCudaRandnLaunch(std::uint64_t count, std::uint64_t threadCap) {
    const std::uint64_t capBlocks = threadCap / kTorchCudaRandnBlock > 0 ? threadCap / kTorchCudaRandnBlock : 1;
    const std::uint64_t needed = (count + kTorchCudaRandnBlock - 1) / kTorchCudaRandnBlock;
    TorchCudaRandnLaunch launch;
    launch.blocks = needed < capBlocks ? needed : capBlocks;
    launch.threads = launch.blocks * kTorchCudaRandnBlock;
    // calc_execution_policy's counter_offset (4 engine calls per curand_normal4), rounded up to a
    // multiple of 4 by philox_cuda_state (already one).
    launch.offsetIncrement = ((count - 1) / (launch.threads * 4) + 1) * 4;
    return launch;
}

}  // namespace tessera
