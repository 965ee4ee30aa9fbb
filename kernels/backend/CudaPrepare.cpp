// CudaBackend::Impl: the device, and prepare() from a graph to a ready arena: lowering
// (CudaLowering.cpp), the memory plan (CudaMemoryPlan.h), the timed choices on a scratch arena
// (CudaAlgorithmChoice.cpp), the arena itself with the weights uploaded, and planSummary.
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "core/formats/TuningCache.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/NvtxRange.h"
#include "kernels/ops/FillUniform.cuh"

namespace tessera {

CudaBackend::Impl::Impl(Precision p, int dev) : precision(p), dtype(dtypeFor(p)), device(dev) {
    std::string why;
    if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
    int count = 0;
    TESSERA_CHECK(cudaGetDeviceCount(&count));
    if (dev < 0 || dev >= count)
        throw std::runtime_error("CUDA device " + std::to_string(dev) + " does not exist (" + std::to_string(count) +
                                 " present)");
    TESSERA_CHECK(cudaSetDevice(dev));
    TESSERA_CHECK(cudaGetDeviceProperties(&props, dev));
    if (p == Precision::BF16 && props.major < 8)
        throw std::runtime_error(std::string("bf16 needs compute capability 8.0 or newer; ") + props.name + " has " +
                                 std::to_string(props.major) + "." + std::to_string(props.minor));
    int driver = 0, runtime = 0;
    TESSERA_CHECK(cudaDriverGetVersion(&driver));
    TESSERA_CHECK(cudaRuntimeGetVersion(&runtime));
    tuning.setContext(TuningContext{props.name, std::to_string(props.major) + "." + std::to_string(props.minor), driver,
                                    runtime, static_cast<int>(cudnnGetVersion()), std::string(toString(p))}
                          .key());
    stream = makeStream(!settings.nonblockingStream);
    cudnn = makeCudnn();
    cublas = makeCublas();
    TESSERA_CHECK(cudnnSetStream(cudnn.get(), stream.get()));
    TESSERA_CHECK(cublasSetStream(cublas.get(), stream.get()));
    // fp32 means fp32: no TF32 anywhere (the CPU comparison is at 1e-5).
    TESSERA_CHECK(cublasSetMathMode(cublas.get(), p == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
    opStream = stream.get();
    opCublas = cublas.get();
}

void CudaBackend::Impl::prepare(const ModelGraph& g, const TensorMap& tensors, int batch, int h, int w, int laneCount) {
    if (batch < 1) throw std::invalid_argument("tile batch must be at least 1, got " + std::to_string(batch));
    if (h < 1 || w < 1) throw std::invalid_argument("tile size must be positive");
    if (laneCount < 1 || laneCount > kMaxLanes)
        throw std::invalid_argument("lanes must be 1.." + std::to_string(kMaxLanes) + ", got " +
                                    std::to_string(laneCount));
    TESSERA_CHECK(cudaSetDevice(device));
    clearPlan();
    maxBatch = batch;
    tileH = h;
    tileW = w;
    const NvtxRange nvtxPrepare("CudaBackend prepare " + std::to_string(batch) + "x" + std::to_string(w) + "x" +
                                std::to_string(h));
    for (;;) {
        {
            const NvtxRange nvtxLower("lower + plan arena");
            build(g, tensors);
            planArena();
        }
        const std::size_t freeBytes = freeForPlan();
        const std::size_t base = blob.size() + activationBytes + kCublasWorkspace;
        if (base > freeBytes) throw outOfMemory(base, freeBytes, blob.size() + kCublasWorkspace);
        try {
            // The convolutions' workspace also serves cuDNN's fused attention (chosen while lowering).
            convWorkspace = alignUp(std::max(chooseOnScratchArena(freeBytes, base), sdpaWorkspace));
            break;
        } catch (const DenseViewsRefused& e) {
            // Once per backend: later prepares copy the concatenations from the start.
            (void)cudaGetLastError();
            denseRefusal = e.what();
            denseViews = false;
            clearPlan();
            maxBatch = batch;
            tileH = h;
            tileW = w;
        }
    }
    const std::size_t weights = blob.size();
    const std::size_t total = placeArena(laneCount);

    plan.weightsBytes = weights;
    plan.activationsBytes = activationBytes;
    plan.unsharedActivationsBytes = unsharedBytes;
    plan.workspaceBytes = convWorkspace + kCublasWorkspace;
    plan.totalBytes = total;
    plan.lanes = lanes;
    plan.tensors = static_cast<int>(buffers.size());
    summary = describePlan(total);
    prepared = true;
}

CudaMemoryPlan CudaBackend::Impl::planOnly(const ModelGraph& g, const TensorMap& tensors, int batch, int h, int w) {
    if (batch < 1) throw std::invalid_argument("tile batch must be at least 1, got " + std::to_string(batch));
    if (h < 1 || w < 1) throw std::invalid_argument("tile size must be positive");
    TESSERA_CHECK(cudaSetDevice(device));
    clearPlan();
    maxBatch = batch;
    tileH = h;
    tileW = w;
    build(g, tensors);
    planArena();
    CudaMemoryPlan p;
    p.weightsBytes = blob.size();
    p.activationsBytes = activationBytes;
    p.unsharedActivationsBytes = unsharedBytes;
    p.workspaceBytes = kCublasWorkspace;
    p.totalBytes = p.weightsBytes + p.activationsBytes + p.workspaceBytes;
    p.tensors = static_cast<int>(buffers.size());
    clearPlan();  // nothing of this plan may run
    return p;
}

void CudaBackend::Impl::clearPlan() {
    prepared = false;
    lanes = 1;
    laneAct.assign(1, nullptr);
    laneCublas.clear();
    opStream = stream.get();
    opCublas = cublas.get();
    TESSERA_CHECK(cudnnSetStream(cudnn.get(), stream.get()));
    TESSERA_CHECK(cublasSetStream(cublas.get(), stream.get()));
    graphs.clear();
    graphsFailed = false;
    graphStats = GraphStats{};
    graphStats.mode = graphsWanted ? "tile" : "off";
    arena.reset();
    buffers.clear();
    ops.clear();
    convs.clear();
    graphNotes.clear();
    attentionNotes.clear();
    attentionRecords.clear();
    attentionChosen.clear();
    sdpaChosen.clear();
    sdpaWorkspace = 0;
    fusedChosen.clear();
    fusedBuildMs = 0;
    tuning.clear();
    blob = WeightBlob();
}

void CudaBackend::Impl::planArena() {
    std::vector<std::vector<int>> buffersPerOp;
    buffersPerOp.reserve(ops.size());
    for (const Op& op : ops) buffersPerOp.push_back(op.buffers);
    const ActivationLayout layout = placeBuffers(buffers, buffersPerOp);
    activationBytes = layout.bytes;
    unsharedBytes = layout.unsharedBytes;
}

std::size_t CudaBackend::Impl::chooseOnScratchArena(std::size_t freeBytes, std::size_t base) {
    const std::size_t weights = blob.size();
    // Benchmark arena: weights + activations + a generous workspace, given back afterwards.
    const std::size_t findCap = std::min<std::size_t>(std::size_t(1) << 30, (freeBytes - base) / 2);
    std::size_t wsNeed = 0;
    const NvtxRange nvtxChoose("weights + algorithm choice (tuning cache or timing)");
    DeviceBuffer temp(weights + activationBytes + findCap);
    weightsBase = temp.as<char>();
    actBase = weightsBase + weights;
    // On the backend's stream, then waited for: a plain cudaMemcpy from pageable memory
    // may return before its DMA lands, and a non-blocking stream would not wait for it.
    TESSERA_CHECK(cudaMemcpyAsync(weightsBase, blob.data(), weights, cudaMemcpyHostToDevice, stream.get()));
    TESSERA_CHECK(cudaStreamSynchronize(stream.get()));
    launchFillUniform(dtype, actBase, static_cast<long long>(activationBytes / dtypeSize(dtype)), 1234u, 1.0f,
                      stream.get());
    wsNeed = chooseAlgorithms(findCap ? actBase + activationBytes : nullptr, findCap);
    wsNeed = std::max(wsNeed, chooseGraphConvs(findCap ? actBase + activationBytes : nullptr, findCap));
    TESSERA_CHECK(cudaStreamSynchronize(stream.get()));
    return wsNeed;
}

// One copy of the activations and workspaces per lane, after the shared weights; the weights
// uploaded, the activations zeroed. Returns the arena's size.
std::size_t CudaBackend::Impl::placeArena(int laneCount) {
    const std::size_t weights = blob.size();
    const std::size_t laneBytes = alignUp(activationBytes + convWorkspace + kCublasWorkspace);
    const std::size_t total = weights + static_cast<std::size_t>(laneCount) * laneBytes;
    const std::size_t fixed = weights + static_cast<std::size_t>(laneCount) * (convWorkspace + kCublasWorkspace);
    const std::size_t freeBytes = freeForPlan();
    if (total > freeBytes) throw outOfMemory(total, freeBytes, fixed, laneCount);
    const NvtxRange nvtxPlace("arena + weights upload");
    try {
        arena = DeviceBuffer(total);
    } catch (const CudaError& e) {
        if (!e.outOfMemory()) throw;
        (void)cudaGetLastError();
        throw outOfMemory(total, freeBytes, fixed, laneCount);
    }
    weightsBase = arena.as<char>();
    lanes = laneCount;
    laneAct.assign(static_cast<std::size_t>(lanes), nullptr);
    for (int l = 0; l < lanes; ++l) laneAct[static_cast<std::size_t>(l)] = weightsBase + weights + l * laneBytes;
    for (int l = 1; l < lanes; ++l) {
        laneCublas.push_back(makeCublas());
        TESSERA_CHECK(cublasSetMathMode(laneCublas.back().get(),
                                        precision == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
    }
    TESSERA_CHECK(cudaMemcpyAsync(weightsBase, blob.data(), weights, cudaMemcpyHostToDevice, stream.get()));
    for (int l = 0; l < lanes; ++l)
        TESSERA_CHECK(cudaMemsetAsync(laneAct[static_cast<std::size_t>(l)], 0, activationBytes, stream.get()));
    selectOwnLane();
    TESSERA_CHECK(cudaStreamSynchronize(stream.get()));
    return total;
}

std::string CudaBackend::Impl::describePlan(std::size_t total) const {
    const std::size_t weights = blob.size();
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(1);
    s << "CudaBackend " << dtypeName(dtype) << " on " << props.name << ": batch " << maxBatch << " of " << tileW << "x"
      << tileH << ", " << ops.size() << " layers, " << convs.size() << " convolutions, " << buffers.size()
      << " tensors; arena " << mib(total) << " MiB = weights " << mib(weights) << " + " << lanes
      << (lanes == 1 ? " lane" : " lanes") << " x (activations " << mib(activationBytes) << " (unshared "
      << mib(unsharedBytes) << ") + workspace " << mib(convWorkspace + kCublasWorkspace) << ")\n";
    for (const ConvLayer& c : convs) {
        s << "  " << c.name << " " << c.key() << ": " << algoName(c.algo[static_cast<std::size_t>(maxBatch)])
          << (c.math[static_cast<std::size_t>(maxBatch)] == CUDNN_FMA_MATH ? " (fma)" : "");
        // Times where this prepare measured them (-1: not measured, or the tuning cache chose).
        const auto ms = [](double v) { return v >= 0 ? std::to_string(v).substr(0, 6) + " ms" : std::string("-"); };
        if (c.legacyMs != 0 || c.graph) {
            s << " " << ms(c.legacyMs) << "; " << (c.graph ? c.graph->engineName() : std::string("graph API")) << " "
              << ms(c.graphMs) << (c.graph ? " [graph]" : " [legacy]")
              << (c.legacyMs < 0 && c.graphMs < 0 ? " (tuning cache)" : "");
            if (c.hasEpilogue && (c.fused || c.epilogueMs != 0))
                s << "; epilogue " << ms(c.epilogueMs) << ", fused " << ms(c.fusedMs)
                  << (c.fused ? " [fused: " + c.fused->engineName() + "]" : std::string(" [apart]"))
                  << (c.epilogueMs < 0 && c.fusedMs < 0 ? " (tuning cache)" : "");
        }
        s << "\n";
    }
    if (!denseGroups.empty())
        s << "  dense groups: " << denseGroups.size() << " (concatenations kept in one buffer of "
          << denseGroups.front().channels << " channels each, no copies)\n";
    if (!denseRefusal.empty()) s << "  dense groups off: " << denseRefusal << "\n";
    s << graphNotes << attentionNotes;
    s << "  fused-plan build + benchmark time " << fusedBuildMs << " ms\n";
    s << tuning.summary();
    return s.str();
}

std::size_t CudaBackend::Impl::freeForPlan() const {
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    return freeBytes > reservedBytes ? freeBytes - reservedBytes : 0;
}

// The message and the largest batch that fits are computed here, in order, and handed to the
// error together: a function argument read in the same throw expression as a call that sets it
// would be read in an unspecified order.
CudaOutOfMemory CudaBackend::Impl::outOfMemory(std::size_t needed, std::size_t freeBytes, std::size_t fixedBytes,
                                               int laneCount) const {
    // In tiles (imagesPerTile UNet images each): what the user's tile batch counts.
    const int per = std::max(1, imagesPerTile);
    const int tiles = std::max(1, maxBatch / per);
    const double perTile = static_cast<double>(activationBytes) * laneCount / std::max(1, maxBatch) * per;
    const double room = static_cast<double>(freeBytes) - static_cast<double>(fixedBytes);
    const int fit = room > perTile ? static_cast<int>(room / perTile) : 0;
    const int largest = std::max(0, std::min(fit, tiles - 1));
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(0);
    s << "not enough GPU memory for tile batch " << tiles << " of " << tileW * pixelScale << "x" << tileH * pixelScale;
    if (pixelScale > 1 || per > 1) {
        s << " (";
        if (pixelScale > 1) s << tileW << "x" << tileH << " latents";
        if (pixelScale > 1 && per > 1) s << ", ";
        if (per > 1) s << maxBatch << " UNet images with guidance";
        s << ")";
    }
    s << " (" << dtypeName(dtype) << "): needs " << mib(needed) << " MiB, " << mib(freeBytes) << " MiB free on "
      << props.name;
    if (reservedBytes > 0) s << " beside the " << mib(reservedBytes) << " MiB the canvas needs";
    s << "; ";
    if (largest > 0)
        s << "the largest tile batch that fits is about " << largest;
    else
        s << "not even one tile fits: use a smaller tile or fp16";
    if (laneCount > 1) s << " (with " << laneCount << " lanes, each a copy of the activations: or use fewer lanes)";
    return CudaOutOfMemory(s.str(), largest);
}

}  // namespace tessera
