// Configurations of single-file checkpoints: diffusers' loaders/single_file_utils.py
// (fetch_diffusers_config, create_unet_diffusers_config_from_ldm,
// create_vae_diffusers_config_from_ldm, create_diffusers_clip_model_from_ldm), with every size read
// from the tensors rather than from an LDM yaml.
#include "core/models/sd/SingleFileConfigs.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"

namespace tessera::single_file {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

using input_limits::kNameChars;

constexpr FamilyDefaults kSd1{64,
                              512,
                              0.18215,
                              false,
                              "quick_gelu",
                              768,
                              PredictionType::Epsilon,
                              "SD 1.x models predict noise (diffusers: stable-diffusion-v1-5's scheduler)",
                              "PNDMScheduler"};
constexpr FamilyDefaults kSd2{
    96,
    768,
    0.18215,
    true,
    "gelu",
    512,
    PredictionType::VPrediction,
    "the file cannot tell; diffusers reads SD 2.x single files with stable-diffusion-2-1's configuration "
    "(v-prediction, 768 px). A 2.x-base checkpoint predicts noise (epsilon): give its pipeline folder's "
    "configurations (the config folder) or set prediction_type",
    "DDIMScheduler"};

// SDXL base: the first text encoder's values (CLIP ViT-L); the second's are OpenCLIP bigG's,
// read from its tensors (projection included).
constexpr FamilyDefaults kSdxl{128,
                               1024,
                               0.13025,
                               false,
                               "quick_gelu",
                               768,
                               PredictionType::Epsilon,
                               "SDXL base predicts noise (diffusers: stable-diffusion-xl-base-1.0's scheduler)",
                               "EulerDiscreteScheduler"};

// GroupNorm groups of every SD UNet and VAE; the width of SD's attention heads (SD 2.x UNet levels,
// both families' text encoders).
constexpr int kGroups = 32;
constexpr int kHeadWidth = 64;
// OpenCLIP ViT-H (SD 2.x): 24 blocks, of which diffusers keeps 23 (SD_2_TEXT_ENCODER_KEYS_TO_IGNORE).
constexpr int kVitHLayers = 23;

const Shape& shapeIn(const TensorFile& file, const std::string& name, const std::string& where, const char* what) {
    const TensorFileEntry* info = file.find(name);
    if (info == nullptr) throw ModelError(where + ": missing tensor " + inQuotes(name, kNameChars) + " (" + what + ")");
    return info->shape;
}

std::int64_t dim(const Shape& shape, std::size_t axis, const std::string& name, const std::string& where) {
    if (shape.size() <= axis)
        throw ModelError(where + ": tensor " + inQuotes(name, kNameChars) + " has shape " + shapeToString(shape) +
                         "; expected " + std::to_string(axis + 1) + " or more dimensions");
    return shape[axis];
}

// The largest N with some tensor named prefix + N + "." (-1 when none).
int highestIndex(const TensorFile& file, const std::string& prefix) {
    int highest = -1;
    for (const auto& info : file.tensors()) {
        if (!info.name.starts_with(prefix)) continue;
        const std::size_t dot = info.name.find('.', prefix.size());
        const std::string digits = info.name.substr(prefix.size(), dot - prefix.size());
        if (dot == std::string::npos || digits.empty() || digits.size() > 6 ||
            !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        highest = std::max(highest, std::stoi(digits));
    }
    return highest;
}

// SDXL's text-time embedding (SGM's num_classes "sequential" with a 2048-wide context, as diffusers'
// create_unet_diffusers_config_from_ldm reads it):
// add_embedding (label_emb.0) takes adm_in_channels = the pooled text (`pooledWidth`, the second
// text encoder's projection) and six size ids, whose sinusoid width follows (256 in SDXL base).
void addTextTime(nlohmann::json& j, const TensorFile& file, int pooledWidth, const std::string& where) {
    const std::int64_t adm =
        dim(shapeIn(file, kXlAddEmbedding, where, "the UNet's add_embedding"), 1, kXlAddEmbedding, where);
    constexpr int kIds = 6;
    if (adm <= pooledWidth || (adm - pooledWidth) % kIds != 0)
        throw ModelError(where + ": tensor " + inQuotes(kXlAddEmbedding, kNameChars) + " takes " + std::to_string(adm) +
                         " values; SDXL base's add_embedding takes the " + std::to_string(pooledWidth) +
                         " pooled text values and 6 size ids of equal width (2816 = 1280 + 6 x 256); a refiner takes "
                         "5 ids (not supported yet)");
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = (adm - pooledWidth) / kIds;
    j["projection_class_embeddings_input_dim"] = adm;
}

nlohmann::json derivedUNetJson(const TensorFile& file, SdFamily family, int pooledWidth, const std::string& where) {
    const std::string p = kUNet;
    auto shape = [&](const std::string& name, const char* what) -> const Shape& {
        return shapeIn(file, p + name, where, what);
    };
    const Shape& convIn = shape("input_blocks.0.0.weight", "the UNet's conv_in");
    const Shape& timeIn = shape("time_embed.0.weight", "the UNet's time embedding");
    const int inputs = highestIndex(file, p + "input_blocks.") + 1;
    const int outputs = highestIndex(file, p + "output_blocks.") + 1;
    // Level 0 ends with the first downsampler, input block layers_per_block + 1.
    int perLevel = inputs;
    for (int i = 1; i < inputs; ++i)
        if (file.has(p + "input_blocks." + std::to_string(i) + ".0.op.weight")) {
            perLevel = i;
            break;
        }
    if (perLevel < 2 || inputs % perLevel != 0 || outputs != inputs)
        throw ModelError(where + ": the UNet's " + std::to_string(inputs) + " input blocks and " +
                         std::to_string(outputs) +
                         " output blocks do not form levels of layers_per_block resnets "
                         "and a downsampler (input_blocks.<k>.0.op)");
    const int levels = inputs / perLevel;
    nlohmann::json channels = nlohmann::json::array(), down = nlohmann::json::array(), up = nlohmann::json::array(),
                   heads = nlohmann::json::array(), depths = nlohmann::json::array();
    for (int b = 0; b < levels; ++b) {
        const std::string first = "input_blocks." + std::to_string(1 + b * perLevel);
        const std::int64_t width =
            dim(shape(first + ".0.out_layers.3.weight", "a UNet resnet's conv2"), 0, first, where);
        const bool attention = file.has(p + first + ".1.norm.weight");
        channels.push_back(width);
        down.push_back(attention ? "CrossAttnDownBlock2D" : "DownBlock2D");
        up.push_back(file.has(p + "output_blocks." + std::to_string(b * perLevel) + ".1.norm.weight")
                         ? "CrossAttnUpBlock2D"
                         : "UpBlock2D");
        heads.push_back(family != SdFamily::SD1 ? width / kHeadWidth : 8);
        depths.push_back(attention ? highestIndex(file, p + first + ".1.transformer_blocks.") + 1 : 1);
    }
    const std::string midAttention = "middle_block.1.";
    const Shape& toK =
        shape(midAttention + "transformer_blocks.0.attn2.to_k.weight", "the mid block's cross-attention");
    const Shape& projIn = shape(midAttention + "proj_in.weight", "the mid block's proj_in");
    const FamilyDefaults& d = defaultsOf(family);
    nlohmann::json j = {
        {"_class_name", "UNet2DConditionModel"},
        {"sample_size", d.unetSampleSize},
        {"in_channels", dim(convIn, 1, p + "input_blocks.0.0.weight", where)},
        {"out_channels", dim(shape("out.2.weight", "the UNet's conv_out"), 0, p + "out.2.weight", where)},
        {"block_out_channels", channels},
        {"down_block_types", down},
        {"up_block_types", up},
        {"layers_per_block", perLevel - 1},
        {"norm_num_groups", kGroups},
        {"cross_attention_dim", dim(toK, 1, p + midAttention + "attn2.to_k.weight", where)},
        {"attention_head_dim", family != SdFamily::SD1 ? heads : nlohmann::json(8)},
        {"transformer_layers_per_block", depths},
        {"use_linear_projection", projIn.size() == 2},
        {"upcast_attention", d.upcastAttention}};
    if (dim(timeIn, 0, p + "time_embed.0.weight", where) != 4 * dim(convIn, 0, kConvInKey, where))
        j["time_embedding_dim"] = timeIn[0];
    if (family == SdFamily::SDXL) addTextTime(j, file, pooledWidth, where);
    return j;
}

nlohmann::json derivedVaeJson(const TensorFile& file, SdFamily family, const std::string& v, const std::string& where) {
    auto shape = [&](const std::string& name, const char* what) -> const Shape& {
        return shapeIn(file, v + name, where, what);
    };
    const int levels = highestIndex(file, v + "encoder.down.") + 1;
    const int layers = highestIndex(file, v + "encoder.down.0.block.") + 1;
    if (levels < 1 || layers < 1)
        throw ModelError(where + ": missing tensor " + inQuotes(v + "encoder.down.0.block.0.conv2.weight", kNameChars) +
                         " (the VAE encoder's first resnet)");
    nlohmann::json channels = nlohmann::json::array();
    for (int i = 0; i < levels; ++i) {
        const std::string name = "encoder.down." + std::to_string(i) + ".block.0.conv2.weight";
        channels.push_back(dim(shape(name, "a VAE encoder resnet's conv2"), 0, v + name, where));
    }
    return {{"_class_name", "AutoencoderKL"},
            {"in_channels",
             dim(shape("encoder.conv_in.weight", "the VAE's conv_in"), 1, v + "encoder.conv_in.weight", where)},
            {"out_channels",
             dim(shape("decoder.conv_out.weight", "the VAE's conv_out"), 0, v + "decoder.conv_out.weight", where)},
            {"block_out_channels", channels},
            {"down_block_types", std::vector<std::string>(static_cast<std::size_t>(levels), "DownEncoderBlock2D")},
            {"up_block_types", std::vector<std::string>(static_cast<std::size_t>(levels), "UpDecoderBlock2D")},
            {"layers_per_block", layers},
            {"latent_channels",
             dim(shape("decoder.conv_in.weight", "the VAE decoder's conv_in"), 1, v + "decoder.conv_in.weight", where)},
            {"norm_num_groups", kGroups},
            {"sample_size", defaultsOf(family).vaeSampleSize},
            {"scaling_factor", defaultsOf(family).vaeScalingFactor},  // LDM_VAE_DEFAULT_SCALING_FACTOR; SDXL's VAE
            {"use_quant_conv", file.has(v + "quant_conv.weight")},
            {"use_post_quant_conv", file.has(v + "post_quant_conv.weight")},
            {"mid_block_add_attention", file.has(v + "encoder.mid.attn_1.q.weight")}};
}

nlohmann::json derivedTextJson(const TensorFile& file, const std::string& t, TextLayout kind, SdFamily family,
                               const std::string& where) {
    const bool open = kind != TextLayout::Clip;
    const std::string tokens = t + (open ? "token_embedding.weight" : "embeddings.token_embedding.weight");
    const std::string positions = t + (open ? "positional_embedding" : "embeddings.position_embedding.weight");
    const std::string fc1 = t + (open ? "transformer.resblocks.0.mlp.c_fc.weight" : "encoder.layers.0.mlp.fc1.weight");
    const Shape& token = shapeIn(file, tokens, where, "the text encoder's token embedding");
    const std::int64_t width = dim(token, 1, tokens, where);
    int layers = highestIndex(file, t + (open ? "transformer.resblocks." : "encoder.layers.")) + 1;
    // SD 2.x conditions on OpenCLIP's penultimate block: diffusers' ViT-H config has 23 of its 24
    // layers; a narrower (test) model drops its last block the same way.
    if (kind == TextLayout::OpenClipH) layers = width == kVitHWidth ? kVitHLayers : layers - 1;
    const FamilyDefaults& d = defaultsOf(family);
    const bool projected = kind == TextLayout::OpenClipBigG;
    const std::string projection = t + "text_projection";  // [width, projection_dim], used as x @ W
    return {{"architectures", {projected ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
            {"model_type", "clip_text_model"},
            {"vocab_size", dim(token, 0, tokens, where)},
            {"hidden_size", width},
            {"intermediate_size", dim(shapeIn(file, fc1, where, "the text encoder's first MLP"), 0, fc1, where)},
            {"num_hidden_layers", layers},
            {"num_attention_heads", width / kHeadWidth},
            {"max_position_embeddings",
             dim(shapeIn(file, positions, where, "the text encoder's positions"), 0, positions, where)},
            {"hidden_act", projected ? "gelu" : d.textActivation},
            {"layer_norm_eps", 1e-5},
            {"projection_dim",
             projected ? dim(shapeIn(file, projection, where, "the text encoder's projection"), 1, projection, where)
                       : d.textProjectionDim},
            // The hub configs' legacy ids (with eos_token_id 2, transformers' CLIPTextTransformer
            // pools at the argmax of the ids).
            {"bos_token_id", 0},
            {"eos_token_id", 2},
            {"pad_token_id", 1}};
}

// Parses a derived configuration; its rejection means the family's fixed values (GroupNorm
// groups, heads) do not fit this file's sizes.
template <typename Config, typename Parse>
Config parseDerived(const nlohmann::json& json, Parse parse, const char* what, const Layout& layout,
                    const std::string& where) {
    try {
        return parse(json);
    } catch (const std::runtime_error& e) {
        throw ModelError(
            where + ": the " + what + " configuration of a " + std::string(familyLabel(layout.family)) +
            " checkpoint (GroupNorm groups 32, " +
            (layout.family != SdFamily::SD1 ? "64-wide attention heads" : "8 UNet attention heads") +
            ", sizes from the tensors) does not fit this file: " + withoutPrefix(e.what(), "config.json: ") +
            ". Give this model as a diffusers pipeline folder, or its configurations as the config folder");
    }
}

}  // namespace

const FamilyDefaults& defaultsOf(SdFamily family) {
    return family == SdFamily::SD2 ? kSd2 : family == SdFamily::SDXL ? kSdxl : kSd1;
}

Configs derivedConfigs(const TensorFile& file, const Layout& layout, const std::string& where) {
    Configs c;
    const auto parseText = [&](const std::string& prefix, TextLayout kind, const char* what) {
        return parseDerived<ClipTextConfig>(
            derivedTextJson(file, prefix, kind, layout.family, where),
            [](const nlohmann::json& j) { return clipTextConfigFromJson(j); }, what, layout, where);
    };
    c.text = parseText(layout.text, layout.openClip() ? TextLayout::OpenClipH : TextLayout::Clip, "text encoder");
    if (!layout.text2.empty()) c.text2 = parseText(layout.text2, TextLayout::OpenClipBigG, "second text encoder");
    c.unet = parseDerived<UNetCondConfig>(
        derivedUNetJson(file, layout.family, c.text2 ? c.text2->projectionDim : 0, where),
        [](const nlohmann::json& j) { return unetCondConfigFromJson(j); }, "UNet", layout, where);
    c.vae = parseDerived<VaeConfig>(
        derivedVaeJson(file, layout.family, layout.vae, where),
        [](const nlohmann::json& j) { return vaeConfigFromJson(j); }, "VAE", layout, where);
    const FamilyDefaults& d = defaultsOf(layout.family);
    c.source = std::string("sizes from the tensors, the rest as diffusers' ") +
               std::string(familyLabel(layout.family)) + " configuration";
    c.prediction = d.prediction;
    c.predictionReason = d.predictionReason;
    return c;
}

// diffusers' from_single_file(config=FOLDER): the folder's component configurations.
Configs folderConfigs(const std::string& folder, const Layout& layout) {
    checkModelFolder(folder);
    const fs::path root(folder);
    Configs c;
    const fs::path unetConfig = root / "unet" / "config.json";
    const nlohmann::json unetJson = readModelJson(unetConfig);
    try {
        c.unet = unetCondConfigFromJson(unetJson);
    } catch (const std::runtime_error& e) {
        throw ModelError(shownPath(unetConfig) + ": " + withoutPrefix(e.what(), "config.json: "));
    }
    c.vae = readVaeConfig((root / "vae").string());
    c.text = readClipTextConfig(root / "text_encoder");
    if (!layout.text2.empty()) c.text2 = readClipTextConfig(root / "text_encoder_2");
    c.source = "the config folder " + shownPath(folder);
    const FamilyDefaults& d = defaultsOf(layout.family);
    c.prediction = d.prediction;
    c.predictionReason = d.predictionReason;
    const fs::path scheduler = root / "scheduler" / "scheduler_config.json";
    if (folderEntryPresent(scheduler)) {
        const nlohmann::json json = readModelJson(scheduler);
        if (json.is_object() && json.contains("prediction_type")) {
            try {
                c.prediction =
                    parsePredictionType(json["prediction_type"].is_string() ? json["prediction_type"].get<std::string>()
                                                                            : excerptJson(json["prediction_type"]));
            } catch (const ValidationError& e) {
                throw ModelError(shownPath(scheduler) + ": " + e.what());
            }
            c.predictionReason = "prediction_type of " + shownPath(scheduler);
        }
    }
    return c;
}

}  // namespace tessera::single_file
