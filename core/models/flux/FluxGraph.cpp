#include "core/models/flux/FluxGraph.h"

#include <stdexcept>
#include <string>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

class FluxBuilder : private GraphBuilder {
public:
    FluxBuilder(const FluxConfig& c, int textTokens) : c_(c), textTokens_(textTokens) {}

    ModelGraph build() {
        const int D = c_.hidden();
        const int sample = g_.addInput("sample", ValueKind::FeatureMap, c_.latentChannels(), 1);
        const int timestep = g_.addInput("timestep", ValueKind::Vector, 1);
        const int text = g_.addTokenInput("encoder_hidden_states", textTokens_, c_.jointAttentionDim);
        const int pooledGuidance =
            g_.addInput("text_embeds_time", ValueKind::Vector, c_.pooledProjectionDim + (c_.guidanceEmbeds ? 1 : 0));

        // BFL Flux.forward: img_in over the packed latents, the conditioning vector, txt_in.
        GraphOp unshuffle = newOp(OpKind::PixelUnshuffle, "pack", sample);
        unshuffle.factor = 2;
        const int packed = simple(OpKind::ToTokens, g_.addOp(std::move(unshuffle)), -1, "pack.tokens");
        int img = linear("img_in", packed, D);
        const int temb = conditioning(timestep, pooledGuidance);
        int txt = linear("txt_in", text, D);
        // Every modulation reads SiLU(vec) (BFL Modulation, LastLayer; diffusers AdaLayerNormZero).
        mod_ = silu(temb, "vec.silu");

        for (int i = 0; i < c_.layers; ++i) doubleBlock("double_blocks." + std::to_string(i) + ".", img, txt);
        int h = g_.addOp(newOp(OpKind::TokenConcat, "single_blocks.concat", txt, img));
        for (int i = 0; i < c_.singleLayers; ++i) h = singleBlock("single_blocks." + std::to_string(i) + ".", h);
        GraphOp split = newOp(OpKind::TokenSplit, "single_blocks.image", h);
        split.tail = true;
        img = g_.addOp(std::move(split));

        // BFL LastLayer: adaLN_modulation gives (shift, scale); diffusers' norm_out holds the halves swapped.
        const int finalMod = linear("final_layer.adaLN_modulation.1", mod_, 2 * D);
        img = adaNorm("final_layer.norm_final", img, finalMod, 0, D);
        img = linear("final_layer.linear", img, c_.outChannels);
        GraphOp shuffle = newOp(OpKind::PixelShuffle, "unpack", simple(OpKind::ToFeatureMap, img, -1, "unpack.map"));
        shuffle.factor = 2;
        g_.markOutput(g_.addOp(std::move(shuffle), "sample"));
        return std::move(g_);
    }

private:
    // BFL MLPEmbedder: in_layer, SiLU, out_layer.
    int mlpEmbedder(const std::string& prefix, int x) {
        const int D = c_.hidden();
        return linear(prefix + ".out_layer", silu(linear(prefix + ".in_layer", x, D), prefix + ".silu"), D);
    }

    int sinusoid(const std::string& name, int x) {
        GraphOp op = newOp(OpKind::TimestepEmbedding, name, x);
        op.channels = FluxConfig::kTimeChannels;
        op.flipSinToCos = true;  // BFL timestep_embedding: cat([cos, sin])
        op.freqShift = 0;
        return g_.addOp(std::move(op));
    }

    // vec = time_in(t) (+ guidance_in(1000 g)) + vector_in(pooled): diffusers
    // CombinedTimestepGuidanceTextProjEmbeddings' order of sums.
    int conditioning(int timestep, int pooledGuidance) {
        int vec = mlpEmbedder("time_in", sinusoid("time_in.sinusoid", timestep));
        int pooled = pooledGuidance;
        if (c_.guidanceEmbeds) {
            GraphOp g = newOp(OpKind::ChannelSlice, "guidance_in.scale", pooledGuidance);
            g.offset = c_.pooledProjectionDim;
            g.channels = 1;
            const int scale = affine(g_.addOp(std::move(g)), 1000.0f, 0.0f, "guidance_in.times_1000");
            vec = simple(OpKind::Add, vec, mlpEmbedder("guidance_in", sinusoid("guidance_in.sinusoid", scale)),
                         "time_guidance");
            GraphOp p = newOp(OpKind::ChannelSlice, "vector_in.pooled", pooledGuidance);
            p.channels = c_.pooledProjectionDim;
            pooled = g_.addOp(std::move(p));
        }
        return simple(OpKind::Add, vec, mlpEmbedder("vector_in", pooled), "vec");
    }

    int adaNorm(const std::string& name, int x, int mod, int shiftAt, int scaleAt) {
        GraphOp op = newOp(OpKind::AdaLayerNorm, name, x, mod);
        op.eps = FluxConfig::kNormEps;
        op.shiftAt = shiftAt;
        op.scaleAt = scaleAt;
        return g_.addOp(std::move(op));
    }

    int gatedAdd(const std::string& name, int x, int y, int mod, int gateAt) {
        GraphOp op = newOp(OpKind::GatedAdd, name, x, y);
        op.gate = mod;
        op.gateAt = gateAt;
        return g_.addOp(std::move(op));
    }

