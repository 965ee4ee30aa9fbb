// Device-side element conversions and aligned vector access shared by the kernels.
// Arithmetic is always float32; T is the storage type (float, __half, __nv_bfloat16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/device/DType.h"

namespace tessera {

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// VEC consecutive elements, aligned to their size so that one access is one wide load/store.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void loadVec(const T* p, float (&out)[VEC]) {
    const Vec<T, VEC> r = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = toFloat(r.v[i]);
}

template <typename T, int VEC>
__device__ __forceinline__ void storeVec(T* p, const float (&in)[VEC]) {
    Vec<T, VEC> r;
#pragma unroll
    for (int i = 0; i < VEC; ++i) r.v[i] = fromFloat<T>(in[i]);
    *reinterpret_cast<Vec<T, VEC>*>(p) = r;
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// GELU with the exact erf (PyTorch's default, approximate="none"): 0.5 x (1 + erf(x / sqrt 2)).
__device__ __forceinline__ float geluExact(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// The sum (or, IsMax, the maximum) of `v` over a block of Threads threads (a multiple of 32),
// the same in every thread. `shared` holds Threads / 32 + 1 floats; the block must reach
// every call.
template <int Threads, bool IsMax>
__device__ float blockReduce(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = IsMax ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = shared[0];
        for (int w = 1; w < Threads / 32; ++w) r = IsMax ? fmaxf(r, shared[w]) : r + shared[w];
        shared[Threads / 32] = r;
    }
    __syncthreads();
    const float r = shared[Threads / 32];
    __syncthreads();
    return r;
}

// Element `idx` of a grid-stride loop over an NHWC tensor [*, height, width, vecs vectors]:
// its sample, row, column and vector.
struct NhwcVecIndex {
    long long b;
    int y, x, k;
};
__device__ __forceinline__ NhwcVecIndex nhwcVecIndex(long long idx, int vecs, int width, int height) {
    NhwcVecIndex i;
    i.k = static_cast<int>(idx % vecs);
    long long pixel = idx / vecs;
    i.x = static_cast<int>(pixel % width);
    pixel /= width;
    i.y = static_cast<int>(pixel % height);
    i.b = pixel / height;
    return i;
}

// Largest vector width in {8,4,2,1} that divides every count given (channel counts), so
// that a vector never straddles a row or a group. Host-side.
inline int vectorWidthFor(int a, int b = 8, int c = 8) {
    for (int v = 8; v > 1; v /= 2)
        if (a % v == 0 && b % v == 0 && c % v == 0) return v;
    return 1;
}

// Calls f.template operator()<T>() with the storage type for `t`.
#define TESSERA_DISPATCH_DTYPE(t, ...) \
    switch (t) {                       \
        case ::tessera::DType::F32: {  \
            using T = float;           \
            __VA_ARGS__;               \
        } break;                       \
        case ::tessera::DType::F16: {  \
            using T = __half;          \
            __VA_ARGS__;               \
        } break;                       \
        case ::tessera::DType::BF16: { \
            using T = __nv_bfloat16;   \
            __VA_ARGS__;               \
        } break;                       \
    }

#define TESSERA_DISPATCH_VEC(vec, ...) \
    switch (vec) {                     \
        case 8: {                      \
            constexpr int VEC = 8;     \
            __VA_ARGS__;               \
        } break;                       \
        case 4: {                      \
            constexpr int VEC = 4;     \
            __VA_ARGS__;               \
        } break;                       \
        case 2: {                      \
            constexpr int VEC = 2;     \
            __VA_ARGS__;               \
        } break;                       \
        default: {                     \
            constexpr int VEC = 1;     \
            __VA_ARGS__;               \
        } break;                       \
    }

inline unsigned gridFor(long long n, int block, long long cap = 65535LL * 32) {
    long long g = (n + block - 1) / block;
    if (g < 1) g = 1;
    return static_cast<unsigned>(g < cap ? g : cap);
}

}  // namespace tessera
