#include "core/models/sd/UNetCondGraph.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

// The transformers' GroupNorm has a fixed eps (diffusers Transformer2DModel: 1e-6), their
// LayerNorms diffusers' default.
constexpr float kTransformerGroupNormEps = 1e-6f;
constexpr float kLayerNormEps = 1e-5f;
constexpr int kFeedForwardMult = 4;

// UNet2DConditionModel: the shared encoder half, then the up blocks and the output head.
class UNetCondBuilder : private UNetCondEncoderBuilder {
public:
    UNetCondBuilder(const UNetCondConfig& c, int contextTokens) : UNetCondEncoderBuilder(c, contextTokens) {}
    ModelGraph build();
};

}  // namespace

// ToTokens / ToFeatureMap / LayerNorm (with its parameters) / GEGLU (its proj parameters).
int UNetCondEncoderBuilder::tokenOp(OpKind kind, const std::string& name, int x, int channels) {
    GraphOp op = newOp(kind, name, x);
    op.channels = channels;
    const std::int64_t C = this->channels(x);
    if (kind == OpKind::LayerNorm) {
        op.eps = kLayerNormEps;
        op.params = declare(name, {{C}, {C}}, {".weight", ".bias"});
    } else if (kind == OpKind::GEGLU) {
        op.params = declare(name + ".proj", {{2 * channels, C}, {2 * channels}}, {".weight", ".bias"});
    }
    return g_.addOp(std::move(op));
}

// diffusers Attention (attention_processor.py): to_q/to_k/to_v without bias, to_out.0 with; K, V
// from `context` (self: -1).
int UNetCondEncoderBuilder::attention(const std::string& prefix, int x, int context, int heads) {
    const std::int64_t C = channels(x), kv = context >= 0 ? channels(context) : C;
    GraphOp op = newOp(OpKind::Attention, prefix, x, context);
    op.heads = heads;
    op.qkvBias = false;
    op.params = declare(prefix, {{C, C}, {C, kv}, {C, kv}, {C, C}, {C}},
                        {".to_q.weight", ".to_k.weight", ".to_v.weight", ".to_out.0.weight", ".to_out.0.bias"});
    return g_.addOp(std::move(op), prefix + ".out");
}

// diffusers BasicTransformerBlock (attention.py): pre-norm self-attention, cross-attention on the
// context, GEGLU feed-forward, each added to its input.
int UNetCondEncoderBuilder::basicBlock(const std::string& p, int x, int heads) {
    const int C = channels(x);
    int h = attention(p + ".attn1", tokenOp(OpKind::LayerNorm, p + ".norm1", x), -1, heads);
    x = residual(h, x, p + ".attn1", p + ".attn1.sum");
    h = attention(p + ".attn2", tokenOp(OpKind::LayerNorm, p + ".norm2", x), context_, heads);
    x = residual(h, x, p + ".attn2", p + ".attn2.sum");
    h = tokenOp(OpKind::GEGLU, p + ".ff.net.0", tokenOp(OpKind::LayerNorm, p + ".norm3", x), kFeedForwardMult * C);
    h = linear(p + ".ff.net.2", h, C);
    return residual(h, x, p + ".ff", p);
}

// diffusers Transformer2DModel (continuous input): GroupNorm (eps 1e-6), proj_in (1x1 conv before
// the tokens, or Linear on them), the blocks, proj_out, + input.
int UNetCondEncoderBuilder::transformer(const std::string& p, int x, int heads, int depth) {
    const int C = channels(x);
    if (C % heads != 0)
        throw std::invalid_argument("attention_head_dim: " + std::to_string(heads) + " heads do not divide " +
                                    std::to_string(C) + " channels of " + p);
    int h = groupNorm(p + ".norm", x, c_.normNumGroups, kTransformerGroupNormEps, "norm_num_groups");
    if (c_.useLinearProjection) {
        h = linear(p + ".proj_in", tokenOp(OpKind::ToTokens, p + ".tokens", h), C);
    } else {
        h = tokenOp(OpKind::ToTokens, p + ".tokens", sameConv(p + ".proj_in", h, C, 1));
    }
    for (int k = 0; k < depth; ++k) h = basicBlock(indexed(p, ".transformer_blocks.", k), h, heads);
    if (c_.useLinearProjection) {
        h = tokenOp(OpKind::ToFeatureMap, p + ".map", linear(p + ".proj_out", h, C));
    } else {
        h = sameConv(p + ".proj_out", tokenOp(OpKind::ToFeatureMap, p + ".map", h), C, 1);
    }
    return residual(h, x, p, p);
}