    int qkNormRope(const std::string& prefix, int qkv) {
        GraphOp op = newOp(OpKind::QkNormRope, prefix, qkv);
        op.heads = c_.heads;
        op.eps = FluxConfig::kNormEps;
        for (int a = 0; a < 3; ++a) op.ropeAxes[a] = c_.axesDimsRope[static_cast<std::size_t>(a)];
        op.ropeTheta = FluxConfig::kRopeTheta;
        op.params = declare(prefix, {{c_.headDim}, {c_.headDim}}, {".query_norm.scale", ".key_norm.scale"});
        return g_.addOp(std::move(op));
    }

    int attention(const std::string& name, int qkv) {
        GraphOp op = newOp(OpKind::PackedAttention, name, qkv);
        op.heads = c_.heads;
        return g_.addOp(std::move(op));
    }

    int geluTanh(int x, const std::string& name) {
        GraphOp op = newOp(OpKind::GELU, name, x);
        op.geluTanh = true;
        return g_.addOp(std::move(op));
    }

    // One stream's half of a double block after the joint attention (BFL DoubleStreamBlock.forward):
    // x + gate1 proj(a), then x + gate2 mlp(norm2(x)).
    int streamTail(const std::string& p, const char* stream, int x, int a, int mod) {
        const int D = c_.hidden();
        const std::string s = p + stream;
        x = gatedAdd(s + "_attn.residual", x, linear(s + "_attn.proj", a, D), mod, 2 * D);
        const int n = adaNorm(s + "_norm2", x, mod, 3 * D, 4 * D);
        const int m = linear(s + "_mlp.2", geluTanh(linear(s + "_mlp.0", n, c_.mlpHidden()), s + "_mlp.1"), D);
        return gatedAdd(s + "_mlp.residual", x, m, mod, 5 * D);
    }

    void doubleBlock(const std::string& p, int& img, int& txt) {
        const int D = c_.hidden();
        const int imgMod = linear(p + "img_mod.lin", mod_, 6 * D);
        const int txtMod = linear(p + "txt_mod.lin", mod_, 6 * D);
        const int imgQkv = qkNormRope(p + "img_attn.norm",
                                      linear(p + "img_attn.qkv", adaNorm(p + "img_norm1", img, imgMod, 0, D), 3 * D));
        const int txtQkv = qkNormRope(p + "txt_attn.norm",
                                      linear(p + "txt_attn.qkv", adaNorm(p + "txt_norm1", txt, txtMod, 0, D), 3 * D));
        // Text first, as BFL's torch.cat((txt_q, img_q), dim=2).
        const int a = attention(p + "attn", g_.addOp(newOp(OpKind::TokenConcat, p + "attn.qkv", txtQkv, imgQkv)));
        GraphOp txtPart = newOp(OpKind::TokenSplit, p + "attn.txt", a);
        GraphOp imgPart = newOp(OpKind::TokenSplit, p + "attn.img", a);
        imgPart.tail = true;
        const int txtA = g_.addOp(std::move(txtPart)), imgA = g_.addOp(std::move(imgPart));
        img = streamTail(p, "img", img, imgA, imgMod);
        txt = streamTail(p, "txt", txt, txtA, txtMod);
    }

    // BFL SingleStreamBlock.forward: linear1 gives q | k | v | mlp; linear2 reads [attention, gelu(mlp)].
    int singleBlock(const std::string& p, int h) {
        const int D = c_.hidden(), M = c_.mlpHidden();
        const int mod = linear(p + "modulation.lin", mod_, 3 * D);
        const int l1 = linear(p + "linear1", adaNorm(p + "pre_norm", h, mod, 0, D), 3 * D + M);
        GraphOp qkvPart = newOp(OpKind::ChannelSlice, p + "qkv", l1);
        qkvPart.channels = 3 * D;
        GraphOp mlpPart = newOp(OpKind::ChannelSlice, p + "mlp", l1);
        mlpPart.offset = 3 * D;
        mlpPart.channels = M;
        const int qkv = qkNormRope(p + "norm", g_.addOp(std::move(qkvPart)));
        const int mlp = geluTanh(g_.addOp(std::move(mlpPart)), p + "mlp_act");
        const int cat = simple(OpKind::Concat, attention(p + "attn", qkv), mlp, p + "attn_mlp");
        return gatedAdd(p + "residual", h, linear(p + "linear2", cat, D), mod, 2 * D);
    }

    const FluxConfig& c_;
    int textTokens_ = 0;
    int mod_ = -1;
};

}  // namespace

ModelGraph buildFluxGraph(const FluxConfig& config, int textTokens) {
    if (textTokens < 1 || textTokens > 4096)
        throw std::invalid_argument("text tokens: " + std::to_string(textTokens) +
                                    " is outside 1..4096 (FLUX.1 takes 512 for dev, 256 for schnell)");
    return FluxBuilder(config, textTokens).build();
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> fluxParameters(const FluxConfig& config) {
    return buildFluxGraph(config, 1).parameterList();
}

}  // namespace tessera
