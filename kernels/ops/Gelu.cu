#include "kernels/ops/Gelu.cuh"

#include <cstdint>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__device__ __forceinline__ float activate(GeluKind kind, float v) {
    switch (kind) {
        case GeluKind::Tanh:
            return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        case GeluKind::Quick:
            return v / (1.0f + expf(-1.702f * v));
        default:
            return geluExact(v);
    }
}

// 16-bit storage: the same functions through the fast exponential (x sigmoid(2u) for the tanh
// form, 0.5 (1 + tanh u) = sigmoid(2u)); its float32 error is far below a 16-bit output's step.
__device__ __forceinline__ float activateFast(GeluKind kind, float v) {
    switch (kind) {
        case GeluKind::Tanh:
            return v / (1.0f + __expf(-1.5957691216057308f * (v + 0.044715f * v * v * v)));
        case GeluKind::Quick:
            return v / (1.0f + __expf(-1.702f * v));
        default:
            return geluExact(v);
    }
}

template <typename T>
__device__ __forceinline__ float apply(GeluKind kind, float v) {
    if constexpr (sizeof(T) == 2) return activateFast(kind, v);
    return activate(kind, v);
}

template <typename T>
__global__ void gelu(GeluKind kind, const T* x, T* y, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        y[i] = fromFloat<T>(apply<T>(kind, toFloat(x[i])));
}

// 16 bytes per thread and load (8 halves or 4 floats): the activation is a pass over memory.
template <typename T>
__global__ void geluVector(GeluKind kind, const uint4* x, uint4* y, long long vectors) {
    constexpr int kPer = sizeof(uint4) / sizeof(T);
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < vectors;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        uint4 v = x[i];
        T* e = reinterpret_cast<T*>(&v);
#pragma unroll
        for (int j = 0; j < kPer; ++j) e[j] = fromFloat<T>(apply<T>(kind, toFloat(e[j])));
        y[i] = v;
    }
}

// Rows of `count` elements at a pitch, 16 bytes per load: `vectors` per row.
template <typename T>
__global__ void geluRowsVector(GeluKind kind, const uint4* x, long long xPitchVectors, uint4* y, long long rows,
                               int vectors) {
    constexpr int kPer = sizeof(uint4) / sizeof(T);
    const long long n = rows * vectors;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long r = i / vectors, v = i % vectors;
        uint4 value = x[r * xPitchVectors + v];
        T* e = reinterpret_cast<T*>(&value);
#pragma unroll
        for (int j = 0; j < kPer; ++j) e[j] = fromFloat<T>(apply<T>(kind, toFloat(e[j])));
        y[i] = value;
    }
}

template <typename T>
__global__ void geluRows(GeluKind kind, const T* x, long long xPitch, T* y, long long rows, int count) {
    const long long n = rows * count;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        y[i] = fromFloat<T>(apply<T>(kind, toFloat(x[(i / count) * xPitch + i % count])));
}

}  // namespace

void launchGeluRows(DType t, GeluKind kind, const void* x, long long xPitch, void* y, long long rows, int count,
                    cudaStream_t stream) {
    if (rows <= 0 || count <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        constexpr long long per = sizeof(uint4) / sizeof(T);
        const bool aligned = reinterpret_cast<std::uintptr_t>(x) % sizeof(uint4) == 0 &&
                             reinterpret_cast<std::uintptr_t>(y) % sizeof(uint4) == 0 && count % per == 0 &&
                             xPitch % per == 0;
        if (aligned) {
            geluRowsVector<T><<<gridFor(rows * (count / per), 256), 256, 0, stream>>>(
                kind, static_cast<const uint4*>(x), xPitch / per, static_cast<uint4*>(y), rows,
                static_cast<int>(count / per));
        } else {
            geluRows<T><<<gridFor(rows * count, 256), 256, 0, stream>>>(kind, static_cast<const T*>(x), xPitch,
                                                                        static_cast<T*>(y), rows, count);
        }
        TESSERA_CHECK_LAUNCH();
    })
}

void launchGelu(DType t, GeluKind kind, const void* x, void* y, long long n, cudaStream_t stream) {
    if (n <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        constexpr long long per = sizeof(uint4) / sizeof(T);
        const bool aligned = reinterpret_cast<std::uintptr_t>(x) % sizeof(uint4) == 0 &&
                             reinterpret_cast<std::uintptr_t>(y) % sizeof(uint4) == 0;
        if (aligned && n % per == 0) {
            geluVector<T><<<gridFor(n / per, 256), 256, 0, stream>>>(kind, static_cast<const uint4*>(x),
                                                                     static_cast<uint4*>(y), n / per);
        } else {
            gelu<T><<<gridFor(n, 256), 256, 0, stream>>>(kind, static_cast<const T*>(x), static_cast<T*>(y), n);
        }
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
