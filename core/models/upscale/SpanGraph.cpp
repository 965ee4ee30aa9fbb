#include "core/models/upscale/SpanGraph.h"

#include <array>
#include <string>

#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/graph/GraphBuilder.h"
#include "core/models/upscale/CompactGraph.h"

namespace tessera {

namespace {

constexpr int kBlocks = 6;  // SPAN.__init__: block_1 .. block_6
constexpr float kImageRange = 255.0f;
constexpr std::array<float, 3> kRgbMean{0.4488f, 0.4371f, 0.4040f};  // SPAN.__init__ rgb_mean

// The modules that are Conv3XCs, with their (in, out) channels.
std::vector<std::pair<std::string, std::pair<int, int>>> conv3xcModules(const UpscaleConfig& c) {
    std::vector<std::pair<std::string, std::pair<int, int>>> m{{"conv_1", {c.inChannels, c.features}}};
    for (int b = 1; b <= kBlocks; ++b)
        for (const char* conv : {".c1_r", ".c2_r", ".c3_r"})
            m.push_back({"block_" + std::to_string(b) + conv, {c.features, c.features}});
    m.push_back({"conv_2", {c.features, c.features}});
    return m;
}

class SpanBuilder : private GraphBuilder {
public:
    explicit SpanBuilder(const UpscaleConfig& c) : c_(c) {}

    ModelGraph build() {
        int x = g_.addInput("image", ValueKind::FeatureMap, c_.inChannels, c_.scale);
        if (c_.norm) x = sameConv("normalize", x, c_.inChannels, 1);
        const int feature = conv3xc("conv_1", x);
        int h = feature, b1 = -1, out1 = -1;
        for (int b = 1; b <= kBlocks; ++b) {
            h = spab("block_" + std::to_string(b), h, out1);
            if (b == 1) b1 = h;
        }
        const int b6 = conv3xc("conv_2", h);
        int cat = simple(OpKind::Concat, feature, b6, "cat.1");
        cat = simple(OpKind::Concat, cat, b1, "cat.2");
        cat = simple(OpKind::Concat, cat, out1, "cat.3");
        h = sameConv("conv_cat", cat, c_.features, 1);
        h = sameConv("upsampler.0", h, c_.outChannels * c_.scale * c_.scale, 3);
        if (c_.scale > 1) {
            GraphOp shuffle = newOp(OpKind::PixelShuffle, "upsampler.1", h);
            shuffle.factor = c_.scale;
            h = g_.addOp(std::move(shuffle));
        }
        g_.markOutput(h);
        return std::move(g_);
    }

private:
    // Conv3XC in eval mode: its eval_conv, a 3x3 convolution with padding 1.
    int conv3xc(const std::string& p, int x) {
        return conv(p, x, c_.features, 3, 1, 1, 1, declareConv(p + ".eval_conv", channels(x), c_.features, 3));
    }
    // SPAB.forward: out1 = c1(x); out2 = c2(silu(out1)); out3 = c3(silu(out2));
    // out = (out3 + x) * (sigmoid(out3) - 0.5); returns out, and out1 through `out1`: which is
    // silu(out1), as act1 is nn.SiLU(inplace=True) and rewrites out1 before it is returned.
    int spab(const std::string& p, int x, int& out1) {
        out1 = silu(conv3xc(p + ".c1_r", x), p + ".act1");
        const int o2 = conv3xc(p + ".c2_r", out1);
        const int o3 = conv3xc(p + ".c3_r", silu(o2, p + ".act2"));
        const int att = affine(simple(OpKind::Sigmoid, o3, -1, p + ".sigmoid"), 1.0f, -0.5f, p + ".attention");
        return simple(OpKind::Mul, simple(OpKind::Add, o3, x, p + ".residual"), att, p, p);
    }

