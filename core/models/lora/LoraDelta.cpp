// LoraDelta: the delta of each algorithm as rows of a double matrix [out, in * kh * kw], produced a
// block of rows at a time (a low-rank product never exists whole unless DoRA needs its norms), and
// added to the float32 weight with one rounding. Formulas: A1111 extensions-builtin/Lora/
// network_lora.py, network_hada.py, network_lokr.py, network_full.py, network_norm.py, lyco_helpers.py;
// ComfyUI comfy/weight_adapter/lokr.py (LoKr scale), comfy/weight_adapter/base.py weight_decompose;
// LyCORIS lycoris/modules/locon.py apply_weight_decompose; peft tuners/lora/dora.py.
#include "core/models/lora/LoraDelta.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <cblas.h>

#include "core/base/ValidationError.h"
#include "core/formats/Safetensors.h"

namespace tessera {

namespace {

using Shape = std::vector<std::int64_t>;

// Rows of the delta per block: a few hundred KiB of doubles, so a block stays in cache while it is
// added to the weight.
constexpr std::int64_t kBlockElements = std::int64_t{1} << 16;

std::int64_t product(const Shape& s, std::size_t from = 0) {
    std::int64_t n = 1;
    for (std::size_t i = from; i < s.size(); ++i) n *= s[i];
    return n;
}

std::string shapeOf(const LoraTensorInfo* t) { return shapeToString(t->shape); }

// A tensor's name in messages: the part of the key after the stem ("lora_up.weight").
std::string partName(const LoraModule& m, const LoraTensorInfo* t) {
    return t->key.size() > m.stem.size() + 1 ? t->key.substr(m.stem.size() + 1) : t->key;
}

// How one algorithm's delta is produced.
struct Delta {
    std::int64_t rows = 0, cols = 0;
    double scale = 1.0;
    // Fills rows [r0, r1) into out ((r1 - r0) * cols doubles).
    std::function<void(std::int64_t, std::int64_t, double*)> fill;
    std::vector<double> bias;  // diff_b / b_norm, empty when none
};

// The shape checks of one algorithm, shared by loraDeltaShape (names only) and the merge.
struct Check {
    const LoraModule& m;
    std::string& why;
    bool fail(const std::string& text) {
        why = m.stem + ": " + text;
        return false;
    }
    bool matrix(const LoraTensorInfo* t) {  // at least 2-D, positive dimensions
        if (t->shape.size() < 2 || product(t->shape) <= 0)
            return fail(partName(m, t) + " " + shapeOf(t) + " is not a matrix or kernel");
        return true;
    }
    bool scalar(const LoraTensorInfo* t) {
        if (t != nullptr && t->numel() != 1) return fail(partName(m, t) + " " + shapeOf(t) + " is not one number");
        return true;
    }
};

// Elements of a delta or an intermediate beyond which a module is refused (2^31 doubles: 16 GiB,
// far above SDXL's largest weight, 10240 x 1280): keeps hostile factor shapes from overflowing
// sizes or exhausting memory before a weight's shape is compared.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 31;

bool withinBound(std::int64_t a, std::int64_t b) { return a > 0 && b > 0 && b <= kMaxElements / a; }

// One factor of LoHa / LoKr: a full matrix, a product a @ b, or a Tucker core t with a [I, rows],
// b [J, in] (lyco_helpers.py make_weight_cp). Sizes from the shapes; values read on demand.
struct Factor {
    const LoraTensorInfo* full = nullptr;
    const LoraTensorInfo *a = nullptr, *b = nullptr, *t = nullptr;
    std::int64_t rows = 0, cols = 0;  // cols includes the kernel
    std::int64_t kernel = 1;          // kh * kw of a Tucker core (or of a 4-D full factor)
    std::int64_t inner = 0;           // cols without the kernel
};

bool checkFactor(Check& c, Factor& f, const char* what) {
    if (f.full != nullptr) {
        if (!c.matrix(f.full)) return false;
        f.rows = f.full->shape[0];
        f.inner = f.full->shape[1];
        f.kernel = product(f.full->shape, 2);
        f.cols = f.inner * f.kernel;
        return true;
    }
    if (f.a == nullptr || f.b == nullptr) return c.fail(std::string(what) + " is incomplete");
    if (!c.matrix(f.a) || !c.matrix(f.b)) return false;
    if (f.t != nullptr) {
        if (!c.matrix(f.t)) return false;
        if (f.a->shape.size() != 2 || f.b->shape.size() != 2 || f.t->shape[0] != f.a->shape[0] ||
            f.t->shape[1] != f.b->shape[0])
            return c.fail(std::string(what) + ": Tucker core " + shapeOf(f.t) + " does not join " + shapeOf(f.a) +
                          " and " + shapeOf(f.b));
        f.rows = f.a->shape[1];
        f.inner = f.b->shape[1];
        f.kernel = product(f.t->shape, 2);
        if (!withinBound(f.inner, f.kernel) || !withinBound(f.t->shape[0], f.inner * f.kernel))
            return c.fail(std::string(what) + ": a Tucker form of that size is refused");
        f.cols = f.inner * f.kernel;
        return true;
    }
    const std::int64_t rank = f.a->shape[1];
    if (product(f.a->shape, 2) != 1 || f.b->shape[0] != rank)
        return c.fail(std::string(what) + ": " + shapeOf(f.b) + " does not follow " + shapeOf(f.a));
    f.rows = f.a->shape[0];
    f.cols = product(f.b->shape, 1);
    f.inner = f.cols;
    return true;
}

std::vector<double> readDouble(const LoraFile& file, const LoraTensorInfo* t) {
    const std::vector<float> v = file.readFloat32(*t);
    return std::vector<double>(v.begin(), v.end());
}

double readScalar(const LoraFile& file, const LoraTensorInfo* t) {
    return static_cast<double>(file.readFloat32(*t).at(0));
}

// out rows [r0, r1) of A @ B, A [*, k] (row stride lda), B [k, cols]: one double GEMM.
void productRows(const double* a, std::int64_t lda, const double* b, std::int64_t k, std::int64_t cols, std::int64_t r0,
                 std::int64_t r1, double* out) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(r1 - r0), static_cast<int>(cols),
                static_cast<int>(k), 1.0, a + r0 * lda, static_cast<int>(lda), b, static_cast<int>(cols), 0.0, out,
                static_cast<int>(cols));
}

