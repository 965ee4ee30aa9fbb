// GroupMoments: the mean and biased variance of each channel group of an NHWC image region,
// for a tiled pass's whole-image GroupNorm statistics (core/models/vae/TiledVae.h) over a device canvas.
// Two passes (the mean, then the squared deviations from it), each thread summing one channel
// over a chunk of pixels in float32, chunks and channels merged in float64 in a fixed order: no
// atomics, so the same canvas gives the same bits every time.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct GroupMomentsParams {
    DType dtype = DType::F32;
    const void* x = nullptr;                              // [height, width, stride] NHWC, the first `channels` real
    int width = 0, stride = 0, channels = 0, groups = 0;  // channels a multiple of groups, at most 4096
    int x0 = 0, y0 = 0, w = 0, h = 0;                     // the region, pixels
};

// Doubles of scratch launchGroupMoments needs for `p`.
std::size_t groupMomentsScratch(const GroupMomentsParams& p);
// moments[2 g] = mean, moments[2 g + 1] = biased variance of group g over the region (float64,
// device memory, 2 * groups). Enqueued on `stream`; no allocation, no synchronisation.
void launchGroupMoments(const GroupMomentsParams& p, double* moments, double* scratch, cudaStream_t stream);

}  // namespace tessera
