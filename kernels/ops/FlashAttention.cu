#include "kernels/ops/FlashAttention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "kernels/device/CudaCheck.h"

namespace tessera {
namespace {

// mma.sync over ldmatrix rather than nvcuda::wmma: the m16n8k16 accumulator layout is
// documented (PTX ISA, "Matrix fragments for mma.m16n8k16"), so the online softmax runs on the
// score accumulators in registers and the probabilities feed P V as A fragments directly;
// wmma's fragment layout is opaque and would take a round trip of the scores through shared
// memory per block.

// Keys per shared-memory block: 64, or 32 for heads wider than 128 (their output accumulators
// already take 80 registers per thread).
template <int D>
constexpr int blockKeys() {
    return D > 128 ? 32 : 64;
}
// Shared rows of D elements plus padding to an odd number of 16-byte units: the 8 rows one
// ldmatrix phase reads then start in 8 different 16-byte bank groups (no bank conflicts), rows
// stay 16-byte aligned.
template <int D>
constexpr int rowStride() {
    return (D / 8) % 2 == 0 ? D + 8 : D + 16;
}
// Q block (16 x MT rows for each of W warps), then K and V blocks in two stages each.
template <int D, int MT, int W>
constexpr std::size_t sharedBytes() {
    return static_cast<std::size_t>(16 * MT * W + 4 * blockKeys<D>()) * rowStride<D>() * 2;
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
// Two 8 x 8 matrices; lanes 0..15 give the row addresses (lanes 16..31 repeat valid ones).
__device__ __forceinline__ void loadTwoMatrices(unsigned (&r)[2], const void* rowAddress) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(sharedAddress(rowAddress)));
}
__device__ __forceinline__ void loadTwoMatricesTransposed(unsigned (&r)[2], const void* rowAddress) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
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
// c += a (16 x 8) * b (8 x 8): the last 8 dims of a head dim that is 8 past a multiple of 16.
template <typename T>
__device__ __forceinline__ void mma1688(float (&c)[4], const unsigned (&a)[2], unsigned b) {
    if constexpr (std::is_same_v<T, __half>) {
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(b));
    } else {
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(b));
    }
}

// 2^x on the special-function unit (ex2.approx: relative error ~2^-22; -inf gives +0).
__device__ __forceinline__ float fastExp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
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
    float scaleLog2;  // scale * log2(e) > 0: the softmax runs on exp2
    bool causal;
};

// `rows` rows of headDim elements from `src` (row `first`, `stride` elements apart) into shared
// rows of S elements, by `threads` threads; rows at or past `limit` are zero-filled.
template <typename T, int S, int threads>
__device__ __forceinline__ void loadBlock(T* dst, const T* src, long long stride, int first, int rows, int limit,
                                          int chunks) {
    for (int i = threadIdx.x; i < rows * chunks; i += threads) {
        const int r = i / chunks, c = i - r * chunks;
        const bool valid = first + r < limit;
        const T* from = valid ? src + static_cast<long long>(first + r) * stride + c * 8 : src;
        copyAsync16(dst + r * S + c * 8, from, valid);
    }
}

// Steps of flashForward, force-inlined: the arrays they take by reference are the kernel's
// registers (Q fragments, scores, running max/sum, output accumulators), and nvcc emits the
// same PTX for every instantiation as for the kernel written in one piece. The P V product and
// the k8 step stay in the kernel: as helpers they change the PTX of the 128-row and head-dim-40
// tilings. Lane (g = lane / 4, t = lane % 4) holds, per 8-column tile of a score or output
// accumulator, rows g and g + 8 at columns 2t and 2t + 1 (mma's accumulator layout).
template <int D>
constexpr int queryKSteps() {
    return D / 16 > 0 ? D / 16 : 1;
}

