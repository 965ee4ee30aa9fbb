#include "core/models/unet/UNetGraph.h"

#include <algorithm>
#include <stdexcept>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

class UNet2DBuilder : private GraphBuilder {
public:
    explicit UNet2DBuilder(const UNetConfig& c) : c_(c) {}
    ModelGraph build();

private:
    // Every UNet2DModel norm has the config's norm_eps.
    int groupNorm(const std::string& prefix, int x, int groups, const char* key = "norm_num_groups") {
        return GraphBuilder::groupNorm(prefix, x, groups, c_.normEps, key);
    }
    int resnet(const std::string& prefix, int x, int cout, float outputScaleFactor);
    int attention(const std::string& prefix, int x, int groups, float rescale,
                  const char* groupsKey = "norm_num_groups");
    int timeEmbedding();
    void checkConfig() const;

    const UNetConfig& c_;
    int embAct_ = -1;  // act(emb): SiLU of the time embedding, read by every resnet's projection
};

// diffusers ResnetBlock2D (models/resnet.py).
int UNet2DBuilder::resnet(const std::string& p, int x, int cout, float outputScaleFactor) {
    ResnetOptions o;
    o.groups = c_.normNumGroups;
    o.eps = c_.normEps;
    o.scaleShift = c_.resnetTimeScaleShift == TimeScaleShift::ScaleShift;
    o.outputScaleFactor = outputScaleFactor;
    return GraphBuilder::resnet(p, x, cout, embAct_, o);
}

// diffusers Attention with _from_deprecated_attn_block (attention_processor.py): [group_norm],
// attention over the pixels, + input, / rescale_output_factor. groups == 0: no GroupNorm
// (UNetMidBlock2D with resnet_time_scale_shift "scale_shift" and no attn_norm_num_groups).
int UNet2DBuilder::attention(const std::string& prefix, int x, int groups, float rescale, const char* groupsKey) {
    const int ch = channels(x);
    const int heads = c_.headsFor(ch);
    if (heads <= 0 || (c_.attentionHeadDim && ch % *c_.attentionHeadDim != 0))
        throw std::invalid_argument("attention_head_dim: " + std::to_string(c_.attentionHeadDim.value_or(0)) +
                                    " does not divide " + std::to_string(ch) + " channels of " + prefix);
    return attentionBlock(prefix, x, groups, c_.normEps, heads, rescale, groupsKey);
}

// diffusers Timesteps and TimestepEmbedding (models/embeddings.py): sinusoid, linear_1, SiLU,
// linear_2; then act(emb) for the resnets (resnet_skip_time_act is always false here).
int UNet2DBuilder::timeEmbedding() {
    return GraphBuilder::timeEmbedding(g_.inputs().at(1), c_.blockOutChannels[0], c_.freqShift, c_.flipSinToCos,
                                       c_.timeEmbedDim());
}

void UNet2DBuilder::checkConfig() const {
    const int L = c_.levels();
    if (L < 1) throw std::invalid_argument("block_out_channels: must not be empty");
    if (L > 16)  // the downsampling factor 2^(levels - 1) must stay a tile size
        throw std::invalid_argument("block_out_channels: " + std::to_string(L) + " levels; at most 16 are supported");
    if (static_cast<int>(c_.downBlocks.size()) != L)
        throw std::invalid_argument("down_block_types: " + std::to_string(c_.downBlocks.size()) +
                                    " entries, block_out_channels has " + std::to_string(L));
    if (static_cast<int>(c_.upBlocks.size()) != L)
        throw std::invalid_argument("up_block_types: " + std::to_string(c_.upBlocks.size()) +
                                    " entries, block_out_channels has " + std::to_string(L));
    for (int ch : c_.blockOutChannels)
        if (ch <= 0) throw std::invalid_argument("block_out_channels: " + std::to_string(ch) + " is not positive");
    if (c_.layersPerBlock < 1) throw std::invalid_argument("layers_per_block: must be at least 1");
    if (c_.downsamplePadding != 0 && c_.downsamplePadding != 1)
        throw std::invalid_argument("downsample_padding: " + std::to_string(c_.downsamplePadding) +
                                    " is not supported (0 or 1; others change the resolution)");
    if (c_.inChannels <= 0 || c_.outChannels <= 0)
        throw std::invalid_argument("in_channels/out_channels: must be positive");
    if (c_.midBlockScaleFactor == 0.0f) throw std::invalid_argument("mid_block_scale_factor: must not be 0");
    if (c_.timeEmbedDim() <= 0) throw std::invalid_argument("time_embedding_dim: must be positive");
}

