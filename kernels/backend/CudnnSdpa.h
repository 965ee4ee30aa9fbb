// CudnnSdpa: softmax(Q K^T * scale) V through cuDNN's fused attention (the graph API's one
// scaled-dot-product-attention node, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, cuDNN 9.13
// and later), beside Tessera's own fused kernel (FlashAttention.cuh). The backend times both
// at prepare per attention shape and keeps the faster (CudaAlgorithmChoice.cpp); cuDNN's plan
// is built for the prepared batch only, so a call over fewer images runs the own kernel.
// Operands are the fused kernel's (FlashAttentionArgs): rows of heads x headDim elements,
// `*Row` elements apart, images `*Image` apart, head h at column h * headDim. Plans are built and
// timed once; execution builds a variant pack per pointer set once, then only calls
// cudnnBackendExecute, which CUDA graphs capture.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend/CudnnPlans.h"
#include "kernels/ops/FlashAttention.cuh"

namespace tessera {

class CudnnSdpa {
public:
    using PlanId = GraphPlanId;

    // Why cuDNN's fused attention cannot compute this attention ("" when it may: cuDNN then
    // still has to offer a plan): the linked cuDNN is older than 9.13, fp32, a causal mask,
    // head dim above 256 or not a multiple of 8, or strides that leave rows unaligned.
    static std::string refusal(const FlashAttentionArgs& shape);

    // Builds the graph for `shape` (pointers unset; batch = the prepared batch) and the plans
    // cuDNN offers within `workspaceCap` (at most maxPlans; with only.engine >= 0 just that
    // one, chosen without timing). Throws std::runtime_error naming the shape and cuDNN's
    // message when there is none.
    CudnnSdpa(cudnnHandle_t handle, const FlashAttentionArgs& shape, std::size_t workspaceCap, int maxPlans = 4,
              PlanId only = {});
    ~CudnnSdpa();
    CudnnSdpa(const CudnnSdpa&) = delete;
    CudnnSdpa& operator=(const CudnnSdpa&) = delete;

    // Times each plan on `a`'s pointers (median of `repeats`) and keeps the fastest; its ms.
    double benchmark(cudaStream_t stream, const FlashAttentionArgs& a, void* workspace, int repeats = 10);
    // Enqueues the chosen plan on the handle's stream; `a` must have the prepared batch.
    void run(const FlashAttentionArgs& a, void* workspace);

    int batch() const;
    std::size_t workspaceBytes() const;
    PlanId planId() const;
    std::string engineName() const;  // "cuDNN SDPA engine 12 (1 of 2 candidates, compiled at prepare)"

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
