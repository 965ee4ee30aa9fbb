#include "core/UNetGraph.h"

#include <algorithm>
#include <stdexcept>

namespace tessera {

const char* toString(OpKind k) {
    switch (k) {
    case OpKind::Affine: return "affine";
    case OpKind::TimestepEmbedding: return "timestep_embedding";
    case OpKind::Linear: return "linear";
    case OpKind::Conv: return "conv";
    case OpKind::Downsample: return "downsample";
    case OpKind::GroupNorm: return "group_norm";
    case OpKind::Attention: return "attention";
    case OpKind::Concat: return "concat";
    case OpKind::Upsample: return "upsample";
    }
    return "?";
}

int UNetGraph::addValue(std::string name, int channels, int divisor) {
    values_.push_back(GraphValue{std::move(name), channels, divisor});
    return static_cast<int>(values_.size()) - 1;
}

int UNetGraph::add(GraphOp op, std::string valueName) {
    op.output = addValue(std::move(valueName), op.outChannels, op.divisor);
    ops_.push_back(std::move(op));
    return ops_.back().output;
}

int UNetGraph::groupNorm(const std::string& prefix, int x, int channels, int divisor, bool silu, int addVector,
                         int scaleShift) {
    const int groups = config_.normNumGroups;
    if (groups <= 0 || channels % groups != 0)
        throw std::invalid_argument("norm_num_groups: " + std::to_string(groups) + " does not divide " +
                                    std::to_string(channels) + " channels of " + prefix);
    GraphOp op;
    op.kind = OpKind::GroupNorm;
    op.prefix = prefix;
    op.input = x;
    op.addVector = addVector;
    op.scaleShift = scaleShift;
    op.inChannels = op.outChannels = channels;
    op.divisor = divisor;
    op.groups = groups;
    op.eps = config_.normEps;
    op.silu = silu;
    return add(std::move(op), prefix);
}

int UNetGraph::conv(const std::string& prefix, int x, int cin, int cout, int divisor, int kernel, int residual,
                    float outputScale, const std::string& outName) {
    GraphOp op;
    op.kind = OpKind::Conv;
    op.prefix = prefix;
    op.input = x;
    op.residual = residual;
    op.inChannels = cin;
    op.outChannels = cout;
    op.divisor = divisor;
    op.kernel = kernel;
    op.padding = kernel / 2;
    op.outputScale = outputScale;
    return add(std::move(op), outName);
}

// §2.5. The time projection reads act(emb), computed once by the time MLP.
int UNetGraph::resnet(const std::string& p, int x, int cin, int cout, int divisor, float outputScaleFactor) {
    const bool film = config_.resnetTimeScaleShift == TimeScaleShift::ScaleShift;
    const int a1 = groupNorm(p + ".norm1", x, cin, divisor, true, -1, -1);
    const int c1 = conv(p + ".conv1", a1, cin, cout, divisor, 3, -1, 1.0f, p + ".conv1");
    GraphOp proj;
    proj.kind = OpKind::Linear;
    proj.prefix = p + ".time_emb_proj";
    proj.input = embAct_;
    proj.inChannels = config_.timeEmbedDim();
    proj.outChannels = film ? 2 * cout : cout;
    proj.divisor = 0;
    const int t = add(std::move(proj), p + ".time_emb_proj");
    const int a2 = groupNorm(p + ".norm2", c1, cout, divisor, true, film ? -1 : t, film ? t : -1);
    const int skip = cin != cout ? conv(p + ".conv_shortcut", x, cin, cout, divisor, 1, -1, 1.0f, p + ".conv_shortcut")
                                 : x;
    return conv(p + ".conv2", a2, cout, cout, divisor, 3, skip, 1.0f / outputScaleFactor, p);
}

// §2.6; groups == 0 means the attention has no GroupNorm (mid block with scale_shift, §2.8).
int UNetGraph::attention(const std::string& prefix, int x, int channels, int divisor, int groups, float rescale) {
    if (groups > 0 && channels % groups != 0)
        throw std::invalid_argument("norm_num_groups: " + std::to_string(groups) + " does not divide " +
                                    std::to_string(channels) + " channels of " + prefix + ".group_norm");
    const int heads = config_.headsFor(channels);
    if (heads <= 0 || (config_.attentionHeadDim && channels % *config_.attentionHeadDim != 0))
        throw std::invalid_argument("attention_head_dim: " + std::to_string(config_.attentionHeadDim.value_or(0)) +
                                    " does not divide " + std::to_string(channels) + " channels of " + prefix);
    GraphOp op;
    op.kind = OpKind::Attention;
    op.prefix = prefix;
    op.input = x;
    op.inChannels = op.outChannels = channels;
    op.divisor = divisor;
    op.groups = groups;
    op.eps = config_.normEps;
    op.heads = heads;
    op.outputScale = 1.0f / rescale;
    return add(std::move(op), prefix);
}

UNetGraph UNetGraph::build(const ModelConfig& c) {
    UNetGraph g;
    g.config_ = c;
    const int L = c.levels();
    if (L < 1) throw std::invalid_argument("block_out_channels: must not be empty");
    if (static_cast<int>(c.downBlocks.size()) != L)
        throw std::invalid_argument("down_block_types: " + std::to_string(c.downBlocks.size()) +
                                    " entries, block_out_channels has " + std::to_string(L));
    if (static_cast<int>(c.upBlocks.size()) != L)
        throw std::invalid_argument("up_block_types: " + std::to_string(c.upBlocks.size()) +
                                    " entries, block_out_channels has " + std::to_string(L));
    for (int ch : c.blockOutChannels)
        if (ch <= 0) throw std::invalid_argument("block_out_channels: " + std::to_string(ch) + " is not positive");
    if (c.layersPerBlock < 1) throw std::invalid_argument("layers_per_block: must be at least 1");
    if (c.downsamplePadding != 0 && c.downsamplePadding != 1)
        throw std::invalid_argument("downsample_padding: " + std::to_string(c.downsamplePadding) +
                                    " is not supported (0 or 1; others change the resolution)");
    if (c.inChannels <= 0 || c.outChannels <= 0) throw std::invalid_argument("in_channels/out_channels: must be positive");
    if (c.midBlockScaleFactor == 0.0f) throw std::invalid_argument("mid_block_scale_factor: must not be 0");
    const std::vector<int>& C = c.blockOutChannels;
    const int C0 = C[0], T = c.timeEmbedDim(), n = c.layersPerBlock;

    g.sample_ = g.addValue("sample", c.inChannels, 1);
    g.timestep_ = g.addValue("timestep", 1, 0);
    int h = g.sample_;
    if (c.centerInputSample) {
        GraphOp op;
        op.kind = OpKind::Affine;
        op.input = h;
        op.inChannels = op.outChannels = c.inChannels;
        op.affineScale = 2.0f;
        op.affineShift = -1.0f;
        h = g.add(std::move(op), "sample.centered");
    }

    // §2.2-2.3: sinusoid, linear_1, SiLU, linear_2. Every resnet applies SiLU to emb before its
    // projection (resnet_skip_time_act is always false here) and nothing else reads emb, so
    // linear_2 carries the SiLU and its output is act(emb).
    {
        GraphOp op;
        op.kind = OpKind::TimestepEmbedding;
        op.prefix = "time_proj";
        op.input = g.timestep_;
        op.inChannels = 1;
        op.outChannels = C0;
        op.divisor = 0;
        op.freqShift = c.freqShift;
        op.flipSinToCos = c.flipSinToCos;
        int e = g.add(std::move(op), "time_proj");
        GraphOp l1;
        l1.kind = OpKind::Linear;
        l1.prefix = "time_embedding.linear_1";
        l1.input = e;
        l1.inChannels = C0;
        l1.outChannels = T;
        l1.divisor = 0;
        l1.silu = true;
        e = g.add(l1, "time_embedding.linear_1");
        GraphOp l2 = l1;
        l2.prefix = "time_embedding.linear_2";
        l2.input = e;
        l2.inChannels = T;
        g.embAct_ = g.add(std::move(l2), "time_embedding.act");
    }

    h = g.conv("conv_in", h, c.inChannels, C0, 1, 3, -1, 1.0f, "conv_in");
    std::vector<int> skips{h};

    int divisor = 1;
    for (int i = 0; i < L; ++i) {
        const std::string p = "down_blocks." + std::to_string(i);
        const int in = i == 0 ? C0 : C[i - 1], out = C[i];
        for (int j = 0; j < n; ++j) {
            h = g.resnet(p + ".resnets." + std::to_string(j), h, j == 0 ? in : out, out, divisor, 1.0f);
            if (c.downBlocks[i] == DownBlockType::AttnDown)
                h = g.attention(p + ".attentions." + std::to_string(j), h, out, divisor, c.normNumGroups, 1.0f);
            skips.push_back(h);
        }
        if (i < L - 1) {
            GraphOp op;
            op.kind = OpKind::Downsample;
            op.prefix = p + ".downsamplers.0.conv";
            op.input = h;
            op.inChannels = op.outChannels = out;
            divisor *= 2;
            op.divisor = divisor;
            op.kernel = 3;
            op.stride = 2;
            op.padding = c.downsamplePadding;
            h = g.add(std::move(op), p + ".downsamplers.0");
            skips.push_back(h);
        }
    }

    if (c.hasMidBlock) {
        const int Cm = C[L - 1];
        const float s = c.midBlockScaleFactor;
        h = g.resnet("mid_block.resnets.0", h, Cm, Cm, divisor, s);
        if (c.addAttention) {
            int groups = 0;
            if (c.attnNormNumGroups) groups = *c.attnNormNumGroups;
            else if (c.resnetTimeScaleShift == TimeScaleShift::Default) groups = c.normNumGroups;
            h = g.attention("mid_block.attentions.0", h, Cm, divisor, groups, s);
        }
        h = g.resnet("mid_block.resnets.1", h, Cm, Cm, divisor, s);
    }

    for (int i = 0; i < L; ++i) {
        const std::string p = "up_blocks." + std::to_string(i);
        const int out = C[L - 1 - i];
        const int prev = C[L - 1 - std::max(i - 1, 0)];
        const int skipLast = C[L - 1 - std::min(i + 1, L - 1)];
        for (int j = 0; j <= n; ++j) {
            const int s = skips.back();
            skips.pop_back();
            const int hc = j == 0 ? prev : out;
            const int sc = j == n ? skipLast : out;
            if (g.values_[h].channels != hc || g.values_[s].channels != sc)
                throw std::logic_error("UNetGraph: channel bookkeeping mismatch at " + p);
            const std::string r = p + ".resnets." + std::to_string(j);
            GraphOp cat;
            cat.kind = OpKind::Concat;
            cat.input = h;
            cat.input2 = s;
            cat.inChannels = hc;
            cat.outChannels = hc + sc;
            cat.divisor = divisor;
            h = g.add(std::move(cat), r + ".input");
            h = g.resnet(r, h, hc + sc, out, divisor, 1.0f);
            if (c.upBlocks[i] == UpBlockType::AttnUp)
                h = g.attention(p + ".attentions." + std::to_string(j), h, out, divisor, c.normNumGroups, 1.0f);
        }
        if (i < L - 1) {
            GraphOp up;
            up.kind = OpKind::Upsample;
            up.input = h;
            up.inChannels = up.outChannels = out;
            divisor /= 2;
            up.divisor = divisor;
            h = g.add(std::move(up), p + ".upsamplers.0.nearest");
            h = g.conv(p + ".upsamplers.0.conv", h, out, out, divisor, 3, -1, 1.0f, p + ".upsamplers.0");
        }
    }
    if (!skips.empty()) throw std::logic_error("UNetGraph: skip stack not empty after the up blocks");

    h = g.groupNorm("conv_norm_out", h, C0, 1, true, -1, -1);  // §2.10: always SiLU
    g.output_ = g.conv("conv_out", h, C0, c.outChannels, 1, 3, -1, 1.0f, "conv_out");
    return g;
}

void UNetGraph::checkTileSize(int h, int w) const {
    const int f = config_.downsampleFactor();
    auto check = [f](const char* what, int v) {
        if (v <= 0 || v % f != 0)
            throw std::invalid_argument(std::string("tile ") + what + " " + std::to_string(v) + " is not a positive multiple of " +
                                        std::to_string(f) + ", the model's downsampling factor");
    };
    check("height", h);
    check("width", w);
}

std::vector<std::int64_t> UNetGraph::shape(int value, int batch, int h, int w) const {
    const GraphValue& v = values_.at(static_cast<std::size_t>(value));
    if (v.isVector()) return {batch, v.channels};
    return {batch, v.channels, h / v.divisor, w / v.divisor};
}

std::int64_t UNetGraph::elements(int value, int batch, int h, int w) const {
    std::int64_t n = 1;
    for (std::int64_t d : shape(value, batch, h, w)) n *= d;
    return n;
}

double UNetGraph::flops(const GraphOp& op, int h, int w) const {
    const double pixels = op.divisor > 0 ? double(h / op.divisor) * double(w / op.divisor) : 1.0;
    switch (op.kind) {
    case OpKind::Conv:
    case OpKind::Downsample:
        return 2.0 * op.outChannels * op.inChannels * op.kernel * op.kernel * pixels;
    case OpKind::Linear: return 2.0 * op.inChannels * op.outChannels;
    case OpKind::Attention: {
        const double C = op.inChannels;
        return 4.0 * 2.0 * C * C * pixels + 2.0 * 2.0 * pixels * pixels * C;
    }
    default: return 0.0;
    }
}

double UNetGraph::flops(int h, int w) const {
    double total = 0;
    for (const GraphOp& op : ops_) total += flops(op, h, w);
    return total;
}

std::vector<int> UNetGraph::lastUse() const {
    std::vector<int> last(values_.size(), -1);
    for (int i = 0; i < static_cast<int>(ops_.size()); ++i) {
        const GraphOp& op = ops_[static_cast<std::size_t>(i)];
        for (int v : {op.input, op.input2, op.residual, op.addVector, op.scaleShift})
            if (v >= 0) last[static_cast<std::size_t>(v)] = i;
    }
    last[static_cast<std::size_t>(output_)] = static_cast<int>(ops_.size());
    return last;
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> UNetGraph::weights() const {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> w;
    for (const GraphOp& op : ops_) {
        const std::int64_t ci = op.inChannels, co = op.outChannels;
        switch (op.kind) {
        case OpKind::Conv:
        case OpKind::Downsample:
            w.push_back({op.prefix + ".weight", {co, ci, op.kernel, op.kernel}});
            w.push_back({op.prefix + ".bias", {co}});
            break;
        case OpKind::Linear:
            w.push_back({op.prefix + ".weight", {co, ci}});
            w.push_back({op.prefix + ".bias", {co}});
            break;
        case OpKind::GroupNorm:
            w.push_back({op.prefix + ".weight", {ci}});
            w.push_back({op.prefix + ".bias", {ci}});
            break;
        case OpKind::Attention:
            if (op.groups > 0) {
                w.push_back({op.prefix + ".group_norm.weight", {ci}});
                w.push_back({op.prefix + ".group_norm.bias", {ci}});
            }
            for (const char* l : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
                w.push_back({op.prefix + l + ".weight", {ci, ci}});
                w.push_back({op.prefix + l + ".bias", {ci}});
            }
            break;
        default: break;
        }
    }
    return w;
}

}  // namespace tessera
