#include "app/qt/UpscaleModelPass.h"

#include <array>
#include <memory>
#include <utility>

namespace tessera {

namespace {

// The run's device, forwarded to, that counts the tiles each wait() returned and stops the run
// from submit() when asked: after waiting for every batch still on the device (a device of two
// slots may hold one), so nothing runs once the exception unwinds the tiler.
class ObservedUpscaleDevice : public UpscaleDevice {
public:
    explicit ObservedUpscaleDevice(std::unique_ptr<UpscaleDevice> inner) : inner_(std::move(inner)) {}

    void observe(UpscaleModelPass::Cancelled cancelled, UpscaleModelPass::Progress progress, int tiles) {
        cancelled_ = std::move(cancelled);
        progress_ = std::move(progress);
        tiles_ = tiles;
        done_ = 0;
    }

    std::uint64_t tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const override {
        return inner_->tileBytes(model, batch, outH, outW);
    }
    std::optional<std::uint64_t> deviceBudget() const override { return inner_->deviceBudget(); }
    int maxTileBatch(int outH, int outW) const override { return inner_->maxTileBatch(outH, outW); }
    int slotCount() const override { return inner_->slotCount(); }
    void prepare(const UpscaleModel& model, int batch, int outH, int outW) override {
        inner_->prepare(model, batch, outH, outW);
    }
    float* tileInput(int slot) override { return inner_->tileInput(slot); }
    const float* tileOutput(int slot) override { return inner_->tileOutput(slot); }
    std::string note() const override { return inner_->note(); }

    void submit(int slot, int count, int firstTile) override {
        if (cancelled_ && cancelled_()) {
            for (std::size_t s = 0; s < inFlight_.size(); ++s)
                if (inFlight_[s]) {
                    inner_->wait(static_cast<int>(s));
                    inFlight_[s] = false;
                }
            throw UpscaleCancelled(done_, tiles_);
        }
        inner_->submit(slot, count, firstTile);
        const auto s = static_cast<std::size_t>(slot);
        if (s < inFlight_.size()) {
            inFlight_[s] = true;
            counts_[s] = count;
        }
    }

    void wait(int slot) override {
        inner_->wait(slot);
        const auto s = static_cast<std::size_t>(slot);
        if (s >= inFlight_.size() || !inFlight_[s]) return;
        inFlight_[s] = false;
        done_ += counts_[s];
        if (progress_) progress_(done_, tiles_);
    }

private:
    std::unique_ptr<UpscaleDevice> inner_;
    UpscaleModelPass::Cancelled cancelled_;
    UpscaleModelPass::Progress progress_;
    int tiles_ = 0, done_ = 0;
    std::array<bool, 2> inFlight_{};  // UpscaleDevice::slotCount is 1 or 2
    std::array<int, 2> counts_{};
};

}  // namespace

UpscaleCancelled::UpscaleCancelled(int tilesDone, int tiles)
    : std::runtime_error("upscale model: stopped after " + std::to_string(tilesDone) + " of " + std::to_string(tiles) +
                         " tiles"),
      tilesDone_(tilesDone),
      tiles_(tiles) {}

UpscaleModelPass::UpscaleModelPass(const RunConfig& config, int inW, int inH, int targetW, int targetH,
                                   std::string* note)
    : run_(loadUpscaleModelRun(config.upscaleModel, cliUpscaleModelsFolders(config.model))) {
    std::string deviceNote;
    device_ = createUpscaleDevice(config.backend, upscaleDeviceRequest(config), &deviceNote);
    device_.device = std::make_unique<ObservedUpscaleDevice>(std::move(device_.device));
    if (note) *note = deviceNote;
    checkUpscaleModelRun(run_, inW, inH, targetW, targetH, device_, tiling_);
}

Rgb8Image UpscaleModelPass::run(const Rgb8Image& image, const Cancelled& cancelled, const Progress& progress) {
    auto& observed = static_cast<ObservedUpscaleDevice&>(*device_.device);
    observed.observe(cancelled, progress, run_.record.tiles);
    if (progress) progress(0, run_.record.tiles);
    return runUpscaleModel(run_, image, device_, tiling_);
}

}  // namespace tessera
