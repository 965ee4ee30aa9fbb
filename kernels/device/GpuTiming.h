// GpuTiming: the one timing loop of prepare's choices (cuDNN legacy algorithm vs graph plan,
// fused epilogue vs apart, a graph plan's candidates): CUDA events around each call on the
// stream, the median of the timed calls.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"

namespace tessera {

// Runs `launch` (which enqueues work on `stream`) `discard` + `repeats` times, each between two
// events, waiting for each; returns the median GPU time in ms of the last `repeats` calls
// (repeats >= 1). The first calls warm caches and lazily loaded kernels up.
inline double medianGpuMs(cudaStream_t stream, int repeats, int discard, const std::function<void()>& launch) {
    CudaEvent a = makeEvent(), b = makeEvent();
    std::vector<float> times;
    for (int r = 0; r < discard + repeats; ++r) {
        TESSERA_CHECK(cudaEventRecord(a.get(), stream));
        launch();
        TESSERA_CHECK(cudaEventRecord(b.get(), stream));
        TESSERA_CHECK(cudaEventSynchronize(b.get()));
        float ms = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
        if (r >= discard) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace tessera
