#include "core/models/upscale/EsrganGraph.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

constexpr float kSlope = 0.2f;          // block.py act("leakyrelu"): nn.LeakyReLU(0.2)
constexpr float kResidualScale = 0.2f;  // ResidualDenseBlock_5C and RRDB: x5 * 0.2 + x, out * 0.2 + x

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The integer right after `prefix` in `name` ("model.12.bias", "model." -> 12), if there is one
// followed by a dot.
std::optional<int> indexAfter(const std::string& name, const std::string& prefix) {
    if (!startsWith(name, prefix)) return std::nullopt;
    std::size_t i = prefix.size();
    int v = 0;
    const std::size_t start = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - start < 6) v = v * 10 + (name[i++] - '0');
    if (i == start || i >= name.size() || name[i] != '.') return std::nullopt;
    return v;
}

// spandrel util get_seq_len: 1 + the largest index after `prefix`, 0 when none.
int seqLen(const StateDict& dict, const std::string& prefix) {
    int n = 0;
    for (const StateDict::Entry& e : dict.entries())
        if (const auto i = indexAfter(e.name, prefix)) n = std::max(n, *i + 1);
    return n;
}

std::int64_t dim(const StateDict& dict, const std::string& key, std::size_t axis) {
    const std::vector<std::int64_t> s = dict.shape(key);
    if (s.size() != 4 || s[axis] < 1 || s[axis] > 1 << 16)
        throw ModelError(dict.source() + ": ESRGAN: '" + dict.prefix() + key + "' has shape " + shapeToString(s) +
                         ", not a convolution's [out, in, k, k]");
    return s[axis];
}

class EsrganBuilder : private GraphBuilder {
public:
    explicit EsrganBuilder(const UpscaleConfig& c) : c_(c) {}
    ModelGraph build();

private:
    int conv3(const std::string& prefix, int x, int cout) { return sameConv(prefix, x, cout, 3); }
    int lrelu(int x, const std::string& name) {
        GraphOp op = newOp(OpKind::LeakyReLU, name, x);
        op.slope = kSlope;
        return g_.addOp(std::move(op));
    }
    int denseBlock(const std::string& p, int x);
    int rrdb(const std::string& p, int x);

    const UpscaleConfig& c_;
};

// ResidualDenseBlock_5C: x1 = lrelu(conv1(x)); x2 = lrelu(conv2([x, x1])) (+ conv1x1(x) for
// ESRGAN+); x3 = lrelu(conv3([x, x1, x2])); x4 = lrelu(conv4([x, x1, x2, x3])) (+ x2 for ESRGAN+);
// x5 = conv5([x, x1, x2, x3, x4]); x5 * 0.2 + x. The concatenations grow one operand at a time.
int EsrganBuilder::denseBlock(const std::string& p, int x) {
    const int nf = c_.features, gc = c_.growth;
    int cat = x;
    int x2 = -1;
    for (int j = 1; j <= 4; ++j) {
        const std::string conv = indexed(p, ".conv", j);
        int xj = lrelu(conv3(conv, cat, gc), conv + ".act");
        if (c_.plus && j == 2) {
            // conv1x1 has no bias (block.py conv1x1): a zero bias stands in for it.
            const int shortcut = sameConv(p + ".conv1x1", x, gc, 1);
            xj = simple(OpKind::Add, shortcut, xj, p + ".conv1x1.add");
        }
        if (c_.plus && j == 4) xj = simple(OpKind::Add, xj, x2, p + ".conv4.add");
        if (j == 2) x2 = xj;
        cat = simple(OpKind::Concat, cat, xj, indexed(p, ".cat", j));
    }
    const int x5 = affine(conv3(p + ".conv5", cat, nf), kResidualScale, 0.0f, p + ".conv5.scale");
    return residual(x5, x, p, p);
}

int EsrganBuilder::rrdb(const std::string& p, int x) {
    int h = x;
    for (int k = 1; k <= 3; ++k) h = denseBlock(indexed(p, ".rdb", k), h);
    return residual(affine(h, kResidualScale, 0.0f, p + ".scale"), x, p, p);
}

