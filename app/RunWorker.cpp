#include "app/RunWorker.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <exception>
#include <utility>

#include "core/ImageOps.h"
#include "core/TiledSampler.h"
#include "core/UNetModel.h"

namespace tessera {

void registerRunMetaTypes() {
    qRegisterMetaType<tessera::RunConfig>();
    qRegisterMetaType<tessera::RunRecord>();
    qRegisterMetaType<tessera::StepEvent>();
    qRegisterMetaType<tessera::TileBatchEvent>();
    qRegisterMetaType<tessera::MemorySample>();
    qRegisterMetaType<tessera::FinishedRun>();
    qRegisterMetaType<tessera::DeviceReport>();
}

namespace {

QImage fromRgb8Pixels(const Rgb8Image& rgb) {
    QImage out(rgb.width, rgb.height, QImage::Format_RGB888);
    const std::size_t rowBytes = static_cast<std::size_t>(rgb.width) * 3;
    for (int y = 0; y < rgb.height; ++y)
        std::copy_n(rgb.pixels.data() + static_cast<std::size_t>(y) * rowBytes, rowBytes, out.scanLine(y));
    return out;
}

}  // namespace

QImage toQImage(const ImageTensor& image) {
    if (image.data.empty()) return {};
    return fromRgb8Pixels(toRgb8(image));
}

QImage heatmapToQImage(const ImageTensor& map) {
    if (map.data.empty()) return {};
    return fromRgb8Pixels(heatmapToRgb8(map));
}

// Turns engine callbacks (on the worker thread) into queued signals.
class RunWorker::Observer : public RunObserver {
public:
    Observer(RunWorker& worker, quint64 runId) : worker_(worker), runId_(runId) {}

    void onStarted(const RunRecord& record) override { emit worker_.runStarted(runId_, record); }

    void onTileBatch(const TileBatchEvent& event) override {
        // A fast device finishes thousands of batches a second; the window only needs enough
        // of them to move the highlight, and always the last one of a step.
        const auto now = Clock::now();
        const bool lastOfStep = event.batchIndex + 1 >= event.batches;
        if (!lastOfStep && lastBatchSignal_ && now - *lastBatchSignal_ < std::chrono::milliseconds(kTileBatchSignalIntervalMs))
            return;
        lastBatchSignal_ = now;
        emit worker_.tileBatchFinished(runId_, event);
    }

    void onStep(const StepEvent& event) override { emit worker_.stepFinished(runId_, event); }

    void onPreview(const PreviewEvent& event) override {
        // Converted here, off the GUI thread.
        emit worker_.previewReady(runId_, event.step, toQImage(event.image));
    }

    void onMemory(const MemorySample& sample) override { emit worker_.memorySampled(runId_, sample); }

    void onMessage(const std::string& text) override { emit worker_.message(runId_, QString::fromStdString(text)); }

private:
    using Clock = std::chrono::steady_clock;
    RunWorker& worker_;
    quint64 runId_;
    std::optional<Clock::time_point> lastBatchSignal_;
};

RunWorker::RunWorker(QObject* parent) : QObject(parent) { registerRunMetaTypes(); }

RunWorker::~RunWorker() = default;

void RunWorker::cancel(quint64 runId) {
    quint64 seen = cancelledUpTo_.load();
    while (seen < runId && !cancelledUpTo_.compare_exchange_weak(seen, runId)) {
    }
    std::lock_guard lock(engineMutex_);
    if (engine_ && activeRunId_ == runId) engine_->requestCancel();
}

Engine& RunWorker::engineFor(BackendKind backend, quint64 runId) {
    // Engines keep their loaded model and prepared memory between runs; rebuild only when the
    // backend choice changes.
    if (engine_ && engineBackend_ == backend) return *engine_;
    std::string note;
    auto engine = createEngine(backend, &note);
    {
        std::lock_guard lock(engineMutex_);
        engine_ = std::move(engine);
        engineBackend_ = backend;
    }
    if (!note.empty()) emit message(runId, QString::fromStdString(note));
    return *engine_;
}

void RunWorker::start(const RunConfig& config, quint64 runId) {
    try {
        Engine& engine = engineFor(config.backend, runId);
        {
            std::lock_guard lock(engineMutex_);
            activeRunId_ = runId;
            engine.resetCancel();
            if (runId <= cancelledUpTo_.load()) engine.requestCancel();
        }
        if (auto* sampler = dynamic_cast<TiledSampler*>(&engine)) {
            ImageTensor init;
            if (!config.initImage.empty()) {
                QImage picture(QString::fromStdString(config.initImage));
                if (picture.isNull())
                    throw ValidationError("init", "init: '" + config.initImage + "' is not a readable image");
                picture = picture.convertToFormat(QImage::Format_RGB888)
                              .scaled(config.width, config.height, Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
                Rgb8Image rgb{picture.width(), picture.height(), {}};
                rgb.pixels.resize(static_cast<std::size_t>(rgb.width) * rgb.height * 3);
                for (int y = 0; y < rgb.height; ++y)
                    std::copy_n(picture.constScanLine(y), rgb.width * 3, rgb.pixels.data() + static_cast<std::size_t>(y) * rgb.width * 3);
                init = fromRgb8(rgb, 3);
            }
            sampler->setInitImage(std::move(init));
        }

        Observer observer(*this, runId);
        auto result = std::make_shared<RunResult>(engine.run(config, observer));
        {
            std::lock_guard lock(engineMutex_);
            activeRunId_ = 0;
        }
        FinishedRun finished;
        finished.image = toQImage(result->image);
        finished.seamMap = heatmapToQImage(result->seamMap);
        finished.result = std::move(result);
        emit runFinished(runId, finished);
    } catch (const std::exception& e) {
        {
            std::lock_guard lock(engineMutex_);
            activeRunId_ = 0;
        }
        emit runFailed(runId, QString::fromUtf8(e.what()));
    } catch (...) {
        {
            std::lock_guard lock(engineMutex_);
            activeRunId_ = 0;
        }
        emit runFailed(runId, QStringLiteral("the engine failed with an unknown error"));
    }
}

void RunWorker::probeDevices() { emit devicesProbed(tessera::probeDevices()); }

}  // namespace tessera
