// GraphBuilder: what every model family's builder (core/UNetGraph.h, core/UNetCondGraph.h)
// shares: parameters declared under diffusers module paths, primitive ops appended in execution
// order, and the blocks that more than one family uses (ResnetBlock2D, the time MLP). Qt-free.
#pragma once

#include <string>
#include <vector>

#include "core/ModelGraph.h"

namespace tessera {

// "down_blocks." + "" + 1, ".resnets." ...: module paths.
std::string indexed(const std::string& prefix, const char* part, int i);

class GraphBuilder {
public:
    // diffusers ResnetBlock2D (shared/spec/unet2d.md §2.5) as the families configure it.
    struct ResnetOptions {
        int groups = 32;
        float eps = 1e-5f;
        bool scaleShift = false;     // resnet_time_scale_shift "scale_shift" (FiLM) instead of "default"
        float outputScaleFactor = 1.0f;
        const char* groupsKey = "norm_num_groups";  // the config key behind `groups`, for messages
    };

protected:
    int channels(int v) const { return g_.value(v).channels; }

    std::vector<int> declare(const std::string& module, std::vector<std::vector<std::int64_t>> shapes,
                             const std::vector<const char*>& names);
    std::vector<int> declareConv(const std::string& prefix, int cin, int cout, int kernel);

    int simple(OpKind kind, int x, int x2, const std::string& name, const std::string& valueName = {});
    int silu(int x, const std::string& name) { return simple(OpKind::SiLU, x, -1, name); }
    // The residual sum of a block (op "<block>.residual"); its value is named valueName.
    int residual(int a, int b, const std::string& block, const std::string& valueName) {
        return simple(OpKind::Add, a, b, block + ".residual", valueName);
    }
    int affine(int x, float scale, float shift, const std::string& name, const std::string& valueName = {});
    // output / factor as "<block>.rescale", named after the block; nothing when factor is 1.
    int sumAndRescale(int a, int b, const std::string& block, float factor);
    // Throws std::invalid_argument naming `key` when `groups` does not divide the channels.
    int groupNorm(const std::string& prefix, int x, int groups, float eps, const char* key);
    // Parameters declared here unless given.
    int conv(const std::string& prefix, int x, int cout, int kernel, int stride, int padBegin, int padEnd,
             std::vector<int> params = {}, const std::string& valueName = {});
    int sameConv(const std::string& prefix, int x, int cout, int kernel, const std::string& valueName = {}) {
        return conv(prefix, x, cout, kernel, 1, kernel / 2, kernel / 2, {}, valueName);
    }
    // Over vectors or tokens.
    int linear(const std::string& prefix, int x, int out);
    // norm1, SiLU, conv1, + time_emb_proj(embAct) (or FiLM after norm2), norm2, SiLU, conv2,
    // (input or conv_shortcut(input)) + h, / output_scale_factor.
    int resnet(const std::string& prefix, int x, int cout, int embAct, const ResnetOptions&);
    // Sinusoid of `sinusoidChannels` ("time_proj"), time_embedding.linear_1, SiLU, linear_2,
    // then act(emb) ("time_embedding.act"), the value every resnet's projection reads.
    int timeEmbedding(int timestep, int sinusoidChannels, int freqShift, bool flipSinToCos, int timeEmbedDim);

    ModelGraph g_;
};

}  // namespace tessera
