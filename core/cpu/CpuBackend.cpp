#include "core/cpu/CpuBackend.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <cblas.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/cpu/HostMemoryEstimate.h"
#include "core/graph/TimestepEmbedding.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"

namespace tessera {
namespace cpu {

namespace {

inline float siluValue(float v) { return v / (1.0f + std::exp(-v)); }

constexpr std::int64_t kElementwiseChunk = 1 << 14;  // floats per task of an elementwise loop

// Attention's Q, K, V and O of the images of a tile batch are made a few images at a time, so
// their size stays bounded for large tiles and batches (64 MiB, or one image).
constexpr std::int64_t kMaxAttentionFloats = 16 << 20;
// One worker's scratch for a block of attention scores or GEGLU's projected rows (1 MiB).
constexpr std::int64_t kWorkerFloats = 1 << 18;
// Multiply-adds of one GEMM task, about: a few hundred microseconds on one core, so a step has
// many tasks to share out, each large enough that OpenBLAS's packing stays a small part.
constexpr std::int64_t kGemmTaskFma = 1 << 22;
// Query rows of one attention task at most: several tasks per head even for small images.
constexpr int kAttentionRows = 32;
// How long an idle thread spins before it sleeps: ops follow each other within microseconds,
// and waking a sleeping thread costs more than that.
constexpr std::chrono::microseconds kSpin{50};

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// Spins until pred() or kSpin has passed; returns pred().
template <class Pred>
bool spinUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
        if (pred()) return true;
        cpuRelax();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
    }
}

std::int64_t floorPow2(std::int64_t v) {
    std::int64_t p = 1;
    while (2 * p <= v) p *= 2;
    return p;
}

}  // namespace

// ---------------------------------------------------------------- WorkerPool

int hardwareThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int resolveThreads(int threads) { return threads > 0 ? threads : hardwareThreads(); }

WorkerPool::WorkerPool(int threads) {
    threads = resolveThreads(threads);
    scratch_.resize(static_cast<std::size_t>(threads));
    workers_.reserve(static_cast<std::size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void WorkerPool::reserveScratch(std::size_t floats) {
    for (std::vector<float>& s : scratch_)
        if (s.size() < floats) s.assign(floats, 0.0f);
}

std::size_t WorkerPool::scratchFloats() const {
    std::size_t n = 0;
    for (const std::vector<float>& s : scratch_) n += s.size();
    return n;
}

// state_ is (generation << 32 | next index). A call moves through two generations: an odd one
// that closes the previous call (no index can be claimed, so no late worker can take an index
// while task_, ctx_ and n_ change), then an even one that opens the new call at index 0. A
// task is claimed by a compare-and-swap of the whole state, so only in its own generation.
// (All atomics are sequentially consistent: a worker that claims an index read n_ before the
// claim, hence before the close.)
void WorkerPool::claimTasks(std::uint32_t generation, int worker) {
    const std::int64_t n = n_.load();
    std::uint64_t state = state_.load();
    for (;;) {
        const auto index = static_cast<std::int64_t>(state & 0xffffffffu);
        if (state >> 32 != generation || index >= n) return;
        if (!state_.compare_exchange_weak(state, state + 1)) continue;
        // Claimed: the call cannot finish (nor task_ change) before this index is done.
        task_.load()(ctx_.load(), index, worker);
        if (finished_.fetch_add(1) + 1 == n) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_.notify_one();
        }
        state = state_.load();
    }
}

void WorkerPool::setHelperScratch(std::vector<float*> helperScratch) { helperScratch_ = std::move(helperScratch); }

void WorkerPool::helpWhile(int slot, const std::atomic<bool>& busy) {
    if (slot < 0 || slot >= helperSlots())
        throw std::out_of_range("WorkerPool::helpWhile: slot " + std::to_string(slot) + " of " +
                                std::to_string(helperSlots()));
    const int worker = threads() + slot;
    helpers_.fetch_add(1);
    // A call not yet seen, as workerLoop; 1 (odd) stands for none, so a call open now is joined.
    std::uint32_t seen = 1;
    for (int i = 0; busy.load(); ++i) {
        const auto generation = static_cast<std::uint32_t>(state_.load() >> 32);
        if (generation % 2 == 0 && generation != seen) {
            seen = generation;
            claimTasks(generation, worker);
        } else {
            cpuRelax();
            if ((i & 1023) == 1023) std::this_thread::yield();
        }
    }
    helpers_.fetch_sub(1);
}

void WorkerPool::run(std::int64_t n, Task task, void* ctx) {
    if (n <= 0) return;
    if (n == 1 || (workers_.empty() && helpers_.load() == 0)) {
        for (std::int64_t i = 0; i < n; ++i) task(ctx, i, 0);
        return;
    }
    if (n > std::numeric_limits<std::int32_t>::max())
        throw std::length_error("WorkerPool::parallelFor: " + std::to_string(n) + " tasks");
    const auto closed = static_cast<std::uint32_t>((state_.load() >> 32) + 1), open = closed + 1;
    state_.store(std::uint64_t(closed) << 32 | 0xffffffffu);
    task_.store(task);
    ctx_.store(ctx);
    n_.store(n);
    finished_.store(0);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        state_.store(std::uint64_t(open) << 32);
    }
    wake_.notify_all();
    claimTasks(open, 0);
    const auto allDone = [&] { return finished_.load() == n; };
    if (spinUntil(allDone)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, allDone);
}

void WorkerPool::workerLoop(int worker) {
    std::uint32_t seen = 0;
    // A call to join: an open (even) generation not yet seen.
    const auto next = [&] {
        const auto generation = static_cast<std::uint32_t>(state_.load() >> 32);
        return generation != seen && generation % 2 == 0;
    };
    for (;;) {
        if (!spinUntil(next)) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || next(); });
            if (stop_) return;
        }
        seen = static_cast<std::uint32_t>(state_.load() >> 32);
        if (seen % 2 == 0) claimTasks(seen, worker);
    }
}

// ---------------------------------------------------------------- images over threads

ImageSplit splitImages(int images, int threads) {
    ImageSplit split;
    split.opByOp = std::max(images, 0);
    if (images < 2 || threads < 2) return split;
    // Every image a whole forward, on as many lanes as there are threads or images; a thread
    // without an image of its own helps a lane that still has one, op by op inside that lane
    // (CpuBackend::run), so a last partial round (13 images on 16 threads, or the 9 left of 25)
    // keeps every thread busy.
    split.wholeForwards = images;
    split.lanes = std::min(threads, images);
    split.opByOp = 0;
    return split;
}

// ---------------------------------------------------------------- GEMM tasks

GemmBlocks gemmBlocks(int m, int n, int k) {
    // Columns first (an im2col GEMM's B is packed once per block of rows, so cutting the rows
    // repacks it), at least 64 wide; rows only where a block of 64 columns is still too large.
    const std::int64_t perColumn = std::max<std::int64_t>(std::int64_t(m) * k, 1);
    GemmBlocks b;
    b.nc = static_cast<int>(std::min<std::int64_t>(n, std::max<std::int64_t>(64, floorPow2(kGemmTaskFma / perColumn))));
    b.mc = m;
    const std::int64_t perRow = std::max<std::int64_t>(std::int64_t(b.nc) * k, 1);
    if (std::int64_t(m) * perRow > 2 * kGemmTaskFma)
        b.mc = static_cast<int>(std::min<std::int64_t>(m, std::max<std::int64_t>(64, floorPow2(kGemmTaskFma / perRow))));
    b.mc = std::max(b.mc, 1);
    b.nc = std::max(b.nc, 1);
    b.mBlocks = (m + b.mc - 1) / b.mc;
    b.nBlocks = (n + b.nc - 1) / b.nc;
    return b;
}

