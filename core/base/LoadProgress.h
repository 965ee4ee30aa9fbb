// LoadProgress: how far a model load has got, as bytes of weights done out of the bytes the
// whole load handles (the stored bytes of the tensors read from safetensors files; float32 bytes
// for weights drawn at random), with the phase under way. The model readers (core/formats/ModelWeights.h,
// core/models/sd/SingleFileCheckpoint.h, core/models/sd/SdModel.h) count through a LoadMeter, once per tensor (never
// per element), on the loading thread. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace tessera {

struct LoadProgress {
    std::string phase;        // what is under way: "reading the UNet", "random weights for the VAE", ...
    std::uint64_t done = 0;   // bytes done, all phases so far; never decreases
    std::uint64_t total = 0;  // bytes of the whole load, fixed before the first report; done <= total
    double fraction() const { return total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total); }
};

// Called on the loading thread. It throws nothing but LoadCancelled, which stops the load
// between two tensors (the readers keep everything in owning objects, so nothing leaks and no
// partial model remains).
using LoadProgressCallback = std::function<void(const LoadProgress&)>;

// A load stopped from its progress callback because the run was cancelled: says where it was.
class LoadCancelled : public std::runtime_error {
public:
    explicit LoadCancelled(const LoadProgress& at);
};

// Counts a load phase by phase and reports to a callback: when a phase begins, after each
// advance, and at the end (done == total). Each phase is given its share of the total up front;
// advances beyond it are clamped, so done never passes total and never goes back. A meter
// without a callback counts and reports nothing. Not thread-safe: one loading thread.
class LoadMeter {
public:
    LoadMeter(LoadProgressCallback callback, std::uint64_t total);

    // Starts phase `phase` of `bytes` bytes (clamped to what is left of the total); reports.
    void beginPhase(std::string phase, std::uint64_t bytes);
    // `bytes` more of the current phase done (one tensor); reports.
    void advance(std::uint64_t bytes);
    // Counts the rest of the current phase's share (tensors a file holds that the model does not
    // read) without reporting; the next beginPhase or finish reports it.
    void endPhase();
    // done = total; reports with `phase` (empty: the last phase's name).
    void finish(std::string phase = {});

    const LoadProgress& progress() const { return progress_; }

private:
    void report() const;

    LoadProgressCallback callback_;
    LoadProgress progress_;
    std::uint64_t phaseEnd_ = 0;
};

}  // namespace tessera
