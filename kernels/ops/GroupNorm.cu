#include "kernels/ops/GroupNorm.cuh"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// Two schemes, both deterministic (every reduction runs in a fixed order, no atomics):
//  * fused (one launch): when a (sample, slab of whole groups) fits in one block's registers
//    (at most kMaxThreads threads x kMaxHeld pixel vectors), the block loads its slab once,
//    reduces the statistics and normalises from registers: x is read once.
//  * streaming (three launches): a partials kernel over (pixel chunk, slab, sample) with
//    16-byte loads, a one-warp-per-(sample, group) finalize in float64, and an apply kernel
//    whose threads keep one channel vector's coefficients in registers; x is read twice
//    (at batch 1 the second read mostly hits L2).
// Statistics: each thread keeps per-channel sums of (v - K) and (v - K)^2 around the
// channel's first value K; threads are merged per channel with Chan's (count, mean, M2)
// update in a fixed tree over rows, channels of a group with the equal-count form of the
// same update (E[x^2] - mean^2 in float32 loses the variance of 2-channel groups).
constexpr int kMaxThreads = 512;
constexpr int kMaxHeld = 8;       // pixel vectors a thread holds in the fused scheme
constexpr int kStreamUnroll = 4;  // independent 16-byte loads in flight per thread
constexpr int kMaxSlabVecs = 64;  // channel vectors per block in the streaming scheme

struct GroupNormArgs {
    const void* x;
    void* y;
    int pixels, channels, groups, cpg;
    int slabChannels, slabs, chunks, chunkPixels;
    float eps;
    const float* gamma;
    const float* beta;
    const float* preAdd;
    long long preStride;
    const float* scale;
    const float* shift;
    long long filmStride;
    bool silu;
    float* partials;  // [batch][chunks][groups][3]
    float* stats;     // [batch][groups][2] (mean, rstd)
};

// Chan et al.'s pairwise update of (count, mean, M2): numerically stable where the mean is
// large against the spread.
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

// Channel c's affine map after the centring, FiLM folded in: y = (v - mean) * gain + bias
// with gain = rstd * gamma * (1 + scale), bias = beta * (1 + scale) + shift. Folding moves
// results by float32 rounding of O(1) values only; the centring (v - mean), where
// cancellation lives, stays as it is.
__device__ __forceinline__ void affineFor(const GroupNormArgs& a, int b, int c, float rstd, float& gain, float& bias) {
    gain = rstd * a.gamma[c];
    bias = a.beta[c];
    if (a.scale) {
        const float mul = 1.0f + a.scale[b * a.filmStride + c];
        gain *= mul;
        bias = bias * mul + a.shift[b * a.filmStride + c];
    }
}

// SiLU with the fast exponential and division (MUFU ex2 and rcp, ~5 instructions instead of
// ~25): the apply is instruction-bound at large batch otherwise. Relative error ~1e-6.
__device__ __forceinline__ float fastSilu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

// Vector <-> float conversions two elements per instruction for the 16-bit types.
template <typename T, int VEC>
__device__ __forceinline__ void unpack(const Vec<T, VEC>& r, float (&out)[VEC]) {
    if constexpr (std::is_same_v<T, __half> && VEC % 2 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 2) {
            const float2 f = __half22float2(__halves2half2(r.v[i], r.v[i + 1]));
            out[i] = f.x;
            out[i + 1] = f.y;
        }
    } else if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 2) {
            const float2 f = __bfloat1622float2(__halves2bfloat162(r.v[i], r.v[i + 1]));
            out[i] = f.x;
            out[i + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = toFloat(r.v[i]);
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void storePacked(T* p, const float (&in)[VEC]) {
    Vec<T, VEC> r;
    if constexpr (std::is_same_v<T, __half> && VEC % 2 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 2) {
            const __half2 h = __floats2half2_rn(in[i], in[i + 1]);
            r.v[i] = __low2half(h);
            r.v[i + 1] = __high2half(h);
        }
    } else if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 2) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(in[i], in[i + 1]);
            r.v[i] = __low2bfloat16(h);
            r.v[i + 1] = __high2bfloat16(h);
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) r.v[i] = fromFloat<T>(in[i]);
    }
    *reinterpret_cast<Vec<T, VEC>*>(p) = r;
}

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> loadRaw(const T* p) {
    return *reinterpret_cast<const Vec<T, VEC>*>(p);
}