namespace {

// One image's C [m, n] (row-major, ldc) = alpha * op(A) op(B) + beta * C; A, B and C advance by
// their image strides from one image to the next (0: shared by all images, e.g. the weights).
struct Gemm {
    CBLAS_TRANSPOSE transA = CblasNoTrans, transB = CblasNoTrans;
    int m = 0, n = 0, k = 0;
    float alpha = 1.0f, beta = 1.0f;
    const float* a = nullptr;
    int lda = 0;
    std::int64_t aStride = 0;
    const float* b = nullptr;
    int ldb = 0;
    std::int64_t bStride = 0;
    float* c = nullptr;
    int ldc = 0;
    std::int64_t cStride = 0;
};

// The GEMMs of `images` images as one set of tasks, one per (image, block of C): each block is
// first prepared by start(image, r0, r1, c0, c1) (C's rows [r0, r1) and columns [c0, c1)), then
// one single-threaded sgemm adds to it. The blocks depend on the shape alone (gemmBlocks).
template <class Start>
void gemmImages(WorkerPool& pool, int images, const Gemm& g, Start&& start) {
    const GemmBlocks bl = gemmBlocks(g.m, g.n, g.k);
    const std::int64_t perImage = std::int64_t(bl.mBlocks) * bl.nBlocks;
    pool.parallelFor(images * perImage, [&](std::int64_t task) {
        const int image = static_cast<int>(task / perImage);
        const int mb = static_cast<int>(task % perImage / bl.nBlocks), nb = static_cast<int>(task % bl.nBlocks);
        const int r0 = mb * bl.mc, r1 = std::min(g.m, r0 + bl.mc), c0 = nb * bl.nc, c1 = std::min(g.n, c0 + bl.nc);
        start(image, r0, r1, c0, c1);
        const float* a = g.a + image * g.aStride + (g.transA == CblasNoTrans ? std::int64_t(r0) * g.lda : r0);
        const float* b = g.b + image * g.bStride + (g.transB == CblasNoTrans ? c0 : std::int64_t(c0) * g.ldb);
        float* c = g.c + image * g.cStride + std::int64_t(r0) * g.ldc + c0;
        cblas_sgemm(CblasRowMajor, g.transA, g.transB, r1 - r0, c1 - c0, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c,
                    g.ldc);
    });
}

// Rows of `images` images' token matrices: y [rows, out] = (x [rows, in] W^T + bias + residual)
// * outScale, as y = (bias + residual) * outScale, then the GEMM adds outScale * x W^T. x is
// xStride floats from one image to the next, y and residual yStride.
void linearRows(WorkerPool& pool, int images, int rows, int in, int out, const float* x, std::int64_t xStride,
                const float* weight, const float* bias, const float* residual, float outScale, float* y,
                std::int64_t yStride) {
    Gemm g;
    g.transB = CblasTrans;
    g.m = rows;
    g.n = out;
    g.k = in;
    g.alpha = outScale;
    g.a = x;
    g.lda = in;
    g.aStride = xStride;
    g.b = weight;
    g.ldb = in;
    g.c = y;
    g.ldc = out;
    g.cStride = yStride;
    gemmImages(pool, images, g, [&](int image, int r0, int r1, int c0, int c1) {
        for (int r = r0; r < r1; ++r) {
            float* yr = y + image * yStride + std::int64_t(r) * out;
            const float* res = residual ? residual + image * yStride + std::int64_t(r) * out : nullptr;
            for (int o = c0; o < c1; ++o) yr[o] = ((bias ? bias[o] : 0.0f) + (res ? res[o] : 0.0f)) * outScale;
        }
    });
}

}  // namespace

// ---------------------------------------------------------------- convolution

ConvShape ConvShape::same(int cin, int cout, int h, int w, int kernel) {
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
            const float* residual, float outScale, float* y) {
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
    if (isPointwise(s)) {
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
        gemmImages(pool, images, g, start);
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
    });
}

void conv2d(WorkerPool& pool, const ConvShape& s, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y) {
    pool.reserveScratch(convWorkerFloats(s));
    conv2d(pool, s, 1, x, weight, bias, residual, outScale, y);
}

// ---------------------------------------------------------------- GroupNorm, linear, embedding, upsample

namespace {

// Sums in double with four partial sums (independent additions, so they pipeline and
// vectorise); the order of the additions is fixed by the length alone.
double sumOf(const float* x, std::int64_t n) {
    double s[4] = {0, 0, 0, 0};
    std::int64_t p = 0;
    for (; p + 4 <= n; p += 4)
        for (int j = 0; j < 4; ++j) s[j] += x[p + j];
    for (; p < n; ++p) s[0] += x[p];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// Sum of (x[p] + add - mean)^2 in double, four partial sums as sumOf.
double squaredDeviations(const float* x, std::int64_t n, float add, double mean) {
    double s[4] = {0, 0, 0, 0};
    std::int64_t p = 0;
    for (; p + 4 <= n; p += 4)
        for (int j = 0; j < 4; ++j) {
            const double d = static_cast<double>(x[p + j] + add) - mean;
            s[j] += d * d;
        }
    for (; p < n; ++p) {
        const double d = static_cast<double>(x[p] + add) - mean;
        s[0] += d * d;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace

void groupNorm(WorkerPool& pool, int batch, int channels, std::int64_t pixels, int groups, float eps, const float* x,
               const float* gamma, const float* beta, const float* preAdd, const float* scaleShift, bool silu,
               float* y) {
    const int perGroup = channels / groups;
    pool.parallelFor(std::int64_t(batch) * groups, [&](std::int64_t task) {
        const int b = static_cast<int>(task / groups), g = static_cast<int>(task % groups);
        const int c0 = g * perGroup;
        const std::int64_t base = (std::int64_t(b) * channels + c0) * pixels;
        // Two passes in double: the mean, then the biased variance about it.
        double sum = 0.0;
        for (int c = 0; c < perGroup; ++c) {
            const double add = preAdd ? preAdd[b * channels + c0 + c] : 0.0;
            sum += sumOf(x + base + c * pixels, pixels) + add * static_cast<double>(pixels);
        }
        const double count = static_cast<double>(perGroup) * static_cast<double>(pixels);
        const double mean = sum / count;
        double sq = 0.0;
        for (int c = 0; c < perGroup; ++c)
            sq += squaredDeviations(x + base + c * pixels, pixels, preAdd ? preAdd[b * channels + c0 + c] : 0.0f, mean);
        const double invStd = 1.0 / std::sqrt(sq / count + static_cast<double>(eps));
        for (int c = 0; c < perGroup; ++c) {
            const int ch = c0 + c;
            const float add = preAdd ? preAdd[b * channels + ch] : 0.0f;
            const double a = invStd * gamma[ch];
            const double shiftD = beta[ch] - mean * a;
            const float filmScale = scaleShift ? 1.0f + scaleShift[std::int64_t(b) * 2 * channels + ch] : 1.0f;
            const float filmShift = scaleShift ? scaleShift[std::int64_t(b) * 2 * channels + channels + ch] : 0.0f;
            const float* xc = x + base + c * pixels;
            float* yc = y + base + c * pixels;
            for (std::int64_t p = 0; p < pixels; ++p) {
                float v = static_cast<float>(static_cast<double>(xc[p] + add) * a + shiftD);
                if (scaleShift) v = v * filmScale + filmShift;
                yc[p] = silu ? siluValue(v) : v;
            }
        }
    });
}

namespace {

// body(i) for i in [0, n), in chunks of kElementwiseChunk on the pool.
template <class F>
void elementwise(WorkerPool& pool, std::int64_t n, F&& body) {
    pool.parallelRange(n, kElementwiseChunk, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) body(i);
    });
}

}  // namespace

void copyFloats(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    pool.parallelRange(n, kElementwiseChunk, [&](std::int64_t begin, std::int64_t end) {
        std::copy(x + begin, x + end, y + begin);
    });
}

void affine(WorkerPool& pool, std::int64_t n, const float* x, float scale, float shift, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = x[i] * scale + shift; });
}

