// Flow matching's Euler sampler (FLUX.1): diffusers schedulers/scheduling_flow_match_euler_discrete.py
// FlowMatchEulerDiscreteScheduler (set_timesteps with the pipelines' sigmas linspace(1, 1/N, N),
// time_shift, step, scale_noise) and pipelines/flux/pipeline_flux.py calculate_shift, as one more
// Scheduler whose per-step scalars (StepUpdate.h) the engines already apply:
//   x0 = x - sigma_k v,   x_{k+1} = x + (sigma_{k+1} - sigma_k) v
// with v the model's output (a velocity), the model's timestep 1000 sigma_k, no input scaling, the
// start noise unscaled, and an image-to-image start at step b x_b = (1 - sigma_b) image + sigma_b z
// (scale_noise). Qt-free.
#pragma once

#include <memory>

#include "core/sampling/Scheduler.h"

namespace tessera {

struct FlowMatchOptions {
    // FLUX.1-dev: the shift follows the image's token count (use_dynamic_shifting); schnell: a
    // static shift of 1 (none).
    bool dynamicShift = true;
    float shift = 1.0f;  // the static shift: sigma' = shift sigma / (1 + (shift - 1) sigma)
    double baseShift = 0.5, maxShift = 1.15;
    int baseImageSeqLen = 256, maxImageSeqLen = 4096;
    // The image tokens mu is computed for ((H / 16) (W / 16) pixels of one tile in a tiled run).
    int imageSeqLen = 4096;

    // calculate_shift: mu = m * imageSeqLen + b on the line through (base, baseShift) and (max, maxShift).
    double mu() const;
};

// Throws ValidationError("steps") for n outside 1..1000 at setTimesteps, as the others.
std::unique_ptr<Scheduler> createFlowMatchScheduler(const FlowMatchOptions& options);

}  // namespace tessera
