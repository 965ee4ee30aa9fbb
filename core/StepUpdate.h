// One scheduler update, reduced to per-step scalars so that the CPU reference and the
// CUDA kernels apply exactly the same arithmetic, and so that a captured CUDA graph can
// read the scalars from device memory. Every scheduler (DDPM, DDIM, Euler) is a
// Scheduler::coefficients(stepIndex) producing this struct (core/Scheduler.h).
//
//   x0     = ax * x + ae * eps                    (prediction of the clean sample)
//   x0     = clamp(x0, -clipRange, clipRange)      if clip != 0
//   epsHat = ee * eps + ex * x + e0 * x0          (the direction term's noise estimate)
//   xPrev  = cx0 * x0 + cx * x + ceps * epsHat + sigma * z    (z ~ N(0,1), only if sigma != 0)
#pragma once

#include <algorithm>
#include <cmath>

#include "core/HostDevice.h"

namespace tessera {

struct StepCoefficients {
    float ax = 0, ae = 0;
    float clip = 0, clipRange = 1;
    float ee = 0, ex = 0, e0 = 0;
    float cx0 = 0, cx = 0, ceps = 0, sigma = 0;
    float modelInputScale = 1;  // UNet input = x * modelInputScale (Euler); 1 otherwise
    float timestep = 0;         // the UNet's timestep input for this step
    float pad_[2] = {0, 0};     // keeps the struct 16-float aligned for device copies
};

TESSERA_HD float applyStep(const StepCoefficients& k, float x, float eps, float z) {
    float x0 = k.ax * x + k.ae * eps;
    if (k.clip != 0.0f) x0 = fminf(fmaxf(x0, -k.clipRange), k.clipRange);
    const float epsHat = k.ee * eps + k.ex * x + k.e0 * x0;
    return k.cx0 * x0 + k.cx * x + k.ceps * epsHat + k.sigma * z;
}

}  // namespace tessera