void silu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = siluValue(x[i]); });
}

void add(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* a, const float* b, bool bPerPlane,
         float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t base = plane * pixels;
        if (bPerPlane) {
            const float v = b[plane];
            for (std::int64_t p = 0; p < pixels; ++p) y[base + p] = a[base + p] + v;
        } else {
            for (std::int64_t p = base; p < base + pixels; ++p) y[p] = a[p] + b[p];
        }
    });
}

void scaleShift(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, const float* v,
                float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t b = plane / channels, c = plane % channels;
        const float scale = 1.0f + v[b * 2 * channels + c], shift = v[b * 2 * channels + channels + c];
        for (std::int64_t p = plane * pixels; p < (plane + 1) * pixels; ++p) y[p] = x[p] * scale + shift;
    });
}

void linear(int batch, int in, int out, const float* x, const float* weight, const float* bias, bool silu, float* y) {
    // One GEMM per row: OpenBLAS takes a different kernel path for the N tail than for a full
    // panel, so one GEMM over the batch makes a row's result depend on the batch size (a tile
    // batch of 4 then differs in the last bit from batch 1). Rows here are few (time embeddings).
    for (int b = 0; b < batch; ++b)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, out, in, 1.0f, x + std::int64_t(b) * in, in, weight, in,
                    0.0f, y + std::int64_t(b) * out, out);
    for (int b = 0; b < batch; ++b)
        for (int o = 0; o < out; ++o) {
            float& v = y[std::int64_t(b) * out + o];
            v += bias ? bias[o] : 0.0f;
            if (silu) v = siluValue(v);
        }
}

void upsampleNearest2x(WorkerPool& pool, std::int64_t planes, int h, int w, const float* x, float* y) {
    const int w2 = 2 * w;
    pool.parallelFor(planes, [&](std::int64_t p) {
        const float* src = x + p * h * w;
        float* dst = y + p * 4 * h * w;
        for (int oy = 0; oy < 2 * h; ++oy) {
            const float* row = src + std::int64_t(oy / 2) * w;
            float* o = dst + std::int64_t(oy) * w2;
            for (int ox = 0; ox < w2; ++ox) o[ox] = row[ox / 2];
        }
    });
}

// ---------------------------------------------------------------- attention

int attentionQueryBlock(std::int64_t pixels, std::int64_t maxScoreFloats) {
    return static_cast<int>(std::clamp<std::int64_t>(maxScoreFloats / std::max<std::int64_t>(pixels, 1), 1, pixels));
}

int attentionTaskRows(int queries, std::int64_t keys, std::int64_t maxScoreFloats) {
    return std::clamp(std::min(attentionQueryBlock(keys, maxScoreFloats), kAttentionRows), 1, std::max(queries, 1));
}

std::size_t attentionScratchFloats(int channels, std::int64_t pixels) {
    return static_cast<std::size_t>(4 * std::int64_t(channels) * pixels);
}

namespace {

// softmax over row[0, visible) in place (max-subtracted, the sum in double); row[visible, keys) = 0.
void softmaxRow(float* row, int visible, int keys) {
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < visible; ++j) m = std::max(m, row[j]);
    double sum = 0.0;
    for (int j = 0; j < visible; ++j) {
        row[j] = std::exp(row[j] - m);
        sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < visible; ++j) row[j] *= inv;
    std::fill(row + visible, row + keys, 0.0f);
}

// Q, K, V and the heads' output O of each image, one image after another in `base`: channel-major
// [C, tokens] (feature maps) or token-major [tokens, C] (token sequences).
struct AttentionCore {
    int queries = 0, keys = 0, channels = 0, heads = 1, queryBlock = 1;
    bool causal = false, tokenMajor = false;
    float* base = nullptr;
    std::int64_t qFloats() const { return std::int64_t(queries) * channels; }
    std::int64_t kFloats() const { return std::int64_t(keys) * channels; }
    std::int64_t imageFloats() const { return 2 * (qFloats() + kFloats()); }
    float* q(int image) const { return base + image * imageFloats(); }
    float* k(int image) const { return q(image) + qFloats(); }
    float* v(int image) const { return k(image) + kFloats(); }
    float* o(int image) const { return v(image) + kFloats(); }
};

// O = softmax(Q K^T / sqrt(d)) V per head, one task per (image, head, block of query rows), the
// block's scores in the worker's scratch (queryBlock * keys floats).
void attendHeads(WorkerPool& pool, int images, const AttentionCore& a) {
    const int C = a.channels, d = C / a.heads, M = a.keys, N = a.queries;
    const int blocks = (N + a.queryBlock - 1) / a.queryBlock;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    pool.parallelFor(std::int64_t(images) * a.heads * blocks, [&](std::int64_t task, int worker) {
        const int image = static_cast<int>(task / (std::int64_t(a.heads) * blocks));
        const int h = static_cast<int>(task / blocks % a.heads), i0 = static_cast<int>(task % blocks) * a.queryBlock;
        const int rows = std::min(a.queryBlock, N - i0);
        const float *q = a.q(image), *k = a.k(image), *v = a.v(image);
        float* o = a.o(image);
        float* scores = pool.scratch(worker);
        if (a.tokenMajor)  // scores[i, j] = scale * sum_c Q[i0 + i, h d + c] K[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, M, d, scale, q + std::int64_t(i0) * C + h * d,
                        C, k + h * d, C, 0.0f, scores, M);
        else  // scores[i, j] = scale * sum_c Q[h d + c, i0 + i] K[h d + c, j]
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, M, d, scale, q + std::int64_t(h) * d * N + i0,
                        N, k + std::int64_t(h) * d * M, M, 0.0f, scores, M);
        for (int i = 0; i < rows; ++i)
            softmaxRow(scores + std::int64_t(i) * M, a.causal ? std::min(M, i0 + i + 1) : M, M);
        if (a.tokenMajor)  // O[i0 + i, h d + c] = sum_j A[i, j] V[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, M, 1.0f, scores, M, v + h * d, C, 0.0f,
                        o + std::int64_t(i0) * C + h * d, C);
        else  // O[h d + c, i0 + i] = sum_j V[h d + c, j] A[i, j]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, rows, M, 1.0f, v + std::int64_t(h) * d * M, M,
                        scores, M, 0.0f, o + std::int64_t(h) * d * N + i0, N);
    });
}