// temp [I, in, K] = sum_j core[i, j, k] * m[j, c]: the first contraction of a Tucker form
// (lyco_helpers.py make_weight_cp's einsum 'i j k l, j r -> i r k l'; rebuild_cp_decomposition's
// 'n m k l, m j' with m = down).
std::vector<double> contractCore(const std::vector<double>& core, std::int64_t I, std::int64_t J, std::int64_t K,
                                 const std::vector<double>& m, std::int64_t in) {
    std::vector<double> temp(static_cast<std::size_t>(I * in * K), 0.0);
    for (std::int64_t i = 0; i < I; ++i)
        for (std::int64_t j = 0; j < J; ++j)
            for (std::int64_t c = 0; c < in; ++c) {
                const double w = m[static_cast<std::size_t>(j * in + c)];
                const double* t = core.data() + (i * J + j) * K;
                double* o = temp.data() + (i * in + c) * K;
                for (std::int64_t k = 0; k < K; ++k) o[k] += t[k] * w;
            }
    return temp;
}

// The transpose of a [r, c] matrix.
std::vector<double> transposed(const std::vector<double>& m, std::int64_t r, std::int64_t c) {
    std::vector<double> t(m.size());
    for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < c; ++j)
            t[static_cast<std::size_t>(j * r + i)] = m[static_cast<std::size_t>(i * c + j)];
    return t;
}

