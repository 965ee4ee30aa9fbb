#include "kernels/ops/GroupMoments.cuh"

#include <stdexcept>
#include <string>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {

namespace {

constexpr int kThreads = 256;
constexpr long long kChunkPixels = 2048;
constexpr int kMaxChannels = 4096;

long long regionPixels(const GroupMomentsParams& p) { return static_cast<long long>(p.w) * p.h; }
long long chunksOf(const GroupMomentsParams& p) { return (regionPixels(p) + kChunkPixels - 1) / kChunkPixels; }

// partial[chunk * groups + g]: the sum over the chunk's pixels and group g's channels of
// x (means == nullptr) or of (x - means[2 g])^2.
template <typename T>
__global__ void chunkSums(const T* __restrict__ x, int width, int stride, int channels, int groups, int x0, int y0,
                          int w, long long pixels, const double* __restrict__ means, double* __restrict__ partial) {
    extern __shared__ double channelSum[];  // [channels]
    const long long first = static_cast<long long>(blockIdx.x) * kChunkPixels;
    const long long last = min(first + kChunkPixels, pixels);
    const int perGroup = channels / groups;
    for (int c = threadIdx.x; c < channels; c += blockDim.x) {
        const float mean = means ? static_cast<float>(means[2 * (c / perGroup)]) : 0.0f;
        float sum = 0.0f;
        long long y = y0 + first / w, xx = x0 + first % w;  // walked along the rows: no division per pixel
        for (long long i = first; i < last; ++i) {
            const float v = toFloat(x[(y * width + xx) * stride + c]);
            sum += means ? (v - mean) * (v - mean) : v;
            if (++xx == x0 + w) {
                xx = x0;
                ++y;
            }
        }
        channelSum[c] = sum;
    }
    __syncthreads();
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        double s = 0;
        for (int c = g * perGroup; c < (g + 1) * perGroup; ++c) s += channelSum[c];
        partial[static_cast<long long>(blockIdx.x) * groups + g] = s;
    }
}

// moments[2 g + slot] = (sum over chunks of partial[chunk * groups + g]) / count.
__global__ void mergeChunks(const double* __restrict__ partial, long long chunks, int groups, double count, int slot,
                            double* __restrict__ moments) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    double s = 0;
    for (long long k = 0; k < chunks; ++k) s += partial[k * groups + g];
    moments[2 * g + slot] = s / count;
}

}  // namespace

std::size_t groupMomentsScratch(const GroupMomentsParams& p) {
    return static_cast<std::size_t>(chunksOf(p)) * static_cast<std::size_t>(p.groups);
}

void launchGroupMoments(const GroupMomentsParams& p, double* moments, double* scratch, cudaStream_t stream) {
    if (p.groups < 1 || p.channels < p.groups || p.channels % p.groups != 0 || p.channels > kMaxChannels ||
        p.stride < p.channels || p.w < 1 || p.h < 1 || p.x0 < 0 || p.y0 < 0 || p.x0 + p.w > p.width)
        throw std::invalid_argument("GroupMoments: " + std::to_string(p.channels) + " channels (stride " +
                                    std::to_string(p.stride) + ") in " + std::to_string(p.groups) + " groups over " +
                                    std::to_string(p.w) + "x" + std::to_string(p.h) + " px at (" +
                                    std::to_string(p.x0) + ", " + std::to_string(p.y0) + ") of width " +
                                    std::to_string(p.width) + "; the channels must split into the groups, at most " +
                                    std::to_string(kMaxChannels) + ", the region inside the image");
    const long long chunks = chunksOf(p), pixels = regionPixels(p);
    const double count = static_cast<double>(pixels) * (p.channels / p.groups);
    const std::size_t shared = static_cast<std::size_t>(p.channels) * sizeof(double);
    const int mergeBlocks = (p.groups + kThreads - 1) / kThreads;
    for (int pass = 0; pass < 2; ++pass) {
        const double* means = pass == 0 ? nullptr : moments;
        TESSERA_DISPATCH_DTYPE(p.dtype, chunkSums<T><<<static_cast<unsigned>(chunks), kThreads, shared, stream>>>(
                                            static_cast<const T*>(p.x), p.width, p.stride, p.channels, p.groups, p.x0,
                                            p.y0, p.w, pixels, means, scratch));
        TESSERA_CHECK_LAUNCH();
        mergeChunks<<<mergeBlocks, kThreads, 0, stream>>>(scratch, chunks, p.groups, count, pass, moments);
        TESSERA_CHECK_LAUNCH();
    }
}

}  // namespace tessera
