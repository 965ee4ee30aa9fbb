// ModelInspector: what a model allows (ModelLocator::readLimits for a UNet2DModel folder,
// ModelLocator::readSdLimits for Stable Diffusion: a pipeline folder, a .safetensors
// checkpoint, random:sd15 / random:sd21; configuration files only) and where the default
// model is (ModelLocator::defaultModelFolder), found on a thread pool and answered by queued
// signal, so the settings panel never reads a file on the GUI thread.
//
// Results are cached per folder and the modification times and sizes of the files the limits
// come from (config.json and scheduler_config.json, at the top or in unet/ and scheduler/;
// model_index.json and vae/config.json; a checkpoint file itself):
// asking again about a folder whose files did not change only looks at their times, and a
// file changed on disk is read again. Only the newest inspect() is answered; the answers of
// earlier ones (a folder name typed letter by letter) are dropped by job id.
//
// Threads: create, use and destroy on one thread (the GUI thread); the destructor waits for
// the jobs in flight and drops their answers.
#pragma once

#include <map>
#include <memory>
#include <optional>

#include <QMetaType>
#include <QObject>
#include <QString>

#include "app/qt/JobQueue.h"
#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"

namespace tessera {

// What inspecting one model found: the limits, or why there are none.
struct ModelInspection {
    QString folder;                     // as asked: a folder, a checkpoint file or random:sd15 / random:sd21
    std::optional<ModelLimits> limits;  // set when the model's configuration could be read
    QString error;                      // otherwise: what is wrong, naming the folder or file
    bool stableDiffusion = false;       // a Stable Diffusion model (prompts, guidance, clip skip apply)
    int pixelMultiple = 1;              // SD: image sides and overlaps in multiples of this (the VAE's scale)
    SdFamily family = SdFamily::SD1;    // SD: which family (SDXL takes no clip skip)
    // A FLUX.1 model (a FluxPipeline folder or a BFL transformer file): "flux-dev" or
    // "flux-schnell"; empty otherwise. Prompts apply (stableDiffusion is set too); the negative
    // prompt, CFG and clip skip do not, the embedded guidance does (dev).
    QString flux;
};

class ModelInspector : public QObject {
    Q_OBJECT
public:
    explicit ModelInspector(QObject* parent = nullptr);
    ~ModelInspector() override;

    // Inspects `folder` off this thread: answered by inspected() unless a newer inspect()
    // came first. Returns the job's id.
    quint64 inspect(const QString& folder);
    // Looks for the default model of a binary in `executableDir` (ModelLocator's search):
    // answered by defaultModelLocated (an empty folder when none is installed).
    quint64 locateDefault(const QString& executableDir);

    // How many times a folder's configuration was read (cache misses), since construction.
    int configurationReads() const;
    // Jobs not answered yet.
    int pendingJobs() const { return jobs_.pending(); }

signals:
    void inspected(quint64 jobId, const tessera::ModelInspection& inspection);
    void defaultModelLocated(const QString& folder);

private:
    struct Cache;
    std::shared_ptr<Cache> cache_;  // shared with the jobs; locked inside
    quint64 inspectJob_ = 0;        // the newest inspect(): the only one answered
    JobQueue jobs_{2};              // last member: destroyed (waited for) first
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::ModelInspection)