// A factor as a low-rank product A [rows, k] @ B [k, cols] (a full factor: A = identity is avoided,
// the values are copied instead), ready to produce rows.
struct Product {
    std::vector<double> a, b;  // a empty: b holds the full [rows, cols] matrix
    std::int64_t k = 0, cols = 0;
    void rows(std::int64_t r0, std::int64_t r1, double* out) const {
        if (a.empty()) {
            std::copy(b.begin() + r0 * cols, b.begin() + r1 * cols, out);
            return;
        }
        productRows(a.data(), k, b.data(), k, cols, r0, r1, out);
    }
};

Product productOf(const LoraFile& file, const Factor& f) {
    Product p;
    p.cols = f.cols;
    if (f.full != nullptr) {
        p.b = readDouble(file, f.full);
        return p;
    }
    if (f.t != nullptr) {
        const std::int64_t I = f.t->shape[0], J = f.t->shape[1];
        p.b = contractCore(readDouble(file, f.t), I, J, f.kernel, readDouble(file, f.b), f.inner);
        p.a = transposed(readDouble(file, f.a), I, f.rows);  // [rows, I]
        p.k = I;
        return p;
    }
    p.a = readDouble(file, f.a);
    p.b = readDouble(file, f.b);
    p.k = f.a->shape[1];
    return p;
}

// Shape checks and, when `file` is given, the values: one function per algorithm.
class DeltaBuilder {
public:
    DeltaBuilder(const LoraModule& m, const LoraFile* file, std::optional<std::int64_t> dyn, std::string& why)
        : m_(m), file_(file), dyn_(dyn), c_{m, why} {}

    std::optional<Delta> build() {
        if (!c_.scalar(m_.part(LoraPart::Scale)) || !c_.scalar(m_.part(LoraPart::Alpha))) return std::nullopt;
        std::optional<Delta> d;
        switch (m_.algorithm) {
            case LoraAlgorithm::LoRA:
                d = lora();
                break;
            case LoraAlgorithm::LoHa:
                d = loha();
                break;
            case LoraAlgorithm::LoKr:
                d = lokr();
                break;
            case LoraAlgorithm::Full:
            case LoraAlgorithm::Norm:
                d = full();
                break;
            case LoraAlgorithm::IA3:
            case LoraAlgorithm::GLoRA:
            case LoraAlgorithm::OFT:
                return none(std::string(toString(m_.algorithm)) + " modules are not merged");
        }
        if (d && !withinBound(d->rows, d->cols)) return none("a delta of that size is refused");
        return d;
    }

private:
    std::optional<Delta> none(const std::string& why) {
        c_.fail(why);
        return std::nullopt;
    }

    // A1111 network.py calc_scale: `scale` wins; alpha / dim where the algorithm has a dim; else 1.
    double scaleFor(std::int64_t dim) const {
        if (file_ == nullptr) return 1.0;
        if (const LoraTensorInfo* s = m_.part(LoraPart::Scale)) return readScalar(*file_, s);
        if (const LoraTensorInfo* a = m_.part(LoraPart::Alpha); a != nullptr && dim > 0)
            return readScalar(*file_, a) / static_cast<double>(dim);
        return 1.0;
    }

