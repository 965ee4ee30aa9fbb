// CudaBackend's facade: the public API of CudaBackend.h over CudaBackend::Impl
// (CudaBackendImpl.h, whose functions live in one file per responsibility).
#include "kernels/backend/CudaBackend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/backend/CudaCanvasStore.h"

namespace tessera {

namespace {

// "13.0" from CUDA's 13000.
std::string cudaVersionText(int version) {
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

// Why CUDA cannot be used, in words for a person choosing a backend: the runtime's own text
// ("CUDA driver version is insufficient for CUDA runtime version") says nothing about what to do.
std::string cudaUnusableReason(cudaError_t error) {
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaGetLastError();
    const std::string needed = cudaVersionText(CUDART_VERSION);
    if (driver == 0)
        return "no NVIDIA driver is installed (libcuda was not found); install the NVIDIA driver for CUDA " + needed +
               " or use the CPU";
    if (error == cudaErrorInsufficientDriver || driver < CUDART_VERSION)
        return "the NVIDIA driver is too old: it supports CUDA " + cudaVersionText(driver) +
               ", this build needs CUDA " + needed + " (a newer driver)";
    if (error == cudaErrorNoDevice) return "the NVIDIA driver found no GPU";
    return std::string("no usable CUDA device: ") + cudaGetErrorString(error);
}

}  // namespace

bool cudaDeviceAvailable(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = cudaUnusableReason(e);
        return false;
    }
    if (count == 0) {
        if (why) *why = "the NVIDIA driver found no GPU";
        return false;
    }
    if (why) why->clear();
    return true;
}

CudaBackend::CudaBackend(Precision precision, int device) : impl_(std::make_unique<Impl>(precision, device)) {}
CudaBackend::~CudaBackend() = default;

BackendInfo CudaBackend::info() const {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    BackendInfo i;
    i.name = "cuda";
    i.device = std::string(impl_->props.name) + " (sm_" + std::to_string(impl_->props.major) +
               std::to_string(impl_->props.minor) + ", " + dtypeName(impl_->dtype) + ", CUDA runtime " +
               std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", driver " +
               std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", cuDNN " +
               std::to_string(cudnnGetVersion()) + ")";
    return i;
}

void CudaBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) {
    impl_->prepare(graph, weights, batch, tileH, tileW, 1);
}
void CudaBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW,
                               int lanes) {
    impl_->prepare(graph, weights, batch, tileH, tileW, lanes);
}
void CudaBackend::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    impl_->run(inputs, batch, outputs);
}
void CudaBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    impl_->prepare(unet2DExecutionGraph(model.config()), model.tensors(), batch, tileH, tileW, 1);
}
CudaMemoryPlan CudaBackend::planGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH,
                                      int tileW) {
    return impl_->planOnly(graph, weights, batch, tileH, tileW);
}
const ModelGraph& CudaBackend::graph() const { return impl_->graph; }
int CudaBackend::lanes() const { return impl_->prepared ? impl_->lanes : 0; }
void CudaBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    impl_->run({x, timesteps}, batch, {out});
}
Precision CudaBackend::precision() const { return impl_->precision; }
CudaMemoryPlan CudaBackend::memoryPlan() const { return impl_->plan; }
std::string CudaBackend::planSummary() const { return impl_->summary; }
std::vector<CudaBackend::AttentionPath> CudaBackend::attentionPaths() const { return impl_->attentionRecords; }
CUstream_st* CudaBackend::stream() const { return impl_->stream.get(); }
void* CudaBackend::deviceInput(int lane) const { return impl_->lanePtr(lane, impl_->inputBuf); }
const void* CudaBackend::deviceOutput(int lane) const { return impl_->lanePtr(lane, impl_->outputBuf); }
void* CudaBackend::deviceTokens(int lane) const {
    return impl_->tokenBuf < 0 ? nullptr : impl_->lanePtr(lane, impl_->tokenBuf);
}
float* CudaBackend::deviceVector(const std::string& name, int lane) const {
    for (int v : impl_->graph.inputs()) {
        const GraphValue& g = impl_->graph.value(v);
        const int buf = g.kind == ValueKind::Vector ? impl_->valueVec[static_cast<std::size_t>(v)].buf : -1;
        if (g.name == name && buf >= 0) return reinterpret_cast<float*>(impl_->lanePtr(lane, buf));
    }
    return nullptr;
}
float* CudaBackend::deviceTimesteps(int lane) const {
    return reinterpret_cast<float*>(impl_->lanePtr(lane, impl_->timestepBuf));
}
void* CudaBackend::deviceGraphInput(std::size_t k, int lane) const {
    return impl_->graphValuePtr(impl_->graph.inputs().at(k), lane);
}
const void* CudaBackend::deviceGraphOutput(std::size_t k, int lane) const {
    return impl_->graphValuePtr(impl_->graph.outputs().at(k), lane);
}
std::unique_ptr<TiledCanvasStore> CudaBackend::makeCanvasStore(std::uint64_t canvasBytes) {
    return makeCudaCanvasStore(*this, *this, canvasBytes);
}
float* CudaBackend::stagedInput(std::size_t k) const { return impl_->stagingPtr(impl_->stageIn, k); }
const float* CudaBackend::stagedOutput(std::size_t k) const { return impl_->stagingPtr(impl_->stageOut, k); }
void CudaBackend::enqueueStaged(int batch) { impl_->enqueueStaged(batch); }
int CudaBackend::inputChannelsPadded() const { return impl_->inPad; }
int CudaBackend::outputChannelsPadded() const { return impl_->outPad; }
void CudaBackend::enqueue(int batch) { impl_->enqueue(batch, 0, nullptr); }
void CudaBackend::enqueue(int batch, int lane, CUstream_st* stream) { impl_->enqueue(batch, lane, stream); }
void CudaBackend::setGraphs(bool enabled) {
    impl_->graphsWanted = enabled;
    if (!impl_->graphsFailed) impl_->graphStats.mode = enabled ? "tile" : "off";
}
GraphStats CudaBackend::graphStats() const { return impl_->graphStats; }
void CudaBackend::setTuningCache(TuningCache* cache) { impl_->tuning.setCache(cache); }
void CudaBackend::setTileTerms(int imagesPerTile, int pixelScale) {
    impl_->imagesPerTile = std::max(1, imagesPerTile);
    impl_->pixelScale = std::max(1, pixelScale);
}
void CudaBackend::setReservedBytes(std::size_t bytes) { impl_->reservedBytes = bytes; }
TuningInfo CudaBackend::tuningInfo() const { return impl_->tuning.info(impl_->settings.values); }
std::vector<std::string> CudaBackend::tuningWarnings() const { return impl_->tuning.warnings(); }
std::vector<CudaBackend::OpTime> CudaBackend::profileOps(int batch, int repeats, bool inGraph) {
    return impl_->profileOps(batch, repeats, inGraph);
}
CudaBackend::ForwardTimes CudaBackend::timeForwards(int batch, int warmup, int repeats) {
    return impl_->timeForwards(batch, warmup, repeats);
}
std::vector<CudaBackend::LayerTrace> CudaBackend::traceForward(const float* x, const float* timesteps, int batch) {
    return impl_->traceForward(x, timesteps, batch);
}

}  // namespace tessera
