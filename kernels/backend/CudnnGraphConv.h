// CudnnGraphConv: one NHWC convolution through cuDNN's graph (backend) API, optionally with
// its epilogue fused: y = conv(x, w) * alpha [+ bias[c]] [+ residual]. The legacy
// cudnnConvolutionForward reaches only part of cuDNN's kernels; on Hopper the graph API's
// engines (the sm90 wgmma convolutions PyTorch uses) are several times faster at the small
// spatial sizes of 64x64 tiles. Plans are built and benchmarked once (prepare); execution
// builds a variant pack per pointer set once and then only calls cudnnBackendExecute, which
// is capturable in CUDA graphs. Deterministic engines only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/backend/CudnnPlans.h"
#include "kernels/device/DType.h"

namespace tessera {

struct GraphConvShape {
    DType dtype = DType::F16;
    int n = 1, cin = 0, h = 0, w = 0;  // input NHWC [n, h, w, cin]
    int cout = 0, k = 3, stride = 1, pad = 1;
    int ho = 0, wo = 0;          // output NHWC [n, ho, wo, cout]
    int xPitch = 0, yPitch = 0;  // elements between pixels of x and y where they are channel slices (0: packed)
    float alpha = 1.0f;
    bool bias = false;                  // + bias[cout] (float32)
    bool residual = false;              // + residual NHWC [n, ho, wo, cout], activation type
    bool allowRuntimeCompiled = false;  // engines that compile at prepare time (NVRTC)
    std::string key() const;
};

class GraphConv {
public:
    // Builds the operation graph and the deterministic execution plans the heuristics offer
    // (at most maxPlans) whose workspace fits workspaceCap. Throws std::runtime_error when
    // none exists (the caller then keeps the legacy path). With onlyEngine >= 0 (a choice from
    // the tuning cache) only the plan that PlanId names is built, and chosen without a
    // benchmark; it throws when the heuristics no longer offer it.
    using PlanId = GraphPlanId;
    GraphConv(cudnnHandle_t handle, const GraphConvShape& shape, std::size_t workspaceCap, int maxPlans = 8,
              PlanId only = {});
    ~GraphConv();
    GraphConv(const GraphConv&) = delete;
    GraphConv& operator=(const GraphConv&) = delete;

    // Times every candidate plan on the given buffers (median of `repeats` after a warm-up)
    // and keeps the fastest; returns its time in ms.
    double benchmark(cudaStream_t stream, const void* x, const void* w, void* y, const float* bias,
                     const void* residual, void* workspace, int repeats = 5);
    // Enqueues the chosen plan on the handle's stream.
    void run(const void* x, const void* w, void* y, const float* bias, const void* residual, void* workspace);

    std::size_t workspaceBytes() const;
    std::string engineName() const;  // e.g. "graph engine 12 (of 9 candidates)"
    PlanId planId() const;           // the chosen plan's engine and ordinal
    int candidates() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