    std::optional<Delta> lora() {
        const LoraTensorInfo* up = m_.part(LoraPart::Up);
        const LoraTensorInfo* down = m_.part(LoraPart::Down);
        const LoraTensorInfo* mid = m_.part(LoraPart::Mid);
        if (!c_.matrix(up) || !c_.matrix(down) || (mid != nullptr && !c_.matrix(mid))) return std::nullopt;
        const std::int64_t rank = up->shape[1];
        if (product(up->shape, 2) != 1)
            return none(partName(m_, up) + " " + shapeOf(up) + " is not [out, rank] or [out, rank, 1, 1]");
        if (down->shape[0] != (mid != nullptr ? mid->shape[1] : rank))
            return none(partName(m_, down) + " " + shapeOf(down) + " does not follow " + partName(m_, up) + " " +
                        shapeOf(up));
        const std::int64_t downCols = product(down->shape, 1);
        if (mid != nullptr && (mid->shape[0] != rank || product(down->shape, 2) != 1))
            return none("lora_mid " + shapeOf(mid) + " does not join " + shapeOf(up) + " and " + shapeOf(down));
        const std::int64_t kernel = mid != nullptr ? product(mid->shape, 2) : 1;
        if (!withinBound(downCols, kernel) || !withinBound(rank, downCols * kernel))
            return none("a delta of that size is refused");
        Delta d;
        d.rows = up->shape[0];
        d.cols = downCols * kernel;
        d.scale = scaleFor(down->shape[0]);  // network_lora.py: dim = lora_down.shape[0]
        if (file_ == nullptr) return d;
        auto left = std::make_shared<std::vector<double>>(readDouble(*file_, up));
        std::shared_ptr<std::vector<double>> right;
        std::int64_t k = rank;
        if (mid != nullptr) {
            // rebuild_cp_decomposition: einsum('n m k l, i n, m j -> i j k l', mid, up, down)
            right = std::make_shared<std::vector<double>>(
                contractCore(readDouble(*file_, mid), rank, mid->shape[1], kernel, readDouble(*file_, down), downCols));
        } else {
            right = std::make_shared<std::vector<double>>(readDouble(*file_, down));
            if (dyn_) k = std::clamp<std::int64_t>(*dyn_, 0, k);  // rebuild_conventional's dyn_dim (0: no delta)
        }
        const std::int64_t cols = d.cols;
        d.fill = [left, right, rank, k, cols](std::int64_t r0, std::int64_t r1, double* out) {
            productRows(left->data(), rank, right->data(), k, cols, r0, r1, out);
        };
        return d;
    }

    std::optional<Delta> loha() {
        Factor f1{nullptr, m_.part(LoraPart::HadaW1A), m_.part(LoraPart::HadaW1B), m_.part(LoraPart::HadaT1)};
        Factor f2{nullptr, m_.part(LoraPart::HadaW2A), m_.part(LoraPart::HadaW2B), m_.part(LoraPart::HadaT2)};
        if (!checkFactor(c_, f1, "hada_w1") || !checkFactor(c_, f2, "hada_w2")) return std::nullopt;
        if (f1.rows != f2.rows || f1.cols != f2.cols)
            return none("hada_w1 gives [" + std::to_string(f1.rows) + ", " + std::to_string(f1.cols) + "], hada_w2 [" +
                        std::to_string(f2.rows) + ", " + std::to_string(f2.cols) + "]");
        Delta d;
        d.rows = f1.rows;
        d.cols = f1.cols;
        d.scale = scaleFor(f1.b->shape[0]);  // network_hada.py: dim = w1b.shape[0]
        if (file_ == nullptr) return d;
        auto p1 = std::make_shared<Product>(productOf(*file_, f1));
        auto p2 = std::make_shared<Product>(productOf(*file_, f2));
        d.fill = [p1, p2](std::int64_t r0, std::int64_t r1, double* out) {
            std::vector<double> second(static_cast<std::size_t>((r1 - r0) * p2->cols));
            p1->rows(r0, r1, out);
            p2->rows(r0, r1, second.data());
            for (std::size_t i = 0; i < second.size(); ++i) out[i] *= second[i];
        };
        return d;
    }

