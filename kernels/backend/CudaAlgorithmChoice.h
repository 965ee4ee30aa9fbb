// The CUDA backend's algorithm choice: what prepare decides by timing (each conv shape's
// legacy cuDNN algorithm; fp16/bf16: graph-API plan or legacy, epilogue fused or apart; each
// attention shape's fused or blocked path), and its record in the tuning cache
// (core/formats/TuningCache.h). Each choice has an op key (the shape, batch included) and a text
// ("algo=1 math=1", "engine=12 config=0", "legacy", "apart", "fused", "blocked"); the cache
// holds them per TuningContext (device, driver, cuDNN, runtime, precision), so a new process
// makes the same choices and computes the same bits. The timing itself is GpuTiming.h's
// medianGpuMs; the choosing functions are CudaBackend::Impl's (CudaAlgorithmChoice.cpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cudnn.h>

#include "core/run/RunRecord.h"
#include "kernels/backend/CudnnGraphConv.h"

namespace tessera {

class TuningCache;  // core/formats/TuningCache.h

// "algo=1 math=1" <-> (algorithm, math type) of a legacy cuDNN convolution; nullopt for text
// that is not one (a damaged or foreign cache entry).
std::string legacyChoice(cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math);
std::optional<std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> parseLegacyChoice(const std::string& text);
// "engine=12 config=0" <-> a graph-API plan (GraphConv::PlanId); `none` ("legacy" / "apart")
// <-> no plan (engine -1).
std::string planChoiceText(std::optional<GraphPlanId> id, const char* none);
template <typename Plan>  // GraphConv or CudnnSdpa
std::string planChoice(const std::shared_ptr<Plan>& plan, const char* none) {
    return planChoiceText(plan ? std::optional<GraphPlanId>(plan->planId()) : std::nullopt, none);
}
std::optional<GraphConv::PlanId> parsePlanChoice(const std::string& text, const char* none);
// "implicit_gemm", ... for planSummary.
const char* algoName(cudnnConvolutionFwdAlgo_t a);

// The choices of one prepare: looked up in the tuning cache (if any) within this device's
// context, counted (hits, timed misses, refused cached choices with a warning each) and
// recorded for the run's digest. A cached choice the library refuses now is timed again and
// replaced.
class TuningLedger {
public:
    // Not owned; nullptr = no cache (every choice timed). It must outlive the prepare.
    void setCache(TuningCache* cache) { cache_ = cache; }
    void setContext(std::string context) { context_ = std::move(context); }
    void clear();  // a new prepare

    // The cached choice for `op`, if any.
    std::optional<std::string> cached(const std::string& op) const;
    void useCached(const std::string& op, const std::string& choice);
    void rejectCached(const std::string& op, const std::string& choice, const std::string& why);
    // A choice made now: `timed` ones are stored in the cache (heuristic ones are the same in
    // every process and are not).
    void useNew(const std::string& op, const std::string& choice, bool timed);

    // Hits, misses, refused, the digest of every choice used; `settings` as given.
    TuningInfo info(const std::map<std::string, std::string>& settings) const;
    // "  tuning: H choices from the cache, M timed, R refused; digest D\n" and the warnings.
    std::string summary() const;
    const std::vector<std::string>& warnings() const { return warnings_; }

private:
    TuningCache* cache_ = nullptr;
    std::string context_;
    std::map<std::string, std::string> used_;
    int hits_ = 0, misses_ = 0, rejected_ = 0;
    std::vector<std::string> warnings_;
};

}  // namespace tessera
