#include "kernels/engine/CudaUpscaler.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <vector>

#include <cuda_runtime.h>

#include "core/base/FormatNumber.h"
#include "core/formats/TuningCache.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/device/NvtxRange.h"
#include "kernels/ops/NonFinite.cuh"

namespace tessera {

namespace {

constexpr int kSlots = 2;
constexpr std::size_t kStateOffset = 256;  // the StepState after the slots' non-finite words

std::string precisionText(Precision p) { return std::string(toString(p)); }

// Events around one forward of a slot: its copy in, its forward, its checks and copy back.
struct ChunkEvents {
    CudaEvent begin = makeEvent(), forwardBegin = makeEvent(), forwardEnd = makeEvent(), end = makeEvent();
};

}  // namespace

struct CudaUpscaler::Impl {
    Impl(CudaUpscaleOptions o, int dev) : options(std::move(o)), device(dev) {}
    ~Impl() {
        if (backend) (void)cudaStreamSynchronize(backend->stream());  // pinned buffers outlive the copies
    }
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    struct Slot {
        PinnedBuffer input, output;
        std::size_t inputTiles = 0, outputTiles = 0;  // what the buffers hold
        int count = 0, firstTile = 0;
        long long order = 0;   // submission order
        bool pending = false;  // submitted, not yet waited for
        CudaEvent done = makeEvent(false);
        std::vector<ChunkEvents> chunks;
        int chunksUsed = 0;
    };

    const CudaUpscaleOptions options;
    const int device;
    std::uint64_t budget = 0;
    std::unique_ptr<CudaBackend> backend;
    std::string preparedKey;
    const UpscaleModel* model = nullptr;
    int capacity = 0, forwardBatch = 0, outH = 0, outW = 0;
    std::size_t inFloats = 0, outFloats = 0;  // per tile
    std::array<Slot, kSlots> slots;
    long long submitted = 0;
    DeviceBuffer words;  // kSlots non-finite words, then a zero StepState at kStateOffset
    PinnedBuffer hostWords;
    // The models that overflowed in half precision (upscalePlanKey at batch 0), run in fp32 from then on.
    std::vector<std::string> overflowed;
    // The backend's memory plan at batch 1 per (model, shape, precision).
    std::map<std::string, CudaMemoryPlan> plans;
    std::string note;
    bool fp32NonFinite = false;  // noted: a tile gave a NaN or an infinity in fp32
    CudaUpscaleTimes times;