    std::optional<Delta> lokr() {
        Factor f1{m_.part(LoraPart::LokrW1), m_.part(LoraPart::LokrW1A), m_.part(LoraPart::LokrW1B), nullptr};
        Factor f2{m_.part(LoraPart::LokrW2), m_.part(LoraPart::LokrW2A), m_.part(LoraPart::LokrW2B),
                  m_.part(LoraPart::LokrT2)};
        if (!checkFactor(c_, f1, "lokr_w1") || !checkFactor(c_, f2, "lokr_w2")) return std::nullopt;
        if (f1.kernel != 1) return none("lokr_w1 " + shapeOf(f1.full) + " is not a matrix");
        if (!withinBound(f1.rows, f2.rows) || !withinBound(f1.cols, f2.cols))
            return none("a delta of that size is refused");
        Delta d;
        d.rows = f1.rows * f2.rows;
        d.cols = f1.cols * f2.cols;
        // ComfyUI lokr.py calculate_weight: dim = rank of the factored w2, else of the factored w1;
        // both full: scale 1.
        const std::int64_t dim = f2.full == nullptr ? f2.b->shape[0] : f1.full == nullptr ? f1.b->shape[0] : 0;
        d.scale = scaleFor(dim);
        if (file_ == nullptr) return d;
        // network_lokr.py make_kron: kron(w1 [a, b], w2 [c, d, K]) = [a c, b d K] (w1 unsqueezed to
        // [a, b, 1, 1] for a kernel w2): element (i c + p, (j d + q) K + k) = w1[i, j] w2[p, q, k].
        auto w1 = std::make_shared<std::vector<double>>(static_cast<std::size_t>(f1.rows * f1.cols));
        productOf(*file_, f1).rows(0, f1.rows, w1->data());
        auto w2 = std::make_shared<std::vector<double>>(static_cast<std::size_t>(f2.rows * f2.cols));
        productOf(*file_, f2).rows(0, f2.rows, w2->data());
        const std::int64_t b = f1.cols, cRows = f2.rows, dCols = f2.cols;
        d.fill = [w1, w2, b, cRows, dCols](std::int64_t r0, std::int64_t r1, double* out) {
            for (std::int64_t r = r0; r < r1; ++r) {
                const double* row1 = w1->data() + (r / cRows) * b;
                const double* row2 = w2->data() + (r % cRows) * dCols;
                for (std::int64_t j = 0; j < b; ++j)
                    for (std::int64_t q = 0; q < dCols; ++q) *out++ = row1[j] * row2[q];
            }
        };
        return d;
    }

    std::optional<Delta> full() {
        const bool norm = m_.algorithm == LoraAlgorithm::Norm;
        const LoraTensorInfo* diff = m_.part(norm ? LoraPart::NormWeight : LoraPart::Diff);
        const LoraTensorInfo* bias = m_.part(norm ? LoraPart::NormBias : LoraPart::DiffBias);
        if (diff->numel() <= 0) return none(partName(m_, diff) + " is empty");
        Delta d;
        d.rows = diff->shape.empty() ? 1 : diff->shape[0];
        d.cols = diff->numel() / d.rows;
        d.scale = scaleFor(0);  // network_full.py / network_norm.py have no dim: `scale` or 1
        if (bias != nullptr && bias->numel() != d.rows)
            return none(partName(m_, bias) + " " + shapeOf(bias) + " does not fit " + shapeOf(diff));
        if (file_ == nullptr) return d;
        auto values = std::make_shared<std::vector<double>>(readDouble(*file_, diff));
        if (bias != nullptr) d.bias = readDouble(*file_, bias);
        const std::int64_t cols = d.cols;
        d.fill = [values, cols](std::int64_t r0, std::int64_t r1, double* out) {
            std::copy(values->begin() + r0 * cols, values->begin() + r1 * cols, out);
        };
        return d;
    }

    const LoraModule& m_;
    const LoraFile* file_;
    std::optional<std::int64_t> dyn_;
    Check c_;
};

std::optional<Delta> prepare(const LoraModule& m, const LoraFile* file, std::optional<std::int64_t> dyn,
                             std::string& why) {
    return DeltaBuilder(m, file, dyn, why).build();
}

// L2 norms of v [out, in, K] per output row and per input channel.
std::vector<double> rowNorms(const std::vector<double>& v, std::int64_t out, std::int64_t cols) {
    std::vector<double> n(static_cast<std::size_t>(out));
    for (std::int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (std::int64_t c = 0; c < cols; ++c)
            s += v[static_cast<std::size_t>(o * cols + c)] * v[static_cast<std::size_t>(o * cols + c)];
        n[static_cast<std::size_t>(o)] = std::sqrt(s);
    }
    return n;
}

