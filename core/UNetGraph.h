// UNetGraph: the UNet2DModel forward (shared/spec/unet2d.md §2) written out as an ordered
// list of operations over numbered values. Every backend walks the same list, so the network
// structure (block order, skip stack, concat order, which norms exist, head counts, paddings)
// is decided once, here. Qt-free.
//
// Values are activations [batch, channels, H/divisor, W/divisor] (NCHW, H x W = the tile) or
// per-sample vectors [batch, channels] (divisor 0: timesteps, time embeddings). Fusions that
// both backends can do cheaply are part of the op description (cuDNN's conv-bias-add form,
// GroupNorm with a per-(sample, channel) pre-add or FiLM and SiLU), so the list stays short.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ModelConfig.h"

namespace tessera {

enum class OpKind {
    Affine,             // y = x * affineScale + affineShift (center_input_sample)
    TimestepEmbedding,  // y[b] = sinusoid(t[b]) of width outChannels (§2.2)
    Linear,             // y = x W^T + b (prefix.weight [out,in], prefix.bias), then SiLU when silu
    Conv,               // kernel x kernel, stride 1, symmetric padding; y = (conv + bias + residual) * outputScale
    Downsample,         // 3x3 stride 2; padding 0 = one zero row/column added at bottom/right (§2.7)
    GroupNorm,          // y = silu?(GN(x + addVector) * (1 + scale) + shift), see fields
    Attention,          // spatial self-attention with optional GroupNorm and residual (§2.6)
    Concat,             // y = [input, input2] along channels: h first, skip second (§2.9)
    Upsample,           // nearest x2
};

const char* toString(OpKind);

struct GraphValue {
    std::string name;  // e.g. "down_blocks.1.attentions.0", "time_embedding.act"
    int channels = 0;
    int divisor = 1;   // spatial size = tile / divisor; 0 for a per-sample vector [batch, channels]
    bool isVector() const { return divisor == 0; }
};

struct GraphOp {
    OpKind kind = OpKind::Conv;
    std::string prefix;     // weights are prefix + ".weight" / ".bias"; Attention: prefix + ".to_q.weight" ...
    int input = -1;         // value ids
    int input2 = -1;        // Concat: the skip tensor (second)
    int residual = -1;      // Conv: added after the bias (the resnet's skip branch)
    int addVector = -1;     // GroupNorm: [batch, channels] added to every pixel before the statistics
    int scaleShift = -1;    // GroupNorm: [batch, 2*channels], y = y * (1 + first half) + second half
    int output = -1;
    int inChannels = 0;     // Linear: in features; TimestepEmbedding: 1
    int outChannels = 0;
    int divisor = 1;        // spatial divisor of the output (0 for vectors)
    int kernel = 3;         // Conv/Downsample
    int stride = 1;
    int padding = 1;        // Conv: symmetric; Downsample: downsample_padding (0 = right/bottom only)
    int groups = 0;         // GroupNorm / Attention norm; Attention: 0 = no GroupNorm
    float eps = 1e-5f;
    bool silu = false;      // GroupNorm / Linear: SiLU on the output
    int heads = 1;          // Attention
    float outputScale = 1.0f;  // Conv: 1/output_scale_factor; Attention: 1/rescale_output_factor
    float affineScale = 1.0f, affineShift = 0.0f;  // Affine
    int freqShift = 0;      // TimestepEmbedding
    bool flipSinToCos = false;

    bool hasBias() const { return kind == OpKind::Conv || kind == OpKind::Downsample || kind == OpKind::Linear; }
};

class UNetGraph {
public:
    // Throws std::invalid_argument naming the config key that cannot be built
    // ("norm_num_groups: 32 does not divide 48 channels of down_blocks.0.resnets.0.norm1").
    static UNetGraph build(const ModelConfig&);

    const ModelConfig& config() const { return config_; }
    const std::vector<GraphOp>& ops() const { return ops_; }
    const std::vector<GraphValue>& values() const { return values_; }
    int sampleInput() const { return sample_; }     // [batch, in_channels, H, W]
    int timestepInput() const { return timestep_; } // vector [batch, 1]
    int output() const { return output_; }          // [batch, out_channels, H, W]

    // Throws std::invalid_argument when the tile cannot be evaluated ("tile height 36 is not a
    // multiple of 8, the model's downsampling factor").
    void checkTileSize(int h, int w) const;
    // Activation shape inference: {batch, C, h/d, w/d} or {batch, C} for vectors.
    std::vector<std::int64_t> shape(int value, int batch, int h, int w) const;
    std::int64_t elements(int value, int batch, int h, int w) const;

    // Floating-point operations of one op for a single tile of h x w: multiply-adds x 2 of
    // convolutions, linear layers and the attention products (QKV/out projections, Q K^T,
    // A V). Normalisation and elementwise ops count 0 (they are memory-bound).
    double flops(const GraphOp&, int h, int w) const;
    double flops(int h, int w) const;  // sum over all ops

    // For each value, the index of the last op that reads it (-1 if none; ops().size() for
    // the output, which lives to the end). Buffers can be reused after that op.
    std::vector<int> lastUse() const;
    // Every weight tensor the graph reads, (name, PyTorch shape), in op order.
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> weights() const;

private:
    int addValue(std::string name, int channels, int divisor);
    int add(GraphOp op, std::string valueName);  // appends op, creates its output value, returns it

    int groupNorm(const std::string& prefix, int x, int channels, int divisor, bool silu, int addVector,
                  int scaleShift);
    int conv(const std::string& prefix, int x, int cin, int cout, int divisor, int kernel, int residual,
             float outputScale, const std::string& outName);
    int resnet(const std::string& prefix, int x, int cin, int cout, int divisor, float outputScaleFactor);
    int attention(const std::string& prefix, int x, int channels, int divisor, int groups, float rescale);

    ModelConfig config_;
    std::vector<GraphOp> ops_;
    std::vector<GraphValue> values_;
    int sample_ = -1, timestep_ = -1, output_ = -1, embAct_ = -1;
};

}  // namespace tessera
