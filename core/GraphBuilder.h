// GraphBuilder: the primitives every model family's builder (core/UNetGraph.cpp,
// core/VaeGraph.cpp) writes its structure with. Each call declares the module's parameters
// under diffusers' names, in state-dict order (weight then bias), and appends one op to the
// graph; the returned int is the op's output value. Shape errors are std::logic_error from
// ModelGraph::addOp (a builder bug); a config that cannot be built is std::invalid_argument
// naming the config key. Qt-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ModelGraph.h"

namespace tessera {

class GraphBuilder {
protected:
    int channels(int value) const { return g_.value(value).channels; }

    // Parameters module + names[i] of shapes[i], in that order; their ids.
    std::vector<int> declare(const std::string& module, std::vector<std::vector<std::int64_t>> shapes,
                             const std::vector<const char*>& names);
    std::vector<int> declareConv(const std::string& prefix, int cin, int cout, int kernel);

    // An op without parameters or attributes (SiLU, Add, ScaleShift, Concat, Upsample).
    int simple(OpKind kind, int x, int x2, const std::string& name, const std::string& valueName = {});
    int silu(int x, const std::string& name) { return simple(OpKind::SiLU, x, -1, name); }
    // The residual sum of a block (op "<block>.residual"); its value is named valueName.
    int residual(int a, int b, const std::string& block, const std::string& valueName) {
        return simple(OpKind::Add, a, b, block + ".residual", valueName);
    }
    int affine(int x, float scale, float shift, const std::string& name, const std::string& valueName = {});
    // (a + b) / factor as "<block>.rescale", named after the block; no Affine when factor is 1.
    int sumAndRescale(int a, int b, const std::string& block, float factor);
    // `key`: the config key that set `groups`, for the message when they do not divide.
    int groupNorm(const std::string& prefix, int x, int groups, float eps, const char* key);
    // Parameters declared here unless given (declared earlier to follow the state dict's order).
    int conv(const std::string& prefix, int x, int cout, int kernel, int stride, int padBegin, int padEnd,
             std::vector<int> params = {}, const std::string& valueName = {});
    // kernel x kernel, stride 1, padding kernel / 2 on every side.
    int sameConv(const std::string& prefix, int x, int cout, int kernel, const std::string& valueName = {}) {
        return conv(prefix, x, cout, kernel, 1, kernel / 2, kernel / 2, {}, valueName);
    }
    int linear(const std::string& prefix, int x, int out);
    // diffusers' Attention over the pixels with its residual: [group_norm] (groups 0: none),
    // `heads` heads, to_q/to_k/to_v/to_out.0 with biases, + input, / rescale. The attention
    // op's value is "<prefix>.attn", the block's "<prefix>".
    int attentionBlock(const std::string& prefix, int x, int groups, float eps, int heads, float rescale,
                       const char* groupsKey);

    ModelGraph g_;
};

}  // namespace tessera
