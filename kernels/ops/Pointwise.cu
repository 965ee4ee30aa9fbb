#include "kernels/ops/Pointwise.cuh"

#include <cstdint>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// One element per iteration: the ops that need each element's channel or sample.
template <typename T>
__global__ void pointwise(PointwiseParams p) {
    const long long total = p.rows * p.channels;
    const T* x = static_cast<const T*>(p.x);
    T* y = static_cast<T*>(p.y);
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float v = toFloat(x[i]);
        const int c = static_cast<int>(i % p.channels);
        const long long sample = i / p.channels / p.rowsPerSample;
        float r = v;
        switch (p.op) {
            case PointwiseOp::Affine:
                r = v * p.scale + p.shift;
                break;
            case PointwiseOp::Silu:
                r = silu(v);
                break;
            case PointwiseOp::Add:
                r = (p.scale == 1.0f ? v : v * p.scale) + toFloat(static_cast<const T*>(p.other)[i]);
                break;
            case PointwiseOp::AddVector:
                r = v + p.vector[sample * p.vectorStride + c];
                break;
            case PointwiseOp::ScaleShift: {
                const float* s = p.vector + sample * p.vectorStride;
                r = v * (1.0f + s[c]) + s[p.channels + c];
                break;
            }
            case PointwiseOp::LeakyRelu:
                r = v >= 0.0f ? v : v * p.scale;
                break;
            case PointwiseOp::Prelu:
                r = v >= 0.0f ? v : v * p.vector[sample * p.vectorStride + c];
                break;
            case PointwiseOp::Sigmoid:
                r = 1.0f / (1.0f + expf(-v));
                break;
            case PointwiseOp::Mul:
                r = v * toFloat(static_cast<const T*>(p.other)[i]);
                break;
        }
        y[i] = fromFloat<T>(r);
    }
}

// The ops that need no channel or sample index, VEC elements per iteration: an upscale model's
// residual adds and activations run at full width on its largest feature maps.
template <typename T, int VEC>
__global__ void pointwiseVec(PointwiseParams p, long long vecs) {
    const T* x = static_cast<const T*>(p.x);
    const T* o = static_cast<const T*>(p.other);
    T* y = static_cast<T*>(p.y);
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < vecs;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        float v[VEC], w[VEC];
        loadVec<T, VEC>(x + i * VEC, v);
        if (p.op == PointwiseOp::Add || p.op == PointwiseOp::Mul) loadVec<T, VEC>(o + i * VEC, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            switch (p.op) {
                case PointwiseOp::Affine:
                    v[k] = v[k] * p.scale + p.shift;
                    break;
                case PointwiseOp::Silu:
                    v[k] = silu(v[k]);
                    break;
                case PointwiseOp::Add:
                    v[k] = (p.scale == 1.0f ? v[k] : v[k] * p.scale) + w[k];
                    break;
                case PointwiseOp::LeakyRelu:
                    v[k] = v[k] >= 0.0f ? v[k] : v[k] * p.scale;
                    break;
                case PointwiseOp::Sigmoid:
                    v[k] = 1.0f / (1.0f + expf(-v[k]));
                    break;
                case PointwiseOp::Mul:
                    v[k] = v[k] * w[k];
                    break;
                default:
                    break;
            }
        }
        storeVec<T, VEC>(y + i * VEC, v);
    }
}

bool indexFree(PointwiseOp op) {
    return op == PointwiseOp::Affine || op == PointwiseOp::Silu || op == PointwiseOp::Add ||
           op == PointwiseOp::LeakyRelu || op == PointwiseOp::Sigmoid || op == PointwiseOp::Mul;
}

// Elements of `p` per access where every pointer allows it (8, 4, 2 or 1).
int pointwiseVector(const PointwiseParams& p, long long total) {
    const std::size_t bytes = dtypeSize(p.dtype);
    for (int v = 8; v > 1; v /= 2) {
        const std::size_t a = bytes * static_cast<std::size_t>(v);
        if (total % v == 0 && reinterpret_cast<std::uintptr_t>(p.x) % a == 0 &&
            reinterpret_cast<std::uintptr_t>(p.y) % a == 0 &&
            (p.other == nullptr || reinterpret_cast<std::uintptr_t>(p.other) % a == 0))
            return v;
    }
    return 1;
}

}  // namespace

void launchPointwise(const PointwiseParams& p, cudaStream_t stream) {
    const long long total = p.rows * p.channels;
    if (total <= 0) return;
    const int vec = indexFree(p.op) ? pointwiseVector(p, total) : 1;
    if (vec > 1) {
        const long long vecs = total / vec;
        TESSERA_DISPATCH_DTYPE(p.dtype, TESSERA_DISPATCH_VEC(vec, {
                                   pointwiseVec<T, VEC><<<gridFor(vecs, 256), 256, 0, stream>>>(p, vecs);
                                   TESSERA_CHECK_LAUNCH();
                               }))
        return;
    }
    TESSERA_DISPATCH_DTYPE(p.dtype, {
        pointwise<T><<<gridFor(total, 256), 256, 0, stream>>>(p);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
