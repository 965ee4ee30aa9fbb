#include "kernels/ops/Pointwise.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// One element per iteration: these ops are not on the UNet's hot path.
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
                r = v + toFloat(static_cast<const T*>(p.other)[i]);
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

}  // namespace

void launchPointwise(const PointwiseParams& p, cudaStream_t stream) {
    const long long total = p.rows * p.channels;
    if (total <= 0) return;
    TESSERA_DISPATCH_DTYPE(p.dtype, {
        pointwise<T><<<gridFor(total, 256), 256, 0, stream>>>(p);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
