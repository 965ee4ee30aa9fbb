#include "kernels/FlashAttention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "kernels/CudaCheck.h"

namespace tessera {
namespace {

// mma.sync over ldmatrix rather than nvcuda::wmma: the m16n8k16 accumulator layout is
// documented (PTX ISA, "Matrix fragments for mma.m16n8k16"), so the online softmax runs on the
// score accumulators in registers and the probabilities feed P V as A fragments directly;
// wmma's fragment layout is opaque and would take a round trip of the scores through shared
// memory per block.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = kFlashBlockQueries;   // 16 query rows (one m16 tile) per warp
static_assert(kBlockM == 16 * kWarps, "one m16 tile of query rows per warp");

// Keys per shared-memory block: 64, or 32 for heads wider than 128 (their output accumulators
// already take 80 registers per thread).
template <int D>
constexpr int blockKeys() {
    return D > 128 ? 32 : 64;
}
// Shared rows of D + 8 elements (16 bytes of padding): the 8 rows one ldmatrix phase reads
// then start in 8 different 16-byte bank groups (no bank conflicts), rows stay 16-byte aligned.
template <int D>
constexpr int rowStride() {
    return D + 8;
}
// Q block, then K and V blocks in two stages each: (64 + 4 x keys per block) rows.
template <int D>
constexpr std::size_t sharedBytes() {
    return static_cast<std::size_t>(kBlockM + 4 * blockKeys<D>()) * rowStride<D>() * 2;
}

__device__ __forceinline__ unsigned sharedAddress(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; with `valid` false the 16 bytes are zero-filled
// (src-size 0: nothing is read).
__device__ __forceinline__ void copyAsync16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sharedAddress(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commitAsync() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void waitAsync() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Four 8 x 8 matrices of 16-bit elements; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void loadMatrices(unsigned (&r)[4], const void* rowAddress) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sharedAddress(rowAddress)));
}
__device__ __forceinline__ void loadMatricesTransposed(unsigned (&r)[4], const void* rowAddress) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sharedAddress(rowAddress)));
}

// c += a (16 x 16, row-major fragment) * b (16 x 8, column fragment), float32 accumulation.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (std::is_same_v<T, __half>) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats as two T in one register, the first in the low half (fragment order).
template <typename T>
__device__ __forceinline__ unsigned packPair(float lo, float hi) {
    if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const unsigned*>(&h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const unsigned*>(&h);
    }
}

struct Params {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    long long qRow, qImage, kRow, kImage, vRow, vImage, oRow, oImage;
    int heads, queries, keys, headDim;
    float scaleLog2;   // scale * log2(e): the softmax runs on exp2
    bool causal;
};

// `rows` rows of headDim elements from `src` (row `first`, `stride` elements apart) into shared
// rows of S elements; rows at or past `limit` are zero-filled.
template <typename T, int S>
__device__ __forceinline__ void loadBlock(T* dst, const T* src, long long stride, int first, int rows, int limit,
                                          int chunks) {
    for (int i = threadIdx.x; i < rows * chunks; i += kThreads) {
        const int r = i / chunks, c = i - r * chunks;
        const bool valid = first + r < limit;
        const T* from = valid ? src + static_cast<long long>(first + r) * stride + c * 8 : src;
        copyAsync16(dst + r * S + c * 8, from, valid);
    }
}

