#include "core/models/upscale/UpscaleModel.h"

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"
#include "core/models/upscale/CompactGraph.h"
#include "core/models/upscale/EsrganGraph.h"
#include "core/models/upscale/SpanGraph.h"

namespace tessera {

namespace {

using KeySet = std::vector<const char*>;

// A family spandrel detects (architectures/<family>/__init__.py detect=KeyCondition...): some of
// its keys, all present in any file of it, in spandrel's registry order. The ones Tessera runs
// are detected by their own functions at their place in that order.
struct KnownFamily {
    const char* name;
    std::vector<KeySet> keySets;  // any one set, all of its keys
    bool (*runs)(const StateDict&) = nullptr;
};

const std::vector<KnownFamily>& knownFamilies() {
    static const std::vector<KnownFamily> families{
        {"Compact", {}, hasCompactKeys},
        {"SwiftSRGAN", {{"initial.cnn.depthwise.weight", "final_conv.pointwise.weight"}}},
        {"HAT",
         {{"relative_position_index_SA", "conv_first.weight",
           "layers.0.residual_group.blocks.0.conv_block.cab.0.weight",
           "layers.0.residual_group.overlap_attn.qkv.weight"}}},
        {"GRL",
         {{"conv_first.weight", "norm_start.weight", "norm_end.weight",
           "layers.0.blocks.0.attn.window_attn.attn_transform.logit_scale"},
          {"model.conv_first.weight", "model.norm_start.weight", "model.norm_end.weight"},
          {"model_g.conv_first.weight", "model_g.norm_start.weight", "model_g.norm_end.weight"}}},
        {"Swin2SR",
         {{"layers.0.residual_group.blocks.0.norm1.weight", "patch_embed.proj.weight", "conv_first.weight",
           "layers.0.residual_group.blocks.0.mlp.fc1.bias",
           "layers.0.residual_group.blocks.0.attn.relative_position_index"}}},
        {"SwinIR",
         {{"layers.0.residual_group.blocks.0.norm1.weight", "conv_first.weight",
           "layers.0.residual_group.blocks.0.mlp.fc1.bias",
           "layers.0.residual_group.blocks.0.attn.relative_position_index"},
          {"layers.0.residual_group.blocks.0.norm1.weight", "conv_first.1.weight",
           "layers.0.residual_group.blocks.0.mlp.fc1.bias",
           "layers.0.residual_group.blocks.0.attn.relative_position_index"}}},
        {"GFPGAN", {{"toRGB.0.weight", "stylegan_decoder.style_mlp.1.weight"}}},
        {"RestoreFormer", {{"quantize.embedding.weight", "encoder.conv_in.weight", "quant_conv.weight"}}},
        {"LaMa", {{"model.model.1.bn_l.running_mean"}, {"generator.model.1.bn_l.running_mean"}}},
        {"OmniSR", {{"residual_layer.0.residual_layer.0.layer.0.fn.0.weight", "input.weight", "up.0.weight"}}},
        {"SCUNet", {{"m_head.0.weight", "m_tail.0.weight"}}},
        {"FBCNN", {{"m_head.weight", "qf_pred.0.res.0.weight"}}},
        {"Uformer",
         {{"input_proj.proj.0.weight", "output_proj.proj.0.weight", "encoderlayer_0.blocks.0.norm1.weight"}}},
        {"RGT", {{"conv_first.weight", "before_RG.1.weight", "layers.0.blocks.0.gamma"}}},
        {"DAT",
         {{"conv_first.weight", "before_RG.1.weight", "layers.0.blocks.0.attn.attns.0.rpe_biases",
           "layers.0.blocks.0.ffn.sg.conv.weight"}}},
        {"CRAFT", {{"conv_first.weight", "layers.0.residual_group.hf_blocks.0.attn.temperature"}}},
        {"KBNet",
         {{"intro.weight", "encoders.0.0.attgamma", "middle_blks.0.w"},
          {"patch_embed.proj.weight", "encoder_level3.0.ffn.project_out.weight", "latent.0.ffn.qkv.weight"}}},
        {"DITN", {{"sft.weight", "UFONE.0.ITLs.0.attn.temperature"}}},
        {"MMRealSR",
         {{"conv_first.weight", "body.0.rdb1.conv1.weight", "am_list.0.fc.0.weight", "de_net.conv_first.0.weight"}}},
        {"SPAN", {}, hasSpanKeys},
        {"RealCUGAN", {{"unet1.conv1.conv.0.weight", "unet2.conv1.conv.0.weight"}}},
        {"SAFMN", {{"to_feat.weight", "feats.0.safm.mfr.0.weight"}}},
        {"SAFMNBCIE", {{"to_feat.1.weight", "feats.0.layers.0.safm.mfr.0.weight"}}},
        {"DCTLSA", {{"fea_conv.weight", "B1.body.0.transformer_body.0.blocks.0.attn.qkv.weight"}}},
        {"ATD", {{"relative_position_index_SA", "conv_first.weight", "layers.0.residual_group.td"}}},
        {"DRCT", {{"conv_first.weight", "layers.0.swin1.attn.relative_position_index", "layers.0.adjust1.weight"}}},
        {"ESRGAN", {}, hasEsrganKeys},
        {"PLKSR", {{"feats.0.weight", "feats.1.refine.weight"}}},
    };
    return families;
}

bool hasAll(const StateDict& dict, const KeySet& keys) {
    for (const char* k : keys)
        if (!dict.has(k)) return false;
    return true;
}

}  // namespace

std::string detectUpscaleFamily(const StateDict& dict) {
    for (const KnownFamily& f : knownFamilies()) {
        if (f.runs) {
            if (f.runs(dict)) return f.name;
            continue;
        }
        for (const KeySet& keys : f.keySets)
            if (hasAll(dict, keys)) return f.name;
    }
    return "";
}

ModelGraph buildUpscaleGraph(const UpscaleConfig& c) {
    switch (c.architecture) {
        case UpscaleArchitecture::Esrgan:
            return buildEsrganGraph(c);
        case UpscaleArchitecture::Compact:
            return buildCompactGraph(c);
        case UpscaleArchitecture::Span:
            return buildSpanGraph(c);
    }
    throw std::logic_error("buildUpscaleGraph: not an architecture");
}

UpscaleModel::UpscaleModel(UpscaleConfig config, TensorMap tensors, std::string source)
    : config_(config),
      tensors_(std::move(tensors)),
      source_(std::move(source)),
      graph_(buildUpscaleGraph(config_)),
      execution_(fuseForExecution(graph_)) {
    for (const GraphParam& p : graph_.params()) {
        const auto it = tensors_.find(p.name);
        if (it == tensors_.end()) throw ModelError(source_ + ": no tensor '" + p.name + "' for " + config_.describe());
        if (it->second.shape != p.shape)
            throw ModelError(source_ + ": " + p.name + ": expected " + shapeToString(p.shape) + ", found " +
                             shapeToString(it->second.shape));
    }
}

UpscaleModel UpscaleModel::load(const StateDict& dict) {
    if (dict.entries().empty()) throw ModelError(dict.source() + ": holds no tensor");
    const std::string family = detectUpscaleFamily(dict);
    UpscaleConfig config;
    if (family == "ESRGAN") {
        config = inferEsrganConfig(dict);
    } else if (family == "Compact") {
        config = inferCompactConfig(dict);
    } else if (family == "SPAN") {
        config = inferSpanConfig(dict);
    } else if (!family.empty()) {
        throw ModelError(dict.source() + ": a " + family +
                         " model (detected from its keys as spandrel does); Tessera runs ESRGAN, Real-ESRGAN "
                         "Compact and SPAN upscale models");
    } else {
        std::vector<std::string> keys;
        for (const StateDict::Entry& e : dict.entries()) keys.push_back(dict.prefix() + e.name);
        throw ModelError(dict.source() + ": no upscale architecture has these keys (" + std::to_string(keys.size()) +
                         "): " + listNames(keys, 8) + "; Tessera runs ESRGAN, Real-ESRGAN Compact and SPAN models");
    }
    const ModelGraph graph = buildUpscaleGraph(config);
    TensorMap weights;
    switch (config.architecture) {
        case UpscaleArchitecture::Esrgan:
            weights = readEsrganWeights(config, dict, graph);
            break;
        case UpscaleArchitecture::Compact:
            weights = readCompactWeights(config, dict, graph);
            break;
        case UpscaleArchitecture::Span:
            weights = readSpanWeights(config, dict, graph);
            break;
    }
    return UpscaleModel(config, std::move(weights), dict.source());
}

UpscaleModel UpscaleModel::loadFile(const std::string& path) {
    std::string head;
    try {
        // Weights have no size bound; only the first bytes are read here, to tell the formats apart.
        head = BoundedFile::open(path, "upscale model", std::numeric_limits<std::size_t>::max()).readAt(0, 512);
    } catch (const InputFileError& e) {
        throw ModelError(e.what());
    }
    try {
        if (detectTorchContainer(head) != TorchContainer::Unknown) {
            const TorchCheckpointFile file(path);
            UpscaleModel model = load(StateDict::fromFile(file));
            model.readNote_ = file.description();
            return model;
        }
        const SafetensorsFile file(path);
        return load(StateDict::fromFile(file));
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    } catch (const TorchCheckpointError& e) {
        throw ModelError(e.what());
    }
}

}  // namespace tessera