ModelGraph EsrganBuilder::build() {
    int x = g_.addInput("image", ValueKind::FeatureMap, c_.inChannels, c_.scale);
    if (c_.unshuffle > 1) {
        GraphOp op = newOp(OpKind::PixelUnshuffle, "pixel_unshuffle", x);
        op.factor = c_.unshuffle;
        x = g_.addOp(std::move(op));
    }
    const int first = conv3("conv_first", x, c_.features);
    int h = first;
    for (int n = 0; n < c_.blocks; ++n) h = rrdb(indexed("body.", "", n), h);
    h = residual(conv3("conv_body", h, c_.features), first, "trunk", "trunk");
    for (int u = 1, s = 2; s <= c_.networkScale(); ++u, s *= 2) {
        const std::string up = indexed("conv_up", "", u);
        h = lrelu(conv3(up, simple(OpKind::Upsample, h, -1, up + ".upsample"), c_.features), up + ".act");
    }
    h = lrelu(conv3("conv_hr", h, c_.features), "conv_hr.act");
    g_.markOutput(conv3("conv_last", h, c_.outChannels));
    return std::move(g_);
}

std::string suffixAfter(const std::string& s, std::size_t n) { return s.substr(n); }

}  // namespace

bool hasEsrganKeys(const StateDict& d) {
    const bool original = d.has("model.0.weight") &&
                          (d.has("model.1.sub.0.RDB1.conv1.0.weight") || d.has("model.1.sub.0.RDB1.conv1x1.weight"));
    const bool basicSr = d.has("conv_first.weight") && d.has("body.0.rdb1.conv1.weight") && d.has("conv_body.weight") &&
                         d.has("conv_last.weight");
    const bool kair = d.has("conv_first.weight") && d.has("RRDB_trunk.0.RDB1.conv1.weight") &&
                      d.has("trunk_conv.weight") && d.has("conv_last.weight");
    return original || basicSr || kair;
}

UpscaleConfig inferEsrganConfig(const StateDict& d) {
    UpscaleConfig c;
    c.architecture = UpscaleArchitecture::Esrgan;
    std::string first, dense, last;
    int upsamples = 0;
    if (d.has("model.0.weight")) {
        c.layout = EsrganLayout::Original;
        // [conv, shortcut, (upsample, conv, lrelu) x U, conv, lrelu, conv] (spandrel _get_scale).
        const int length = seqLen(d, "model.");
        if (length < 5 || (length - 5) % 3 != 0)
            throw ModelError(d.source() + ": ESRGAN: model." + std::to_string(length - 1) +
                             " is the last layer, which no RRDBNet scale gives");
        upsamples = (length - 5) / 3;
        c.blocks = seqLen(d, "model.1.sub.") - 1;
        first = "model.0.weight";
        dense = "model.1.sub.0.RDB1.conv1.0.weight";
        last = "model." + std::to_string(length - 1) + ".weight";
    } else {
        c.layout = d.has("body.0.rdb1.conv1.weight") ? EsrganLayout::BasicSr : EsrganLayout::Kair;
        const bool basic = c.layout == EsrganLayout::BasicSr;
        const std::string up = basic ? "conv_up" : "upconv";
        while (d.has(up + std::to_string(upsamples + 1) + ".weight")) ++upsamples;
        c.blocks = seqLen(d, basic ? "body." : "RRDB_trunk.");
        first = "conv_first.weight";
        dense = basic ? "body.0.rdb1.conv1.weight" : "RRDB_trunk.0.RDB1.conv1.weight";
        last = "conv_last.weight";
    }
    if (upsamples > 3)
        throw ModelError(d.source() + ": ESRGAN: " + std::to_string(upsamples) + " upsamples (x" +
                         std::to_string(1 << upsamples) + "); 1x to 8x are supported");
    if (c.blocks < 1) throw ModelError(d.source() + ": ESRGAN: no RRDB block");
    c.features = static_cast<int>(dim(d, first, 0));
    c.inChannels = static_cast<int>(dim(d, first, 1));
    c.growth = static_cast<int>(dim(d, dense, 0));
    c.outChannels = static_cast<int>(dim(d, last, 0));
    c.plus = std::any_of(d.entries().begin(), d.entries().end(),
                         [](const StateDict::Entry& e) { return e.name.find(".conv1x1.") != std::string::npos; });
    const int net = 1 << upsamples;
    c.scale = net;
    // A pixel-unshuffled input: 4 or 16 times the output's channels (spandrel ESRGANArch.load).
    for (const int r : {2, 4})
        if (c.inChannels == r * r * c.outChannels) {
            if (net % r != 0)
                throw ModelError(d.source() + ": ESRGAN: an input unshuffled by " + std::to_string(r) +
                                 " into a network of scale " + std::to_string(net) + " would shrink the image");
            c.unshuffle = r;
            c.inChannels /= r * r;
            c.scale = net / r;
        }
    return c;
}