    static std::string modelKey(const UpscaleModel& m) { return upscalePlanKey(m, 0, 0, 0); }
    Precision precisionFor(const UpscaleModel& m) const {
        return std::find(overflowed.begin(), overflowed.end(), modelKey(m)) != overflowed.end() ? Precision::FP32
                                                                                                : options.precision;
    }
    CudaBackend& backendAt(Precision p);
    const CudaMemoryPlan& planAt(const UpscaleModel& m, Precision p, int h, int w);
    std::uint64_t bytesAt(const UpscaleModel& m, Precision p, int batch, int h, int w);
    void preparePlan(const UpscaleModel& m, Precision p, int batch, int h, int w);
    void enqueueSlot(int slot);
    void collectTimes(Slot& s);
    void fallBack(int slot, unsigned tile);
    unsigned long long* word(int slot) const { return words.as<unsigned long long>() + slot; }
    const StepState* state() const { return reinterpret_cast<const StepState*>(words.as<char>() + kStateOffset); }
};

CudaBackend& CudaUpscaler::Impl::backendAt(Precision p) {
    if (!backend || backend->precision() != p) {
        if (backend) TESSERA_CHECK(cudaStreamSynchronize(backend->stream()));
        preparedKey.clear();
        backend.reset();  // its arena given back before the next one plans
        backend = std::make_unique<CudaBackend>(p, device);
        backend->setGraphs(options.graphs);
    }
    return *backend;
}

const CudaMemoryPlan& CudaUpscaler::Impl::planAt(const UpscaleModel& m, Precision p, int h, int w) {
    const std::string key = upscalePlanKey(m, 1, h, w) + "|" + precisionText(p);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    CudaBackend& b = backendAt(p);
    TESSERA_CHECK(cudaStreamSynchronize(b.stream()));
    preparedKey.clear();  // planGraph forgets the prepared plan
    return plans.emplace(key, b.planGraph(m.executionGraph(), m.tensors(), 1, h, w)).first->second;
}

std::uint64_t CudaUpscaler::Impl::bytesAt(const UpscaleModel& m, Precision p, int batch, int h, int w) {
    const CudaMemoryPlan& plan = planAt(m, p, h, w);
    return plan.weightsBytes + static_cast<std::uint64_t>(batch) * plan.activationsBytes + plan.workspaceBytes +
           kWorkspaceBytes + kHeadroomBytes + words.bytes();
}

void CudaUpscaler::Impl::preparePlan(const UpscaleModel& m, Precision p, int batch, int h, int w) {
    std::string key = upscalePlanKey(m, batch, h, w) + "|" + precisionText(p);
    if (key == preparedKey && backend && backend->precision() == p) return;
    CudaBackend& b = backendAt(p);
    TESSERA_CHECK(cudaStreamSynchronize(b.stream()));
    preparedKey.clear();
    // The backend plans within budget - headroom: the rest of the free memory is reserved. What its
    // current plan holds is free again when it prepares.
    const std::uint64_t room = budget > kHeadroomBytes + words.bytes() ? budget - kHeadroomBytes - words.bytes() : 0;
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    const std::uint64_t available = freeBytes + (b.lanes() > 0 ? b.memoryPlan().totalBytes : 0);
    b.setReservedBytes(available > room ? available - room : 0);
    const NvtxRange range("upscale prepare");
    TuningCache cache(TuningCache::resolvePath(options.tuningCache));
    b.setTuningCache(&cache);
    int tried = batch;
    for (;;) {
        try {
            b.prepareGraph(m.executionGraph(), m.tensors(), tried, h, w);
            break;
        } catch (const CudaOutOfMemory& e) {
            if (tried <= 1) {
                b.setTuningCache(nullptr);
                throw CudaOutOfMemory(
                    std::string(e.what()) + " (the upscaler's device budget is " + formatBytes(budget) + ")", 0);
            }
            tried = std::max(1, std::min(tried - 1, e.largestBatch()));
        } catch (...) {
            b.setTuningCache(nullptr);
            throw;
        }
    }
    b.setTuningCache(nullptr);
    cache.save();  // a failure is the cache's warning, never the upscale's end
    forwardBatch = tried;
    preparedKey = std::move(key);
}

void CudaUpscaler::Impl::enqueueSlot(int slot) {
    Slot& s = slots[static_cast<std::size_t>(slot)];
    CudaBackend& b = *backend;
    cudaStream_t stream = b.stream();
    TESSERA_CHECK(cudaSetDevice(device));
    TESSERA_CHECK(cudaMemsetAsync(word(slot), 0xFF, sizeof(unsigned long long), stream));  // kNonFiniteClean
    const int chunks = (s.count + forwardBatch - 1) / forwardBatch;
    while (static_cast<int>(s.chunks.size()) < chunks) s.chunks.emplace_back();
    s.chunksUsed = chunks;
    float* stagedIn = b.stagedInput(0);
    const float* stagedOut = b.stagedOutput(0);
    for (int c = 0; c < chunks; ++c) {
        const int first = c * forwardBatch, n = std::min(forwardBatch, s.count - first);
        ChunkEvents& ev = s.chunks[static_cast<std::size_t>(c)];
        TESSERA_CHECK(cudaEventRecord(ev.begin.get(), stream));
        TESSERA_CHECK(cudaMemcpyAsync(stagedIn, s.input.as<float>() + std::size_t(first) * inFloats,
                                      std::size_t(n) * inFloats * sizeof(float), cudaMemcpyHostToDevice, stream));
        TESSERA_CHECK(cudaEventRecord(ev.forwardBegin.get(), stream));
        b.enqueueStaged(n);
        TESSERA_CHECK(cudaEventRecord(ev.forwardEnd.get(), stream));
        for (int t = 0; t < n; ++t)
            launchNonFiniteCheck(DType::F32, stagedOut + std::size_t(t) * outFloats, static_cast<long long>(outFloats),
                                 1, 1, state(), static_cast<unsigned>(s.firstTile + first + t), word(slot), stream);
        TESSERA_CHECK(cudaMemcpyAsync(s.output.as<float>() + std::size_t(first) * outFloats, stagedOut,
                                      std::size_t(n) * outFloats * sizeof(float), cudaMemcpyDeviceToHost, stream));
        TESSERA_CHECK(cudaEventRecord(ev.end.get(), stream));
    }
    TESSERA_CHECK(cudaMemcpyAsync(hostWords.as<unsigned long long>() + slot, word(slot), sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream));
    TESSERA_CHECK(cudaEventRecord(s.done.get(), stream));
}

void CudaUpscaler::Impl::collectTimes(Slot& s) {
    for (int c = 0; c < s.chunksUsed; ++c) {
        const ChunkEvents& ev = s.chunks[static_cast<std::size_t>(c)];
        float in = 0, fwd = 0, out = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&in, ev.begin.get(), ev.forwardBegin.get()));
        TESSERA_CHECK(cudaEventElapsedTime(&fwd, ev.forwardBegin.get(), ev.forwardEnd.get()));
        TESSERA_CHECK(cudaEventElapsedTime(&out, ev.forwardEnd.get(), ev.end.get()));
        times.forwardMs += fwd;
        times.copyMs += in + out;
        times.forwards += 1;
    }
}

