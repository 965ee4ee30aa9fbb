// GraphBuilder: what every model family's builder (core/models/unet/UNetGraph.cpp, core/models/sd/UNetCondGraph.cpp,
// core/models/vae/VaeGraph.cpp) shares: parameters declared under diffusers' module paths in state-dict
// order (weight then bias), primitive ops appended in execution order, and the blocks that more
// than one family uses (ResnetBlock2D, pixel attention, the time MLP). Each call returns the
// int id of its output value. Shape errors are std::logic_error from ModelGraph::addOp (a
// builder bug); a config that cannot be built is std::invalid_argument naming the config key.
// Qt-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/ModelGraph.h"

namespace tessera {

// "down_blocks." + "" + 1, ".resnets." ...: module paths.
std::string indexed(const std::string& prefix, const char* part, int i);

// An op of `kind` named `name` reading value `input` (and `input2`): what every builder starts
// from before setting the kind's own fields and adding it.
GraphOp newOp(OpKind kind, std::string name, int input, int input2 = -1);

class GraphBuilder {
public:
    // diffusers ResnetBlock2D (models/resnet.py) as the families configure it.
    struct ResnetOptions {
        int groups = 32;
        float eps = 1e-5f;
        bool scaleShift = false;  // resnet_time_scale_shift "scale_shift" (FiLM) instead of "default"
        float outputScaleFactor = 1.0f;
        const char* groupsKey = "norm_num_groups";  // the config key behind `groups`, for messages
    };

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
    // `key`: the config key that set `groups`, for the std::invalid_argument when they do not divide.
    int groupNorm(const std::string& prefix, int x, int groups, float eps, const char* key);
    // Parameters declared here unless given (declared earlier to follow the state dict's order).
    int conv(const std::string& prefix, int x, int cout, int kernel, int stride, int padBegin, int padEnd,
             std::vector<int> params = {}, const std::string& valueName = {});
    // kernel x kernel, stride 1, padding kernel / 2 on every side.
    int sameConv(const std::string& prefix, int x, int cout, int kernel, const std::string& valueName = {}) {
        return conv(prefix, x, cout, kernel, 1, kernel / 2, kernel / 2, {}, valueName);
    }
    // Over vectors or tokens.
    int linear(const std::string& prefix, int x, int out);
    // norm1, SiLU, conv1, + time_emb_proj(embAct) (or FiLM after norm2), norm2, SiLU, conv2,
    // (input or conv_shortcut(input)) + h, / output_scale_factor. embAct < 0: temb None (the
    // VAE's resnets): no time_emb_proj, nothing added (scaleShift must then be false).
    int resnet(const std::string& prefix, int x, int cout, int embAct, const ResnetOptions&);
    // diffusers' Attention over the pixels with its residual: [group_norm] (groups 0: none),
    // `heads` heads, to_q/to_k/to_v/to_out.0 with biases, + input, / rescale. The attention
    // op's value is "<prefix>.attn", the block's "<prefix>".
    int attentionBlock(const std::string& prefix, int x, int groups, float eps, int heads, float rescale,
                       const char* groupsKey);
    // Sinusoid of `sinusoidChannels` ("time_proj"), time_embedding.linear_1, SiLU, linear_2,
    // then act(emb) ("time_embedding.act"), the value every resnet's projection reads.
    int timeEmbedding(int timestep, int sinusoidChannels, int freqShift, bool flipSinToCos, int timeEmbedDim) {
        return silu(timeEmbeddingMlp(timestep, sinusoidChannels, freqShift, flipSinToCos, timeEmbedDim),
                    "time_embedding.act");
    }
    // The same without the final act: emb (linear_2's value), for families that add to it first.
    int timeEmbeddingMlp(int timestep, int sinusoidChannels, int freqShift, bool flipSinToCos, int timeEmbedDim);

    ModelGraph g_;
};

}  // namespace tessera
