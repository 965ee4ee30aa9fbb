#include "kernels/ops/LayerNorm.cuh"

#include <cstdint>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

// Rows wider than the warp kernel holds: one block per row; two passes over the row (mean,
// then the centred sum of squares).
template <typename T>
__global__ void __launch_bounds__(kThreads) layerNorm(const T* x, T* y, const float* __restrict__ gamma,
                                                      const float* __restrict__ beta, int channels, float eps) {
    __shared__ float shared[kThreads / 32 + 1];
    const long long row = blockIdx.x;
    const T* in = x + row * channels;
    T* out = y + row * channels;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < channels; c += kThreads) sum += toFloat(in[c]);
    const float mean = blockReduce<kThreads, false>(sum, shared) / channels;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < channels; c += kThreads) {
        const float d = toFloat(in[c]) - mean;
        sq += d * d;
    }
    const float inv = rsqrtf(blockReduce<kThreads, false>(sq, shared) / channels + eps);
    for (int c = threadIdx.x; c < channels; c += kThreads)
        out[c] = fromFloat<T>((toFloat(in[c]) - mean) * inv * gamma[c] + beta[c]);
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

constexpr int kRowsPerBlock = 4;  // one warp per row

// One warp per row, the row held in registers (MAXV vectors of VEC elements per lane): one
// read of the row and one write, the same two-pass statistics as above (mean, then the centred
// sum of squares) over the values in registers. Row widths up to 32 x MAXV x VEC.
template <typename T, int VEC, int MAXV>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layerNormWarp(const T* x, T* y, const float* __restrict__ gamma, const float* __restrict__ beta, long long rows,
                  int channels, float eps) {
    const long long row = blockIdx.x * static_cast<long long>(kRowsPerBlock) + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32, vecs = channels / VEC;
    const T* in = x + row * channels;
    T* out = y + row * channels;
    float v[MAXV][VEC];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
        const int k = lane + 32 * i;
        if (k < vecs) {
            loadVec<T, VEC>(in + k * VEC, v[i]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) sum += v[i][j];
        }
    }
    const float mean = warpSum(sum) / channels;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
        if (lane + 32 * i < vecs)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float d = v[i][j] - mean;
                sq += d * d;
            }
    const float inv = rsqrtf(warpSum(sq) / channels + eps);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
        const int k = lane + 32 * i;
        if (k >= vecs) continue;
        float g[VEC], b[VEC], o[VEC];
        loadVec<float, VEC>(gamma + k * VEC, g);
        loadVec<float, VEC>(beta + k * VEC, b);
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = (v[i][j] - mean) * inv * g[j] + b[j];
        storeVec<T, VEC>(out + k * VEC, o);
    }
}

template <typename T, int VEC>
bool launchWarp(const T* x, T* y, const float* gamma, const float* beta, long long rows, int channels, float eps,
                cudaStream_t stream) {
    const int perLane = (channels / VEC + 31) / 32;
    const unsigned grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    const unsigned threads = 32 * kRowsPerBlock;
    if (perLane <= 1)
        layerNormWarp<T, VEC, 1><<<grid, threads, 0, stream>>>(x, y, gamma, beta, rows, channels, eps);
    else if (perLane <= 2)
        layerNormWarp<T, VEC, 2><<<grid, threads, 0, stream>>>(x, y, gamma, beta, rows, channels, eps);
    else if (perLane <= 4)
        layerNormWarp<T, VEC, 4><<<grid, threads, 0, stream>>>(x, y, gamma, beta, rows, channels, eps);
    else if (perLane <= 8)
        layerNormWarp<T, VEC, 8><<<grid, threads, 0, stream>>>(x, y, gamma, beta, rows, channels, eps);
    else
        return false;
    return true;
}

}  // namespace

void launchLayerNorm(DType t, const void* x, void* y, const float* gamma, const float* beta, long long rows,
                     int channels, float eps, cudaStream_t stream) {
    if (rows <= 0) return;
    // Rows in registers, one warp each, where the row is whole 16-byte vectors (channels a
    // multiple of 8) and fits (up to 2,048 channels); else one block per row.
    const bool vectors = channels % 8 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(y) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(gamma) % 32 == 0 &&
                         reinterpret_cast<std::uintptr_t>(beta) % 32 == 0;
    TESSERA_DISPATCH_DTYPE(t, {
        if (!vectors ||
            !launchWarp<T, 8>(static_cast<const T*>(x), static_cast<T*>(y), gamma, beta, rows, channels, eps, stream))
            layerNorm<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
                static_cast<const T*>(x), static_cast<T*>(y), gamma, beta, channels, eps);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
