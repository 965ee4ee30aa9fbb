#include "core/models/vae/VaeGraph.h"

#include <stdexcept>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

class VaeBuilder : private GraphBuilder {
public:
    explicit VaeBuilder(const VaeConfig& c) : c_(c) { checkConfig(); }
    ModelGraph encoder();
    ModelGraph decoder();

private:
    int groupNorm(const std::string& prefix, int x) {
        return GraphBuilder::groupNorm(prefix, x, c_.normNumGroups, VaeConfig::kNormEps, "norm_num_groups");
    }
    int resnet(const std::string& prefix, int x, int cout);
    int midBlock(const std::string& prefix, int x);
    // conv_norm_out, SiLU, conv_out (3x3) to `channels`.
    int head(const std::string& prefix, int x, int channels, const std::string& valueName);
    void checkConfig() const;

    const VaeConfig& c_;
};

// ResnetBlock2D with temb None (diffusers models/autoencoders/vae.py Encoder, Decoder): norm1,
// SiLU, conv1, norm2, SiLU, conv2 (dropout is the identity at inference), then (input or
// conv_shortcut(input)) + h; output_scale_factor 1.
int VaeBuilder::resnet(const std::string& p, int x, int cout) {
    ResnetOptions o;
    o.groups = c_.normNumGroups;
    o.eps = VaeConfig::kNormEps;
    return GraphBuilder::resnet(p, x, cout, -1, o);
}

// UNetMidBlock2D (as the VAE's Encoder and Decoder build it): resnet, [attention: one head of all
// channels, GroupNorm with eps 1e-6, residual, rescale 1], resnet.
int VaeBuilder::midBlock(const std::string& p, int x) {
    const int ch = channels(x);
    int h = resnet(p + ".resnets.0", x, ch);
    if (c_.midBlockAddAttention)
        h = attentionBlock(p + ".attentions.0", h, c_.normNumGroups, VaeConfig::kNormEps, 1, 1.0f, "norm_num_groups");
    return resnet(p + ".resnets.1", h, ch);
}

int VaeBuilder::head(const std::string& p, int x, int cout, const std::string& valueName) {
    const int h = silu(groupNorm(p + ".conv_norm_out", x), p + ".conv_norm_out.silu");
    return sameConv(p + ".conv_out", h, cout, 3, valueName);
}

// The config reader checks these for files; configs built in code get the same answers.
void VaeBuilder::checkConfig() const {
    const int L = c_.levels();
    if (L < 1 || L > vae_config_bounds::kMaxLevels)
        throw std::invalid_argument("block_out_channels: " + std::to_string(L) + " levels; 1 to " +
                                    std::to_string(vae_config_bounds::kMaxLevels) + " are supported");
    for (int ch : c_.blockOutChannels)
        if (ch <= 0) throw std::invalid_argument("block_out_channels: " + std::to_string(ch) + " is not positive");
    if (c_.layersPerBlock < 1) throw std::invalid_argument("layers_per_block: must be at least 1");
    if (c_.inChannels <= 0 || c_.outChannels <= 0 || c_.latentChannels <= 0)
        throw std::invalid_argument("in_channels/out_channels/latent_channels: must be positive");
}

ModelGraph VaeBuilder::encoder() {
    const std::vector<int>& C = c_.blockOutChannels;
    const int L = c_.levels(), n = c_.layersPerBlock;
    int h = g_.addInput("image", ValueKind::FeatureMap, c_.inChannels, 1);
    h = sameConv("encoder.conv_in", h, C[0], 3);
    for (int i = 0; i < L; ++i) {  // DownEncoderBlock2D
        const std::string p = indexed("encoder.down_blocks.", "", i);
        for (int j = 0; j < n; ++j) h = resnet(indexed(p, ".resnets.", j), h, C[static_cast<std::size_t>(i)]);
        if (i < L - 1)  // Downsample2D(padding 0): one zero row/column at the bottom/right, 3x3 stride 2
            h = conv(p + ".downsamplers.0.conv", h, channels(h), 3, 2, 0, 1, {}, p + ".downsamplers.0");
    }
    h = midBlock("encoder.mid_block", h);
    const int moments = 2 * c_.latentChannels;
    h = head("encoder", h, moments, c_.useQuantConv ? "encoder.conv_out" : "moments");
    if (c_.useQuantConv) h = sameConv("quant_conv", h, moments, 1, "moments");
    g_.markOutput(h);
    return std::move(g_);
}

ModelGraph VaeBuilder::decoder() {
    const std::vector<int>& C = c_.blockOutChannels;
    const int L = c_.levels(), n = c_.layersPerBlock;
    int h = g_.addInput("latent", ValueKind::FeatureMap, c_.latentChannels, c_.scaleFactor());
    if (c_.usePostQuantConv) h = sameConv("post_quant_conv", h, c_.latentChannels, 1);
    h = sameConv("decoder.conv_in", h, C.back(), 3);
    h = midBlock("decoder.mid_block", h);
    for (int i = 0; i < L; ++i) {  // UpDecoderBlock2D, widest first
        const std::string p = indexed("decoder.up_blocks.", "", i);
        const int out = C[static_cast<std::size_t>(L - 1 - i)];
        for (int j = 0; j <= n; ++j) h = resnet(indexed(p, ".resnets.", j), h, out);
        if (i < L - 1) {  // Upsample2D: nearest x2, then 3x3 conv
            h = simple(OpKind::Upsample, h, -1, p + ".upsample");
            h = sameConv(p + ".upsamplers.0.conv", h, out, 3, p + ".upsamplers.0");
        }
    }
    g_.markOutput(head("decoder", h, c_.outChannels, "image"));
    return std::move(g_);
}

}  // namespace

ModelGraph buildVaeEncoderGraph(const VaeConfig& config) { return VaeBuilder(config).encoder(); }

ModelGraph buildVaeDecoderGraph(const VaeConfig& config) { return VaeBuilder(config).decoder(); }

ModelGraph vaeEncoderExecutionGraph(const VaeConfig& config) { return fuseForExecution(buildVaeEncoderGraph(config)); }

ModelGraph vaeDecoderExecutionGraph(const VaeConfig& config) { return fuseForExecution(buildVaeDecoderGraph(config)); }

std::vector<std::pair<std::string, std::vector<std::int64_t>>> vaeParameterList(const VaeConfig& config) {
    auto list = buildVaeEncoderGraph(config).parameterList();
    for (auto& entry : buildVaeDecoderGraph(config).parameterList()) list.push_back(std::move(entry));
    return list;
}

}  // namespace tessera