// Shared-memory floats the reduction of a (vecs x rows) block needs.
std::size_t reduceSharedFloats(int vecs, int rows, int vec, int slabChannels, int cpg) {
    const int half = (rows + 1) / 2;
    return static_cast<std::size_t>(half) * vecs * (2 * vec + 1) + 2 * static_cast<std::size_t>(slabChannels) + 1 +
           2 * static_cast<std::size_t>(slabChannels / cpg);
}

// grid (chunks * slabs, batch); block (slab vectors, rows). Each thread owns one channel
// vector of the slab and the chunk's pixels ty, ty + rows, ... FUSED: one chunk per sample
// and every pixel held in registers (rows * HELD >= pixels); the block normalises its slab.
// Otherwise HELD is the load unroll and the block writes (count, mean, M2) per group.
// Two resident 512-thread blocks per multiprocessor (64 registers) for the streaming partials
// and for the fused variants whose held data fits without spilling (checked with ptxas -v);
// the wider fused ones keep 128 registers and one block.
constexpr int fusedBlocksPerSm(int vec, int held) { return vec * held < 16 || (vec * held == 16 && vec <= 4) ? 2 : 1; }
template <int VEC, int HELD, bool FUSED>
constexpr int reduceMinBlocks() {
    return FUSED ? fusedBlocksPerSm(VEC, HELD) : 2;
}

// Fixed tree over rows: rows [half, active) hand their values to rows [0, active - half), so
// row 0 ends with every row's (n, mean, M2). Slot layout [slot row][value][tx] keeps a warp's
// stores on consecutive banks. Every thread of the block must call it.
template <int VEC>
__device__ __forceinline__ void mergeRows(float* shared, int slotStride, float& n, float (&mean)[VEC],
                                          float (&m2)[VEC]) {
    const int vecs = blockDim.x, rows = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    for (int active = rows; active > 1;) {
        const int half = (active + 1) / 2;
        if (ty >= half && ty < active) {
            float* slot = shared + (ty - half) * slotStride + tx;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                slot[(2 * i) * vecs] = mean[i];
                slot[(2 * i + 1) * vecs] = m2[i];
            }
            slot[2 * VEC * vecs] = n;
        }
        __syncthreads();
        if (ty < active - half) {
            const float* slot = shared + ty * slotStride + tx;
            // Chan's update with the weights shared by the thread's channels (one count).
            const float nb = slot[2 * VEC * vecs];
            if (nb > 0.0f) {
                const float total = n + nb, wb = nb / total, wd = n * wb;
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float d = slot[(2 * i) * vecs] - mean[i];
                    mean[i] += d * wb;
                    m2[i] += slot[(2 * i + 1) * vecs] + d * d * wd;
                }
                n = total;
            }
        }
        __syncthreads();
        active = half;
    }
}

