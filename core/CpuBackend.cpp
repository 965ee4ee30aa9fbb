#include "core/CpuBackend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <cblas.h>

#include "core/UNetModel.h"

namespace tessera {
namespace cpu {

namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// Column and score buffers are processed in bands so their size stays bounded for large
// tiles; the bands are big enough that the GEMMs stay efficient.
constexpr std::int64_t kMaxColFloats = 16 << 20;    // 64 MiB of im2col columns
constexpr std::int64_t kMaxScoreFloats = 4 << 20;   // 16 MiB of attention scores

}  // namespace

// ---------------------------------------------------------------- WorkerPool

WorkerPool::WorkerPool(int threads) {
    if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
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

void WorkerPool::runShare(int index, int parts) {
    const std::int64_t begin = n_ * index / parts, end = n_ * (index + 1) / parts;
    for (std::int64_t i = begin; i < end; ++i) task_(ctx_, i);
}

void WorkerPool::run(std::int64_t n, Task task, void* ctx) {
    if (n <= 0) return;
    if (workers_.empty() || n == 1) {
        for (std::int64_t i = 0; i < n; ++i) task(ctx, i);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        task_ = task;
        ctx_ = ctx;
        n_ = n;
        pending_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    runShare(0, threads());
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
}

void WorkerPool::workerLoop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        runShare(index, threads());
        std::lock_guard<std::mutex> lock(mutex_);
        if (--pending_ == 0) done_.notify_one();
    }
}

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
}  // namespace

int convBandRows(const ConvShape& s, std::int64_t maxColFloats) {
    if (isPointwise(s)) return s.hout;
    const std::int64_t perRow = s.colRows() * s.wout;
    return static_cast<int>(std::clamp<std::int64_t>(maxColFloats / std::max<std::int64_t>(perRow, 1), 1, s.hout));
}

std::size_t convScratchFloats(const ConvShape& s, int bandRows) {
    if (isPointwise(s)) return 0;
    return static_cast<std::size_t>(s.colRows() * bandRows * s.wout);
}

void conv2d(WorkerPool& pool, const ConvShape& s, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float* col, int bandRows) {
    const std::int64_t outPixels = std::int64_t(s.hout) * s.wout;
    // y starts as (bias + residual) * scale and the GEMM accumulates scale * W col onto it.
    pool.parallelFor(s.cout, [&](std::int64_t o) {
        float* yo = y + o * outPixels;
        const float b = bias ? bias[o] : 0.0f;
        if (residual) {
            const float* r = residual + o * outPixels;
            for (std::int64_t p = 0; p < outPixels; ++p) yo[p] = (b + r[p]) * outScale;
        } else {
            std::fill(yo, yo + outPixels, b * outScale);
        }
    });
    if (isPointwise(s)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.cout, static_cast<int>(outPixels), s.cin, outScale,
                    weight, s.cin, x, static_cast<int>(outPixels), 1.0f, y, static_cast<int>(outPixels));
        return;
    }
    const int k = s.kernel, K = static_cast<int>(s.colRows());
    const std::int64_t inPlane = std::int64_t(s.h) * s.w;
    for (int y0 = 0; y0 < s.hout; y0 += bandRows) {
        const int rows = std::min(bandRows, s.hout - y0);
        const std::int64_t N = std::int64_t(rows) * s.wout;
        // Row r of the column matrix is (input channel, ky, kx), matching the weight layout [O, I, kh, kw].
        pool.parallelFor(K, [&](std::int64_t r) {
            const int ci = static_cast<int>(r / (k * k)), ky = static_cast<int>(r / k % k), kx = static_cast<int>(r % k);
            const float* plane = x + ci * inPlane;
            float* dst = col + r * N;
            for (int oy = y0; oy < y0 + rows; ++oy, dst += s.wout) {
                const int iy = oy * s.stride + ky - s.padTop;
                if (iy < 0 || iy >= s.h) {
                    std::fill(dst, dst + s.wout, 0.0f);
                    continue;
                }
                const float* src = plane + std::int64_t(iy) * s.w;
                if (s.stride == 1) {
                    const int shift = kx - s.padLeft;  // ix = ox + shift
                    const int lo = std::clamp(-shift, 0, s.wout), hi = std::clamp(s.w - shift, lo, s.wout);
                    std::fill(dst, dst + lo, 0.0f);
                    std::memcpy(dst + lo, src + lo + shift, sizeof(float) * static_cast<std::size_t>(hi - lo));
                    std::fill(dst + hi, dst + s.wout, 0.0f);
                } else {
                    for (int ox = 0; ox < s.wout; ++ox) {
                        const int ix = ox * s.stride + kx - s.padLeft;
                        dst[ox] = ix >= 0 && ix < s.w ? src[ix] : 0.0f;
                    }
                }
            }
        });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.cout, static_cast<int>(N), K, outScale, weight, K,
                    col, static_cast<int>(N), 1.0f, y + std::int64_t(y0) * s.wout, static_cast<int>(outPixels));
    }
}