std::vector<double> inputNorms(const std::vector<double>& v, std::int64_t out, std::int64_t in, std::int64_t K) {
    std::vector<double> s(static_cast<std::size_t>(in), 0.0);
    for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t i = 0; i < in; ++i)
            for (std::int64_t k = 0; k < K; ++k) {
                const double x = v[static_cast<std::size_t>((o * in + i) * K + k)];
                s[static_cast<std::size_t>(i)] += x * x;
            }
    for (double& x : s) x = std::sqrt(x);
    return s;
}

// DoRA over the whole delta (its norms need every row). Formulas per DoraConvention (header).
void applyDora(const LoraModule& m, const LoraFile& file, const Delta& d, const LoraModuleMerge& how,
               HostTensor& weight) {
    const LoraTensorInfo* magnitude = m.part(LoraPart::MagnitudeVector);
    const bool peft = magnitude != nullptr;
    if (!peft) magnitude = m.part(LoraPart::DoraScale);
    const std::int64_t out = weight.shape.at(0), cols = d.cols;
    const std::int64_t K = weight.shape.size() == 4 ? weight.shape[2] * weight.shape[3] : 1;
    const std::int64_t in = cols / K;
    const Shape& ms = magnitude->shape;
    const bool outAxis = !ms.empty() && ms[0] == out && product(ms) == out;
    const bool inAxis = !outAxis && ms.size() >= 2 && ms[0] == 1 && product(ms) == in;
    if (!outAxis && !(inAxis && !peft))
        throw LoraFileError("lora: " + shownPath(file.path()) + ": " + m.stem + ": " + partName(m, magnitude) + " " +
                            shapeOf(magnitude) + " fits neither the output [" + std::to_string(out) +
                            "] nor the input [" + std::to_string(in) + "] axis of " + shapeToString(weight.shape));
    const std::vector<double> mag = readDouble(file, magnitude);
    std::vector<double> delta(static_cast<std::size_t>(out * cols));
    d.fill(0, out, delta.data());
    const double mult = how.multiplier, s = d.scale;
    const double vScale = peft ? mult * s : s;  // peft: diffusers' fuse_lora(lora_scale) scales `scaling`
    std::vector<double> w(weight.data.begin(), weight.data.end());
    std::vector<double> v(w.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = w[i] + vScale * delta[i];
    std::vector<double> result(v.size());
    const double eps = FLT_EPSILON;  // torch.finfo(float32).eps, as LyCORIS and ComfyUI add it
    if (peft) {
        const std::vector<double> n = rowNorms(v, out, cols);
        for (std::int64_t o = 0; o < out; ++o)
            for (std::int64_t c = 0; c < cols; ++c) {
                const std::size_t i = static_cast<std::size_t>(o * cols + c);
                result[i] = v[i] * (mag[static_cast<std::size_t>(o)] / n[static_cast<std::size_t>(o)]);
            }
    } else {
        const std::vector<double> nOut =
            how.dora == DoraConvention::ComfyUI ? rowNorms(w, out, cols) : rowNorms(v, out, cols);
        const std::vector<double> nIn = inputNorms(v, out, in, K);
        for (std::int64_t o = 0; o < out; ++o)
            for (std::int64_t c = 0; c < cols; ++c) {
                const std::size_t i = static_cast<std::size_t>(o * cols + c);
                const std::int64_t row = o, channel = c / K;
                const double mv = mag[static_cast<std::size_t>(outAxis ? row : channel)];
                switch (how.dora) {
                    case DoraConvention::LyCORIS: {
                        const double n =
                            outAxis ? nOut[static_cast<std::size_t>(row)] : nIn[static_cast<std::size_t>(channel)];
                        double k = mv / (n + eps);
                        if (mult != 1.0) k = mult * (k - 1) + 1;
                        result[i] = v[i] * k;
                        break;
                    }
                    case DoraConvention::ComfyUI: {
                        const double n =
                            outAxis ? nOut[static_cast<std::size_t>(row)] : nIn[static_cast<std::size_t>(channel)];
                        const double calc = v[i] * (mv / (n + eps));
                        result[i] = mult != 1.0 ? w[i] + mult * (calc - w[i]) : calc;
                        break;
                    }
                    case DoraConvention::A1111: {
                        const double updown = v[i] * (mv / nIn[static_cast<std::size_t>(channel)]) - w[i];
                        result[i] = w[i] + mult * updown;
                        break;
                    }
                }
            }
    }
    for (std::size_t i = 0; i < result.size(); ++i) weight.data[i] = static_cast<float>(result[i]);
}

}  // namespace