// The fused variants keep every pixel of the slab in registers (held[]) from the load through
// the statistics to the normalised store; their register budget (64 or 128 above) is tuned to
// this body. The normalise-and-store stays written out here (groupNormApply has its own): as a
// shared force-inlined helper it changes the sm_90 code of the fused variants.
template <typename T, int VEC, int HELD, bool FUSED>
__global__ void __launch_bounds__(kMaxThreads, reduceMinBlocks<VEC, HELD, FUSED>()) groupNormReduce(GroupNormArgs a) {
    extern __shared__ float shared[];
    const int vecs = blockDim.x, rows = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    const int slab = blockIdx.x % a.slabs, chunk = blockIdx.x / a.slabs, b = blockIdx.y;
    const int slabBase = slab * a.slabChannels, c0 = slabBase + tx * VEC;
    const T* xb = static_cast<const T*>(a.x) + static_cast<long long>(b) * a.pixels * a.channels + c0;
    const int p0 = chunk * a.chunkPixels, p1 = min(a.pixels, p0 + a.chunkPixels);

    float add[VEC], origin[VEC], s[VEC], ss[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        add[i] = a.preAdd ? a.preAdd[b * a.preStride + c0 + i] : 0.0f;
        origin[i] = s[i] = ss[i] = 0.0f;
    }
    if (p0 + ty < p1) {
        const Vec<T, VEC> first = loadRaw<T, VEC>(xb + static_cast<long long>(p0 + ty) * a.channels);
#pragma unroll
        for (int i = 0; i < VEC; ++i) origin[i] = toFloat(first.v[i]) + add[i];
    }
    Vec<T, VEC> held[HELD];
    int count = 0;
    for (int base = p0 + ty; base < p1; base += HELD * rows) {
#pragma unroll
        for (int r = 0; r < HELD; ++r) {
            const int p = base + r * rows;
            if (p < p1) held[r] = loadRaw<T, VEC>(xb + static_cast<long long>(p) * a.channels);
        }
#pragma unroll
        for (int r = 0; r < HELD; ++r) {
            if (base + r * rows < p1) {
                float v[VEC];
                unpack<T, VEC>(held[r], v);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float d = v[i] + add[i] - origin[i];
                    s[i] += d;
                    ss[i] += d * d;
                }
                ++count;
            }
        }
        if (FUSED) break;  // rows * HELD covers the sample: held[] stays for the apply
    }

    // Per-channel (n, mean, M2) of this thread; n is the same for all its channels.
    float n = static_cast<float>(count), mean[VEC], m2[VEC];
    const float inv = count > 0 ? 1.0f / n : 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        mean[i] = count > 0 ? origin[i] + s[i] * inv : 0.0f;
        m2[i] = fmaxf(ss[i] - s[i] * s[i] * inv, 0.0f);
    }

    const int slotStride = vecs * (2 * VEC + 1);
    mergeRows<VEC>(shared, slotStride, n, mean, m2);

    // Row 0 now holds every slab channel over the whole chunk (one count for all).
    const int slabChannels = a.slabChannels, cpg = a.cpg, slabGroups = slabChannels / cpg;
    float* channelStats = shared + ((rows + 1) / 2) * slotStride;  // [slab channel][mean, M2]
    float* chunkCount = channelStats + 2 * slabChannels;
    float* groupStats = chunkCount + 1;  // [slab group][mean, rstd]
    if (ty == 0) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            channelStats[(tx * VEC + i) * 2] = mean[i];
            channelStats[(tx * VEC + i) * 2 + 1] = m2[i];
        }
        if (tx == 0) *chunkCount = n;
    }
    __syncthreads();
    const float cn = *chunkCount;
    for (int gl = ty * vecs + tx; gl < slabGroups; gl += vecs * rows) {
        // Equal-count merge of the group's channels, in channel order.
        const float* cs = channelStats + gl * cpg * 2;
        float sum = 0.0f;
        for (int k = 0; k < cpg; ++k) sum += cs[2 * k];
        const float gmean = cn > 0.0f ? sum / static_cast<float>(cpg) : 0.0f;
        float gm2 = 0.0f;
        for (int k = 0; k < cpg; ++k) {
            const float d = cs[2 * k] - gmean;
            gm2 += cs[2 * k + 1] + cn * d * d;
        }
        const float gn = cn * static_cast<float>(cpg);
        if (FUSED) {
            const double var = gn > 0.0f ? fmax(static_cast<double>(gm2) / gn, 0.0) : 0.0;
            groupStats[gl * 2] = gmean;
            groupStats[gl * 2 + 1] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.eps)));
        } else {
            float* out =
                a.partials + ((static_cast<long long>(b) * a.chunks + chunk) * a.groups + slab * slabGroups + gl) * 3;
            out[0] = gn;
            out[1] = gmean;
            out[2] = gm2;
        }
    }
    if (!FUSED) return;
    __syncthreads();

    float gmean[VEC], gain[VEC], bias[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int c = c0 + i, gl = (c - slabBase) / cpg;
        gmean[i] = groupStats[gl * 2];
        affineFor(a, b, c, groupStats[gl * 2 + 1], gain[i], bias[i]);
    }
    T* yb = static_cast<T*>(a.y) + static_cast<long long>(b) * a.pixels * a.channels + c0;
