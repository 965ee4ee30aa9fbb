#include "kernels/GroupNorm.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/CudaCheck.h"
#include "kernels/DeviceTypes.cuh"

namespace tessera {
namespace {

// grid (chunks, batch); block (channels/VEC, rows). Each thread owns one channel vector and
// walks the chunk's pixels; partial (sum, sum of squares) per group go to `partials`.
template <typename T, int VEC>
__global__ void groupNormPartials(const T* __restrict__ x, int pixels, int channels, int groups, int chunkPixels,
                                  const float* __restrict__ preAdd, long long preStride, float* __restrict__ partials) {
    extern __shared__ float shared[];  // [rows][vecs][2]
    const int b = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
    const int vecs = blockDim.x, tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = tx * VEC;
    float add[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) add[i] = preAdd ? preAdd[b * preStride + c0 + i] : 0.0f;
    const T* xb = x + static_cast<long long>(b) * pixels * channels;
    const int p0 = chunk * chunkPixels, p1 = min(pixels, p0 + chunkPixels);
    float s = 0.0f, ss = 0.0f;
    for (int p = p0 + ty; p < p1; p += blockDim.y) {
        float v[VEC];
        loadVec<T, VEC>(xb + static_cast<long long>(p) * channels + c0, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const float a = v[i] + add[i];
            s += a;
            ss += a * a;
        }
    }
    shared[(ty * vecs + tx) * 2] = s;
    shared[(ty * vecs + tx) * 2 + 1] = ss;
    __syncthreads();
    if (ty == 0) {
        for (int r = 1; r < static_cast<int>(blockDim.y); ++r) {
            s += shared[(r * vecs + tx) * 2];
            ss += shared[(r * vecs + tx) * 2 + 1];
        }
        shared[tx * 2] = s;
        shared[tx * 2 + 1] = ss;
    }
    __syncthreads();
    const int vecsPerGroup = channels / groups / VEC;
    const int flat = ty * vecs + tx;
    for (int g = flat; g < groups; g += vecs * blockDim.y) {
        float gs = 0.0f, gss = 0.0f;
        for (int k = g * vecsPerGroup; k < (g + 1) * vecsPerGroup; ++k) {
            gs += shared[k * 2];
            gss += shared[k * 2 + 1];
        }
        float* out = partials + ((static_cast<long long>(b) * chunks + chunk) * groups + g) * 2;
        out[0] = gs;
        out[1] = gss;
    }
}

__global__ void groupNormFinalize(const float* __restrict__ partials, int batch, int chunks, int groups, double count,
                                  float eps, float* __restrict__ stats) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch * groups) return;
    const int b = i / groups, g = i % groups;
    double s = 0.0, ss = 0.0;
    for (int k = 0; k < chunks; ++k) {
        const float* p = partials + ((static_cast<long long>(b) * chunks + k) * groups + g) * 2;
        s += p[0];
        ss += p[1];
    }
    const double mean = s / count;
    const double var = fmax(ss / count - mean * mean, 0.0);
    stats[i * 2] = static_cast<float>(mean);
    stats[i * 2 + 1] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
}

template <typename T, int VEC>
__global__ void groupNormApply(const T* __restrict__ x, T* __restrict__ y, long long totalVecs, int pixels,
                               int channels, int groups, const float* __restrict__ stats,
                               const float* __restrict__ gamma, const float* __restrict__ beta,
                               const float* __restrict__ preAdd, long long preStride, const float* __restrict__ scale,
                               const float* __restrict__ shift, long long filmStride, bool applySilu) {
    const int vecsPerPixel = channels / VEC;
    const int channelsPerGroup = channels / groups;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c0 = static_cast<int>(idx % vecsPerPixel) * VEC;
        const long long pixel = idx / vecsPerPixel;
        const int b = static_cast<int>(pixel / pixels);
        const int g = c0 / channelsPerGroup;
        const float mean = stats[(b * groups + g) * 2], rstd = stats[(b * groups + g) * 2 + 1];
        float v[VEC];
        loadVec<T, VEC>(x + idx * VEC, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int c = c0 + i;
            float a = v[i] + (preAdd ? preAdd[b * preStride + c] : 0.0f);
            a = (a - mean) * rstd * gamma[c] + beta[c];
            if (scale) a = a * (1.0f + scale[b * filmStride + c]) + shift[b * filmStride + c];
            v[i] = applySilu ? silu(a) : a;
        }
        storeVec<T, VEC>(y + idx * VEC, v);
    }
}

}  // namespace

int groupNormChunks(int pixels, int batch, int multiprocessors) {
    const int target = std::max(1, (4 * multiprocessors + batch - 1) / std::max(1, batch));
    // At least 32 pixels per chunk so a block has work to amortise its reduction.
    return std::max(1, std::min(target, (pixels + 31) / 32));
}

std::size_t groupNormScratchFloats(int batch, int chunks, int groups) {
    return static_cast<std::size_t>(batch) * chunks * groups * 2 + static_cast<std::size_t>(batch) * groups * 2;
}

void launchGroupNorm(const GroupNormParams& p, cudaStream_t stream) {
    if (p.groups <= 0 || p.channels % p.groups != 0)
        throw std::invalid_argument("GroupNorm: " + std::to_string(p.channels) + " channels are not divisible into " +
                                    std::to_string(p.groups) + " groups");
    const int cpg = p.channels / p.groups;
    const int vec = vectorWidthFor(cpg);
    const int vecs = p.channels / vec;
    if (vecs > 1024)
        throw std::invalid_argument("GroupNorm: " + std::to_string(p.channels) + " channels with " +
                                    std::to_string(cpg) + " per group exceed one thread block");
    const int chunks = std::max(1, p.chunks);
    const int chunkPixels = (p.pixels + chunks - 1) / chunks;
    const int rows = std::max(1, std::min(256 / vecs, chunkPixels));
    float* partials = p.scratch;
    float* stats = p.scratch + static_cast<std::size_t>(p.batch) * chunks * p.groups * 2;
    const long long totalVecs = static_cast<long long>(p.batch) * p.pixels * vecs;
    TESSERA_DISPATCH_DTYPE(p.dtype, TESSERA_DISPATCH_VEC(vec, {
        const dim3 block(vecs, rows);
        const std::size_t shared = static_cast<std::size_t>(vecs) * rows * 2 * sizeof(float);
        groupNormPartials<T, VEC><<<dim3(chunks, p.batch), block, shared, stream>>>(
            static_cast<const T*>(p.x), p.pixels, p.channels, p.groups, chunkPixels, p.preAdd, p.preAddBatchStride,
            partials);
        TESSERA_CHECK_LAUNCH();
        groupNormFinalize<<<gridFor(p.batch * p.groups, 128), 128, 0, stream>>>(
            partials, p.batch, chunks, p.groups, static_cast<double>(p.pixels) * cpg, p.eps, stats);
        TESSERA_CHECK_LAUNCH();
        groupNormApply<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
            static_cast<const T*>(p.x), static_cast<T*>(p.y), totalVecs, p.pixels, p.channels, p.groups, stats,
            p.gamma, p.beta, p.preAdd, p.preAddBatchStride, p.scale, p.shift, p.filmBatchStride, p.silu);
        TESSERA_CHECK_LAUNCH();
    }))
}

}  // namespace tessera
