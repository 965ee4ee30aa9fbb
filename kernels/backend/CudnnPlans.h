// CudnnPlans: what every operation graph of cuDNN's backend (graph) API needs, shared by the
// convolutions (CudnnGraphConv.h) and the fused attention (CudnnSdpa.h): an owner of one
// backend descriptor, tensor descriptors, and the execution plans the heuristics offer for a
// finalized operation graph, filtered and timed the same way for both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/device/DType.h"

namespace tessera {

// One execution plan, as the tuning cache keeps it.
struct GraphPlanId {
    std::int64_t engine = -1;  // CUDNN_ATTR_ENGINE_GLOBAL_INDEX; -1 = none
    int ordinal = 0;           // among the usable configurations of that engine, in heuristics order
};

namespace cudnn {

// Owner of one cudnnBackendDescriptor_t.
class Desc {
public:
    Desc() = default;
    explicit Desc(cudnnBackendDescriptorType_t type);
    ~Desc();
    Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
    Desc& operator=(Desc&& o) noexcept;
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;

    cudnnBackendDescriptor_t get() const { return d_; }
    Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count, const void* v);
    Desc& set(cudnnBackendAttributeName_t name, const Desc& other);
    void finalize();

private:
    cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t typeOf(DType t);

// A finalized tensor descriptor of any rank (dims and strides in elements).
Desc tensor(std::int64_t id, cudnnDataType_t type, const std::vector<std::int64_t>& dims,
            const std::vector<std::int64_t>& strides, bool isVirtual = false, bool byValue = false);

// Which engines a graph may run on.
struct PlanFilter {
    bool noTensorCores = false;         // fp32: no tensor-core or down-converting engines
    bool allowRuntimeCompiled = false;  // engines compiled at prepare time (NVRTC)
};

struct Plan {
    Desc plan;
    std::int64_t workspace = 0;
    std::int64_t engineIndex = -1;
    int ordinal = 0;  // among the usable configurations of that engine (GraphPlanId)
    bool runtimeCompiled = false;
    double ms = 0;
};

// The deterministic plans the heuristics offer for `graph` (mode A, then the fallback list if A
// offers nothing usable), at most `maxPlans` within `workspaceCap`; with only.engine >= 0, just
// that one. `offered` counts the configurations the heuristics listed; the configurations the
// plans were made from join `keep`.
std::vector<Plan> findPlans(cudnnHandle_t handle, const Desc& graph, std::size_t workspaceCap, int maxPlans,
                            GraphPlanId only, PlanFilter filter, int& offered, std::vector<Desc>& keep);

// Runs every plan once through `execute` (false: it failed, ms = -1) and times the ones that
// ran (median of `repeats` after a warm-up); the index of the fastest, or -1 when none ran.
int fastestPlan(std::vector<Plan>& plans, cudaStream_t stream, int repeats,
                const std::function<bool(const Plan&)>& execute);

// The last error cuDNN recorded on this thread ("" when none).
std::string lastError();

}  // namespace cudnn
}  // namespace tessera