    const UpscaleConfig& c_;
};

}  // namespace

bool hasSpanKeys(const StateDict& d) {
    for (const char* key :
         {"conv_1.sk.weight", "block_1.c1_r.sk.weight", "conv_cat.weight", "conv_2.sk.weight", "upsampler.0.weight"})
        if (!d.has(key)) return false;
    return true;
}

UpscaleConfig inferSpanConfig(const StateDict& d) {
    UpscaleConfig c;
    c.architecture = UpscaleArchitecture::Span;
    c.blocks = kBlocks;
    const std::vector<std::int64_t> sk = d.shape("conv_1.sk.weight"), up = d.shape("upsampler.0.weight");
    if (sk.size() != 4 || up.size() != 4 || sk[0] < 1 || sk[1] < 1 || sk[0] > 1 << 16 || sk[1] > 1 << 16)
        throw ModelError(d.source() + ": SPAN: conv_1.sk.weight " + shapeToString(sk) + " and upsampler.0.weight " +
                         shapeToString(up) + " are not convolutions");
    c.features = static_cast<int>(sk[0]);
    c.inChannels = static_cast<int>(sk[1]);
    const auto [scale, out] = scaleAndOutputChannels(up[0], c.inChannels);
    if (scale < 1)
        throw ModelError(d.source() + ": SPAN: upsampler.0's " + std::to_string(up[0]) +
                         " channels are no scale^2 x (1, 3 or 4) output channels");
    c.scale = scale;
    c.outChannels = out;
    c.norm = !d.has("no_norm");
    if (c.norm && c.inChannels != 3)
        throw ModelError(d.source() + ": SPAN: " + std::to_string(c.inChannels) +
                         " input channels with the RGB mean normalisation (no 'no_norm' buffer): spandrel's SPAN "
                         "cannot run it either");
    return c;
}

ModelGraph buildSpanGraph(const UpscaleConfig& c) {
    if (c.features < 1 || c.scale < 1 || c.inChannels < 1 || c.outChannels < 1 || (c.norm && c.inChannels != 3))
        throw std::invalid_argument("SPAN: no network for " + c.describe());
    return SpanBuilder(c).build();
}

FusedConv fuseConv3XC(int ci, int co, const std::vector<float>& w1, const std::vector<float>& b1,
                      const std::vector<float>& w2, const std::vector<float>& b2, const std::vector<float>& w3,
                      const std::vector<float>& b3, const std::vector<float>& ws, const std::vector<float>& bs) {
    const auto mi = std::size_t(2) * static_cast<std::size_t>(ci), mo = std::size_t(2) * static_cast<std::size_t>(co);
    const auto nci = static_cast<std::size_t>(ci), nco = static_cast<std::size_t>(co);
    // t[m][i][k] = sum_p w2[m][p][k] w1[p][i] (k the 9 taps), then W[o][i][k] = sum_m w3[o][m] t[m][i][k].
    std::vector<double> t(mo * nci * 9, 0.0);
    for (std::size_t m = 0; m < mo; ++m)
        for (std::size_t p = 0; p < mi; ++p)
            for (std::size_t k = 0; k < 9; ++k) {
                const double w = w2[(m * mi + p) * 9 + k];
                for (std::size_t i = 0; i < nci; ++i) t[(m * nci + i) * 9 + k] += w * w1[p * nci + i];
            }
    FusedConv f;
    f.weight.assign(nco * nci * 9, 0.0f);
    f.bias.assign(nco, 0.0f);
    std::vector<double> mid(mo);  // b2[m] + sum_{p,k} w2[m][p][k] b1[p]
    for (std::size_t m = 0; m < mo; ++m) {
        double s = b2[m];
        for (std::size_t p = 0; p < mi; ++p)
            for (std::size_t k = 0; k < 9; ++k) s += double(w2[(m * mi + p) * 9 + k]) * b1[p];
        mid[m] = s;
    }
    for (std::size_t o = 0; o < nco; ++o) {
        std::vector<double> acc(nci * 9, 0.0);
        double bias = double(b3[o]) + bs[o];
        for (std::size_t m = 0; m < mo; ++m) {
            const double w = w3[o * mo + m];
            bias += w * mid[m];
            for (std::size_t j = 0; j < nci * 9; ++j) acc[j] += w * t[m * nci * 9 + j];
        }
        for (std::size_t i = 0; i < nci; ++i) acc[i * 9 + 4] += ws[o * nci + i];  // sk at the centre tap
        for (std::size_t j = 0; j < nci * 9; ++j) f.weight[o * nci * 9 + j] = static_cast<float>(acc[j]);
        f.bias[o] = static_cast<float>(bias);
    }
    return f;
}

TensorMap readSpanWeights(const UpscaleConfig& c, const StateDict& dict, const ModelGraph& graph) {
    StateDictCheck check(dict);
    const auto modules = conv3xcModules(c);
    for (const auto& [p, io] : modules) {
        const std::int64_t ci = io.first, co = io.second;
        check.expect(p + ".sk.weight", {co, ci, 1, 1});
        check.expect(p + ".sk.bias", {co});
        check.expect(p + ".conv.0.weight", {2 * ci, ci, 1, 1});
        check.expect(p + ".conv.0.bias", {2 * ci});
        check.expect(p + ".conv.1.weight", {2 * co, 2 * ci, 3, 3});
        check.expect(p + ".conv.1.bias", {2 * co});
        check.expect(p + ".conv.2.weight", {co, 2 * co, 1, 1});
        check.expect(p + ".conv.2.bias", {co});
        check.allow(p + ".eval_conv.weight", {co, ci, 3, 3});
        check.allow(p + ".eval_conv.bias", {co});
    }
    const std::int64_t F = c.features, up = std::int64_t(c.outChannels) * c.scale * c.scale;
    check.expect("conv_cat.weight", {F, 4 * F, 1, 1});
    check.expect("conv_cat.bias", {F});
    check.expect("upsampler.0.weight", {up, F, 3, 3});
    check.expect("upsampler.0.bias", {up});
    if (!c.norm) check.expect("no_norm", {1});
    check.check("SPAN (" + c.describe() + ")");

    TensorMap weights;
    for (const auto& [p, io] : modules) {
        FusedConv f =
            fuseConv3XC(io.first, io.second, dict.read(p + ".conv.0.weight"), dict.read(p + ".conv.0.bias"),
                        dict.read(p + ".conv.1.weight"), dict.read(p + ".conv.1.bias"), dict.read(p + ".conv.2.weight"),
                        dict.read(p + ".conv.2.bias"), dict.read(p + ".sk.weight"), dict.read(p + ".sk.bias"));
        weights.emplace(p + ".eval_conv.weight", HostTensor{{io.second, io.first, 3, 3}, std::move(f.weight)});
        weights.emplace(p + ".eval_conv.bias", HostTensor{{io.second}, std::move(f.bias)});
    }
    for (const char* key : {"conv_cat.weight", "conv_cat.bias", "upsampler.0.weight", "upsampler.0.bias"})
        weights.emplace(key, HostTensor{dict.shape(key), dict.read(key)});
    if (c.norm) {
        HostTensor w{{3, 3, 1, 1}, std::vector<float>(9, 0.0f)}, b{{3}, std::vector<float>(3, 0.0f)};
        for (std::size_t i = 0; i < 3; ++i) {
            w.data[i * 4] = kImageRange;
            b.data[i] = -kImageRange * kRgbMean[i];
        }
        weights.emplace("normalize.weight", std::move(w));
        weights.emplace("normalize.bias", std::move(b));
    }
    for (const GraphParam& p : graph.params())
        if (!weights.count(p.name)) throw std::logic_error("SPAN: no weight made for " + p.name);
    return weights;
}

}  // namespace tessera