void CudaUpscaler::Impl::fallBack(int slot, unsigned tile) {
    TESSERA_CHECK(cudaStreamSynchronize(backend->stream()));
    const Precision from = backend->precision();
    overflowed.push_back(modelKey(*model));
    note = precisionText(from) + " gave a NaN or an infinity in tile " + std::to_string(tile + 1) +
           ": that tile's batch and every tile after it ran in fp32";
    preparePlan(*model, Precision::FP32, capacity, outH, outW);
    Slot& s = slots[static_cast<std::size_t>(slot)];
    enqueueSlot(slot);
    // The other slot, when it was submitted after this one, ran at the old precision too.
    Slot& other = slots[static_cast<std::size_t>(1 - slot)];
    if (other.pending && other.order > s.order) enqueueSlot(1 - slot);
    TESSERA_CHECK(cudaEventSynchronize(s.done.get()));
    if (hostWords.as<unsigned long long>()[slot] != kNonFiniteClean) {
        note += " (and it gave a NaN or an infinity in fp32 as well)";
        fp32NonFinite = true;
    }
}

CudaUpscaler::CudaUpscaler(CudaUpscaleOptions options, int device) {
    std::string why;
    if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
    TESSERA_CHECK(cudaSetDevice(device));
    impl_ = std::make_unique<Impl>(std::move(options), device);
    Impl& d = *impl_;
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    d.budget = d.options.memoryBudget > 0 ? d.options.memoryBudget
                                          : (freeBytes > kReserveBytes ? freeBytes - kReserveBytes : 0);
    d.words = DeviceBuffer(kStateOffset + sizeof(StepState));
    TESSERA_CHECK(cudaMemset(d.words.data(), 0, d.words.bytes()));
    d.hostWords = PinnedBuffer(kSlots * sizeof(unsigned long long));
}

CudaUpscaler::~CudaUpscaler() = default;

std::string CudaUpscaler::deviceName() const {
    cudaDeviceProp props{};
    TESSERA_CHECK(cudaGetDeviceProperties(&props, impl_->device));
    return props.name;
}

std::uint64_t CudaUpscaler::tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const {
    return impl_->bytesAt(model, impl_->precisionFor(model), batch, outH, outW);
}

std::optional<std::uint64_t> CudaUpscaler::deviceBudget() const { return impl_->budget; }

int CudaUpscaler::maxTileBatch(int outH, int outW) const {
    if (impl_->options.tileBatch > 0) return impl_->options.tileBatch;
    const std::int64_t pixels = std::max<std::int64_t>(1, std::int64_t(outH) * outW);
    return static_cast<int>(std::clamp<std::int64_t>(kBatchPixels / pixels, 1, kMaxTileBatch));
}