ModelGraph UNet2DBuilder::build() {
    checkConfig();
    const UNetConfig& c = c_;
    const std::vector<int>& C = c.blockOutChannels;
    const int L = c.levels(), n = c.layersPerBlock;

    // Spelled out as in UNetCondBuilder::build: the order of inputs and parameters is the graph's identity.
    int h = g_.addInput("sample", ValueKind::FeatureMap, c.inChannels, 1);
    g_.addInput("timestep", ValueKind::Vector, 1, 0);
    // conv_in is the state dict's first module but runs after the time embedding.
    std::vector<int> convIn = declareConv("conv_in", c.inChannels, C[0], 3);
    if (c.centerInputSample) h = affine(h, 2.0f, -1.0f, "sample.centered");
    embAct_ = timeEmbedding();
    h = conv("conv_in", h, C[0], 3, 1, 1, 1, std::move(convIn));
    std::vector<int> skips{h};

    for (int i = 0; i < L; ++i) {
        const std::string p = indexed("down_blocks.", "", i);
        for (int j = 0; j < n; ++j) {
            h = resnet(indexed(p, ".resnets.", j), h, C[static_cast<std::size_t>(i)], 1.0f);
            if (c.downBlocks[static_cast<std::size_t>(i)] == DownBlockType::AttnDown)
                h = attention(indexed(p, ".attentions.", j), h, c.normNumGroups, 1.0f);
            skips.push_back(h);
        }
        if (i < L - 1) {  // Downsample2D: padding 0 pads one row/column at the bottom/right only
            const int pad = c.downsamplePadding;
            h = conv(p + ".downsamplers.0.conv", h, channels(h), 3, 2, pad, pad == 0 ? 1 : pad, {},
                     p + ".downsamplers.0");
            skips.push_back(h);
        }
    }

    if (c.hasMidBlock) {  // UNetMidBlock2D
        const float s = c.midBlockScaleFactor;
        h = resnet("mid_block.resnets.0", h, C.back(), s);
        if (c.addAttention) {
            int groups = 0;
            if (c.attnNormNumGroups)
                groups = *c.attnNormNumGroups;
            else if (c.resnetTimeScaleShift == TimeScaleShift::Default)
                groups = c.normNumGroups;
            h = attention("mid_block.attentions.0", h, groups, s,
                          c.attnNormNumGroups ? "attn_norm_num_groups" : "norm_num_groups");
        }
        h = resnet("mid_block.resnets.1", h, C.back(), s);
    }

    for (int i = 0; i < L; ++i) {  // up blocks: concat [h, skip], the last skip first
        const std::string p = indexed("up_blocks.", "", i);
        const int out = C[static_cast<std::size_t>(L - 1 - i)];
        for (int j = 0; j <= n; ++j) {
            const int skip = skips.back();
            skips.pop_back();
            h = simple(OpKind::Concat, h, skip, indexed(p, ".cat", j));
            h = resnet(indexed(p, ".resnets.", j), h, out, 1.0f);
            if (c.upBlocks[static_cast<std::size_t>(i)] == UpBlockType::AttnUp)
                h = attention(indexed(p, ".attentions.", j), h, c.normNumGroups, 1.0f);
        }
        if (i < L - 1) {
            h = simple(OpKind::Upsample, h, -1, p + ".upsample");
            h = sameConv(p + ".upsamplers.0.conv", h, out, 3, p + ".upsamplers.0");
        }
    }
    if (!skips.empty()) throw std::logic_error("UNet2D graph: skip stack not empty after the up blocks");

    h = silu(groupNorm("conv_norm_out", h, c.normNumGroups), "conv_norm_out.silu");  // the output head
    g_.markOutput(sameConv("conv_out", h, c.outChannels, 3));
    return std::move(g_);
}

}  // namespace

ModelGraph buildUNet2DGraph(const UNetConfig& config) { return UNet2DBuilder(config).build(); }

ModelGraph unet2DExecutionGraph(const UNetConfig& config) { return fuseForExecution(buildUNet2DGraph(config)); }

}  // namespace tessera