// Channel-major projections of `images` images: dst [C, N] = (W src + bias + residual) * outScale,
// src [C, N] at srcStride floats apart, dst (and residual) at dstStride.
void projectChannels(WorkerPool& pool, int images, int C, int N, const float* w, const float* bias, const float* src,
                     std::int64_t srcStride, const float* residual, float outScale, float* dst,
                     std::int64_t dstStride) {
    Gemm g;
    g.m = C;
    g.n = N;
    g.k = C;
    g.alpha = outScale;
    g.a = w;
    g.lda = C;
    g.b = src;
    g.ldb = N;
    g.bStride = srcStride;
    g.c = dst;
    g.ldc = N;
    g.cStride = dstStride;
    gemmImages(pool, images, g, [&](int image, int c0, int c1, int p0, int p1) {
        for (int c = c0; c < c1; ++c) {
            float* row = dst + image * dstStride + std::int64_t(c) * N;
            const float* r = residual ? residual + image * dstStride + std::int64_t(c) * N : nullptr;
            const float b = bias ? bias[c] : 0.0f;
            for (int p = p0; p < p1; ++p) row[p] = (b + (r ? r[p] : 0.0f)) * outScale;
        }
    });
}

}  // namespace

void attention(WorkerPool& pool, int images, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int scratchImages,
               int queryBlock) {
    const int C = channels, N = static_cast<int>(pixels);
    const std::int64_t CN = std::int64_t(C) * N;
    AttentionCore a;
    a.queries = a.keys = N;
    a.channels = C;
    a.heads = heads;
    a.queryBlock = queryBlock;
    a.base = scratch;
    scratchImages = std::max(scratchImages, 1);
    for (int first = 0; first < images; first += scratchImages) {
        const int count = std::min(scratchImages, images - first);
        const float* xs = x + first * CN;
        // Tokens are the pixels; all matrices stay channel-major [C, N] like the activations.
        projectChannels(pool, count, C, N, wt.wq, wt.bq, xs, CN, nullptr, 1.0f, a.q(0), a.imageFloats());
        projectChannels(pool, count, C, N, wt.wk, wt.bk, xs, CN, nullptr, 1.0f, a.k(0), a.imageFloats());
        projectChannels(pool, count, C, N, wt.wv, wt.bv, xs, CN, nullptr, 1.0f, a.v(0), a.imageFloats());
        attendHeads(pool, count, a);
        projectChannels(pool, count, C, N, wt.wo, wt.bo, a.o(0), a.imageFloats(),
                        residual ? residual + first * CN : nullptr, outScale, y + first * CN, CN);
    }
}

void attention(WorkerPool& pool, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int queryBlock) {
    pool.reserveScratch(static_cast<std::size_t>(std::int64_t(queryBlock) * pixels));
    attention(pool, 1, channels, pixels, heads, wt, x, residual, outScale, y, scratch, 1, queryBlock);
}

// ---------------------------------------------------------------- token sequences

void toTokens(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, float* y) {
    pool.parallelFor(std::int64_t(batch) * pixels, [&](std::int64_t row) {
        const std::int64_t b = row / pixels, p = row % pixels;
        const float* src = x + b * channels * pixels + p;
        float* dst = y + row * channels;
        for (int c = 0; c < channels; ++c) dst[c] = src[c * pixels];
    });
}

void toFeatureMap(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, const float* residual,
                  float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t b = plane / channels, c = plane % channels;
        const float* src = x + b * pixels * channels + c;
        float* dst = y + plane * pixels;
        const float* r = residual ? residual + plane * pixels : nullptr;
        for (std::int64_t p = 0; p < pixels; ++p) dst[p] = src[p * channels] + (r ? r[p] : 0.0f);
    });
}

void layerNorm(WorkerPool& pool, std::int64_t rows, int channels, float eps, const float* x, const float* gamma,
               const float* beta, float* y) {
    pool.parallelFor(rows, [&](std::int64_t row) {
        const float* v = x + row * channels;
        double sum = 0, sq = 0;
        for (int c = 0; c < channels; ++c) sum += v[c];
        const double mean = sum / channels;
        for (int c = 0; c < channels; ++c) sq += (v[c] - mean) * (v[c] - mean);
        const double inv = 1.0 / std::sqrt(sq / channels + double(eps));
        float* out = y + row * channels;
        for (int c = 0; c < channels; ++c)
            out[c] = static_cast<float>((v[c] - mean) * inv) * gamma[c] + beta[c];
    });
}

void tokenLinear(WorkerPool& pool, int images, int rows, int in, int out, const float* x, const float* weight,
                 const float* bias, const float* residual, float* y) {
    linearRows(pool, images, rows, in, out, x, std::int64_t(rows) * in, weight, bias, residual, 1.0f, y,
               std::int64_t(rows) * out);
}

namespace {
inline float geluValue(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
inline float geluTanhValue(float v) {
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}
}  // namespace

void gelu(WorkerPool& pool, std::int64_t n, const float* x, bool tanhApproximation, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = tanhApproximation ? geluTanhValue(x[i]) : geluValue(x[i]); });
}

void quickGelu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i])); });
}

void checkTokenIds(int batch, int tokens, std::int64_t vocab, const float* ids) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    for (std::int64_t r = 0; r < rows; ++r)
        if (!(ids[r] >= 0.0f && ids[r] < static_cast<float>(vocab)) || ids[r] != std::floor(ids[r]))
            throw std::out_of_range("token embedding: row " + std::to_string(r / tokens) + " position " +
                                    std::to_string(r % tokens) + " holds id " + std::to_string(ids[r]) +
                                    ", not an integer from 0 to " + std::to_string(vocab - 1));
}

void tokenEmbedding(WorkerPool& pool, int batch, int tokens, int channels, std::int64_t vocab, const float* ids,
                    const float* table, const float* positions, float* y) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    checkTokenIds(batch, tokens, vocab, ids);
    pool.parallelFor(rows, [&](std::int64_t r) {
        const float* t = table + static_cast<std::int64_t>(ids[r]) * channels;
        const float* p = positions + (r % tokens) * channels;
        float* out = y + r * channels;
        for (int c = 0; c < channels; ++c) out[c] = t[c] + p[c];
    });
}

void eosPool(int batch, int tokens, int channels, const float* x, const float* ids, int token, float* y) {
    for (int b = 0; b < batch; ++b) {
        const float* row = ids + std::int64_t(b) * tokens;
        // std::max_element and std::find both return the first match, as torch's argmax does.
        const float* at = token < 0 ? std::max_element(row, row + tokens) : std::find(row, row + tokens, float(token));
        const std::int64_t pos = at == row + tokens ? 0 : at - row;
        const float* src = x + (std::int64_t(b) * tokens + pos) * channels;
        std::copy(src, src + channels, y + std::int64_t(b) * channels);
    }
}

int gegluTaskRows(int rows, int in, int out) {
    // As gemmBlocks' rows (all 2 out columns in one block: the gate needs both halves of a row),
    // within one worker's scratch.
    const std::int64_t perRow = std::max<std::int64_t>(2 * std::int64_t(out) * in, 1);
    const std::int64_t byWork = std::max<std::int64_t>(16, floorPow2(kGemmTaskFma / perRow));
    const std::int64_t byScratch = std::max<std::int64_t>(1, kWorkerFloats / std::max(2 * out, 1));
    return static_cast<int>(std::clamp<std::int64_t>(std::min(byWork, byScratch), 1, std::max(rows, 1)));
}

std::size_t gegluWorkerFloats(int rows, int in, int out) {
    return static_cast<std::size_t>(std::int64_t(gegluTaskRows(rows, in, out)) * 2 * out);
}