void CudaUpscaler::prepare(const UpscaleModel& model, int batch, int outH, int outW) {
    Impl& d = *impl_;
    if (batch < 1 || outH < 1 || outW < 1 || outH % model.scale() != 0 || outW % model.scale() != 0)
        throw std::invalid_argument("CudaUpscaler: a batch of " + std::to_string(batch) + " tiles of " +
                                    std::to_string(outW) + " x " + std::to_string(outH) + " for a " +
                                    std::to_string(model.scale()) + "x model");
    if (d.backend) TESSERA_CHECK(cudaStreamSynchronize(d.backend->stream()));
    const Precision p = d.precisionFor(model);
    d.note = p != d.options.precision ? "fp32: this model gave a NaN or an infinity in " +
                                            precisionText(d.options.precision) + " in an earlier run"
                                      : std::string();
    d.times = {};
    d.fp32NonFinite = false;
    for (Impl::Slot& s : d.slots) s.pending = false;
    const std::size_t inFloats = std::size_t(model.inputChannels()) * (outH / model.scale()) * (outW / model.scale());
    const std::size_t outFloats = std::size_t(model.outputChannels()) * outH * outW;
    if (inFloats != d.inFloats || outFloats != d.outFloats || batch > d.capacity)
        for (Impl::Slot& s : d.slots) {  // allocated again at first use
            s.input = PinnedBuffer();
            s.output = PinnedBuffer();
            s.inputTiles = s.outputTiles = 0;
        }
    d.inFloats = inFloats;
    d.outFloats = outFloats;
    d.capacity = batch;
    d.outH = outH;
    d.outW = outW;
    d.model = &model;
    d.preparePlan(model, p, batch, outH, outW);
}

float* CudaUpscaler::tileInput(int slot) {
    Impl::Slot& s = impl_->slots.at(static_cast<std::size_t>(slot));
    if (s.inputTiles < static_cast<std::size_t>(impl_->capacity)) {
        s.input = PinnedBuffer(std::size_t(impl_->capacity) * impl_->inFloats * sizeof(float));
        s.inputTiles = static_cast<std::size_t>(impl_->capacity);
    }
    return s.input.as<float>();
}

const float* CudaUpscaler::tileOutput(int slot) {
    Impl::Slot& s = impl_->slots.at(static_cast<std::size_t>(slot));
    if (s.outputTiles < static_cast<std::size_t>(impl_->capacity)) {
        s.output = PinnedBuffer(std::size_t(impl_->capacity) * impl_->outFloats * sizeof(float));
        s.outputTiles = static_cast<std::size_t>(impl_->capacity);
    }
    return s.output.as<float>();
}

void CudaUpscaler::submit(int slot, int count, int firstTile) {
    Impl& d = *impl_;
    if (!d.backend || d.preparedKey.empty()) throw std::logic_error("CudaUpscaler: submit before prepare");
    if (count < 1 || count > d.capacity)
        throw std::invalid_argument("CudaUpscaler: " + std::to_string(count) + " tiles in a slot of " +
                                    std::to_string(d.capacity));
    Impl::Slot& s = d.slots.at(static_cast<std::size_t>(slot));
    (void)tileInput(slot);
    (void)tileOutput(slot);
    s.count = count;
    s.firstTile = firstTile;
    s.order = ++d.submitted;
    s.pending = true;
    d.enqueueSlot(slot);
}

void CudaUpscaler::wait(int slot) {
    Impl& d = *impl_;
    Impl::Slot& s = d.slots.at(static_cast<std::size_t>(slot));
    if (!s.pending) return;
    TESSERA_CHECK(cudaEventSynchronize(s.done.get()));
    const unsigned long long found = d.hostWords.as<unsigned long long>()[slot];
    if (found != kNonFiniteClean) {
        const auto tile = static_cast<unsigned>(found & 0xFFFFFFFFull);
        if (d.backend->precision() != Precision::FP32)
            d.fallBack(slot, tile);
        else if (!d.fp32NonFinite) {
            d.note += std::string(d.note.empty() ? "" : "; ") + "tile " + std::to_string(tile + 1) +
                      " gave a NaN or an infinity in fp32";
            d.fp32NonFinite = true;
        }
    }
    d.collectTimes(s);
    s.pending = false;
}

std::string CudaUpscaler::note() const { return impl_->note; }

ImageTensor CudaUpscaler::upscale(const UpscaleModel& model, const ImageTensor& image, const UpscaleTiling& tiling) {
    UpscaleTiler tiler(model, *this, tiling);
    return tiler.upscale(image);
}

Precision CudaUpscaler::precision() const {
    return impl_->backend ? impl_->backend->precision() : impl_->options.precision;
}

const CudaBackend* CudaUpscaler::backend() const { return impl_->backend.get(); }

CudaBackend* CudaUpscaler::backend() { return impl_->backend.get(); }

int CudaUpscaler::forwardBatch() const { return impl_->forwardBatch; }

CudaUpscaleTimes CudaUpscaler::timings() const { return impl_->times; }

std::unique_ptr<UpscaleDevice> makeCudaUpscaler(const CudaUpscaleOptions& options, int device) {
    return std::make_unique<CudaUpscaler>(options, device);
}

}  // namespace tessera
