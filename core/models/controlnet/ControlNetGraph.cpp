// ControlNetModel.forward (diffusers models/controlnets/controlnet.py) in graph ops; the original
// is ControlNet-v1-1's cldm/cldm.py ControlNet.forward (guided_hint added after input_blocks[0],
// zero_convs[i] after every input block, middle_block_out last), which computes the same.
#include "core/models/controlnet/ControlNetGraph.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph/GraphBuilder.h"
#include "core/models/sd/UNetCondGraph.h"

namespace tessera {

namespace {

constexpr const char* kHintInput = "controlnet_cond";
constexpr const char* kHintEmbedding = "controlnet_cond_embedding";
constexpr const char* kScaleInput = "conditioning_scale.";

void checkHintConfig(const ControlNetConfig& c) {
    const std::vector<int>& widths = c.conditioningEmbeddingOutChannels;
    if (widths.empty() || static_cast<int>(widths.size()) > controlnet_bounds::kMaxEmbeddingLevels)
        throw std::invalid_argument("conditioning_embedding_out_channels: " + std::to_string(widths.size()) +
                                    " entries; 1 to " + std::to_string(controlnet_bounds::kMaxEmbeddingLevels) +
                                    " are supported");
    for (const int w : widths)
        if (w <= 0) throw std::invalid_argument("conditioning_embedding_out_channels: " + std::to_string(w));
    if (c.conditioningChannels <= 0)
        throw std::invalid_argument("conditioning_channels: " + std::to_string(c.conditioningChannels));
    if (c.unet.blockOutChannels.empty()) throw std::invalid_argument("block_out_channels: must not be empty");
}

// ControlNetConditioningEmbedding: 3x3 convolutions, padding 1, every one but conv_out followed
// by SiLU; block 2i keeps the width and the resolution, block 2i + 1 widens and halves.
class HintBuilder : private GraphBuilder {
public:
    explicit HintBuilder(const ControlNetConfig& c) : c_(c) {}
    ModelGraph build() {
        checkHintConfig(c_);
        const std::vector<int>& widths = c_.conditioningEmbeddingOutChannels;
        const std::string p = kHintEmbedding;
        int h = g_.addInput(kHintInput, ValueKind::FeatureMap, c_.conditioningChannels, 1);
        h = silu(sameConv(p + ".conv_in", h, widths.front(), 3), p + ".conv_in.silu");
        for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
            const int block = 2 * static_cast<int>(i);
            const std::string same = indexed(p, ".blocks.", block), down = indexed(p, ".blocks.", block + 1);
            h = silu(sameConv(same, h, widths[i], 3), same + ".silu");
            h = silu(conv(down, h, widths[i + 1], 3, 2, 1, 1), down + ".silu");
        }
        g_.markOutput(sameConv(p + ".conv_out", h, c_.unet.blockOutChannels.front(), 3, kHintEmbedding));
        return std::move(g_);
    }

private:
    const ControlNetConfig& c_;
};

// The trunk: the UNet's encoder half from its own builder, the hint embedding added to conv_in's
// output (the first skip), a 1x1 zero convolution on every skip and on the mid block's output,
// each scaled.
class TrunkBuilder : private UNetCondEncoderBuilder {
public:
    TrunkBuilder(const ControlNetConfig& c, const ControlNetGraphOptions& o)
        : UNetCondEncoderBuilder(c.unet, o.contextTokens), cn_(c), o_(o) {}
    ModelGraph build();

private:
    // zero_conv(x) * residualScales[k] * the row's scale, named as diffusers' outputs.
    void zeroConvResidual(int k, int x, const std::string& convName, const std::string& name);