#pragma unroll
    for (int r = 0; r < HELD; ++r) {
        const int p = p0 + ty + r * rows;
        if (p < p1) {  // as groupNormApply's normalise-and-store, apart on purpose (groupNormReduce's comment)
            float v[VEC];
            unpack<T, VEC>(held[r], v);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const float t = (v[i] + add[i] - gmean[i]) * gain[i] + bias[i];
                v[i] = a.silu ? fastSilu(t) : t;
            }
            storePacked<T, VEC>(yb + static_cast<long long>(p) * a.channels, v);
        }
    }
}

// One warp per (sample, group): lane l merges chunks l, l + 32, ... in order, then the 32
// lane results are merged by a fixed shuffle tree, in float64.
__global__ void groupNormFinalize(GroupNormArgs a, int batch) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= batch * a.groups) return;
    const int b = warp / a.groups, g = warp % a.groups;
    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int k = lane; k < a.chunks; k += 32) {
        const float* p = a.partials + ((static_cast<long long>(b) * a.chunks + k) * a.groups + g) * 3;
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
    a.stats[warp * 2] = static_cast<float>(mean);
    a.stats[warp * 2 + 1] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.eps)));
}

// grid (chunks * slabs, batch); block (slab vectors, rows): each thread keeps its channel
// vector's coefficients in registers and walks the chunk's pixels with UNROLL loads in flight.
template <typename T, int VEC, int UNROLL>
__global__ void __launch_bounds__(kMaxThreads) groupNormApply(GroupNormArgs a) {
    const int rows = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    const int slab = blockIdx.x % a.slabs, chunk = blockIdx.x / a.slabs, b = blockIdx.y;
    const int c0 = slab * a.slabChannels + tx * VEC;
    float add[VEC], gmean[VEC], gain[VEC], bias[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int c = c0 + i, g = c / a.cpg;
        add[i] = a.preAdd ? a.preAdd[b * a.preStride + c] : 0.0f;
        gmean[i] = a.stats[(b * a.groups + g) * 2];
        affineFor(a, b, c, a.stats[(b * a.groups + g) * 2 + 1], gain[i], bias[i]);
    }
    const long long sampleOffset = static_cast<long long>(b) * a.pixels * a.channels + c0;
    const T* xb = static_cast<const T*>(a.x) + sampleOffset;
    T* yb = static_cast<T*>(a.y) + sampleOffset;
    const int p0 = chunk * a.chunkPixels, p1 = min(a.pixels, p0 + a.chunkPixels);
    // Software pipeline: the next UNROLL vectors are in flight while these are normalised.
    Vec<T, VEC> cur[UNROLL], next[UNROLL];
    int base = p0 + ty;
#pragma unroll
    for (int r = 0; r < UNROLL; ++r)
        if (base + r * rows < p1) cur[r] = loadRaw<T, VEC>(xb + static_cast<long long>(base + r * rows) * a.channels);
    for (; base < p1; base += UNROLL * rows) {
        const int nextBase = base + UNROLL * rows;
#pragma unroll
        for (int r = 0; r < UNROLL; ++r)
            if (nextBase + r * rows < p1)
                next[r] = loadRaw<T, VEC>(xb + static_cast<long long>(nextBase + r * rows) * a.channels);
#pragma unroll
        for (int r = 0; r < UNROLL; ++r) {
            const int p = base + r * rows;
            if (p < p1) {  // as groupNormReduce's normalise-and-store, apart on purpose (see its comment)
                float v[VEC];
                unpack<T, VEC>(cur[r], v);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float t = (v[i] + add[i] - gmean[i]) * gain[i] + bias[i];
                    v[i] = a.silu ? fastSilu(t) : t;
                }
                storePacked<T, VEC>(yb + static_cast<long long>(p) * a.channels, v);
            }
        }
#pragma unroll
        for (int r = 0; r < UNROLL; ++r) cur[r] = next[r];
    }
}