// Raw scores (unscaled) of the warp's MT row tiles against one shared block of BN keys: the
// D / 16 k16 steps (the k8 step of D % 16 == 8 follows in the kernel).
template <typename T, int D, int MT>
__device__ __forceinline__ void blockScores(float (&s)[MT][blockKeys<D>() / 8][4],
                                            const unsigned (&qa)[MT][queryKSteps<D>()][4], const T* const k, int lane) {
    constexpr int BN = blockKeys<D>(), S = rowStride<D>(), KS = D / 16;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
            // Matrices: keys +0..7 dims +0..7, keys +0..7 dims +8..15, keys +8..15 dims
            // +0..7, keys +8..15 dims +8..15: b0, b1 of key tile 2nn, then of 2nn + 1.
            unsigned b[4];
            const int m = lane / 8;
            loadMatrices(b, k + (nn * 16 + lane % 8 + (m / 2) * 8) * S + kk * 16 + (m % 2) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816<T>(s[mt][2 * nn], qa[mt][kk], b[0], b[1]);
                mma16816<T>(s[mt][2 * nn + 1], qa[mt][kk], b[2], b[3]);
            }
        }
}

// Masks keys past the end and, causal, keys after the query (a score of -inf) in the scores of
// the block from key `key0`; the warp's rows start at query q0 + warpRow.
template <int D, int MT>
__device__ __forceinline__ void maskScores(float (&s)[MT][blockKeys<D>() / 8][4], const Params& p,
                                           const int (&rowQuery)[MT][2], int key0, int q0, int warpRow, int t) {
    constexpr int BN = blockKeys<D>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (key0 + BN > p.keys || (p.causal && key0 + BN - 1 > q0 + warpRow + 16 * mt)) {
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = key0 + 8 * j + 2 * t + (e & 1);
                    if (key >= p.keys || (p.causal && key > rowQuery[mt][e / 2])) s[mt][j][e] = -CUDART_INF_F;
                }
        }
    }
}

// Online softmax per row (the 4 lanes of a quad share a row): new maximum of the raw scores,
// rescale what was accumulated, exponentiate with the scale folded in (exp2(s x scale log2 e -
// max x scale log2 e), one FFMA). A row with every key so far masked keeps base 0.
template <int D, int MT>
__device__ __forceinline__ void onlineSoftmax(float (&s)[MT][blockKeys<D>() / 8][4], float (&out)[MT][D / 8][4],
                                              float (&rowMax)[MT][2], float (&rowSum)[MT][2], float scaleLog2) {
    constexpr int BN = blockKeys<D>(), NT = D / 8;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float m = rowMax[mt][half];
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) m = fmaxf(m, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            const float base = m == -CUDART_INF_F ? 0.0f : m * scaleLog2;
            const float correction = fastExp2(rowMax[mt][half] * scaleLog2 - base);
            rowMax[mt][half] = m;
            float sum = rowSum[mt][half] * correction;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                out[mt][j][2 * half] *= correction;
                out[mt][j][2 * half + 1] *= correction;
            }
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; ++e) {
                    s[mt][j][e] = fastExp2(fmaf(s[mt][j][e], scaleLog2, -base));
                    sum += s[mt][j][e];
                }
            rowSum[mt][half] = sum;  // this lane's columns only; the quad's sum is taken at the end
        }
}

// Normalise and store rows that exist, dims below headDim (whole 8-column tiles: d % 8 == 0).
template <typename T, int D, int MT>
__device__ __forceinline__ void storeOutput(const Params& p, T* const O, const float (&out)[MT][D / 8][4],
                                            const float (&rowSum)[MT][2], const int (&rowQuery)[MT][2], int t) {
    constexpr int NT = D / 8;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float sum = rowSum[mt][half];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = 1.0f / sum;
            const int query = rowQuery[mt][half];
            if (query >= p.queries) continue;
            T* const row = O + static_cast<long long>(query) * p.oRow;
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (8 * j < p.headDim)
                    *reinterpret_cast<unsigned*>(row + 8 * j + 2 * t) =
                        packPair<T>(out[mt][j][2 * half] * inv, out[mt][j][2 * half + 1] * inv);
        }
}