    const ControlNetConfig& cn_;
    const ControlNetGraphOptions& o_;
    std::vector<int> scaleInputs_;  // by residual width, in the order of first use
};

void TrunkBuilder::zeroConvResidual(int k, int x, const std::string& convName, const std::string& name) {
    int r = conv(convName, x, channels(x), 1, 1, 0, 0);
    const auto at = static_cast<std::size_t>(k);
    if (!o_.residualScales.empty() && o_.residualScales[at] != 1.0f)
        r = affine(r, o_.residualScales[at], 0.0f, convName + ".weighted");
    const auto scale =
        std::find_if(scaleInputs_.begin(), scaleInputs_.end(), [&](int v) { return 2 * channels(x) == channels(v); });
    g_.markOutput(simple(OpKind::ScaleShift, r, *scale, convName + ".scaled", name));
}

ModelGraph TrunkBuilder::build() {
    checkConfig(false);
    checkHintConfig(cn_);
    const int N = cn_.downResiduals();
    if (!o_.residualScales.empty() && static_cast<int>(o_.residualScales.size()) != N + 1)
        throw std::invalid_argument("residual scales: " + std::to_string(o_.residualScales.size()) +
                                    " given, the ControlNet has " + std::to_string(N) +
                                    " down residuals and a mid residual");
    int h = stem();
    const int hint = g_.addInput(kHintEmbedding, ValueKind::FeatureMap, c_.blockOutChannels.front(), 1);
    std::vector<int> widths;
    for (int k = 0; k <= N; ++k)
        if (std::find(widths.begin(), widths.end(), cn_.residualChannels(k)) == widths.end())
            widths.push_back(cn_.residualChannels(k));
    for (const int C : widths)
        scaleInputs_.push_back(g_.addInput(kScaleInput + std::to_string(C), ValueKind::Vector, 2 * C, 0));

    // sample = conv_in(sample) + controlnet_cond_embedding(controlnet_cond)
    h = simple(OpKind::Add, h, hint, "conv_in.add_hint", "conv_in.hinted");
    std::vector<int> skips{h};
    h = downBlocks(h, skips);
    h = midBlock(h, cn_.midBlock == ControlNetMidBlock::CrossAttn);
    if (static_cast<int>(skips.size()) != N)
        throw std::logic_error("ControlNet graph: " + std::to_string(skips.size()) + " skips, expected " +
                               std::to_string(N));
    for (int k = 0; k < N; ++k)
        zeroConvResidual(k, skips[static_cast<std::size_t>(k)], indexed("controlnet_down_blocks.", "", k),
                         indexed("down_block_res_samples.", "", k));
    zeroConvResidual(N, h, "controlnet_mid_block", "mid_block_res_sample");
    return std::move(g_);
}

}  // namespace

ModelGraph buildControlNetHintGraph(const ControlNetConfig& config) { return HintBuilder(config).build(); }

ModelGraph controlNetHintExecutionGraph(const ControlNetConfig& config) {
    return fuseForExecution(buildControlNetHintGraph(config));
}

ModelGraph buildControlNetGraph(const ControlNetConfig& config, const ControlNetGraphOptions& options) {
    return TrunkBuilder(config, options).build();
}

ModelGraph controlNetExecutionGraph(const ControlNetConfig& config, const ControlNetGraphOptions& options) {
    return fuseForExecution(buildControlNetGraph(config, options));
}

std::vector<std::vector<float>> conditioningScaleInputs(const ModelGraph& trunk, const std::vector<float>& rowScales) {
    std::vector<std::vector<float>> inputs;
    for (const int v : trunk.inputs()) {
        const GraphValue& value = trunk.value(v);
        if (!value.name.starts_with(kScaleInput)) continue;
        const auto C = static_cast<std::size_t>(value.channels / 2);
        std::vector<float> film(rowScales.size() * 2 * C, 0.0f);
        for (std::size_t b = 0; b < rowScales.size(); ++b)
            std::fill_n(film.begin() + static_cast<std::ptrdiff_t>(b * 2 * C), C, rowScales[b] - 1.0f);
        inputs.push_back(std::move(film));
    }
    if (inputs.empty())
        throw std::invalid_argument("conditioningScaleInputs: the graph has no conditioning_scale inputs");
    return inputs;
}

std::vector<float> meanOverPixels(const std::vector<float>& residual, int batch, int channels) {
    const auto planes = static_cast<std::size_t>(batch) * static_cast<std::size_t>(channels);
    if (planes == 0 || residual.size() % planes != 0)
        throw std::invalid_argument("meanOverPixels: " + std::to_string(residual.size()) + " values are not " +
                                    std::to_string(planes) + " planes");
    const std::size_t pixels = residual.size() / planes;
    std::vector<float> mean(planes);
    for (std::size_t p = 0; p < planes; ++p) {
        double sum = 0;
        for (std::size_t i = 0; i < pixels; ++i) sum += residual[p * pixels + i];
        mean[p] = static_cast<float>(sum / static_cast<double>(pixels));
    }
    return mean;
}

}  // namespace tessera