// Widest vector (at most 16 bytes) that divides the channel count.
int vectorWidth(int channels, std::size_t elementSize) {
    for (int v = static_cast<int>(16 / elementSize); v > 1; v /= 2)
        if (channels % v == 0) return v;
    return 1;
}

struct FusedPlan {
    bool ok = false;
    int slabChannels = 0, rows = 0, held = 0;
};

// The fused scheme's slab: whole groups and whole vectors, preferably at least 32 bytes per
// pixel (a full sector), with every pixel of the sample held by at most kMaxThreads threads.
FusedPlan planFused(int pixels, int channels, int cpg, int vec, std::size_t elementSize) {
    FusedPlan plan;
    const int unit = std::lcm(cpg, vec);
    int smallest = 0, preferred = 0;
    for (int s = unit; s <= channels; s += unit) {
        if (channels % s != 0) continue;
        const int vecs = s / vec;
        if (static_cast<long long>(vecs) * ((pixels + kMaxHeld - 1) / kMaxHeld) > kMaxThreads) break;
        if (smallest == 0) smallest = s;
        if (preferred == 0 && static_cast<std::size_t>(s) * elementSize >= 32) preferred = s;
    }
    plan.slabChannels = preferred ? preferred : smallest;
    if (plan.slabChannels == 0) return plan;
    const int vecs = plan.slabChannels / vec;
    for (int held = 1; held <= kMaxHeld; held *= 2) {
        const int rows = (pixels + held - 1) / held;
        if (static_cast<long long>(vecs) * rows <= kMaxThreads) {
            plan.ok = true;
            plan.rows = rows;
            plan.held = held;
            return plan;
        }
    }
    return plan;
}

// The streaming scheme's slab: the largest divisor of the channels holding whole groups and
// at most kMaxSlabVecs vectors (0 when even one group needs more than kMaxThreads vectors).
int streamSlabChannels(int channels, int cpg, int vec) {
    const int unit = std::lcm(cpg, vec);
    int best = 0;
    for (int s = unit; s <= channels && s / vec <= kMaxSlabVecs; s += unit)
        if (channels % s == 0) best = s;
    if (best == 0)  // very wide groups: one block row of up to kMaxThreads vectors
        for (int s = unit; s <= channels && s / vec <= kMaxThreads; s += unit)
            if (channels % s == 0) return s;
    return best;
}

