// One scheduler update, reduced to per-step scalars so that the CPU reference and the
// CUDA kernels apply exactly the same arithmetic, and so that a captured CUDA graph can
// read the scalars from device memory. Every scheduler (DDPM, DDIM, Euler, Euler a,
// DPM++ 2M) is a Scheduler::coefficients(stepIndex) producing this struct (core/sampling/Scheduler.h).
//
//   x0     = ax * x + ae * eps                    (prediction of the clean sample)
//   x0     = clamp(x0, -clipRange, clipRange)      if clip != 0
//   epsHat = ee * eps + ex * x + e0 * x0          (the direction term's noise estimate)
//   xPrev  = cx0 * x0 + cx * x + ceps * epsHat + cprev * x0Prev + sigma * z
//            (z ~ N(0,1), only if sigma != 0; x0Prev = the x0 of the step run before, only if
//             cprev != 0: DPM++ 2M's second-order steps)
//
// A step that has no previous x0 (the first step run, text-to-image or image-to-image) uses
// withoutPreviousX0(K): x0 in x0Prev's place, which turns DPM++ 2M's second-order update into
// its first-order one, as diffusers does for its first step (lower_order_nums = 0).
//
// Samplers that need more than one previous x0 (Heun and DPM2: two model evaluations per step,
// the step's start sample kept between them; LMS: the last three derivatives) also read up to
// kStepHistory canvas-sized history buffers h_j, and each step rewrites them. A "step" here is one
// model evaluation (diffusers' scheduler.timesteps entry; Heun and DPM2 have 2N - 1 for N steps):
//
//   xPrev += Σ_j hw[j] * h_j                                  (only where usesHistory(K))
//   after the update:  h_j = hKeep[j] * h_j + hx[j] * x + h0[j] * x0     (x: the step's input)
//
// A buffer is read by the update before the same step rewrites it, so LMS's four derivatives
// fit three buffers (the oldest is read, then replaced by the newest). Every h_j is zero before
// the first step after the canvas starts.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/base/HostDevice.h"

namespace tessera {

inline constexpr int kStepHistory = 3;  // history buffers a step may read and rewrite

struct StepCoefficients {
    float ax = 0, ae = 0;
    float clip = 0, clipRange = 1;
    float ee = 0, ex = 0, e0 = 0;
    float cx0 = 0, cx = 0, ceps = 0, sigma = 0;
    float modelInputScale = 1;  // UNet input = x * modelInputScale (Euler, Euler a); 1 otherwise
    float timestep = 0;         // the UNet's timestep input for this step
    float cprev = 0;            // weight of the previous step's x0 (DPM++ 2M); 0 otherwise
    float history = 0;          // != 0: the step reads or rewrites the history buffers below
    float pad_ = 0;
    float hw[kStepHistory] = {0, 0, 0};     // weight of h_j in xPrev
    float hKeep[kStepHistory] = {1, 1, 1};  // h_j after the step = hKeep h_j + hx x + h0 x0
    float hx[kStepHistory] = {0, 0, 0};
    float h0[kStepHistory] = {0, 0, 0};
    float pad2_[4] = {0, 0, 0, 0};  // 32 floats: a whole number of 16-byte vectors for device copies
};
static_assert(sizeof(StepCoefficients) == 32 * sizeof(float), "StepCoefficients is 32 floats on host and device");

TESSERA_HD float predictX0(const StepCoefficients& k, float x, float eps) {
    const float x0 = k.ax * x + k.ae * eps;
    return k.clip != 0.0f ? fminf(fmaxf(x0, -k.clipRange), k.clipRange) : x0;
}

// x0Prev is read only when k.cprev != 0 (pass 0 otherwise).
TESSERA_HD float applyStep(const StepCoefficients& k, float x, float eps, float z, float x0Prev) {
    const float x0 = predictX0(k, x, eps);
    const float epsHat = k.ee * eps + k.ex * x + k.e0 * x0;
    return k.cx0 * x0 + k.cx * x + k.ceps * epsHat + k.cprev * x0Prev + k.sigma * z;
}

// Whether the step reads or rewrites the history buffers (a pass keeps them when any step does).
TESSERA_HD bool usesHistory(const StepCoefficients& k) { return k.history != 0.0f; }

// applyStep plus the history terms; h[j] is read only where usesHistory(k) (nullptr otherwise).
// The samplers without history keep applyStep's exact arithmetic.
TESSERA_HD float applyStepWithHistory(const StepCoefficients& k, float x, float eps, float z, float x0Prev,
                                      const float* h) {
    const float v = applyStep(k, x, eps, z, x0Prev);
    if (!usesHistory(k)) return v;
    return v + (k.hw[0] * h[0] + k.hw[1] * h[1] + k.hw[2] * h[2]);
}

// h_j after the step, from its value before, the step's input x and its x0 prediction.
TESSERA_HD float nextHistory(const StepCoefficients& k, int j, float h, float x, float x0) {
    return k.hKeep[j] * h + k.hx[j] * x + k.h0[j] * x0;
}

TESSERA_HD StepCoefficients withoutPreviousX0(StepCoefficients k) {
    k.cx0 += k.cprev;
    k.cprev = 0.0f;
    return k;
}

}  // namespace tessera