void UNetCondEncoderBuilder::checkConfig(bool upBlocks) const {
    const int L = c_.levels();
    if (L < 1) throw std::invalid_argument("block_out_channels: must not be empty");
    if (L > unet_config_bounds::kMaxLevels)
        throw std::invalid_argument("block_out_channels: " + std::to_string(L) + " levels; at most " +
                                    std::to_string(unet_config_bounds::kMaxLevels) + " are supported");
    auto perLevel = [L](std::size_t n, const char* key) {
        if (static_cast<int>(n) != L)
            throw std::invalid_argument(std::string(key) + ": " + std::to_string(n) +
                                        " entries, block_out_channels has " + std::to_string(L));
    };
    perLevel(c_.downBlocks.size(), "down_block_types");
    if (upBlocks) perLevel(c_.upBlocks.size(), "up_block_types");
    perLevel(c_.attentionHeads.size(), "attention_head_dim");
    perLevel(c_.transformerLayers.size(), "transformer_layers_per_block");
    for (int ch : c_.blockOutChannels)
        if (ch <= 0) throw std::invalid_argument("block_out_channels: " + std::to_string(ch) + " is not positive");
    for (int n : c_.attentionHeads)
        if (n <= 0) throw std::invalid_argument("attention_head_dim: " + std::to_string(n) + " heads");
    for (int n : c_.transformerLayers)
        if (n <= 0) throw std::invalid_argument("transformer_layers_per_block: " + std::to_string(n) + " layers");
    if (c_.layersPerBlock < 1) throw std::invalid_argument("layers_per_block: must be at least 1");
    if (c_.downsamplePadding != 0 && c_.downsamplePadding != 1)
        throw std::invalid_argument("downsample_padding: " + std::to_string(c_.downsamplePadding) + " is not 0 or 1");
    if (c_.inChannels <= 0 || c_.outChannels <= 0 || c_.crossAttentionDim <= 0)
        throw std::invalid_argument("in_channels/out_channels/cross_attention_dim: must be positive");
    if (c_.convInKernel % 2 == 0 || c_.convOutKernel % 2 == 0)
        throw std::invalid_argument("conv_in_kernel/conv_out_kernel: must be odd");
    if (c_.midBlockScaleFactor == 0.0f) throw std::invalid_argument("mid_block_scale_factor: must not be 0");
    if (c_.timeEmbedDim() <= 0) throw std::invalid_argument("time_embedding_dim: must be positive");
    if (!c_.additionEmbedType.empty() && !c_.hasTextTime())
        throw std::invalid_argument("addition_embed_type: \"" + c_.additionEmbedType +
                                    "\" is not supported (null or \"text_time\")");
    if (c_.hasTextTime() && (c_.textTimeDim() <= 0 || c_.additionTimeEmbedDim <= 0))
        throw std::invalid_argument(
            "projection_class_embeddings_input_dim/addition_time_embed_dim: \"text_time\" "
            "needs both to be positive");
    if (contextTokens_ < 1 || contextTokens_ > unet_cond_bounds::kMaxContextTokens)
        throw std::invalid_argument("encoder_hidden_states: " + std::to_string(contextTokens_) + " tokens; 1 to " +
                                    std::to_string(unet_cond_bounds::kMaxContextTokens) + " are allowed");
}

int UNetCondEncoderBuilder::stem() {
    const UNetCondConfig& c = c_;
    const std::vector<int>& C = c.blockOutChannels;
    // Spelled out as in UNet2DBuilder::build: the order of inputs and parameters is the graph's identity.
    int h = g_.addInput("sample", ValueKind::FeatureMap, c.inChannels, 1);
    const int timestep = g_.addInput("timestep", ValueKind::Vector, 1, 0);
    context_ = g_.addTokenInput("encoder_hidden_states", contextTokens_, c.crossAttentionDim);
    // conv_in is the state dict's first module but runs after the time embedding.
    std::vector<int> convIn = declareConv("conv_in", c.inChannels, C[0], c.convInKernel);
    if (c.centerInputSample) h = affine(h, 2.0f, -1.0f, "sample.centered");
    if (c.hasTextTime()) {
        // UNet2DConditionModel.get_aug_embed: emb = time MLP + add_embedding(text_embeds_time),
        // then act(emb).
        const int textTime = g_.addInput("text_embeds_time", ValueKind::Vector, c.textTimeDim(), 0);
        const int emb = timeEmbeddingMlp(timestep, C[0], c.freqShift, c.flipSinToCos, c.timeEmbedDim());
        int aug = silu(linear("add_embedding.linear_1", textTime, c.timeEmbedDim()), "add_embedding.linear_1.silu");
        aug = linear("add_embedding.linear_2", aug, c.timeEmbedDim());
        embAct_ = silu(simple(OpKind::Add, emb, aug, "time_embedding.add", "time_embedding.sum"), "time_embedding.act");
    } else {
        embAct_ = timeEmbedding(timestep, C[0], c.freqShift, c.flipSinToCos, c.timeEmbedDim());
    }
    const int kIn = c.convInKernel;
    return conv("conv_in", h, C[0], kIn, 1, kIn / 2, kIn / 2, std::move(convIn));
}