// ---------------------------------------------------------------- GroupNorm, linear, embedding, upsample

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
            const float* xc = x + base + c * pixels;
            double s = 0.0;
            for (std::int64_t p = 0; p < pixels; ++p) s += xc[p];
            sum += s + add * static_cast<double>(pixels);
        }
        const double count = static_cast<double>(perGroup) * static_cast<double>(pixels);
        const double mean = sum / count;
        double sq = 0.0;
        for (int c = 0; c < perGroup; ++c) {
            const float add = preAdd ? preAdd[b * channels + c0 + c] : 0.0f;
            const float* xc = x + base + c * pixels;
            for (std::int64_t p = 0; p < pixels; ++p) {
                const double d = static_cast<double>(xc[p] + add) - mean;
                sq += d * d;
            }
        }
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
                yc[p] = silu ? cpu::silu(v) : v;
            }
        }
    });
}

void linear(int batch, int in, int out, const float* x, const float* weight, const float* bias, bool silu, float* y) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x, in, weight, in, 0.0f, y, out);
    for (int b = 0; b < batch; ++b)
        for (int o = 0; o < out; ++o) {
            float& v = y[std::int64_t(b) * out + o];
            v += bias ? bias[o] : 0.0f;
            if (silu) v = cpu::silu(v);
        }
}