// One CTA of W warps: queries blockIdx.x * BM .. + BM - 1 of (image, head) blockIdx.y, BM =
// 16 MT W; warp w owns rows 16 MT w .. + 16 MT - 1 as MT m16 tiles, so each K and V fragment
// read from shared memory feeds MT products and each K/V block read from L2 serves BM queries.
// D is the head dim the kernel computes (a multiple of 8; a head dim below it is zero-padded):
// D / 16 k16 steps, then one k8 step when D % 16 == 8; D / 8 output tiles. The Q fragments, the
// running max/sum and the output accumulators stay in registers across the whole key loop.
template <typename T, int D, int MT, int W>
__global__ void __launch_bounds__(32 * W) flashForward(const Params p) {
    constexpr int BN = blockKeys<D>(), S = rowStride<D>(), BM = 16 * MT * W, kThreads = 32 * W;
    constexpr int KS = D / 16, NT = D / 8;
    constexpr bool kTail = D % 16 == 8;
    extern __shared__ __align__(16) unsigned char shared[];
    T* const sQ = reinterpret_cast<T*>(shared);  // [BM][S]
    T* const sK = sQ + BM * S;                   // [2][BN][S]
    T* const sV = sK + 2 * BN * S;               // [2][BN][S]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int image = blockIdx.y / p.heads, head = blockIdx.y % p.heads;
    const int q0 = blockIdx.x * BM;
    const T* const Q = static_cast<const T*>(p.q) + image * p.qImage + static_cast<long long>(head) * p.headDim;
    const T* const K = static_cast<const T*>(p.k) + image * p.kImage + static_cast<long long>(head) * p.headDim;
    const T* const V = static_cast<const T*>(p.v) + image * p.vImage + static_cast<long long>(head) * p.headDim;
    const int chunks = p.headDim / 8;  // 16-byte pieces of a row

    // Padding columns headDim..D-1 of every shared row: zero once (cp.async never writes them),
    // so padded dims add 0 x 0 to the scores and the outputs read there are never stored.
    if (p.headDim < D) {
        const int padChunks = (D - p.headDim) / 8, rows = BM + 4 * BN;
        for (int i = threadIdx.x; i < rows * padChunks; i += kThreads) {
            const int r = i / padChunks, c = i - r * padChunks;
            *reinterpret_cast<uint4*>(sQ + r * S + p.headDim + c * 8) = make_uint4(0, 0, 0, 0);
        }
    }

    // Key blocks this CTA needs: all, or with the causal mask those up to its last query.
    int blocks = (p.keys + BN - 1) / BN;
    if (p.causal) blocks = min(blocks, (min(q0 + BM, p.queries) - 1) / BN + 1);

    loadBlock<T, S, kThreads>(sQ, Q, p.qRow, q0, BM, p.queries, chunks);
    commitAsync();
    loadBlock<T, S, kThreads>(sK, K, p.kRow, 0, BN, p.keys, chunks);
    loadBlock<T, S, kThreads>(sV, V, p.vRow, 0, BN, p.keys, chunks);
    commitAsync();

    // This warp's Q fragments, held in registers for the whole key loop.
    const int warpRow = warp * 16 * MT;
    waitAsync<1>();
    __syncthreads();
    unsigned qa[MT][queryKSteps<D>()][4], qt[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const T* const rowAt = sQ + (warpRow + 16 * mt + lane % 16) * S;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) loadMatrices(qa[mt][kk], rowAt + kk * 16 + (lane / 16) * 8);
        if constexpr (kTail) loadTwoMatrices(qt[mt], rowAt + KS * 16);
    }

    float out[MT][NT][4];
    float rowMax[MT][2], rowSum[MT][2];
    int rowQuery[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < NT; ++j) out[mt][j][0] = out[mt][j][1] = out[mt][j][2] = out[mt][j][3] = 0.0f;
        rowMax[mt][0] = rowMax[mt][1] = -CUDART_INF_F;
        rowSum[mt][0] = rowSum[mt][1] = 0.0f;
        rowQuery[mt][0] = q0 + warpRow + 16 * mt + g;
        rowQuery[mt][1] = rowQuery[mt][0] + 8;
    }

    for (int kb = 0; kb < blocks; ++kb) {
        // Next block into the other stage (last read before the previous iteration's barrier).
        if (kb + 1 < blocks) {
            const int stage = (kb + 1) & 1;
            loadBlock<T, S, kThreads>(sK + stage * BN * S, K, p.kRow, (kb + 1) * BN, BN, p.keys, chunks);
            loadBlock<T, S, kThreads>(sV + stage * BN * S, V, p.vRow, (kb + 1) * BN, BN, p.keys, chunks);
            commitAsync();
            waitAsync<1>();
        } else {
            waitAsync<0>();
        }
        __syncthreads();
        const T* const k = sK + (kb & 1) * BN * S;
        const T* const v = sV + (kb & 1) * BN * S;

        float s[MT][BN / 8][4];
        blockScores<T, D, MT>(s, qa, k, lane);
        if constexpr (kTail) {
            // Dims D - 8 .. D - 1: matrix m of one ldmatrix.x4 is key tile 4nn + m's b.
#pragma unroll
            for (int nn = 0; nn < BN / 32; ++nn) {
                unsigned b[4];
                loadMatrices(b, k + (nn * 32 + lane) * S + KS * 16);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) mma1688<T>(s[mt][4 * nn + i], qt[mt], b[i]);
            }
        }

        const int key0 = kb * BN;
        maskScores<D, MT>(s, p, rowQuery, key0, q0, warpRow, t);

        onlineSoftmax<D, MT>(s, out, rowMax, rowSum, p.scaleLog2);

        // out += P V: the score accumulators of key tiles 2kk, 2kk + 1 are the A fragment of
        // keys 16kk..16kk + 15; V through ldmatrix.trans gives the column fragments.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                a[mt][0] = packPair<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = packPair<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = packPair<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = packPair<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dd = 0; dd < NT / 2; ++dd) {
                // Matrices: keys +0..7 dims +0..7, keys +8..15 dims +0..7, keys +0..7 dims
                // +8..15, keys +8..15 dims +8..15: b0, b1 of dim tile 2dd, then of 2dd + 1.
                unsigned b[4];
                const int m = lane / 8;
                loadMatricesTransposed(b, v + (kk * 16 + lane % 8 + (m % 2) * 8) * S + dd * 16 + (m / 2) * 8);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(out[mt][2 * dd], a[mt], b[0], b[1]);
                    mma16816<T>(out[mt][2 * dd + 1], a[mt], b[2], b[3]);
                }
            }
            if constexpr (NT % 2 == 1) {
                // The last dim tile: keys +0..7 and +8..15 at dims D - 8 .. D - 1.
                unsigned b[2];
                loadTwoMatricesTransposed(b, v + (kk * 16 + lane % 16) * S + (NT - 1) * 8);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma16816<T>(out[mt][NT - 1], a[mt], b[0], b[1]);
            }
        }
        __syncthreads();  // this stage is overwritten by the next iteration's prefetch
    }

    T* const O = static_cast<T*>(p.o) + image * p.oImage + static_cast<long long>(head) * p.headDim;
    storeOutput<T, D, MT>(p, O, out, rowSum, rowQuery, t);
}