std::string_view toString(DoraConvention c) {
    switch (c) {
        case DoraConvention::LyCORIS:
            return "lycoris";
        case DoraConvention::A1111:
            return "a1111";
        case DoraConvention::ComfyUI:
            return "comfyui";
    }
    return "?";
}

DoraConvention parseDoraConvention(std::string_view text) {
    for (const DoraConvention c : {DoraConvention::LyCORIS, DoraConvention::A1111, DoraConvention::ComfyUI})
        if (text == toString(c)) return c;
    throw ValidationError("lora dora", "lora dora: " + inQuotes(text) + " is not one of lycoris, a1111, comfyui");
}

std::optional<LoraDeltaShape> loraDeltaShape(const LoraModule& module, std::string& why) {
    const std::optional<Delta> d = prepare(module, nullptr, std::nullopt, why);
    if (!d) return std::nullopt;
    return LoraDeltaShape{d->rows, d->rows * d->cols};
}

void mergeLoraModule(const LoraModule& module, const LoraFile& file, const LoraModuleMerge& how, HostTensor& weight,
                     HostTensor* bias) {
    const auto fail = [&](const std::string& why) {
        throw LoraFileError("lora: " + shownPath(file.path()) + ": " + why);
    };
    std::string why;
    // Shapes first, from the listing: nothing is read or allocated for factors that do not fit.
    const std::optional<Delta> shape = prepare(module, nullptr, how.dyn, why);
    if (!shape) fail(why);
    if (weight.shape.empty() || shape->rows != weight.shape[0] || shape->rows * shape->cols != weight.numel())
        fail(module.stem + ": a delta of " + std::to_string(shape->rows) + " rows and " +
             std::to_string(shape->rows * shape->cols) + " elements does not fit the weight " +
             shapeToString(weight.shape));
    const std::optional<Delta> d = prepare(module, &file, how.dyn, why);
    if (!d) fail(why);
    if (!d->bias.empty() && (bias == nullptr || bias->numel() != static_cast<std::int64_t>(d->bias.size())))
        fail(module.stem + ": the model has no bias of " + std::to_string(d->bias.size()) + " values for it");
    const bool dora = module.part(LoraPart::DoraScale) != nullptr || module.part(LoraPart::MagnitudeVector) != nullptr;
    if (dora) {
        applyDora(module, file, *d, how, weight);
    } else {
        const double coef = how.multiplier * d->scale;
        const std::int64_t block = std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(1, d->cols));
        std::vector<double> rows(static_cast<std::size_t>(std::min(block, d->rows) * d->cols));
        for (std::int64_t r0 = 0; r0 < d->rows; r0 += block) {
            const std::int64_t r1 = std::min(d->rows, r0 + block);
            d->fill(r0, r1, rows.data());
            float* w = weight.data.data() + r0 * d->cols;
            const std::int64_t n = (r1 - r0) * d->cols;
            for (std::int64_t i = 0; i < n; ++i)
                w[i] = static_cast<float>(static_cast<double>(w[i]) + rows[static_cast<std::size_t>(i)] * coef);
        }
    }
    if (!d->bias.empty())
        for (std::size_t i = 0; i < d->bias.size(); ++i)
            bias->data[i] = static_cast<float>(static_cast<double>(bias->data[i]) + d->bias[i] * how.multiplier);
}

}  // namespace tessera