// CrossAttnDownBlock2D / DownBlock2D (unet_2d_blocks.py), level by level.
int UNetCondEncoderBuilder::downBlocks(int h, std::vector<int>& skips) {
    const UNetCondConfig& c = c_;
    const std::vector<int>& C = c.blockOutChannels;
    const int L = c.levels(), n = c.layersPerBlock;
    for (int i = 0; i < L; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const std::string p = indexed("down_blocks.", "", i);
        for (int j = 0; j < n; ++j) {
            h = resnet(indexed(p, ".resnets.", j), h, C[at]);
            if (c.downBlocks[at] == CondDownBlock::CrossAttnDown)
                h = transformer(indexed(p, ".attentions.", j), h, c.attentionHeads[at], c.transformerLayers[at]);
            skips.push_back(h);
        }
        if (i < L - 1) {  // padding 0 pads one row/column at the bottom/right only
            const int pad = c.downsamplePadding;
            h = conv(p + ".downsamplers.0.conv", h, channels(h), 3, 2, pad, pad == 0 ? 1 : pad, {},
                     p + ".downsamplers.0");
            skips.push_back(h);
        }
    }
    return h;
}

int UNetCondEncoderBuilder::midBlock(int h, bool attention) {
    const UNetCondConfig& c = c_;
    h = resnet("mid_block.resnets.0", h, c.blockOutChannels.back(), c.midBlockScaleFactor);
    if (!attention) return h;
    h = transformer("mid_block.attentions.0", h, c.attentionHeads.back(), c.transformerLayers.back());
    return resnet("mid_block.resnets.1", h, c.blockOutChannels.back(), c.midBlockScaleFactor);
}

namespace {

// UNet2DConditionModel.forward with the blocks of unet_2d_blocks.py (CrossAttnDownBlock2D,
// DownBlock2D, UNetMidBlock2DCrossAttn, CrossAttnUpBlock2D, UpBlock2D).
ModelGraph UNetCondBuilder::build() {
    checkConfig(true);
    const UNetCondConfig& c = c_;
    const std::vector<int>& C = c.blockOutChannels;
    const int L = c.levels(), n = c.layersPerBlock;

    int h = stem();
    std::vector<int> skips{h};
    h = downBlocks(h, skips);
    if (c.hasMidBlock) h = midBlock(h, true);

    for (int i = 0; i < L; ++i) {  // concat [h, skip], the last skip first
        const std::string p = indexed("up_blocks.", "", i);
        const auto level = static_cast<std::size_t>(L - 1 - i);
        for (int j = 0; j <= n; ++j) {
            const int skip = skips.back();
            skips.pop_back();
            h = simple(OpKind::Concat, h, skip, indexed(p, ".cat", j));
            h = resnet(indexed(p, ".resnets.", j), h, C[level]);
            if (c.upBlocks[static_cast<std::size_t>(i)] == CondUpBlock::CrossAttnUp)
                h = transformer(indexed(p, ".attentions.", j), h, c.attentionHeads[level], c.transformerLayers[level]);
        }
        if (i < L - 1) {
            h = simple(OpKind::Upsample, h, -1, p + ".upsample");
            h = sameConv(p + ".upsamplers.0.conv", h, C[level], 3, p + ".upsamplers.0");
        }
    }
    if (!skips.empty()) throw std::logic_error("UNet2DCondition graph: skip stack not empty after the up blocks");

    h = silu(groupNorm("conv_norm_out", h, c.normNumGroups, c.normEps, "norm_num_groups"), "conv_norm_out.silu");
    g_.markOutput(sameConv("conv_out", h, c.outChannels, c.convOutKernel));
    return std::move(g_);
}

}  // namespace

ModelGraph buildUNet2DConditionGraph(const UNetCondConfig& config, int contextTokens) {
    return UNetCondBuilder(config, contextTokens).build();
}

ModelGraph unet2DConditionExecutionGraph(const UNetCondConfig& config, int contextTokens) {
    return fuseForExecution(buildUNet2DConditionGraph(config, contextTokens));
}

}  // namespace tessera