void geglu(WorkerPool& pool, int images, int rows, int in, int out, const float* x, const float* weight,
           const float* bias, float* y) {
    const int block = gegluTaskRows(rows, in, out), blocks = (rows + block - 1) / block;
    pool.parallelFor(std::int64_t(images) * blocks, [&](std::int64_t task, int worker) {
        const std::int64_t image = task / blocks;
        const int r0 = static_cast<int>(task % blocks) * block, n = std::min(block, rows - r0);
        float* p = pool.scratch(worker);
        // p = x W^T + b for rows [r0, r0 + n), as tokenLinear: bias first, the GEMM adds onto it.
        for (int r = 0; r < n; ++r)
            for (int o = 0; o < 2 * out; ++o) p[std::int64_t(r) * 2 * out + o] = bias ? bias[o] : 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, 2 * out, in, 1.0f,
                    x + (image * rows + r0) * std::int64_t(in), in, weight, in, 1.0f, p, 2 * out);
        for (int r = 0; r < n; ++r) {
            const float* pr = p + std::int64_t(r) * 2 * out;
            float* yr = y + (image * rows + r0 + r) * std::int64_t(out);
            for (int o = 0; o < out; ++o) yr[o] = pr[o] * geluValue(pr[out + o]);
        }
    });
}

std::size_t tokenAttentionScratchFloats(const TokenAttentionShape& s) {
    const std::int64_t C = s.channels;
    return static_cast<std::size_t>(2 * C * s.tokens + 2 * C * s.contextTokens);
}

void tokenAttention(WorkerPool& pool, int images, const TokenAttentionShape& s, const AttentionWeights& wt,
                    const float* x, const float* context, const float* residual, float outScale, float* y,
                    float* scratch, int scratchImages, int queryBlock) {
    const int N = s.tokens, C = s.channels;
    const int M = context ? s.contextTokens : N, Ckv = context ? s.contextChannels : C;
    const std::int64_t xImage = std::int64_t(N) * C, kvImage = std::int64_t(M) * Ckv;
    AttentionCore a;
    a.queries = N;
    a.keys = M;
    a.channels = C;
    a.heads = s.heads;
    a.queryBlock = queryBlock;
    a.causal = s.causal;
    a.tokenMajor = true;
    a.base = scratch;
    scratchImages = std::max(scratchImages, 1);
    for (int first = 0; first < images; first += scratchImages) {
        const int count = std::min(scratchImages, images - first);
        const float* xs = x + first * xImage;
        const float* kv = context ? context + first * kvImage : xs;
        const std::int64_t stride = a.imageFloats();
        linearRows(pool, count, N, C, C, xs, xImage, wt.wq, wt.bq, nullptr, 1.0f, a.q(0), stride);
        linearRows(pool, count, M, Ckv, C, kv, kvImage, wt.wk, wt.bk, nullptr, 1.0f, a.k(0), stride);
        linearRows(pool, count, M, Ckv, C, kv, kvImage, wt.wv, wt.bv, nullptr, 1.0f, a.v(0), stride);
        attendHeads(pool, count, a);
        linearRows(pool, count, N, C, C, a.o(0), stride, wt.wo, wt.bo, residual ? residual + first * xImage : nullptr,
                   outScale, y + first * xImage, xImage);
    }
}

}  // namespace cpu

// ---------------------------------------------------------------- CpuBackend

namespace {

std::string cpuModelName() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                std::string name = line.substr(colon + 1);
                name.erase(0, name.find_first_not_of(" \t"));
                return name;
            }
        }
    }
    return "unknown CPU";
}

// The OpenBLAS kernels this process runs, and a warning when they are older than the CPU: OpenBLAS
// picks them from CPUID when it loads, and under some hypervisors (seen on a GPU machine's
// "Intel(R) Xeon(R) Processor") it does not recognise an AVX2/AVX-512 CPU and falls back to its
// SSE3 kernels, two to three times slower. Only the environment can change the choice
// (OPENBLAS_CORETYPE, read when the library loads): the front ends restart themselves with it
// (restartWithOpenblasKernelsForThisCpu), and the record says what ran and what was done.
std::string openblasKernels() {
    const char* name = openblas_get_corename();
    const std::string core = name ? name : "unknown";
    std::string text = "OpenBLAS " + core;
    if (const char* was = std::getenv(kOpenblasRestartVariable); was && *was)
        text += std::string(" (OPENBLAS_CORETYPE set by Tessera: OpenBLAS had loaded its ") + was +
                " kernels on this CPU)";
#if defined(__x86_64__) || defined(__i386__)
    const std::string suggest = openblasCoreTypeFor(core, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                                                    __builtin_cpu_supports("avx512f"));
    if (!suggest.empty())
        text += " kernels on a CPU with AVX2: slower than this CPU allows; set OPENBLAS_CORETYPE=" + suggest +
                " before starting Tessera";
#endif
    return text;
}

cpu::TokenAttentionShape tokenAttentionShape(const ModelGraph& g, const GraphOp& op, int tileH, int tileW) {
    cpu::TokenAttentionShape s;
    s.tokens = static_cast<int>(g.rows(op.input, tileH, tileW));
    s.channels = g.value(op.input).channels;
    const int kv = op.input2 >= 0 ? op.input2 : op.input;
    s.contextTokens = static_cast<int>(g.rows(kv, tileH, tileW));
    s.contextChannels = g.value(kv).channels;
    s.heads = op.heads;
    s.causal = op.causal;
    return s;
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

std::string openblasCoreTypeFor(std::string_view loaded, bool avx2Fma, bool avx512) {
    static const char* const kPreAvx2[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge",
                                           "atom", "katmai", "coppermine", "northwood", "banias", "opteron",
                                           "barcelona", "bobcat", "generic"};
    std::string lower(loaded);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool old = std::any_of(std::begin(kPreAvx2), std::end(kPreAvx2), [&](const char* k) { return lower == k; });
    if (!old || !avx2Fma) return {};
    return avx512 ? "SkylakeX" : "Haswell";
}

void restartWithOpenblasKernelsForThisCpu(char** argv) {
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    const char* restarted = std::getenv(kOpenblasRestartVariable);
    if ((set && *set) || (restarted && *restarted) || !argv || !argv[0]) return;
    const char* name = openblas_get_corename();
    const std::string loaded = name ? name : "unknown";
    const std::string want = openblasCoreTypeFor(loaded, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                                                 __builtin_cpu_supports("avx512f"));
    if (want.empty()) return;
    if (setenv("OPENBLAS_CORETYPE", want.c_str(), 1) != 0 || setenv(kOpenblasRestartVariable, loaded.c_str(), 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    // The exec failed: go on with the kernels loaded (the record's device line says so).
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(kOpenblasRestartVariable);
#else
    (void)argv;
#endif
}

CpuBackend::CpuBackend(int threads)
    : pool_(std::make_unique<cpu::WorkerPool>(threads)), cpuName_(cpuModelName()), blasKernels_(openblasKernels()) {}

CpuBackend::~CpuBackend() = default;

BackendInfo CpuBackend::info() const {
    std::string device = cpuName_ + " (" + std::to_string(pool_->threads()) + " threads, " + blasKernels_ + ")";
    if (prepared_) device += ": " + parallelism();
    return BackendInfo{"cpu", device};
}

void CpuBackend::setThreads(int threads) {
    if (cpu::resolveThreads(threads) == pool_->threads()) return;
    pool_ = std::make_unique<cpu::WorkerPool>(threads);
    pool_->reserveScratch(workerFloats_);
    if (prepared_) planParallelism();
}

void CpuBackend::setWholeForwards(bool allowed) {
    if (allowed == wholeForwards_) return;
    wholeForwards_ = allowed;
    if (prepared_) planParallelism();
}

void CpuBackend::setProfiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    if (prepared_) planParallelism();
}

void CpuBackend::setWholeForwardMemory(std::optional<std::uint64_t> bytes) {
    wholeForwardMemory_ = bytes;
    if (prepared_) planParallelism();
}

std::string CpuBackend::parallelism() const {
    if (!prepared_) return "not prepared";
    const cpu::ImageSplit split = cpu::splitImages(batch_, pool_->threads());
    const std::string batch = "tile batch of " + std::to_string(batch_);
    if (lanes_.empty()) return batch + " op by op" + (note_.empty() ? "" : " (" + note_ + ")");
    return batch + ": " + std::to_string(split.lanes) +
           " images in parallel, whole forwards; a thread without an image helps another's";
}

std::size_t CpuBackend::preparedFloats() const {
    std::size_t n = batched_.floats() + pool_->scratchFloats();
    for (const Lane& lane : lanes_) n += lane.space.floats() + lane.pool->scratchFloats();
    for (const std::vector<float>& s : helperScratch_) n += s.size();
    return n;
}

void CpuBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    prepareGraph(unet2DExecutionGraph(model.config()), model.tensors(), batch, tileH, tileW);
}

void CpuBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    run({x, timesteps}, batch, {out});
}

