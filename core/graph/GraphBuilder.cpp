#include "core/graph/GraphBuilder.h"

#include <stdexcept>
#include <utility>

namespace tessera {

std::string indexed(const std::string& prefix, const char* part, int i) { return prefix + part + std::to_string(i); }

std::vector<int> GraphBuilder::declare(const std::string& module, std::vector<std::vector<std::int64_t>> shapes,
                                       const std::vector<const char*>& names) {
    std::vector<int> ids;
    for (std::size_t i = 0; i < shapes.size(); ++i) ids.push_back(g_.addParam(module + names[i], std::move(shapes[i])));
    return ids;
}

std::vector<int> GraphBuilder::declareConv(const std::string& prefix, int cin, int cout, int kernel) {
    return declare(prefix, {{cout, cin, kernel, kernel}, {cout}}, {".weight", ".bias"});
}

GraphOp newOp(OpKind kind, std::string name, int input, int input2) {
    GraphOp op;
    op.kind = kind;
    op.name = std::move(name);
    op.input = input;
    op.input2 = input2;
    return op;
}

int GraphBuilder::simple(OpKind kind, int x, int x2, const std::string& name, const std::string& valueName) {
    return g_.addOp(newOp(kind, name, x, x2), valueName);
}

int GraphBuilder::affine(int x, float scale, float shift, const std::string& name, const std::string& valueName) {
    GraphOp op = newOp(OpKind::Affine, name, x);
    op.scale = scale;
    op.shift = shift;
    return g_.addOp(std::move(op), valueName);
}

int GraphBuilder::sumAndRescale(int a, int b, const std::string& block, float factor) {
    if (factor == 1.0f) return residual(a, b, block, block);
    return affine(residual(a, b, block, block + ".sum"), 1.0f / factor, 0.0f, block + ".rescale", block);
}

int GraphBuilder::groupNorm(const std::string& prefix, int x, int groups, float eps, const char* key) {
    const int ch = channels(x);
    if (groups <= 0 || ch % groups != 0)
        throw std::invalid_argument(std::string(key) + ": " + std::to_string(groups) + " does not divide " +
                                    std::to_string(ch) + " channels of " + prefix);
    GraphOp op = newOp(OpKind::GroupNorm, prefix, x);
    op.groups = groups;
    op.eps = eps;
    op.params = declare(prefix, {{ch}, {ch}}, {".weight", ".bias"});
    return g_.addOp(std::move(op));
}

int GraphBuilder::conv(const std::string& prefix, int x, int cout, int kernel, int stride, int padBegin, int padEnd,
                       std::vector<int> params, const std::string& valueName) {
    GraphOp op = newOp(OpKind::Conv, prefix, x);
    op.channels = cout;
    op.kernel = kernel;
    op.stride = stride;
    op.padBegin = padBegin;
    op.padEnd = padEnd;
    op.params = params.empty() ? declareConv(prefix, channels(x), cout, kernel) : std::move(params);
    return g_.addOp(std::move(op), valueName);
}

int GraphBuilder::linear(const std::string& prefix, int x, int out) {
    GraphOp op = newOp(OpKind::Linear, prefix, x);
    op.channels = out;
    op.params = declare(prefix, {{out, channels(x)}, {out}}, {".weight", ".bias"});
    return g_.addOp(std::move(op));
}

int GraphBuilder::attentionBlock(const std::string& prefix, int x, int groups, float eps, int heads, float rescale,
                                 const char* groupsKey) {
    const int ch = channels(x);
    const int h = groups > 0 ? groupNorm(prefix + ".group_norm", x, groups, eps, groupsKey) : x;
    GraphOp op = newOp(OpKind::Attention, prefix, h);
    op.heads = heads;
    for (const char* layer : {".to_q", ".to_k", ".to_v", ".to_out.0"})
        for (int id : declare(prefix + layer, {{ch, ch}, {ch}}, {".weight", ".bias"})) op.params.push_back(id);
    const int a = g_.addOp(std::move(op), prefix + ".attn");
    return sumAndRescale(a, x, prefix, rescale);
}

int GraphBuilder::resnet(const std::string& p, int x, int cout, int embAct, const ResnetOptions& o) {
    if (embAct < 0 && o.scaleShift) throw std::logic_error(p + ": a FiLM resnet needs a time embedding");
    int h = silu(groupNorm(p + ".norm1", x, o.groups, o.eps, o.groupsKey), p + ".norm1.silu");
    h = sameConv(p + ".conv1", h, cout, 3);
    if (embAct < 0) {
        h = groupNorm(p + ".norm2", h, o.groups, o.eps, o.groupsKey);
    } else {
        const int t = linear(p + ".time_emb_proj", embAct, o.scaleShift ? 2 * cout : cout);
        if (o.scaleShift) {
            h = groupNorm(p + ".norm2", h, o.groups, o.eps, o.groupsKey);
            h = simple(OpKind::ScaleShift, h, t, p + ".norm2.film");
        } else {
            h = groupNorm(p + ".norm2", simple(OpKind::Add, h, t, p + ".temb"), o.groups, o.eps, o.groupsKey);
        }
    }
    h = sameConv(p + ".conv2", silu(h, p + ".norm2.silu"), cout, 3);
    const int skip = channels(x) != cout ? sameConv(p + ".conv_shortcut", x, cout, 1) : x;
    return sumAndRescale(skip, h, p, o.outputScaleFactor);
}

int GraphBuilder::timeEmbeddingMlp(int timestep, int sinusoidChannels, int freqShift, bool flipSinToCos,
                                   int timeEmbedDim) {
    GraphOp sinusoid;
    sinusoid.kind = OpKind::TimestepEmbedding;
    sinusoid.name = "time_proj";
    sinusoid.input = timestep;
    sinusoid.channels = sinusoidChannels;
    sinusoid.freqShift = freqShift;
    sinusoid.flipSinToCos = flipSinToCos;
    int e = g_.addOp(std::move(sinusoid));
    e = silu(linear("time_embedding.linear_1", e, timeEmbedDim), "time_embedding.linear_1.silu");
    return linear("time_embedding.linear_2", e, timeEmbedDim);
}

}  // namespace tessera