// The head dim the kernel computes for `headDim`: 40 exactly (SD 1.x: two k16 steps and one
// k8), others padded to a multiple of 16.
int computedHeadDim(int headDim) { return headDim == 40 ? 40 : (headDim + 15) / 16 * 16; }

// 128 query rows per CTA (two m16 tiles per warp, or eight warps) where the registers allow it.
bool allowsWideBlocks(int headDim) { return computedHeadDim(headDim) <= 80; }

template <typename T, int D, int MT, int W>
void launchFor(const FlashAttentionArgs& a, cudaStream_t stream) {
    constexpr std::size_t bytes = sharedBytes<D, MT, W>();
    static_assert(bytes <= 227 * 1024, "shared memory of one CTA on sm_90");
    if constexpr (bytes > 48 * 1024)
        TESSERA_CHECK(cudaFuncSetAttribute(flashForward<T, D, MT, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
    Params p{a.q,
             a.k,
             a.v,
             a.o,
             a.qRow,
             a.qImage,
             a.kRow,
             a.kImage,
             a.vRow,
             a.vImage,
             a.oRow,
             a.oImage,
             a.heads,
             a.queries,
             a.keys,
             a.headDim,
             a.scale * 1.4426950408889634f,
             a.causal};
    constexpr int rows = 16 * MT * W;
    const dim3 grid(static_cast<unsigned>((a.queries + rows - 1) / rows), static_cast<unsigned>(a.batch * a.heads));
    flashForward<T, D, MT, W><<<grid, 32 * W, bytes, stream>>>(p);
    TESSERA_CHECK_LAUNCH();
}

template <typename T, int D>
void launchRows(const FlashAttentionArgs& a, cudaStream_t stream) {
    if constexpr (D <= 80) {
        if (a.blockQueries == 128) {
            if (a.warps == 8) return launchFor<T, D, 1, 8>(a, stream);
            return launchFor<T, D, 2, 4>(a, stream);
        }
    }
    launchFor<T, D, 1, 4>(a, stream);
}

template <typename T>
void launchTyped(const FlashAttentionArgs& a, cudaStream_t stream) {
    switch (computedHeadDim(a.headDim)) {
        case 16:
            launchRows<T, 16>(a, stream);
            break;
        case 32:
            launchRows<T, 32>(a, stream);
            break;
        case 40:
            launchRows<T, 40>(a, stream);
            break;
        case 48:
            launchRows<T, 48>(a, stream);
            break;
        case 64:
            launchRows<T, 64>(a, stream);
            break;
        case 80:
            launchRows<T, 80>(a, stream);
            break;
        case 96:
            launchRows<T, 96>(a, stream);
            break;
        case 112:
            launchRows<T, 112>(a, stream);
            break;
        case 128:
            launchRows<T, 128>(a, stream);
            break;
        case 144:
            launchRows<T, 144>(a, stream);
            break;
        case 160:
            launchRows<T, 160>(a, stream);
            break;
        default:
            throw std::logic_error("launchFlashAttention: head dim " + std::to_string(a.headDim) + " passed the check");
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

std::vector<FlashTiling> flashTilings(int headDim) {
    if (!allowsWideBlocks(headDim)) return {{64, 4}};
    return {{64, 4}, {128, 4}, {128, 8}};
}

std::string flashAttentionTiling(int headDim, FlashTiling tiling) {
    const int computed = computedHeadDim(headDim);
    const int keys = computed > 128 ? 32 : 64;
    const bool wide = tiling.blockQueries == 128 && allowsWideBlocks(headDim);
    std::string s = "head dim " + std::to_string(headDim);
    if (computed != headDim) s += " in " + std::to_string(computed);
    s += ", " + std::to_string(wide ? 128 : 64) + " queries x " + std::to_string(keys) + " keys per block";
    if (wide) s += tiling.warps == 8 ? ", 8 warps" : ", 4 warps of 32 rows";
    return s;
}

void launchFlashAttention(const FlashAttentionArgs& a, cudaStream_t stream) {
    const std::string why = flashAttentionRefusal(
        a.dtype, a.headDim, a.batch, a.heads, {a.qRow, a.qImage, a.kRow, a.kImage, a.vRow, a.vImage, a.oRow, a.oImage});
    if (!why.empty()) throw std::invalid_argument("launchFlashAttention: " + why);
    if (a.batch < 1 || a.heads < 1 || a.queries < 1 || a.keys < 1)
        throw std::invalid_argument("launchFlashAttention: batch " + std::to_string(a.batch) + ", heads " +
                                    std::to_string(a.heads) + ", queries " + std::to_string(a.queries) + ", keys " +
                                    std::to_string(a.keys) + ": every size must be at least 1");
    if (!(a.scale > 0.0f) || !std::isfinite(a.scale))
        throw std::invalid_argument("launchFlashAttention: scale " + std::to_string(a.scale) +
                                    " must be positive and finite");
    if ((a.blockQueries != 0 && a.blockQueries != 64 && a.blockQueries != 128) ||
        (a.warps != 0 && a.warps != 4 && a.warps != 8))
        throw std::invalid_argument("launchFlashAttention: " + std::to_string(a.blockQueries) +
                                    " queries per block in " + std::to_string(a.warps) +
                                    " warps: 64 or 128 queries (0 for 64), 4 or 8 warps (0 for 4)");
    for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.o)})
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
            throw std::invalid_argument("launchFlashAttention: an operand's base address is not 16-byte aligned");
    if (a.dtype == DType::F16)
        launchTyped<__half>(a, stream);
    else
        launchTyped<__nv_bfloat16>(a, stream);
}

}  // namespace tessera
