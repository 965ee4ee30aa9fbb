#include "kernels/ops/QkNormRope.cuh"

#include <stdexcept>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kWarpsPerBlock = 8;

// Lane l holds pairs l, l + 32, ... of the head (d / 2 pairs), so a pair's two channels stay in
// one thread for the rotation.
template <typename T>
__global__ void qkNormRope(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ qw,
                           const float* __restrict__ kw, const float* __restrict__ table, long long xPitch,
                           long long rows, long long rowsPerImage, int heads, int d, float eps) {
    const long long warp = blockIdx.x * static_cast<long long>(kWarpsPerBlock) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= rows * heads) return;
    const long long row = warp / heads;
    const int h = static_cast<int>(warp % heads);
    const int D = heads * d, pairs = d / 2;
    const T* in = x + row * xPitch;
    T* out = y + row * 3 * D;
    const float* rot = table + (row % rowsPerImage) * pairs * 2;
    for (int part = 0; part < 2; ++part) {
        const T* v = in + part * D + h * d;
        const float* w = part == 0 ? qw : kw;
        float sq = 0.0f;
        for (int p = lane; p < pairs; p += 32) {
            const float a = toFloat(v[2 * p]), b = toFloat(v[2 * p + 1]);
            sq += a * a + b * b;
        }
        for (int o = 16; o > 0; o /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        const float inv = rsqrtf(sq / d + eps);
        T* o = out + part * D + h * d;
        for (int p = lane; p < pairs; p += 32) {
            const float a = toFloat(v[2 * p]) * inv * w[2 * p], b = toFloat(v[2 * p + 1]) * inv * w[2 * p + 1];
            const float c = rot[2 * p], s = rot[2 * p + 1];
            o[2 * p] = fromFloat<T>(a * c - b * s);
            o[2 * p + 1] = fromFloat<T>(b * c + a * s);
        }
    }
    const T* v = in + 2 * D + h * d;
    T* o = out + 2 * D + h * d;
    for (int c = lane; c < d; c += 32) o[c] = v[c];
}

}  // namespace

void launchQkNormRope(const QkNormRopeArgs& a, cudaStream_t stream) {
    if (a.rows <= 0) return;
    if (a.headDim % 2 != 0) throw std::invalid_argument("QkNormRope: the head dim must be even");
    const long long warps = a.rows * a.heads;
    const auto blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
    TESSERA_DISPATCH_DTYPE(a.dtype, {
        qkNormRope<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<const T*>(a.x), static_cast<T*>(a.y), a.qWeight, a.kWeight, a.table,
            a.xPitch > 0 ? a.xPitch : 3LL * a.heads * a.headDim, a.rows, a.rowsPerImage, a.heads, a.headDim, a.eps);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
