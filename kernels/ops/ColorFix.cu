#include "kernels/ops/ColorFix.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

struct Coefficients {
    double a, r;  // sqrt(1 / abar_t), sqrt(1 / abar_t - 1)
};

// torch.round (half to even) then .long(), clamped to the table.
__device__ Coefficients coefficientsOf(const ColorFixParams& p, int b) {
    double t = rint(static_cast<double>(p.timesteps[b * p.timestepStride]));
    t = fmin(fmax(t, 0.0), static_cast<double>(p.tableSize - 1));
    const int i = static_cast<int>(t);
    return {static_cast<double>(p.table[i]), static_cast<double>(p.table[p.tableSize + i])};
}

__device__ __forceinline__ int clampTo(int v, int n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }

// Element c of pixel `pixel` of an operand stored `stride` channels a pixel, as double.
template <typename T>
__device__ __forceinline__ double load(const void* v, long long pixel, int stride, int c) {
    return static_cast<double>(toFloat(static_cast<const T*>(v)[pixel * stride + c]));
}

template <typename T>
__device__ __forceinline__ double x0At(const ColorFixParams& p, const Coefficients& k, long long pixel, int c) {
    return k.a * load<T>(p.x, pixel, p.xStride, c) - k.r * load<T>(p.eps, pixel, p.epsStride, c);
}

// y at (pixel, c) from the corrected x0, and zeros in y's padded channels (by the channel-0 thread).
template <typename T>
__device__ void store(const ColorFixParams& p, const Coefficients& k, long long pixel, int c, double x0) {
    const double eps = load<T>(p.eps, pixel, p.epsStride, c), xt = load<T>(p.x, pixel, p.xStride, c);
    const double w = p.weight;
    T* y = static_cast<T*>(p.y) + pixel * p.yStride;
    y[c] = fromFloat<T>(static_cast<float>((k.a * xt - x0) / k.r * w + eps * (1.0 - w)));
    if (c == 0)
        for (int q = p.channels; q < p.yStride; ++q) y[q] = fromFloat<T>(0.0f);
}

// Row sums: rows0 = sum over the row box of x0, rows1 = of the latent.
template <typename T>
__global__ void rowSums(ColorFixParams p, long long total, double* rows0, double* rows1) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % p.channels);
        const long long pixel = i / p.channels;
        const int x = static_cast<int>(pixel % p.w);
        const long long row = pixel / p.w;  // b * h + y
        const int b = static_cast<int>(row / p.h);
        const Coefficients k = coefficientsOf(p, b);
        double s0 = 0.0, s1 = 0.0;
        for (int d = -p.radius; d <= p.radius; ++d) {
            const long long j = row * p.w + clampTo(x + d, p.w);
            s0 += x0At<T>(p, k, j, c);
            s1 += load<T>(p.latent, j, p.latentStride, c);
        }
        rows0[i] = s0;
        rows1[i] = s1;
    }
}

// Column sums: x0' = x0 - blur(x0) + blur(latent) into fixed; without sharpening, the output.
template <typename T>
__global__ void columnSums(ColorFixParams p, long long total, const double* rows0, const double* rows1, double* fixed,
                           bool finish) {
    const double n = static_cast<double>(2 * p.radius + 1) * (2 * p.radius + 1);
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % p.channels);
        const long long pixel = i / p.channels;
        const int x = static_cast<int>(pixel % p.w);
        const int y = static_cast<int>((pixel / p.w) % p.h);
        const int b = static_cast<int>(pixel / p.w / p.h);
        const Coefficients k = coefficientsOf(p, b);
        double s0 = 0.0, s1 = 0.0;
        for (int d = -p.radius; d <= p.radius; ++d) {
            const long long j = ((static_cast<long long>(b) * p.h + clampTo(y + d, p.h)) * p.w + x) * p.channels + c;
            s0 += rows0[j];
            s1 += rows1[j];
        }
        const double x0 = x0At<T>(p, k, pixel, c);
        const double v = x0 - s0 / n + s1 / n;
        if (finish)
            store<T>(p, k, pixel, c, v);
        else
            fixed[i] = v;
    }
}

// +sharp: the row sums of x0'.
__global__ void fixedRowSums(ColorFixParams p, long long total, const double* fixed, double* rows) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % p.channels);
        const long long pixel = i / p.channels;
        const int x = static_cast<int>(pixel % p.w);
        const long long row = pixel / p.w;
        double s = 0.0;
        for (int d = -p.radius; d <= p.radius; ++d) s += fixed[(row * p.w + clampTo(x + d, p.w)) * p.channels + c];
        rows[i] = s;
    }
}

// +sharp: x0' blended with its blur on the unconditional rows, back to the noise, weighted.
template <typename T>
__global__ void sharpen(ColorFixParams p, long long total, const double* rows, const double* fixed) {
    const double n = static_cast<double>(2 * p.radius + 1) * (2 * p.radius + 1);
    const double d = p.sharpness;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % p.channels);
        const long long pixel = i / p.channels;
        const int x = static_cast<int>(pixel % p.w);
        const int y = static_cast<int>((pixel / p.w) % p.h);
        const int b = static_cast<int>(pixel / p.w / p.h);
        const Coefficients k = coefficientsOf(p, b);
        double s = 0.0;
        for (int dy = -p.radius; dy <= p.radius; ++dy)
            s += rows[((static_cast<long long>(b) * p.h + clampTo(y + dy, p.h)) * p.w + x) * p.channels + c];
        const double v = fixed[i];
        const double negative = d * (s / n) + (1.0 - d) * v;
        const double mark = 1.0 + static_cast<double>(p.mark[b * p.markStride]);
        store<T>(p, k, pixel, c, mark * v + (1.0 - mark) * negative);
    }
}

}  // namespace

std::size_t colorFixScratchBytes(int batch, int h, int w, int channels) {
    return 3 * static_cast<std::size_t>(batch) * h * w * channels * sizeof(double);
}

void launchColorFix(const ColorFixParams& p, cudaStream_t stream) {
    const long long total = static_cast<long long>(p.batch) * p.h * p.w * p.channels;
    if (total <= 0) return;
    double* rows0 = p.scratch;
    double* rows1 = p.scratch + total;
    double* fixed = p.scratch + 2 * total;
    const bool sharp = p.sharpness >= 0.0f;
    const unsigned grid = gridFor(total, 256);
    TESSERA_DISPATCH_DTYPE(p.dtype, {
        rowSums<T><<<grid, 256, 0, stream>>>(p, total, rows0, rows1);
        TESSERA_CHECK_LAUNCH();
        columnSums<T><<<grid, 256, 0, stream>>>(p, total, rows0, rows1, fixed, !sharp);
        TESSERA_CHECK_LAUNCH();
        if (sharp) {
            fixedRowSums<<<grid, 256, 0, stream>>>(p, total, fixed, rows0);
            TESSERA_CHECK_LAUNCH();
            sharpen<T><<<grid, 256, 0, stream>>>(p, total, rows0, fixed);
            TESSERA_CHECK_LAUNCH();
        }
    })
}

}  // namespace tessera