ModelGraph buildEsrganGraph(const UpscaleConfig& c) {
    if (c.features < 1 || c.growth < 1 || c.blocks < 1 || c.inChannels < 1 || c.outChannels < 1 || c.unshuffle < 1 ||
        c.scale < 1 || (c.networkScale() & (c.networkScale() - 1)) != 0 || c.networkScale() > 8)
        throw std::invalid_argument("ESRGAN: no RRDBNet for " + c.describe());
    return EsrganBuilder(c).build();
}

std::string esrganFileKey(const UpscaleConfig& c, const std::string& canonical) {
    const std::size_t dot = canonical.rfind('.');
    const std::string module = canonical.substr(0, dot), param = canonical.substr(dot);  // ".weight" / ".bias"
    if (module.find(".conv1x1") != std::string::npos && param == ".bias") return "";
    if (c.layout == EsrganLayout::BasicSr) return canonical;
    int upsamples = 0;
    for (int s = 1; s < c.networkScale(); s *= 2) ++upsamples;
    const bool original = c.layout == EsrganLayout::Original;
    if (module == "conv_first") return original ? "model.0" + param : canonical;
    if (module == "conv_body") return (original ? "model.1.sub." + std::to_string(c.blocks) : "trunk_conv") + param;
    if (module == "conv_hr") return (original ? "model." + std::to_string(3 * upsamples + 2) : "HRconv") + param;
    if (module == "conv_last") return original ? "model." + std::to_string(3 * upsamples + 4) + param : canonical;
    if (startsWith(module, "conv_up")) {
        const std::string u = suffixAfter(module, 7);
        return (original ? "model." + std::to_string(3 * std::stoi(u)) : "upconv" + u) + param;
    }
    // body.N.rdbK.convJ / conv1x1
    const std::size_t rdb = module.find(".rdb");
    const std::string n = module.substr(5, rdb - 5), rest = module.substr(rdb + 4);  // "K.convJ"
    const std::string block = rest.substr(0, rest.find('.')), conv = rest.substr(rest.find('.') + 1);
    if (original) return "model.1.sub." + n + ".RDB" + block + "." + conv + (conv == "conv1x1" ? "" : ".0") + param;
    return "RRDB_trunk." + n + ".RDB" + block + "." + conv + param;
}

TensorMap readEsrganWeights(const UpscaleConfig& c, const StateDict& dict, const ModelGraph& graph) {
    StateDictCheck check(dict);
    for (const GraphParam& p : graph.params()) {
        const std::string key = esrganFileKey(c, p.name);
        if (!key.empty()) check.expect(key, p.shape);
    }
    check.check(std::string("ESRGAN (") + toString(c.layout) + " layout, " + c.describe() + ")");
    TensorMap weights;
    for (const GraphParam& p : graph.params()) {
        const std::string key = esrganFileKey(c, p.name);
        HostTensor t;
        t.shape = p.shape;
        t.data = key.empty() ? std::vector<float>(static_cast<std::size_t>(p.shape[0]), 0.0f) : dict.read(key);
        weights.emplace(p.name, std::move(t));
    }
    return weights;
}

}  // namespace tessera