template <typename T, int VEC>
void launchTyped(const GroupNormParams& p, GroupNormArgs a, int cpg, cudaStream_t stream) {
    FusedPlan fused = planFused(p.pixels, p.channels, cpg, VEC, sizeof(T));
    if (fused.ok) {
        // The fused blocks load, reduce and store in turn; beyond about two waves of them the
        // streaming scheme (loads overlapping across blocks) is faster (measured on an H100).
        int device = 0, multiprocessors = 0;
        TESSERA_CHECK(cudaGetDevice(&device));
        TESSERA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
        const int perSm = fusedBlocksPerSm(VEC, fused.held);
        const long long blocks = static_cast<long long>(p.batch) * (p.channels / fused.slabChannels);
        if (blocks > 2LL * perSm * multiprocessors) fused.ok = false;
    }
    if (fused.ok) {
        a.slabChannels = fused.slabChannels;
        a.slabs = p.channels / fused.slabChannels;
        a.chunks = 1;
        a.chunkPixels = p.pixels;
        const int vecs = fused.slabChannels / VEC;
        const dim3 block(vecs, fused.rows), grid(a.slabs, p.batch);
        const std::size_t shared = reduceSharedFloats(vecs, fused.rows, VEC, fused.slabChannels, cpg) * sizeof(float);
        switch (fused.held) {
            case 1:
                groupNormReduce<T, VEC, 1, true><<<grid, block, shared, stream>>>(a);
                break;
            case 2:
                groupNormReduce<T, VEC, 2, true><<<grid, block, shared, stream>>>(a);
                break;
            case 4:
                groupNormReduce<T, VEC, 4, true><<<grid, block, shared, stream>>>(a);
                break;
            default:
                groupNormReduce<T, VEC, kMaxHeld, true><<<grid, block, shared, stream>>>(a);
                break;
        }
        TESSERA_CHECK_LAUNCH();
        return;
    }
    const int slabChannels = streamSlabChannels(p.channels, cpg, VEC);
    if (slabChannels == 0)
        throw std::invalid_argument("GroupNorm: " + std::to_string(p.channels) + " channels with " +
                                    std::to_string(cpg) + " per group exceed one thread block");
    a.slabChannels = slabChannels;
    a.slabs = p.channels / slabChannels;
    a.chunks = std::max(1, p.chunks);
    a.chunkPixels = (p.pixels + a.chunks - 1) / a.chunks;
    const int vecs = slabChannels / VEC;
    const int rows = std::max(1, kMaxThreads / vecs);
    const dim3 block(vecs, rows), grid(a.chunks * a.slabs, p.batch);
    const std::size_t shared = reduceSharedFloats(vecs, rows, VEC, slabChannels, cpg) * sizeof(float);
    groupNormReduce<T, VEC, kStreamUnroll, false><<<grid, block, shared, stream>>>(a);
    TESSERA_CHECK_LAUNCH();
    groupNormFinalize<<<gridFor(static_cast<long long>(p.batch) * p.groups * 32, 128), 128, 0, stream>>>(a, p.batch);
    TESSERA_CHECK_LAUNCH();
    // Half-size blocks for the apply: its coefficients take ~75 registers per thread, so
    // 256-thread blocks keep 3 blocks (and every chunk of a batch-1 sample) resident.
    const dim3 applyBlock(vecs, std::max(1, kMaxThreads / 2 / vecs));
    groupNormApply<T, VEC, kStreamUnroll><<<grid, applyBlock, 0, stream>>>(a);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace

int groupNormChunks(int pixels, int batch, int multiprocessors) {
    // About two blocks of the streaming scheme per multiprocessor, each with at least 128
    // pixels so that its reduction is amortised.
    const int target = std::max(1, (2 * multiprocessors + batch - 1) / std::max(1, batch));
    return std::max(1, std::min(target, pixels / 128));
}

std::size_t groupNormScratchFloats(int batch, int chunks, int groups) {
    return static_cast<std::size_t>(batch) * chunks * groups * 3 + static_cast<std::size_t>(batch) * groups * 2;
}

void launchGroupNorm(const GroupNormParams& p, cudaStream_t stream) {
    if (p.groups <= 0 || p.channels % p.groups != 0)
        throw std::invalid_argument("GroupNorm: " + std::to_string(p.channels) + " channels are not divisible into " +
                                    std::to_string(p.groups) + " groups");
    if (p.batch <= 0 || p.pixels <= 0) return;
    const int cpg = p.channels / p.groups;
    // Filled field by field like other parameter blocks: alike in shape only.
    GroupNormArgs a{};
    a.x = p.x;
    a.y = p.y;
    a.pixels = p.pixels;
    a.channels = p.channels;
    a.groups = p.groups;
    a.cpg = cpg;
    a.eps = p.eps;
    a.gamma = p.gamma;
    a.beta = p.beta;
    a.preAdd = p.preAdd;
    a.preStride = p.preAddBatchStride;
    a.scale = p.scale;
    a.shift = p.shift;
    a.filmStride = p.filmBatchStride;
    a.silu = p.silu;
    const int chunks = std::max(1, p.chunks);
    a.partials = p.scratch;
    a.stats = p.scratch + static_cast<std::size_t>(p.batch) * chunks * p.groups * 3;
    TESSERA_DISPATCH_DTYPE(p.dtype, {
        const int vec = vectorWidth(p.channels, sizeof(T));
        switch (vec) {
            case 8:
                if constexpr (sizeof(T) == 2) launchTyped<T, 8>(p, a, cpg, stream);
                break;
            case 4:
                launchTyped<T, 4>(p, a, cpg, stream);
                break;
            case 2:
                launchTyped<T, 2>(p, a, cpg, stream);
                break;
            default:
                launchTyped<T, 1>(p, a, cpg, stream);
                break;
        }
    })
}

}  // namespace tessera