namespace {

// The plan of one op for `batch` tiles of tileH x tileW, and the scratch it needs.
struct OpPlan {
    int scratchImages = 1, queryBlock = 1;
    std::size_t shared = 0, perWorker = 0;
};

// A Conv op's shape at this tile size (bindWeights checks it against the graph's output size).
cpu::ConvShape convShape(const ModelGraph& graph, const GraphOp& op, int tileH, int tileW) {
    const GraphValue& x = graph.value(op.input);
    cpu::ConvShape s;
    s.cin = x.channels;
    s.cout = op.channels;
    s.h = tileH / x.divisor;
    s.w = tileW / x.divisor;
    s.kernel = op.kernel;
    s.stride = op.stride;
    s.padTop = s.padLeft = op.padBegin;
    s.hout = (s.h + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
    s.wout = (s.w + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
    return s;
}

OpPlan planOp(const ModelGraph& graph, const GraphOp& op, int batch, int tileH, int tileW) {
    OpPlan plan;
    if (op.kind == OpKind::Conv) {
        plan.perWorker = cpu::convWorkerFloats(convShape(graph, op, tileH, tileW));
    } else if (op.kind == OpKind::Attention) {
        const cpu::TokenAttentionShape s = tokenAttentionShape(graph, op, tileH, tileW);
        const std::size_t perImage = graph.value(op.input).kind == ValueKind::Tokens
                                         ? cpu::tokenAttentionScratchFloats(s)
                                         : cpu::attentionScratchFloats(s.channels, s.tokens);
        plan.scratchImages = static_cast<int>(std::clamp<std::int64_t>(
            cpu::kMaxAttentionFloats / std::max<std::int64_t>(static_cast<std::int64_t>(perImage), 1), 1, batch));
        plan.queryBlock = cpu::attentionTaskRows(s.tokens, s.contextTokens, cpu::kWorkerFloats);
        plan.shared = perImage * static_cast<std::size_t>(plan.scratchImages);
        plan.perWorker = static_cast<std::size_t>(std::int64_t(plan.queryBlock) * s.contextTokens);
    } else if (op.kind == OpKind::GEGLU) {
        const auto rows = static_cast<int>(graph.rows(op.input, tileH, tileW));
        plan.perWorker = cpu::gegluWorkerFloats(rows, graph.value(op.input).channels, op.channels);
    }
    return plan;
}

}  // namespace

CpuBackend::Scratch CpuBackend::scratchNeeded(const ModelGraph& graph, int batch, int tileH, int tileW) {
    Scratch need;
    for (const GraphOp& op : graph.ops()) {
        const OpPlan plan = planOp(graph, op, batch, tileH, tileW);
        need.shared = std::max(need.shared, plan.shared);
        need.perWorker = std::max(need.perWorker, plan.perWorker);
    }
    return need;
}

std::vector<CpuBackend::OpWeights> CpuBackend::bindWeights(const ModelGraph& graph, const TensorMap& weights,
                                                           int tileH, int tileW) {
    std::vector<OpWeights> bound(graph.ops().size());
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        OpWeights& w = bound[i];
        for (int id : op.params) {
            const GraphParam& p = graph.param(id);
            const auto it = weights.find(p.name);
            if (it == weights.end()) throw ModelError("weights: no tensor '" + p.name + "' (read by " + op.name + ")");
            if (it->second.shape != p.shape)
                throw ModelError(p.name + ": expected " + shapeText(p.shape) + ", found " + shapeText(it->second.shape));
            w.params.push_back(it->second.data.data());
        }
        w.queryBlock = planOp(graph, op, 1, tileH, tileW).queryBlock;
        if (op.kind == OpKind::Conv) {
            w.conv = convShape(graph, op, tileH, tileW);
            const GraphValue& y = graph.value(op.output);
            if (w.conv.hout != tileH / y.divisor || w.conv.wout != tileW / y.divisor)
                throw std::logic_error("CpuBackend: " + op.name + " output size does not match the graph");
        } else if (op.kind == OpKind::Attention) {
            cpu::AttentionWeights& a = w.attn;
            std::size_t k = 0;
            auto next = [&w, &k] { return w.params[k++]; };
            for (auto [weight, bias] : {std::pair{&a.wq, &a.bq}, {&a.wk, &a.bk}, {&a.wv, &a.bv}}) {
                *weight = next();
                if (op.qkvBias) *bias = next();
            }
            a.wo = next();
            a.bo = next();
        }
    }
    return bound;
}

void CpuBackend::Workspace::allocate() {
    buffers.assign(sizes.size(), {});
    for (std::size_t k = 0; k < sizes.size(); ++k) buffers[k].assign(sizes[k], 0.0f);
    shared.assign(sharedFloats, 0.0f);
}

float* CpuBackend::Workspace::data(int value) {
    return value < 0 ? nullptr : buffers[static_cast<std::size_t>(bufferOf[static_cast<std::size_t>(value)])].data();
}

std::size_t CpuBackend::Workspace::floats() const {
    std::size_t n = sharedFloats;
    for (const std::size_t size : sizes) n += size;
    return n;
}

// Activation buffers reused after each value's last reader (greedy best fit, in op order), and
// the attention scratch of the images attended at once.
CpuBackend::Workspace CpuBackend::planWorkspace(int batch) const {
    const ModelGraph& graph = graph_;
    const int tileH = tileH_, tileW = tileW_;
    const std::vector<int> last = graph.lastUse();
    const std::size_t valueCount = graph.values().size();
    std::vector<int> bufferOf(valueCount, -1);
    std::vector<std::size_t> sizes;
    std::vector<int> freeList;
    auto acquire = [&](int value) {
        const std::size_t need = static_cast<std::size_t>(graph.elements(value, batch, tileH, tileW));
        // Best fit: the smallest free buffer that holds `need`, else the largest free one (grown).
        int best = -1;
        for (std::size_t k = 0; k < freeList.size(); ++k) {
            if (best < 0) {
                best = static_cast<int>(k);
                continue;
            }
            const std::size_t have = sizes[static_cast<std::size_t>(freeList[k])];
            const std::size_t cur = sizes[static_cast<std::size_t>(freeList[static_cast<std::size_t>(best)])];
            const bool better = have >= need ? (cur < need || have < cur) : (cur < need && have > cur);
            if (better) best = static_cast<int>(k);
        }
        if (best >= 0) {
            const int id = freeList[static_cast<std::size_t>(best)];
            freeList.erase(freeList.begin() + best);
            sizes[static_cast<std::size_t>(id)] = std::max(sizes[static_cast<std::size_t>(id)], need);
            bufferOf[static_cast<std::size_t>(value)] = id;
        } else {
            sizes.push_back(need);
            bufferOf[static_cast<std::size_t>(value)] = static_cast<int>(sizes.size()) - 1;
        }
    };
    std::vector<char> released(valueCount, 0);
    auto release = [&](int value) {
        if (value < 0 || released[static_cast<std::size_t>(value)]) return;
        released[static_cast<std::size_t>(value)] = 1;
        freeList.push_back(bufferOf[static_cast<std::size_t>(value)]);
    };
    for (int v : graph.inputs()) acquire(v);
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        acquire(op.output);
        for (int v : op.operands())
            if (last[static_cast<std::size_t>(v)] == static_cast<int>(i)) release(v);
        if (last[static_cast<std::size_t>(op.output)] < 0) release(op.output);
    }
    Workspace space;
    space.batch = batch;
    space.sizes = std::move(sizes);
    space.bufferOf = std::move(bufferOf);
    for (const GraphOp& op : graph.ops()) {
        const OpPlan plan = planOp(graph, op, batch, tileH, tileW);
        space.scratchImages.push_back(plan.scratchImages);
        space.sharedFloats = std::max(space.sharedFloats, plan.shared);
    }
    return space;
}

