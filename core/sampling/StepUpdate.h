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
#pragma once

#include <algorithm>
#include <cmath>

#include "core/base/HostDevice.h"

namespace tessera {

struct StepCoefficients {
    float ax = 0, ae = 0;
    float clip = 0, clipRange = 1;
    float ee = 0, ex = 0, e0 = 0;
    float cx0 = 0, cx = 0, ceps = 0, sigma = 0;
    float modelInputScale = 1;  // UNet input = x * modelInputScale (Euler, Euler a); 1 otherwise
    float timestep = 0;         // the UNet's timestep input for this step
    float cprev = 0;            // weight of the previous step's x0 (DPM++ 2M); 0 otherwise
    float pad_[2] = {0, 0};     // 16 floats: a whole number of 16-byte vectors for device copies
};
static_assert(sizeof(StepCoefficients) == 16 * sizeof(float), "StepCoefficients is 16 floats on host and device");

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

TESSERA_HD StepCoefficients withoutPreviousX0(StepCoefficients k) {
    k.cx0 += k.cprev;
    k.cprev = 0.0f;
    return k;
}

}  // namespace tessera
