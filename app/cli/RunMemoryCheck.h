// The host memory check of a render, before anything that grows with the request is allocated
// (the start image decoded or resized, a model loaded, an engine made), for every model family:
// diffusers UNet2DModel folders (their config.json) and Stable Diffusion 1.x, 2.x and XL
// (a pipeline folder's config.json files or a checkpoint's header, no weights read), on the CPU
// engine and on the CUDA engine's host side (core/cpu/HostMemoryEstimate.h), against what the
// machine and the process's own limits leave (core/base/HostMemory.h). Qt-free.
#pragma once

#include <optional>
#include <string>

#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/sd/SdModel.h"
#include "core/models/unet/UNetConfig.h"
#include "core/run/RunConfig.h"

namespace tessera {

// The configurations of the Stable Diffusion model at `path` (a pipeline folder's unet/, vae/,
// text_encoder/ and text_encoder_2/ config.json, a single-file checkpoint's header, or a
// random:* name), read without any weights; nullopt where they cannot be read, for the model's
// load, which follows, to say why.
std::optional<SdModelConfigs> readSdModelConfigs(const std::string& path);

// The model a render runs: a UNet2DModel's config, or a Stable Diffusion model's configurations
// (nullopt: unreadable, see readSdModelConfigs).
struct RunModelShape {
    bool stableDiffusion = false;
    UNetConfig pixel;                       // !stableDiffusion
    std::optional<SdModelConfigs> sdModel;  // stableDiffusion
};

// The estimate of a render of `config` with `model` on `backend`.
HostMemoryEstimate estimateRunMemory(const RunConfig& config, const RunModelShape& model, BackendKind backend,
                                     const std::optional<StartImageSize>& startImage);

// Throws ValidationError (exit 2) when the run's peak exceeds what is available, naming the
// setting to lower, what was needed, what is available and from where (MemAvailable, the
// cgroup, or the process's RLIMIT_AS / RLIMIT_DATA less its use), and what fits. Nothing when
// the machine says nothing of its memory.
void checkRunMemory(const RunConfig& config, const RunModelShape& model, BackendKind backend,
                    const std::optional<StartImageSize>& startImage);

}  // namespace tessera