void timestepEmbedding(const float* timesteps, int batch, int dim, int freqShift, bool flipSinToCos, float* out) {
    const int half = dim / 2;
    // diffusers: exponent = -ln(10000) * arange(half) (float32), / (half - shift), exp; the
    // Python double ln(10000) enters the float32 product as a float32 scalar.
    const float negLog = static_cast<float>(-std::log(10000.0));
    const float divisor = static_cast<float>(half - freqShift);
    for (int b = 0; b < batch; ++b) {
        const float t = timesteps[b];
        float* e = out + std::int64_t(b) * dim;
        for (int i = 0; i < half; ++i) {
            const float exponent = (negLog * static_cast<float>(i)) / divisor;
            const float arg = t * std::exp(exponent);
            const float sn = std::sin(arg), cs = std::cos(arg);
            e[i] = flipSinToCos ? cs : sn;
            e[half + i] = flipSinToCos ? sn : cs;
        }
        if (dim % 2 == 1) e[dim - 1] = 0.0f;
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

std::size_t attentionScratchFloats(int channels, std::int64_t pixels, int queryBlock) {
    return static_cast<std::size_t>(5 * std::int64_t(channels) * pixels + std::int64_t(queryBlock) * pixels);
}

void attention(WorkerPool& pool, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, float outScale, float* y, float* scratch, int queryBlock) {
    const int C = channels, N = static_cast<int>(pixels), d = C / heads;
    const std::int64_t CN = std::int64_t(C) * N;
    float* xn = scratch;
    float* q = xn + CN;
    float* k = q + CN;
    float* v = k + CN;
    float* o = v + CN;
    float* scores = o + CN;
    // Tokens are the pixels; all matrices stay channel-major [C, N] like the activations.
    const float* src = x;
    if (wt.normGamma) {
        groupNorm(pool, 1, C, N, wt.groups, wt.eps, x, wt.normGamma, wt.normBeta, nullptr, nullptr, false, xn);
        src = xn;
    }
    auto project = [&](const float* w, const float* b, float* dst) {
        pool.parallelFor(C, [&](std::int64_t c) { std::fill(dst + c * N, dst + (c + 1) * N, b[c]); });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, N, C, 1.0f, w, C, src, N, 1.0f, dst, N);
    };
    project(wt.wq, wt.bq, q);
    project(wt.wk, wt.bk, k);
    project(wt.wv, wt.bv, v);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    for (int h = 0; h < heads; ++h) {
        const std::int64_t off = std::int64_t(h) * d * N;
        for (int i0 = 0; i0 < N; i0 += queryBlock) {
            const int rows = std::min(queryBlock, N - i0);
            // scores[i, j] = scale * sum_c Q[c, i0 + i] K[c, j]
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, N, d, scale, q + off + i0, N, k + off, N, 0.0f,
                        scores, N);
            pool.parallelFor(rows, [&](std::int64_t i) {
                float* s = scores + i * N;
                float m = -std::numeric_limits<float>::infinity();
                for (int j = 0; j < N; ++j) m = std::max(m, s[j]);
                double sum = 0.0;
                for (int j = 0; j < N; ++j) {
                    s[j] = std::exp(s[j] - m);
                    sum += s[j];
                }
                const float inv = static_cast<float>(1.0 / sum);
                for (int j = 0; j < N; ++j) s[j] *= inv;
            });
            // O[c, i0 + i] = sum_j V[c, j] A[i, j]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, rows, N, 1.0f, v + off, N, scores, N, 0.0f,
                        o + off + i0, N);
        }
    }
    pool.parallelFor(C, [&](std::int64_t c) {
        const float b = wt.bo[c];
        for (std::int64_t p = 0; p < N; ++p) y[c * N + p] = (b + x[c * N + p]) * outScale;
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, N, C, outScale, wt.wo, C, o, N, 1.0f, y, N);
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

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(threads), cpuName_(cpuModelName()) {}

CpuBackend::~CpuBackend() = default;

BackendInfo CpuBackend::info() const {
    return BackendInfo{"cpu", cpuName_ + " (" + std::to_string(pool_.threads()) + " threads)"};
}

std::size_t CpuBackend::preparedFloats() const {
    std::size_t n = scratch_.size();
    for (const auto& b : buffers_) n += b.size();
    return n;
}

void CpuBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    if (batch < 1) throw std::invalid_argument("batch: " + std::to_string(batch) + " must be at least 1");
    UNetGraph graph = UNetGraph::build(model.config());
    graph.checkTileSize(tileH, tileW);
    openblas_set_num_threads(pool_.threads());

    // Bind every weight once, checking shapes, so forward() only follows pointers.
    auto get = [&model](const std::string& name, const std::vector<std::int64_t>& shape) {
        const HostTensor& t = model.tensor(name);
        if (t.shape != shape)
            throw ModelError(name + ": expected " + shapeText(shape) + ", found " + shapeText(t.shape));
        return t.data.data();
    };
    std::vector<OpWeights> weights(graph.ops().size());
    std::size_t scratchFloats = 0;
    std::int64_t maxAttentionPixels = 1;
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        OpWeights& w = weights[i];
        const std::int64_t ci = op.inChannels, co = op.outChannels;
        const int oh = op.divisor > 0 ? tileH / op.divisor : 0, ow = op.divisor > 0 ? tileW / op.divisor : 0;
        switch (op.kind) {
        case OpKind::Conv:
        case OpKind::Downsample:
            w.weight = get(op.prefix + ".weight", {co, ci, op.kernel, op.kernel});
            w.bias = get(op.prefix + ".bias", {co});
            w.conv = op.kind == OpKind::Conv ? cpu::ConvShape::same(op.inChannels, op.outChannels, oh, ow, op.kernel)
                                             : cpu::ConvShape::downsample(op.inChannels, 2 * oh, 2 * ow, op.padding);
            if (w.conv.hout != oh || w.conv.wout != ow)
                throw std::logic_error("CpuBackend: " + op.prefix + " output size does not match the graph");
            w.bandRows = cpu::convBandRows(w.conv, cpu::kMaxColFloats);
            scratchFloats = std::max(scratchFloats, cpu::convScratchFloats(w.conv, w.bandRows));
            break;
        case OpKind::Linear:
            w.weight = get(op.prefix + ".weight", {co, ci});
            w.bias = get(op.prefix + ".bias", {co});
            break;
        case OpKind::GroupNorm:
            w.weight = get(op.prefix + ".weight", {ci});
            w.bias = get(op.prefix + ".bias", {ci});
            break;
        case OpKind::Attention: {
            cpu::AttentionWeights& a = w.attn;
            if (op.groups > 0) {
                a.normGamma = get(op.prefix + ".group_norm.weight", {ci});
                a.normBeta = get(op.prefix + ".group_norm.bias", {ci});
            }
            a.groups = op.groups;
            a.eps = op.eps;
            a.wq = get(op.prefix + ".to_q.weight", {ci, ci});
            a.bq = get(op.prefix + ".to_q.bias", {ci});
            a.wk = get(op.prefix + ".to_k.weight", {ci, ci});
            a.bk = get(op.prefix + ".to_k.bias", {ci});
            a.wv = get(op.prefix + ".to_v.weight", {ci, ci});
            a.bv = get(op.prefix + ".to_v.bias", {ci});
            a.wo = get(op.prefix + ".to_out.0.weight", {ci, ci});
            a.bo = get(op.prefix + ".to_out.0.bias", {ci});
            maxAttentionPixels = std::max(maxAttentionPixels, std::int64_t(oh) * ow);
            break;
        }
        default: break;
        }
    }
    // One query block for all attention layers, sized for the largest; scratch for each layer.
    const int queryBlock = cpu::attentionQueryBlock(maxAttentionPixels, cpu::kMaxScoreFloats);
    for (const GraphOp& op : graph.ops())
        if (op.kind == OpKind::Attention) {
            const std::int64_t pixels = std::int64_t(tileH / op.divisor) * (tileW / op.divisor);
            const int qb = static_cast<int>(std::min<std::int64_t>(queryBlock, pixels));
            scratchFloats = std::max(scratchFloats, cpu::attentionScratchFloats(op.inChannels, pixels, qb));
        }

    // Activation buffers reused after each value's last reader (greedy best fit, in op order).
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
    acquire(graph.sampleInput());
    acquire(graph.timestepInput());
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        acquire(op.output);
        for (int v : {op.input, op.input2, op.residual, op.addVector, op.scaleShift})
            if (v >= 0 && last[static_cast<std::size_t>(v)] == static_cast<int>(i)) release(v);
        if (last[static_cast<std::size_t>(op.output)] < 0) release(op.output);
    }

    std::vector<std::vector<float>> buffers(sizes.size());
    for (std::size_t k = 0; k < sizes.size(); ++k) buffers[k].assign(sizes[k], 0.0f);

    graph_ = std::move(graph);
    weights_ = std::move(weights);
    bufferOf_ = std::move(bufferOf);
    buffers_ = std::move(buffers);
    scratch_.assign(scratchFloats, 0.0f);
    queryBlock_ = queryBlock;
    opMs_.assign(graph_.ops().size(), 0.0);
    batch_ = batch;
    tileH_ = tileH;
    tileW_ = tileW;
    model_ = &model;
}

void CpuBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    if (!model_) throw std::logic_error("CpuBackend::forward called before prepare()");
    if (batch < 1 || batch > batch_)
        throw std::invalid_argument("batch: " + std::to_string(batch) + " is outside 1.." + std::to_string(batch_) +
                                    " (the prepared batch)");
    auto data = [this](int value) { return buffers_[static_cast<std::size_t>(bufferOf_[static_cast<std::size_t>(value)])].data(); };
    const std::int64_t inCount = graph_.elements(graph_.sampleInput(), batch, tileH_, tileW_);
    std::copy(x, x + inCount, data(graph_.sampleInput()));
    std::copy(timesteps, timesteps + batch, data(graph_.timestepInput()));
    for (std::size_t i = 0; i < graph_.ops().size(); ++i) {
        if (!profiling_) {
            runOp(i, batch);
            continue;
        }
        const auto start = std::chrono::steady_clock::now();
        runOp(i, batch);
        opMs_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    const std::int64_t outCount = graph_.elements(graph_.output(), batch, tileH_, tileW_);
    const float* y = data(graph_.output());
    std::copy(y, y + outCount, out);
}

void CpuBackend::runOp(std::size_t index, int batch) {
    const GraphOp& op = graph_.ops()[index];
    const OpWeights& w = weights_[index];
    auto data = [this](int value) -> float* {
        return value < 0 ? nullptr
                         : buffers_[static_cast<std::size_t>(bufferOf_[static_cast<std::size_t>(value)])].data();
    };
    const float* in = data(op.input);
    float* y = data(op.output);
    const std::int64_t pixels = op.divisor > 0 ? std::int64_t(tileH_ / op.divisor) * (tileW_ / op.divisor) : 1;
    switch (op.kind) {
    case OpKind::Affine:
        pool_.parallelFor(std::int64_t(batch) * op.outChannels, [&](std::int64_t plane) {
            for (std::int64_t p = plane * pixels; p < (plane + 1) * pixels; ++p)
                y[p] = in[p] * op.affineScale + op.affineShift;
        });
        break;
    case OpKind::TimestepEmbedding:
        cpu::timestepEmbedding(in, batch, op.outChannels, op.freqShift, op.flipSinToCos, y);
        break;
    case OpKind::Linear:
        cpu::linear(batch, op.inChannels, op.outChannels, in, w.weight, w.bias, op.silu, y);
        break;
    case OpKind::Conv:
    case OpKind::Downsample: {
        const std::int64_t inPlane = std::int64_t(w.conv.cin) * w.conv.h * w.conv.w;
        const std::int64_t outPlane = std::int64_t(w.conv.cout) * pixels;
        const float* residual = data(op.residual);
        for (int b = 0; b < batch; ++b)
            cpu::conv2d(pool_, w.conv, in + b * inPlane, w.weight, w.bias, residual ? residual + b * outPlane : nullptr,
                        op.outputScale, y + b * outPlane, scratch_.data(), w.bandRows);
        break;
    }
    case OpKind::GroupNorm:
        cpu::groupNorm(pool_, batch, op.outChannels, pixels, op.groups, op.eps, in, w.weight, w.bias,
                       data(op.addVector), data(op.scaleShift), op.silu, y);
        break;
    case OpKind::Attention: {
        const std::int64_t plane = std::int64_t(op.outChannels) * pixels;
        const int qb = std::min<int>(queryBlock_, static_cast<int>(pixels));
        for (int b = 0; b < batch; ++b)
            cpu::attention(pool_, op.outChannels, pixels, op.heads, w.attn, in + b * plane, op.outputScale,
                           y + b * plane, scratch_.data(), qb);
        break;
    }
    case OpKind::Concat: {
        const float* skip = data(op.input2);
        const int c1 = op.inChannels, c2 = op.outChannels - op.inChannels;
        pool_.parallelFor(std::int64_t(batch) * op.outChannels, [&](std::int64_t plane) {
            const std::int64_t b = plane / op.outChannels, c = plane % op.outChannels;
            const float* src = c < c1 ? in + (b * c1 + c) * pixels : skip + (b * c2 + (c - c1)) * pixels;
            std::copy(src, src + pixels, y + plane * pixels);
        });
        break;
    }
    case OpKind::Upsample:
        cpu::upsampleNearest2x(pool_, std::int64_t(batch) * op.outChannels, tileH_ / (2 * op.divisor),
                               tileW_ / (2 * op.divisor), in, y);
        break;
    }
}

}  // namespace tessera
