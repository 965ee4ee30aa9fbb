// cpu::conv2d: im2col and one single-threaded sgemm per block of the output
// (core/cpu/CpuOps.h; PyTorch's Conv2d, and diffusers' Downsample2D padding for stride 2).
#include <algorithm>
#include <cstring>

#include "core/cpu/ops/Activation.h"
#include "core/cpu/ops/Gemm.h"

namespace tessera {
namespace cpu {

ConvShape ConvShape::same(int cin, int cout, int h, int w, int kernel) {
    // Filled field by field like other parameter blocks: alike in shape only.
    ConvShape s;
    s.cin = cin;
    s.cout = cout;
    s.h = h;
    s.w = w;
    s.kernel = kernel;
    s.stride = 1;
    s.padTop = s.padLeft = kernel / 2;
    s.hout = h;
    s.wout = w;
    return s;
}

ConvShape ConvShape::downsample(int channels, int h, int w, int padding) {
    ConvShape s;
    s.cin = s.cout = channels;
    s.h = h;
    s.w = w;
    s.kernel = 3;
    s.stride = 2;
    s.padTop = s.padLeft = padding;
    // padding 0: TF "SAME" on even input, one zero row/column after the data only.
    const int extra = padding == 0 ? 1 : 2 * padding;
    s.hout = (h + extra - 3) / 2 + 1;
    s.wout = (w + extra - 3) / 2 + 1;
    return s;
}

namespace {

bool isPointwise(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.padTop == 0 && s.padLeft == 0; }

// Row r (input channel, ky, kx) of one image's column matrix, for output pixels [p0, p1) (in
// row-major order over hout x wout): dst[p - p0] = x[ci, oy * stride + ky - padTop, ox * stride +
// kx - padLeft], zero outside the input.
void im2colRow(const ConvShape& s, const float* x, std::int64_t r, std::int64_t p0, std::int64_t p1, float* dst) {
    const int k = s.kernel;
    const int ci = static_cast<int>(r / (k * k)), ky = static_cast<int>(r / k % k), kx = static_cast<int>(r % k);
    const float* plane = x + ci * std::int64_t(s.h) * s.w;
    for (std::int64_t p = p0; p < p1;) {
        const int oy = static_cast<int>(p / s.wout), ox0 = static_cast<int>(p % s.wout);
        const int ox1 = static_cast<int>(std::min<std::int64_t>(s.wout, ox0 + (p1 - p)));
        float* out = dst + (p - p0) - ox0;  // out[ox] for ox in [ox0, ox1)
        p += ox1 - ox0;
        const int iy = oy * s.stride + ky - s.padTop;
        if (iy < 0 || iy >= s.h) {
            std::fill(out + ox0, out + ox1, 0.0f);
            continue;
        }
        const float* src = plane + std::int64_t(iy) * s.w;
        if (s.stride == 1) {
            const int shift = kx - s.padLeft;  // ix = ox + shift
            const int lo = std::clamp(-shift, ox0, ox1), hi = std::clamp(s.w - shift, lo, ox1);
            std::fill(out + ox0, out + lo, 0.0f);
            std::memcpy(out + lo, src + lo + shift, sizeof(float) * static_cast<std::size_t>(hi - lo));
            std::fill(out + hi, out + ox1, 0.0f);
        } else {
            for (int ox = ox0; ox < ox1; ++ox) {
                const int ix = ox * s.stride + kx - s.padLeft;
                out[ox] = ix >= 0 && ix < s.w ? src[ix] : 0.0f;
            }
        }
    }
}

GemmBlocks convBlocks(const ConvShape& s) { return gemmBlocks(s.cout, s.hout * s.wout, static_cast<int>(s.colRows())); }

}  // namespace

std::size_t convWorkerFloats(const ConvShape& s) {
    if (isPointwise(s)) return 0;
    return static_cast<std::size_t>(s.colRows() * convBlocks(s).nc);
}

void conv2d(WorkerPool& pool, const ConvShape& s, int images, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float negativeSlope) {
    const int outPixels = s.hout * s.wout, K = static_cast<int>(s.colRows());
    const std::int64_t inImage = std::int64_t(s.cin) * s.h * s.w, outImage = std::int64_t(s.cout) * outPixels;
    // A block of y starts as (bias + residual) * scale and its GEMM adds scale * W col onto it.
    auto start = [&](int image, int o0, int o1, int p0, int p1) {
        for (int o = o0; o < o1; ++o) {
            float* yo = y + image * outImage + std::int64_t(o) * outPixels;
            const float b = bias ? bias[o] : 0.0f;
            if (residual) {
                const float* r = residual + image * outImage + std::int64_t(o) * outPixels;
                for (int p = p0; p < p1; ++p) yo[p] = (b + r[p]) * outScale;
            } else {
                std::fill(yo + p0, yo + p1, b * outScale);
            }
        }
    };
    // The block's LeakyReLU once its GEMM is done (slope 1: none).
    auto finish = [&](int image, int o0, int o1, int p0, int p1) {
        if (negativeSlope == 1.0f) return;
        for (int o = o0; o < o1; ++o) {
            float* yo = y + image * outImage + std::int64_t(o) * outPixels;
            for (int p = p0; p < p1; ++p) yo[p] = leakyReluValue(yo[p], negativeSlope);
        }
    };
    if (isPointwise(s)) {
        // Filled field by field like other parameter blocks: alike in shape only.
        Gemm g;
        g.m = s.cout;
        g.n = outPixels;
        g.k = K;
        g.alpha = outScale;
        g.a = weight;
        g.lda = K;
        g.b = x;
        g.ldb = outPixels;
        g.bStride = inImage;
        g.c = y;
        g.ldc = outPixels;
        g.cStride = outImage;
        gemmImages(pool, images, g, start, finish);
        return;
    }
    // One task per (image, block of C): it writes its block's columns into its worker's
    // scratch (K x nc; row r = (input channel, ky, kx), the weight layout [O, I, kh, kw]), then
    // runs one sgemm. Blocks of rows of C rebuild the same columns (cheap next to the GEMM).
    const GemmBlocks bl = convBlocks(s);
    const std::int64_t perImage = std::int64_t(bl.mBlocks) * bl.nBlocks;
    pool.parallelFor(images * perImage, [&](std::int64_t task, int worker) {
        const int image = static_cast<int>(task / perImage);
        const int mb = static_cast<int>(task % perImage / bl.nBlocks), nb = static_cast<int>(task % bl.nBlocks);
        const int o0 = mb * bl.mc, o1 = std::min(s.cout, o0 + bl.mc);
        const int p0 = nb * bl.nc, p1 = std::min(outPixels, p0 + bl.nc), n = p1 - p0;
        float* col = pool.scratch(worker);
        for (int r = 0; r < K; ++r) im2colRow(s, x + image * inImage, r, p0, p1, col + std::int64_t(r) * n);
        start(image, o0, o1, p0, p1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o1 - o0, n, K, outScale, weight + std::int64_t(o0) * K,
                    K, col, n, 1.0f, y + image * outImage + std::int64_t(o0) * outPixels + p0, outPixels);
        finish(image, o0, o1, p0, p1);
    });
}

void conv2d(WorkerPool& pool, const ConvShape& s, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float negativeSlope) {
    pool.reserveScratch(convWorkerFloats(s));
    conv2d(pool, s, 1, x, weight, bias, residual, outScale, y, negativeSlope);
}

}  // namespace cpu
}  // namespace tessera