// Whole forwards take a lane per thread or image (cpu::splitImages of the prepared batch: no
// call of fewer images needs more), each with its activations for one image and a one-thread
// pool; the threads beyond the lanes hold only a worker's scratch, to help the lanes. Op by op
// then runs only calls of one image. Where the lanes need more memory than op by op
// for the whole batch and more than the budget, every call runs op by op.
void CpuBackend::planParallelism() {
    lanes_.clear();
    helperScratch_.clear();
    batched_ = {};  // released first, so the memory available counts them free
    const int threads = pool_->threads();
    const int lanes = wholeForwards_ && !profiling_ ? cpu::splitImages(batch_, threads).lanes : 0;
    Workspace batched = planWorkspace(lanes > 0 ? 1 : batch_);  // with lanes: a call of one image
    Workspace lane = planWorkspace(1);
    note_.clear();
    if (lanes > 0) {
        Workspace all = planWorkspace(batch_);
        const auto bytes = [](std::size_t floats) { return static_cast<std::uint64_t>(floats) * sizeof(float); };
        const std::uint64_t need =
            bytes(batched.floats() + lanes * lane.floats() + std::size_t(threads) * workerFloats_);
        std::optional<std::uint64_t> budget = wholeForwardMemory_;
        std::string available;
        if (!budget) {
            if (const std::optional<HostMemory> host = availableHostMemory()) {
                budget = host->availableBytes / 2;
                available = " (half of the " + formatBytes(host->availableBytes) + " available: " + host->source + ")";
            }
        }
        if (need > bytes(all.floats()) && budget && need > *budget) {
            note_ = "whole forwards on " + std::to_string(lanes) + " threads would need " + formatBytes(need) +
                    " of host memory (op by op " + formatBytes(bytes(all.floats())) + "), over the " +
                    formatBytes(*budget) + " they may take" + available;
            batched = std::move(all);
        }
    }
    batched_ = std::move(batched);
    batched_.allocate();
    if (!note_.empty()) return;
    lane.allocate();
    for (int i = 0; i < lanes; ++i) {
        Lane l{std::make_unique<cpu::WorkerPool>(1), lane};
        l.pool->reserveScratch(workerFloats_);
        lanes_.push_back(std::move(l));
    }
    // Helper slot t is the thread of the lane call's task t (CpuBackend::run): a lane's own
    // scratch once its images are done, or scratch of its own beyond the lanes.
    std::vector<float*> slots;
    for (Lane& l : lanes_) slots.push_back(l.pool->scratch(0));
    if (lanes > 0)
        for (int t = lanes; t < threads; ++t) {
            helperScratch_.emplace_back(workerFloats_, 0.0f);
            slots.push_back(helperScratch_.back().data());
        }
    for (Lane& l : lanes_) l.pool->setHelperScratch(slots);
}

void CpuBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) {
    if (batch < 1) throw std::invalid_argument("batch: " + std::to_string(batch) + " must be at least 1");
    graph.checkTileSize(tileH, tileW);
    prepared_ = false;
    // OpenBLAS computes on the calling thread: with more threads, some of its kernels (seen on
    // an AMD EPYC with Debian's OpenBLAS 0.3.21) split the work so that the bits depend on the
    // thread count, and a run must give the same image on any machine and thread setting; its
    // threads would also compete with the pool's. The pool runs the GEMMs in blocks of a fixed
    // shape instead (cpu::gemmBlocks), one single-threaded sgemm per block.
    openblas_set_num_threads(1);
    // Bind every weight once, checking shapes, so run() only follows pointers.
    weights_ = bindWeights(graph, weights, tileH, tileW);
    graph_ = graph;
    workerFloats_ = scratchNeeded(graph, batch, tileH, tileW).perWorker;
    pool_->reserveScratch(workerFloats_);
    opMs_.assign(graph_.ops().size(), 0.0);
    batch_ = batch;
    tileH_ = tileH;
    tileW_ = tileW;
    planParallelism();
    prepared_ = true;
}

std::int64_t CpuBackend::pixels(int value) const { return graph_.rows(value, tileH_, tileW_); }

