#include "core/GraphBuilder.h"

#include <stdexcept>
#include <utility>

namespace tessera {

std::vector<int> GraphBuilder::declare(const std::string& module, std::vector<std::vector<std::int64_t>> shapes,
                                       const std::vector<const char*>& names) {
    std::vector<int> ids;
    for (std::size_t i = 0; i < shapes.size(); ++i) ids.push_back(g_.addParam(module + names[i], std::move(shapes[i])));
    return ids;
}

std::vector<int> GraphBuilder::declareConv(const std::string& prefix, int cin, int cout, int kernel) {
    return declare(prefix, {{cout, cin, kernel, kernel}, {cout}}, {".weight", ".bias"});
}

int GraphBuilder::simple(OpKind kind, int x, int x2, const std::string& name, const std::string& valueName) {
    GraphOp op;
    op.kind = kind;
    op.name = name;
    op.input = x;
    op.input2 = x2;
    return g_.addOp(std::move(op), valueName);
}

int GraphBuilder::affine(int x, float scale, float shift, const std::string& name, const std::string& valueName) {
    GraphOp op;
    op.kind = OpKind::Affine;
    op.name = name;
    op.input = x;
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
    GraphOp op;
    op.kind = OpKind::GroupNorm;
    op.name = prefix;
    op.input = x;
    op.groups = groups;
    op.eps = eps;
    op.params = declare(prefix, {{ch}, {ch}}, {".weight", ".bias"});
    return g_.addOp(std::move(op));
}

int GraphBuilder::conv(const std::string& prefix, int x, int cout, int kernel, int stride, int padBegin, int padEnd,
                       std::vector<int> params, const std::string& valueName) {
    GraphOp op;
    op.kind = OpKind::Conv;
    op.name = prefix;
    op.input = x;
    op.channels = cout;
    op.kernel = kernel;
    op.stride = stride;
    op.padBegin = padBegin;
    op.padEnd = padEnd;
    op.params = params.empty() ? declareConv(prefix, channels(x), cout, kernel) : std::move(params);
    return g_.addOp(std::move(op), valueName);
}

int GraphBuilder::linear(const std::string& prefix, int x, int out) {
    GraphOp op;
    op.kind = OpKind::Linear;
    op.name = prefix;
    op.input = x;
    op.channels = out;
    op.params = declare(prefix, {{out, channels(x)}, {out}}, {".weight", ".bias"});
    return g_.addOp(std::move(op));
}

int GraphBuilder::attentionBlock(const std::string& prefix, int x, int groups, float eps, int heads, float rescale,
                                 const char* groupsKey) {
    const int ch = channels(x);
    const int h = groups > 0 ? groupNorm(prefix + ".group_norm", x, groups, eps, groupsKey) : x;
    GraphOp op;
    op.kind = OpKind::Attention;
    op.name = prefix;
    op.input = h;
    op.heads = heads;
    for (const char* layer : {".to_q", ".to_k", ".to_v", ".to_out.0"})
        for (int id : declare(prefix + layer, {{ch, ch}, {ch}}, {".weight", ".bias"})) op.params.push_back(id);
    const int a = g_.addOp(std::move(op), prefix + ".attn");
    return sumAndRescale(a, x, prefix, rescale);
}

}  // namespace tessera