// Over 150 lines, one kernel on purpose: the Q fragments, the running max/sum and the output
// accumulators of a warp's 16 rows live in registers across the whole key loop (load K/V
// asynchronously, S = Q K^T by mma, online softmax, O += P V by mma); device-function calls
// across that state would have to keep it in registers anyway, and the loop's stages share
// the double-buffered shared tiles. The steps that repeat are its helpers above (loadBlock,
// the mma wrappers).
// One CTA: queries blockIdx.x * 64 .. + 63 of (image, head) blockIdx.y; warp w owns rows
// 16w .. 16w + 15. Lane (g = lane / 4, t = lane % 4) holds, per 8-column tile of a score or
// output accumulator, rows g and g + 8 at columns 2t and 2t + 1 (mma's accumulator layout).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flashForward(const Params p) {
    constexpr int BN = blockKeys<D>(), S = rowStride<D>();
    extern __shared__ __align__(16) unsigned char shared[];
    T* const sQ = reinterpret_cast<T*>(shared);   // [kBlockM][S]
    T* const sK = sQ + kBlockM * S;                // [2][BN][S]
    T* const sV = sK + 2 * BN * S;                 // [2][BN][S]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int image = blockIdx.y / p.heads, head = blockIdx.y % p.heads;
    const int q0 = blockIdx.x * kBlockM;
    const T* const Q = static_cast<const T*>(p.q) + image * p.qImage + static_cast<long long>(head) * p.headDim;
    const T* const K = static_cast<const T*>(p.k) + image * p.kImage + static_cast<long long>(head) * p.headDim;
    const T* const V = static_cast<const T*>(p.v) + image * p.vImage + static_cast<long long>(head) * p.headDim;
    const int chunks = p.headDim / 8;   // 16-byte pieces of a row

    // Padding columns headDim..D-1 of every shared row: zero once (cp.async never writes them),
    // so padded dims add 0 x 0 to the scores and the outputs read there are never stored.
    if (p.headDim < D) {
        const int padChunks = (D - p.headDim) / 8, rows = kBlockM + 4 * BN;
        for (int i = threadIdx.x; i < rows * padChunks; i += kThreads) {
            const int r = i / padChunks, c = i - r * padChunks;
            *reinterpret_cast<uint4*>(sQ + r * S + p.headDim + c * 8) = make_uint4(0, 0, 0, 0);
        }
    }

    // Key blocks this CTA needs: all, or with the causal mask those up to its last query.
    int blocks = (p.keys + BN - 1) / BN;
    if (p.causal) blocks = min(blocks, (min(q0 + kBlockM, p.queries) - 1) / BN + 1);

    loadBlock<T, S>(sQ, Q, p.qRow, q0, kBlockM, p.queries, chunks);
    loadBlock<T, S>(sK, K, p.kRow, 0, BN, p.keys, chunks);
    loadBlock<T, S>(sV, V, p.vRow, 0, BN, p.keys, chunks);
    commitAsync();

    float out[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.0f;
    float rowMax[2] = {-CUDART_INF_F, -CUDART_INF_F}, rowSum[2] = {0.0f, 0.0f};
    const int warpRow = warp * 16;
    const int rowQuery[2] = {q0 + warpRow + g, q0 + warpRow + g + 8};

    for (int kb = 0; kb < blocks; ++kb) {
        // Next block into the other stage (last read before the previous iteration's barrier).
        if (kb + 1 < blocks) {
            const int stage = (kb + 1) & 1;
            loadBlock<T, S>(sK + stage * BN * S, K, p.kRow, (kb + 1) * BN, BN, p.keys, chunks);
            loadBlock<T, S>(sV + stage * BN * S, V, p.vRow, (kb + 1) * BN, BN, p.keys, chunks);
            commitAsync();
            waitAsync<1>();
        } else {
            waitAsync<0>();
        }
        __syncthreads();
        const T* const k = sK + (kb & 1) * BN * S;
        const T* const v = sV + (kb & 1) * BN * S;

        // Scores of this warp's 16 rows against the block's BN keys.
        float s[BN / 8][4];
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            unsigned a[4];
            loadMatrices(a, sQ + (warpRow + lane % 16) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
            for (int nn = 0; nn < BN / 16; ++nn) {
                // Matrices: keys +0..7 dims +0..7, keys +0..7 dims +8..15, keys +8..15 dims
                // +0..7, keys +8..15 dims +8..15: b0, b1 of key tile 2nn, then of 2nn + 1.
                unsigned b[4];
                const int m = lane / 8;
                loadMatrices(b, k + (nn * 16 + lane % 8 + (m / 2) * 8) * S + kk * 16 + (m % 2) * 8);
                mma16816<T>(s[2 * nn], a, b[0], b[1]);
                mma16816<T>(s[2 * nn + 1], a, b[2], b[3]);
            }
        }

        // Scale into the exp2 domain; mask keys past the end and, causal, keys after the query.
        const int key0 = kb * BN;
        const bool mask = key0 + BN > p.keys || (p.causal && key0 + BN - 1 > q0 + warpRow);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[j][e] * p.scaleLog2;
                if (mask) {
                    const int key = key0 + 8 * j + 2 * t + (e & 1);
                    if (key >= p.keys || (p.causal && key > rowQuery[e / 2])) x = -CUDART_INF_F;
                }
                s[j][e] = x;
            }

        // Online softmax per row (the 4 lanes of a quad share a row): new maximum, rescale what
        // was accumulated, exponentiate. A row with every key so far masked keeps base 0.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float m = rowMax[half];
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) m = fmaxf(m, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            const float base = m == -CUDART_INF_F ? 0.0f : m;
            const float correction = exp2f(rowMax[half] - base);
            rowMax[half] = m;
            float sum = rowSum[half] * correction;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                out[j][2 * half] *= correction;
                out[j][2 * half + 1] *= correction;
            }
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; ++e) {
                    s[j][e] = exp2f(s[j][e] - base);
                    sum += s[j][e];
                }
            rowSum[half] = sum;   // this lane's columns only; the quad's sum is taken at the end
        }

        // out += P V: the score accumulators of key tiles 2kk, 2kk + 1 are the A fragment of
        // keys 16kk..16kk + 15; V through ldmatrix.trans gives the column fragments.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            unsigned a[4];
            a[0] = packPair<T>(s[2 * kk][0], s[2 * kk][1]);
            a[1] = packPair<T>(s[2 * kk][2], s[2 * kk][3]);
            a[2] = packPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = packPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                // Matrices: keys +0..7 dims +0..7, keys +8..15 dims +0..7, keys +0..7 dims
                // +8..15, keys +8..15 dims +8..15: b0, b1 of dim tile 2dd, then of 2dd + 1.
                unsigned b[4];
                const int m = lane / 8;
                loadMatricesTransposed(b, v + (kk * 16 + lane % 8 + (m % 2) * 8) * S + dd * 16 + (m / 2) * 8);
                mma16816<T>(out[2 * dd], a, b[0], b[1]);
                mma16816<T>(out[2 * dd + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();   // this stage is overwritten by the next iteration's prefetch
    }

    // Normalise and store rows that exist, dims below headDim (whole 8-column tiles: d % 8 == 0).
    T* const O = static_cast<T*>(p.o) + image * p.oImage + static_cast<long long>(head) * p.headDim;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float sum = rowSum[half];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = 1.0f / sum;
        const int query = rowQuery[half];
        if (query >= p.queries) continue;
        T* const row = O + static_cast<long long>(query) * p.oRow;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            if (8 * j < p.headDim)
                *reinterpret_cast<unsigned*>(row + 8 * j + 2 * t) =
                    packPair<T>(out[j][2 * half] * inv, out[j][2 * half + 1] * inv);
    }
}

