#include "kernels/GroupNorm.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/CudaCheck.h"
#include "kernels/DeviceTypes.cuh"

namespace tessera {
namespace {

// Chan et al.'s pairwise update of (count, mean, M2): numerically stable where the mean is
// large against the spread (E[x^2] - mean^2 in float32 is not).
template <typename F>
__device__ __forceinline__ void chanMerge(F& n, F& mean, F& m2, F nb, F meanb, F m2b) {
    if (nb == F(0)) return;
    if (n == F(0)) {
        n = nb;
        mean = meanb;
        m2 = m2b;
        return;
    }
    const F total = n + nb;
    const F d = meanb - mean;
    mean += d * (nb / total);
    m2 += m2b + d * d * (n * nb / total);
    n = total;
}

// grid (chunks, batch); block (channels/VEC, rows). Each thread owns one channel vector and
// walks the chunk's pixels, summing (x - K) and (x - K)^2 per lane around the lane's first
// value K; lanes, rows and the group's vectors are then merged in a fixed order into one
// (count, mean, M2) per group and chunk.
template <typename T, int VEC>
__global__ void groupNormPartials(const T* __restrict__ x, int pixels, int channels, int groups, int chunkPixels,
                                  const float* __restrict__ preAdd, long long preStride, float* __restrict__ partials) {
    extern __shared__ float shared[];  // [rows][vecs][3]
    const int b = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
    const int vecs = blockDim.x, tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = tx * VEC;
    float add[VEC], shift[VEC], s[VEC], ss[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        add[i] = preAdd ? preAdd[b * preStride + c0 + i] : 0.0f;
        shift[i] = s[i] = ss[i] = 0.0f;
    }
    const T* xb = x + static_cast<long long>(b) * pixels * channels;
    const int p0 = chunk * chunkPixels, p1 = min(pixels, p0 + chunkPixels);
    int count = 0;
    for (int p = p0 + ty; p < p1; p += blockDim.y) {
        float v[VEC];
        loadVec<T, VEC>(xb + static_cast<long long>(p) * channels + c0, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const float a = v[i] + add[i];
            if (count == 0) shift[i] = a;
            const float d = a - shift[i];
            s[i] += d;
            ss[i] += d * d;
        }
        ++count;
    }
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    if (count > 0) {
        const float c = static_cast<float>(count);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            chanMerge(n, mean, m2, c, shift[i] + s[i] / c, fmaxf(ss[i] - s[i] * s[i] / c, 0.0f));
    }
    float* mine = shared + (ty * vecs + tx) * 3;
    mine[0] = n;
    mine[1] = mean;
    mine[2] = m2;
    __syncthreads();
    if (ty == 0) {
        for (int r = 1; r < static_cast<int>(blockDim.y); ++r) {
            const float* o = shared + (r * vecs + tx) * 3;
            chanMerge(n, mean, m2, o[0], o[1], o[2]);
        }
        mine[0] = n;
        mine[1] = mean;
        mine[2] = m2;
    }
    __syncthreads();
    const int vecsPerGroup = channels / groups / VEC;
    const int flat = ty * vecs + tx;
    for (int g = flat; g < groups; g += vecs * blockDim.y) {
        float gn = 0.0f, gmean = 0.0f, gm2 = 0.0f;
        for (int k = g * vecsPerGroup; k < (g + 1) * vecsPerGroup; ++k)
            chanMerge(gn, gmean, gm2, shared[k * 3], shared[k * 3 + 1], shared[k * 3 + 2]);
        float* out = partials + ((static_cast<long long>(b) * chunks + chunk) * groups + g) * 3;
        out[0] = gn;
        out[1] = gmean;
        out[2] = gm2;
    }
}

// One warp per (sample, group): lane l merges chunks l, l + 32, ... in order, then the 32
// lane results are merged by a fixed shuffle tree. The order depends only on the chunk
// count, so results are deterministic; the work is spread over 32 lanes (a single thread
// per group serialised hundreds of float64 merges: ~85 us at batch 1 on an H100).
__global__ void groupNormFinalize(const float* __restrict__ partials, int batch, int chunks, int groups, float eps,
                                  float* __restrict__ stats) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= batch * groups) return;
    const int b = warp / groups, g = warp % groups;
    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int k = lane; k < chunks; k += 32) {
        const float* p = partials + ((static_cast<long long>(b) * chunks + k) * groups + g) * 3;
        chanMerge<double>(n, mean, m2, p[0], p[1], p[2]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const double on = __shfl_down_sync(0xffffffffu, n, offset);
        const double omean = __shfl_down_sync(0xffffffffu, mean, offset);
        const double om2 = __shfl_down_sync(0xffffffffu, m2, offset);
        chanMerge<double>(n, mean, m2, on, omean, om2);
    }
    if (lane != 0) return;
    const double var = n > 0.0 ? fmax(m2 / n, 0.0) : 0.0;
    stats[warp * 2] = static_cast<float>(mean);
    stats[warp * 2 + 1] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
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
    return static_cast<std::size_t>(batch) * chunks * groups * 3 + static_cast<std::size_t>(batch) * groups * 2;
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
    float* stats = p.scratch + static_cast<std::size_t>(p.batch) * chunks * p.groups * 3;
    const long long totalVecs = static_cast<long long>(p.batch) * p.pixels * vecs;
    TESSERA_DISPATCH_DTYPE(p.dtype, TESSERA_DISPATCH_VEC(vec, {
        const dim3 block(vecs, rows);
        const std::size_t shared = static_cast<std::size_t>(vecs) * rows * 3 * sizeof(float);
        groupNormPartials<T, VEC><<<dim3(chunks, p.batch), block, shared, stream>>>(
            static_cast<const T*>(p.x), p.pixels, p.channels, p.groups, chunkPixels, p.preAdd, p.preAddBatchStride,
            partials);
        TESSERA_CHECK_LAUNCH();
        groupNormFinalize<<<gridFor(static_cast<long long>(p.batch) * p.groups * 32, 128), 128, 0, stream>>>(
            partials, p.batch, chunks, p.groups, p.eps, stats);
        TESSERA_CHECK_LAUNCH();
        groupNormApply<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
            static_cast<const T*>(p.x), static_cast<T*>(p.y), totalVecs, p.pixels, p.channels, p.groups, stats,
            p.gamma, p.beta, p.preAdd, p.preAddBatchStride, p.scale, p.shift, p.filmBatchStride, p.silu);
        TESSERA_CHECK_LAUNCH();
    }))
}

}  // namespace tessera
