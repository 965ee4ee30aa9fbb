// ModelLocator: where the bundled default model lives, and what a model folder allows
// (its ModelLimits, read from config.json alone, so the window can validate settings without
// loading weights). Qt Core only; safe on any thread.
#pragma once

#include <optional>

#include <QString>
#include <QStringList>

#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"

namespace tessera {

class ModelLocator {
public:
    // executableDir: the folder of the running binary (QCoreApplication::applicationDirPath()).
    explicit ModelLocator(QString executableDir);

    // Folders searched for the default model, in order: TESSERA_RESOURCE_DIR/models/default
    // (development builds) and <executableDir>/../share/tessera/models/default (installs).
    QStringList candidates() const;
    // The first candidate that holds a config.json, as an absolute path; empty when none does.
    QString defaultModelFolder() const;

    // True when `dir` holds config.json (the weights are checked only when a run loads them).
    static bool looksLikeModelFolder(const QString& dir);
    // The limits a model folder's config.json implies (downsample factor, input channels,
    // training timesteps from scheduler_config.json when present), read by the core's
    // readModelFolderConfig. nullopt with *error set (naming the file) when it cannot be read
    // or parsed.
    static std::optional<ModelLimits> readLimits(const QString& dir, QString* error = nullptr);

    // True when `path` names a Stable Diffusion model (core isSdModelPath: a pipeline folder
    // with model_index.json, a checkpoint file, or random:sd15 / random:sd21 / random:sdxl).
    static bool isStableDiffusion(const QString& path);
    // A FLUX.1 model: a FluxPipeline folder or a BFL transformer file; `variant` (when given)
    // receives "flux-dev" or "flux-schnell" (from the config or the tensors' names: dev has
    // guidance_in). Reads at most a config and a file header.
    static bool isFlux(const QString& path, QString* variant = nullptr);
    // The limits of a Stable Diffusion model from its configuration files alone, never its
    // weights (core/SdPipeline checkSdRun's rules: tiles in multiples of the UNet's factor
    // times the VAE's, images and overlaps in multiples of the VAE's `*pixelMultiple`):
    // a pipeline folder's unet/ and vae/ config.json and scheduler/scheduler_config.json;
    // a .safetensors checkpoint's header (its family's UNet and VAE as core's
    // inspectSingleFileCheckpoint finds them, no tensor data read: SDXL 32, SD 1.x/2.x 64; a
    // file that is no safetensors file at all (a header that cannot be read: a text file renamed,
    // a download cut short) cannot be used and says why; a valid header whose tensors are not
    // recognised: 64, and the run says why); random:sd15 / random:sd21 (64) and random:sdxl (32:
    // its UNet has 3 levels) as core's randomSdModelConfigs builds them. nullopt with *error set
    // (naming the file) when the model cannot be used. `family` (when given) is set to the
    // model's family (a pipeline's: SDXL with a text-time UNet, else its text encoder's).
    static std::optional<ModelLimits> readSdLimits(const QString& path, int* pixelMultiple, QString* error = nullptr,
                                                   SdFamily* family = nullptr);

    // Why nothing usable is at `path`, for messages, or empty when something is there:
    // brokenLink's message, "'p' cannot be reached (<reason>)" or "'p' does not exist"; `p` is a
    // short escaped excerpt. Looks at the path and its links alone (stat, lstat, readlink); opens
    // nothing.
    static QString whyNotThere(const QString& path);
    // Why `path` cannot be followed where a symbolic link is in the way: "'p' is a symbolic-link
    // loop (too many levels of symbolic links)" (ELOOP) or "'p' is a dangling symbolic link (to
    // 't', which does not exist)"; empty otherwise (also when plainly nothing is there).
    static QString brokenLink(const QString& path);

private:
    QString executableDir_;
};

}  // namespace tessera