template <typename T, int D>
void launchFor(const FlashAttentionArgs& a, cudaStream_t stream) {
    constexpr std::size_t bytes = sharedBytes<D>();
    static_assert(bytes <= 227 * 1024, "shared memory of one CTA on sm_90");
    if constexpr (bytes > 48 * 1024)
        TESSERA_CHECK(cudaFuncSetAttribute(flashForward<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
    Params p{a.q,    a.k,      a.v,    a.o,      a.qRow,  a.qImage,  a.kRow,      a.kImage,
             a.vRow, a.vImage, a.oRow, a.oImage, a.heads, a.queries, a.keys, a.headDim,
             a.scale * 1.4426950408889634f, a.causal};
    const dim3 grid(static_cast<unsigned>((a.queries + kBlockM - 1) / kBlockM),
                    static_cast<unsigned>(a.batch * a.heads));
    flashForward<T, D><<<grid, kThreads, bytes, stream>>>(p);
    TESSERA_CHECK_LAUNCH();
}

template <typename T>
void launchTyped(const FlashAttentionArgs& a, cudaStream_t stream) {
    switch ((a.headDim + 15) / 16 * 16) {
    case 16: launchFor<T, 16>(a, stream); break;
    case 32: launchFor<T, 32>(a, stream); break;
    case 48: launchFor<T, 48>(a, stream); break;
    case 64: launchFor<T, 64>(a, stream); break;
    case 80: launchFor<T, 80>(a, stream); break;
    case 96: launchFor<T, 96>(a, stream); break;
    case 112: launchFor<T, 112>(a, stream); break;
    case 128: launchFor<T, 128>(a, stream); break;
    case 144: launchFor<T, 144>(a, stream); break;
    case 160: launchFor<T, 160>(a, stream); break;
    default: throw std::logic_error("launchFlashAttention: head dim " + std::to_string(a.headDim) + " passed the check");
    }
}

}  // namespace

std::string flashAttentionRefusal(DType dtype, int headDim, int batch, int heads,
                                  std::initializer_list<long long> elementOffsets) {
    if (dtype == DType::F32) return "fp32 runs take the blocked path (the reference)";
    if (headDim < 8 || headDim > kFlashMaxHeadDim || headDim % 8 != 0)
        return "head dim " + std::to_string(headDim) + ": the fused kernel takes multiples of 8 up to " +
               std::to_string(kFlashMaxHeadDim) + " (wider heads do not fit its shared-memory blocks)";
    if (static_cast<long long>(batch) * heads > 65535)
        return std::to_string(batch) + " images x " + std::to_string(heads) + " heads: at most 65,535 (grid rows)";
    for (long long off : elementOffsets)
        if (off % 8 != 0)
            return "a row stride, image stride or operand offset of " + std::to_string(off) +
                   " elements is not a multiple of 8 (16-byte rows)";
    return {};
}

std::string flashAttentionTiling(int headDim) {
    const int padded = (headDim + 15) / 16 * 16;
    const int keys = padded > 128 ? 32 : 64;
    std::string s = "head dim " + std::to_string(headDim);
    if (padded != headDim) s += " in " + std::to_string(padded);
    return s + ", " + std::to_string(kBlockM) + " queries x " + std::to_string(keys) + " keys per block";
}

void launchFlashAttention(const FlashAttentionArgs& a, cudaStream_t stream) {
    const std::string why = flashAttentionRefusal(a.dtype, a.headDim, a.batch, a.heads,
                                                  {a.qRow, a.qImage, a.kRow, a.kImage, a.vRow, a.vImage, a.oRow, a.oImage});
    if (!why.empty()) throw std::invalid_argument("launchFlashAttention: " + why);
    if (a.batch < 1 || a.heads < 1 || a.queries < 1 || a.keys < 1)
        throw std::invalid_argument("launchFlashAttention: batch " + std::to_string(a.batch) + ", heads " +
                                    std::to_string(a.heads) + ", queries " + std::to_string(a.queries) + ", keys " +
                                    std::to_string(a.keys) + ": every size must be at least 1");
    for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.o)})
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
            throw std::invalid_argument("launchFlashAttention: an operand's base address is not 16-byte aligned");
    if (a.dtype == DType::F16)
        launchTyped<__half>(a, stream);
    else
        launchTyped<__nv_bfloat16>(a, stream);
}

}  // namespace tessera
