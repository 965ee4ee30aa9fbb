#include "kernels/backend/CudnnPlans.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/GpuTiming.h"

namespace tessera::cudnn {

Desc::Desc(cudnnBackendDescriptorType_t type) { TESSERA_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }

Desc::~Desc() {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
}

Desc& Desc::operator=(Desc&& o) noexcept {
    if (this != &o) {
        if (d_) (void)cudnnBackendDestroyDescriptor(d_);
        d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
}

Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count, const void* v) {
    TESSERA_CHECK(cudnnBackendSetAttribute(d_, name, type, count, v));
    return *this;
}

Desc& Desc::set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
}

void Desc::finalize() { TESSERA_CHECK(cudnnBackendFinalize(d_)); }

cudnnDataType_t typeOf(DType t) {
    return t == DType::F32 ? CUDNN_DATA_FLOAT : (t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}

Desc tensor(std::int64_t id, cudnnDataType_t type, const std::vector<std::int64_t>& dims,
            const std::vector<std::int64_t>& strides, bool isVirtual, bool byValue) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t alignment = 16, rank = static_cast<std::int64_t>(dims.size());
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (isVirtual) {
        const bool v = true;
        d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    if (byValue) {
        const bool v = true;
        d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    d.finalize();
    return d;
}

namespace {

template <typename Note>
std::vector<Note> notesOf(cudnnBackendDescriptor_t engine, cudnnBackendAttributeName_t name,
                          cudnnBackendAttributeType_t type, int max) {
    std::vector<Note> notes(static_cast<std::size_t>(max));
    std::int64_t n = 0;
    if (cudnnBackendGetAttribute(engine, name, type, max, &n, notes.data()) != CUDNN_STATUS_SUCCESS) return {};
    notes.resize(static_cast<std::size_t>(std::max<std::int64_t>(0, n)));
    return notes;
}

}  // namespace

std::vector<Plan> findPlans(cudnnHandle_t handle, const Desc& graph, std::size_t workspaceCap, int maxPlans,
                            GraphPlanId only, PlanFilter filter, int& offered, std::vector<Desc>& keep) {
    std::vector<Plan> plans;
    std::map<std::int64_t, int> skipped;  // usable configurations passed over per engine (GraphPlanId)
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        skipped.clear();
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
            .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
        std::int64_t count = 0;
        if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                     &count, nullptr) != CUDNN_STATUS_SUCCESS)
            continue;
        std::vector<Desc> configs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (std::int64_t i = 0; i < count; ++i) {
            configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
            raw.push_back(configs.back().get());
        }
        std::int64_t got = 0;
        if (count == 0 ||
            cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                     &got, raw.data()) != CUDNN_STATUS_SUCCESS)
            continue;
        offered += static_cast<int>(got);
        for (std::int64_t i = 0; i < got && static_cast<int>(plans.size()) < maxPlans; ++i) {
            Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            std::int64_t one = 0;
            cudnnBackendDescriptor_t e = engine.get();
            if (cudnnBackendGetAttribute(raw[static_cast<std::size_t>(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &e) != CUDNN_STATUS_SUCCESS)
                continue;
            bool usable = true, runtimeCompiled = false;
            for (cudnnBackendNumericalNote_t n : notesOf<cudnnBackendNumericalNote_t>(
                     e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT)) {
                if (n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) usable = false;
                if (filter.noTensorCores &&
                    (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                    usable = false;
            }
            for (cudnnBackendBehaviorNote_t n : notesOf<cudnnBackendBehaviorNote_t>(
                     e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT))
                if (n == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) runtimeCompiled = true;
            if (runtimeCompiled && !filter.allowRuntimeCompiled) usable = false;
            if (!usable) continue;
            std::int64_t engineIndex = -1;
            (void)cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &one, &engineIndex);
            int ordinal = 0;
            for (const Plan& earlier : plans) ordinal += earlier.engineIndex == engineIndex ? 1 : 0;
            ordinal += skipped[engineIndex];
            if (only.engine >= 0 && (engineIndex != only.engine || ordinal != only.ordinal)) {
                ++skipped[engineIndex];
                continue;
            }
            Plan c;
            c.plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            c.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
                .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &raw[static_cast<std::size_t>(i)]);
            if (cudnnBackendFinalize(c.plan.get()) != CUDNN_STATUS_SUCCESS) continue;
            if (cudnnBackendGetAttribute(c.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &one, &c.workspace) != CUDNN_STATUS_SUCCESS)
                continue;
            if (c.workspace < 0 || static_cast<std::size_t>(c.workspace) > workspaceCap) continue;
            c.engineIndex = engineIndex;
            c.ordinal = ordinal;
            c.runtimeCompiled = runtimeCompiled;
            plans.push_back(std::move(c));
        }
        for (Desc& c : configs) keep.push_back(std::move(c));  // plans were made from them
        if (!plans.empty()) break;
    }
    return plans;
}

int fastestPlan(std::vector<Plan>& plans, cudaStream_t stream, int repeats,
                const std::function<bool(const Plan&)>& execute) {
    double best = -1;
    int bestIndex = -1;
    for (std::size_t i = 0; i < plans.size(); ++i) {
        Plan& c = plans[i];
        if (!execute(c)) {
            (void)cudaGetLastError();
            c.ms = -1;
            continue;
        }
        c.ms = medianGpuMs(stream, repeats, 0, [&] {
            if (!execute(c)) throw std::runtime_error("cuDNN graph API: a plan that ran once failed: " + lastError());
        });
        if (best < 0 || c.ms < best) {
            best = c.ms;
            bestIndex = static_cast<int>(i);
        }
    }
    return bestIndex;
}

std::string lastError() {
    char text[512] = "";
    cudnnGetLastErrorString(text, sizeof text);
    return text;
}

}  // namespace tessera::cudnn