void CpuBackend::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    if (!prepared_) throw std::logic_error("CpuBackend::run called before prepare()");
    if (batch < 1 || batch > batch_)
        throw std::invalid_argument("batch: " + std::to_string(batch) + " is outside 1.." + std::to_string(batch_) +
                                    " (the prepared batch)");
    if (inputs.size() != graph_.inputs().size() || outputs.size() != graph_.outputs().size())
        throw std::invalid_argument("CpuBackend::run: " + std::to_string(inputs.size()) + " inputs and " +
                                    std::to_string(outputs.size()) + " outputs for a graph of " +
                                    std::to_string(graph_.inputs().size()) + " and " +
                                    std::to_string(graph_.outputs().size()));
    // Token ids are checked for the whole call before any work, so a bad id is refused with the
    // same words (its row in the call) however the images are split.
    for (const GraphOp& op : graph_.ops()) {
        const auto input = std::find(graph_.inputs().begin(), graph_.inputs().end(), op.input);
        if (op.kind == OpKind::TokenEmbedding && input != graph_.inputs().end())
            cpu::checkTokenIds(batch, static_cast<int>(pixels(op.input)), graph_.param(op.params[0]).shape[0],
                               inputs[static_cast<std::size_t>(input - graph_.inputs().begin())]);
    }
    const cpu::ImageSplit split =
        lanes_.empty() ? cpu::ImageSplit{0, 0, batch} : cpu::splitImages(batch, pool_->threads());
    if (split.lanes > static_cast<int>(lanes_.size()) || split.opByOp > batched_.batch)
        throw std::logic_error("CpuBackend::run: the split of " + std::to_string(batch) +
                               " images exceeds the prepared activations");
    if (split.wholeForwards > 0) {
        // One task per thread. Task t < lanes takes the call's images one after another, each as a
        // whole forward on lane t; then, like every task without a lane, it helps the lane with
        // the fewest helpers that still has an image, until none has. An image's bits do not depend
        // on its lane or its helpers. An exception is carried out of its task.
        const int threads = pool_->threads(), lanes = split.lanes;
        std::atomic<int> nextImage{0};
        std::vector<std::atomic<bool>> busy(static_cast<std::size_t>(lanes));
        std::vector<std::atomic<int>> helpers(static_cast<std::size_t>(lanes));
        for (int l = 0; l < lanes; ++l) busy[static_cast<std::size_t>(l)].store(true);
        std::vector<std::exception_ptr> errors(static_cast<std::size_t>(lanes));
        pool_->parallelFor(threads, [&](std::int64_t task) {
            const auto t = static_cast<std::size_t>(task);
            if (t < static_cast<std::size_t>(lanes)) {
                Lane& l = lanes_[t];
                try {
                    for (int image; (image = nextImage.fetch_add(1)) < split.wholeForwards;)
                        runImages(*l.pool, l.space, inputs, image, 1, outputs);
                } catch (...) {
                    errors[t] = std::current_exception();
                    nextImage.store(split.wholeForwards);  // the other lanes start no new image
                }
                busy[t].store(false);
            }
            for (;;) {
                int target = -1;
                for (int l = 0; l < lanes; ++l) {
                    const auto k = static_cast<std::size_t>(l);
                    if (busy[k].load() && (target < 0 || helpers[k].load() <
                                                              helpers[static_cast<std::size_t>(target)].load()))
                        target = l;
                }
                if (target < 0) return;
                const auto k = static_cast<std::size_t>(target);
                helpers[k].fetch_add(1);
                lanes_[k].pool->helpWhile(static_cast<int>(task), busy[k]);
                helpers[k].fetch_sub(1);
            }
        });
        for (const std::exception_ptr& error : errors)
            if (error) std::rethrow_exception(error);
    }
    if (split.opByOp > 0) runImages(*pool_, batched_, inputs, split.wholeForwards, split.opByOp, outputs);
}

void CpuBackend::runImages(cpu::WorkerPool& pool, Workspace& space, const std::vector<const float*>& inputs,
                           int first, int count, const std::vector<float*>& outputs) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const int v = graph_.inputs()[i];
        const std::int64_t perImage = graph_.elements(v, 1, tileH_, tileW_);
        cpu::copyFloats(pool, perImage * count, inputs[i] + perImage * first, space.data(v));
    }
    const bool timed = profiling_ && &pool == pool_.get();
    for (std::size_t i = 0; i < graph_.ops().size(); ++i) {
        if (!timed) {
            runOp(pool, space, i, count);
            continue;
        }
        const auto start = std::chrono::steady_clock::now();
        runOp(pool, space, i, count);
        opMs_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const int v = graph_.outputs()[i];
        const std::int64_t perImage = graph_.elements(v, 1, tileH_, tileW_);
        cpu::copyFloats(pool, perImage * count, space.data(v), outputs[i] + perImage * first);
    }
}

void CpuBackend::runOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch) {
    const GraphOp& op = graph_.ops()[index];
    const OpWeights& w = weights_[index];
    const float* in = space.data(op.input);
    float* y = space.data(op.output);
    const int channels = graph_.value(op.input).channels;
    const std::int64_t inPixels = pixels(op.input);
    const std::int64_t count = std::int64_t(batch) * channels * inPixels;
    switch (op.kind) {
    case OpKind::Affine: cpu::affine(pool, count, in, op.scale, op.shift, y); break;
    case OpKind::SiLU: cpu::silu(pool, count, in, y); break;
    case OpKind::Add:
        cpu::add(pool, batch, channels, inPixels, in, space.data(op.input2),
                 graph_.value(op.input2).kind == ValueKind::Vector && graph_.value(op.input).kind == ValueKind::FeatureMap,
                 y);
        break;
    case OpKind::ScaleShift: cpu::scaleShift(pool, batch, channels, inPixels, in, space.data(op.input2), y); break;
    case OpKind::TimestepEmbedding:
        timestepEmbedding(in, batch, op.channels, op.freqShift, op.flipSinToCos, y);
        break;
    case OpKind::Linear:
        if (graph_.value(op.input).kind == ValueKind::Tokens)
            cpu::tokenLinear(pool, batch, static_cast<int>(inPixels), channels, op.channels, in, w.params[0],
                             w.params[1], space.data(op.residual), y);
        else
            cpu::linear(batch, channels, op.channels, in, w.params[0], w.params[1], op.silu, y);
        break;
    case OpKind::Conv:
        cpu::conv2d(pool, w.conv, batch, in, w.params[0], w.params[1], space.data(op.residual), op.outputScale, y);
        break;
    case OpKind::GroupNorm:
        cpu::groupNorm(pool, batch, channels, inPixels, op.groups, op.eps, in, w.params[0], w.params[1],
                       space.data(op.preAdd), space.data(op.scaleShift), op.silu, y);
        break;
    case OpKind::Attention:
        if (graph_.value(op.input).kind == ValueKind::Tokens)
            cpu::tokenAttention(pool, batch, tokenAttentionShape(graph_, op, tileH_, tileW_), w.attn, in,
                                space.data(op.input2), space.data(op.residual), op.outputScale, y, space.shared.data(),
                                space.scratchImages[index], w.queryBlock);
        else
            cpu::attention(pool, batch, channels, inPixels, op.heads, w.attn, in, space.data(op.residual),
                           op.outputScale, y, space.shared.data(), space.scratchImages[index], w.queryBlock);
        break;
    case OpKind::Concat: {
        const float* skip = space.data(op.input2);
        const int c1 = channels, c2 = graph_.value(op.input2).channels, cOut = c1 + c2;
        pool.parallelFor(std::int64_t(batch) * cOut, [&](std::int64_t plane) {
            const std::int64_t b = plane / cOut, c = plane % cOut;
            const float* src = c < c1 ? in + (b * c1 + c) * inPixels : skip + (b * c2 + (c - c1)) * inPixels;
            std::copy(src, src + inPixels, y + plane * inPixels);
        });
        break;
    }
    case OpKind::Upsample: {
        const int d = graph_.value(op.input).divisor;
        cpu::upsampleNearest2x(pool, std::int64_t(batch) * channels, tileH_ / d, tileW_ / d, in, y);
        break;
    }
    case OpKind::ToTokens: cpu::toTokens(pool, batch, channels, inPixels, in, y); break;
    case OpKind::ToFeatureMap:
        cpu::toFeatureMap(pool, batch, channels, inPixels, in, space.data(op.residual), y);
        break;
    case OpKind::LayerNorm:
        cpu::layerNorm(pool, std::int64_t(batch) * inPixels, channels, op.eps, in, w.params[0], w.params[1], y);
        break;
    case OpKind::GEGLU:
        cpu::geglu(pool, batch, static_cast<int>(inPixels), channels, op.channels, in, w.params[0], w.params[1], y);
        break;
    case OpKind::GELU: cpu::gelu(pool, count, in, op.geluTanh, y); break;
    case OpKind::QuickGELU: cpu::quickGelu(pool, count, in, y); break;
    case OpKind::TokenEmbedding:
        cpu::tokenEmbedding(pool, batch, static_cast<int>(inPixels), op.channels, graph_.param(op.params[0]).shape[0],
                            in, w.params[0], w.params[1], y);
        break;
    case OpKind::EosPool:
        cpu::eosPool(batch, static_cast<int>(inPixels), channels, in, space.data(op.input2), op.token, y);
        break;
    }
}

}  // namespace tessera
