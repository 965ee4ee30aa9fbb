// Single-file ControlNets: the layout from the names (spec of the detection: diffusers
// loaders/single_file_utils.py convert_controlnet_checkpoint, ComfyUI comfy/controlnet.py
// load_controlnet, A1111 sd-webui-controlnet scripts/controlnet_model_guess.py), the configuration
// from the shapes (as diffusers' create_controlnet_diffusers_config_from_ldm reads an LDM YAML).
#include "core/models/controlnet/ControlNetFileLayout.h"

#include <algorithm>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/controlnet/ControlNetLdmNames.h"
#include "core/models/sd/SingleFileConfigs.h"

namespace tessera {

namespace {

using input_limits::kNameChars;
using Shape = std::vector<std::int64_t>;

constexpr const char* kPrefixes[] = {"control_model.", ""};
// What the family's UNet uses where shapes cannot tell (diffusers' SD UNet configs).
constexpr int kGroups = 32;
constexpr int kSd1Heads = 8;
constexpr int kHeadWidth = 64;
constexpr int kSdxlSizeIdWidth = 256;
constexpr int kSdxlSizeIds = 6;
constexpr int kSd2TextWidth = 1024;

// The text width of a family's UNet, for a ControlNet without attention (SDXL's small ones).
int familyTextWidth(SdFamily family) {
    return family == SdFamily::SDXL ? 2048 : family == SdFamily::SD2 ? kSd2TextWidth : 768;
}

bool has(const TensorShapes& file, const std::string& name) { return file.find(name) != file.end(); }

std::string someNames(const TensorShapes& file) {
    std::string names;
    int n = 0;
    for (const auto& entry : file) {
        if (n == 3) break;
        names += (n++ ? ", " : "") + inQuotes(entry.first, kNameChars);
    }
    return names.empty() ? "no tensors" : names;
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
    throw ModelError(where + ": " + what +
                     "; Tessera runs ControlNets for Stable Diffusion 1.x, 2.x and XL (ControlNetModel: a diffusers "
                     "folder, or one file in the original or diffusers names)");
}

// The first of `keys` (each under either prefix) the file has; empty when none.
std::string firstPresent(const TensorShapes& file, std::initializer_list<const char*> keys) {
    for (const char* prefix : kPrefixes)
        for (const char* key : keys)
            if (has(file, std::string(prefix) + key)) return std::string(prefix) + key;
    return {};
}

// Reads sizes off the tensors, named as diffusers names them, wherever the layout stores them.
class ShapeReader {
public:
    ShapeReader(const TensorShapes& file, const ControlNetFileLayout& layout, const std::string& where)
        : file_(file), layout_(layout), where_(where) {}

    ControlNetConfig config;  // the sizes read so far (layers per level, hint length first)

    const Shape* find(const std::string& name) const {
        const auto it = file_.find(layout_.storedName(name, config));
        return it == file_.end() ? nullptr : &it->second;
    }
    bool has(const std::string& name) const { return find(name) != nullptr; }
    // A tensor of the file by its stored name.
    bool stored(const std::string& storedName) const { return file_.find(storedName) != file_.end(); }
    // Axis `axis` of a tensor that must be there; ModelError otherwise.
    std::int64_t dim(const std::string& name, std::size_t axis, const char* what) const {
        const Shape* shape = find(name);
        const std::string shown = inQuotes(layout_.storedName(name, config), kNameChars);
        if (shape == nullptr) throw ModelError(where_ + ": missing tensor " + shown + " (" + what + ")");
        if (shape->size() <= axis)
            throw ModelError(where_ + ": tensor " + shown + " (" + what + ") has shape " + shapeToString(*shape) +
                             "; expected " + std::to_string(axis + 1) + " or more dimensions");
        return (*shape)[axis];
    }
    std::size_t rank(const std::string& name, const char* what) const {
        (void)dim(name, 0, what);  // present
        return find(name)->size();
    }
    // How many of name(0), name(1), ... the file has, counting from 0.
    int count(const std::function<std::string(int)>& name) const {
        int n = 0;
        while (n < 1000 && has(name(n))) ++n;
        return n;
    }
    // The largest N with a stored tensor named `head` + N + "." (-1 when none).
    int highestStored(const std::string& head) const {
        int highest = -1;
        for (auto it = file_.lower_bound(head); it != file_.end() && it->first.starts_with(head); ++it) {
            const std::size_t dot = it->first.find('.', head.size());
            const std::string digits = it->first.substr(head.size(), dot - head.size());
            if (dot == std::string::npos || digits.empty() || digits.size() > 6 ||
                !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
                continue;
            highest = std::max(highest, std::stoi(digits));
        }
        return highest;
    }
    const ControlNetFileLayout& layout() const { return layout_; }
    const std::string& where() const { return where_; }

private:
    const TensorShapes& file_;
    const ControlNetFileLayout& layout_;
    const std::string& where_;
};

// Layers per level and the hint encoder's length: what the LDM names need before any other name
// can be found.
void readNumbering(ShapeReader& r) {
    const std::string& p = r.layout().prefix;
    int layers = 0, steps = 0;
    if (r.layout().names == ControlNetNames::Ldm) {
        // Level 0 ends with the first downsampler, input block layers_per_block + 1; one level has none.
        const int inputs = r.highestStored(p + "input_blocks.");
        layers = inputs;
        for (int i = 1; i <= inputs; ++i)
            if (r.stored(p + "input_blocks." + std::to_string(i) + ".0.op.weight")) {
                layers = i - 1;
                break;
            }
        const int last = r.highestStored(p + "input_hint_block.");  // conv_out: 4 x widths - 2
        if (last < 2 || last % 4 != 2)
            throw ModelError(r.where() + ": the hint encoder's last convolution is " +
                             inQuotes(p + "input_hint_block." + std::to_string(last), kNameChars) +
                             "; expected input_hint_block.<4n - 2> for n widths (14 for 4)");
        steps = (last + 2) / 4 - 1;
    } else {
        layers = r.count([&](int j) { return "down_blocks.0.resnets." + std::to_string(j) + ".conv1.weight"; });
        steps = r.count([&](int k) { return "controlnet_cond_embedding.blocks." + std::to_string(k) + ".weight"; }) / 2;
    }
    if (layers < 1)
        throw ModelError(r.where() + ": no resnet in the first level (looked for " +
                         inQuotes(r.layout().storedName("down_blocks.0.resnets.0.conv1.weight", r.config), kNameChars) +
                         ")");
    r.config.unet.layersPerBlock = layers;
    r.config.conditioningEmbeddingOutChannels.assign(static_cast<std::size_t>(steps + 1), 0);
}

// The transformer depth of a Transformer2DModel (0 when absent).
int depthOf(const ShapeReader& r, const std::string& attention) {
    return r.count([&](int k) { return attention + ".transformer_blocks." + std::to_string(k) + ".norm1.weight"; });
}

// The family (what the shapes cannot show follows it) and why.
SdFamily familyOf(const ShapeReader& r, int crossWidth, bool linear, std::string& reason) {
    const std::string stored = inQuotes(r.layout().storedName("add_embedding.linear_1.weight", r.config), kNameChars);
    if (r.has("add_embedding.linear_1.weight")) {
        reason = "it has " + stored + ", SDXL's text-time embedding";
        return SdFamily::SDXL;
    }
    if (crossWidth == kSd2TextWidth || linear) {
        reason = crossWidth == kSd2TextWidth ? "its cross-attention reads 1024-wide text (OpenCLIP ViT-H, SD 2.x)"
                                             : "its transformers project with Linear layers, as SD 2.x's do";
        return SdFamily::SD2;
    }
    reason = crossWidth == 0 ? std::string("it has neither a transformer nor a text-time embedding: SD 1.x's layout")
                             : "its cross-attention reads " + std::to_string(crossWidth) +
                                   "-wide text through 1x1-convolution projections, as SD 1.x's";
    return SdFamily::SD1;
}

// The encoder's levels as the shapes give them.
struct Levels {
    nlohmann::json widths = nlohmann::json::array(), down = nlohmann::json::array(), depths = nlohmann::json::array();
    int crossWidth = 0;  // 0: no transformer anywhere
    bool linear = false;
    int midDepth = 0;  // 0: a one-resnet mid block
};

Levels readLevels(const ShapeReader& r) {
    Levels l;
    const int levels = r.count([&](int b) { return "down_blocks." + std::to_string(b) + ".resnets.0.conv1.weight"; });
    if (levels < 1)
        throw ModelError(r.where() + ": missing tensor " +
                         inQuotes(r.layout().storedName("down_blocks.0.resnets.0.conv1.weight", r.config), kNameChars) +
                         " (the first level's first resnet)");
    auto readAttention = [&](const std::string& attention, const char* what) {
        if (l.crossWidth != 0) return;
        l.crossWidth = static_cast<int>(r.dim(attention + ".transformer_blocks.0.attn2.to_k.weight", 1, what));
        l.linear = r.rank(attention + ".proj_in.weight", what) == 2;
    };
    for (int b = 0; b < levels; ++b) {
        const std::string level = "down_blocks." + std::to_string(b);
        l.widths.push_back(r.dim(level + ".resnets.0.conv2.weight", 0, "a resnet's conv2"));
        const int depth = depthOf(r, level + ".attentions.0");
        l.down.push_back(depth > 0 ? "CrossAttnDownBlock2D" : "DownBlock2D");
        l.depths.push_back(std::max(depth, 1));
        if (depth > 0) readAttention(level + ".attentions.0", "a transformer");
    }
    l.midDepth = depthOf(r, "mid_block.attentions.0");
    if (l.midDepth > 0) {
        readAttention("mid_block.attentions.0", "the mid block's transformer");
        if (l.down.back() == "DownBlock2D") l.depths.back() = l.midDepth;  // an unused entry: the mid block's
        if (l.depths.back() != l.midDepth)
            throw ModelError(r.where() + ": the mid block's transformer has " + std::to_string(l.midDepth) +
                             " blocks, the last level's " + l.depths.back().dump() +
                             "; ControlNetModel gives both transformer_layers_per_block's last entry");
    } else if (r.has("mid_block.resnets.1.conv1.weight")) {
        throw ModelError(r.where() + ": the mid block has two resnets (" +
                         inQuotes(r.layout().storedName("mid_block.resnets.1.conv1.weight", r.config), kNameChars) +
                         ") but no transformer; ControlNetModel's mid blocks are resnet-transformer-resnet "
                         "or one resnet");
    }
    return l;
}

// The config.json these sizes make, checked by controlNetConfigFromJson after.
nlohmann::json derivedJson(ShapeReader& r, SdFamily* familyOut, std::string* reasonOut) {
    readNumbering(r);
    Levels l = readLevels(r);
    std::string reason;
    const SdFamily family = familyOf(r, l.crossWidth, l.linear, reason);
    if (l.crossWidth == 0) l.linear = family != SdFamily::SD1;  // no transformer: the family's UNet's kind
    const std::int64_t c0 = r.dim("conv_in.weight", 0, "conv_in");
    if (r.dim("time_embedding.linear_1.weight", 0, "the time embedding") != 4 * c0)
        throw ModelError(r.where() + ": the time embedding is " +
                         std::to_string(r.dim("time_embedding.linear_1.weight", 0, "the time embedding")) +
                         " wide; ControlNetModel's is 4 x block_out_channels[0] = " + std::to_string(4 * c0));
    nlohmann::json hint = nlohmann::json::array();
    hint.push_back(r.dim("controlnet_cond_embedding.conv_in.weight", 0, "the hint encoder's conv_in"));
    const int steps = static_cast<int>(r.config.conditioningEmbeddingOutChannels.size()) - 1;
    for (int i = 0; i < steps; ++i)
        hint.push_back(r.dim("controlnet_cond_embedding.blocks." + std::to_string(2 * i + 1) + ".weight", 0,
                             "a hint encoder convolution"));
    nlohmann::json heads = nlohmann::json::array();
    for (std::size_t b = 0; b < l.widths.size(); ++b) {
        const int perWidth = l.widths[b].get<int>() / kHeadWidth;
        const bool attends = l.down[b] == "CrossAttnDownBlock2D" || (b + 1 == l.widths.size() && l.midDepth > 0);
        // a level without attention never reads its entry; one with too few channels is refused
        heads.push_back(family == SdFamily::SD1 ? kSd1Heads : attends ? perWidth : std::max(perWidth, 1));
    }
    nlohmann::json j = {
        {"_class_name", "ControlNetModel"},
        {"in_channels", r.dim("conv_in.weight", 1, "conv_in")},
        {"conditioning_channels", r.dim("controlnet_cond_embedding.conv_in.weight", 1, "the hint encoder's conv_in")},
        {"down_block_types", l.down},
        {"mid_block_type", l.midDepth > 0 ? "UNetMidBlock2DCrossAttn" : "UNetMidBlock2D"},
        {"block_out_channels", l.widths},
        {"layers_per_block", r.config.unet.layersPerBlock},
        {"norm_num_groups", kGroups},
        {"cross_attention_dim", l.crossWidth > 0 ? l.crossWidth : familyTextWidth(family)},
        {"transformer_layers_per_block", l.depths},
        {"attention_head_dim", heads},
        {"use_linear_projection", l.linear},
        {"upcast_attention", single_file::defaultsOf(family).upcastAttention},
        {"conditioning_embedding_out_channels", hint},
    };
    if (family == SdFamily::SDXL) {
        const std::int64_t adm = r.dim("add_embedding.linear_1.weight", 1, "the text-time embedding");
        if (adm <= kSdxlSizeIds * kSdxlSizeIdWidth)
            throw ModelError(r.where() + ": the text-time embedding takes " + std::to_string(adm) +
                             " values; SDXL's takes the pooled text and 6 size ids of 256 (2816 = 1280 + 6 x 256)");
        j["addition_embed_type"] = "text_time";
        j["addition_time_embed_dim"] = kSdxlSizeIdWidth;
        j["projection_class_embeddings_input_dim"] = adm;
    }
    if (familyOut != nullptr) *familyOut = family;
    if (reasonOut != nullptr) *reasonOut = reason;
    return j;
}

}  // namespace

TensorShapes tensorShapes(const TensorFile& file) {
    TensorShapes shapes;
    for (const TensorFileEntry& entry : file.tensors()) shapes.emplace(entry.name, entry.shape);
    return shapes;
}

std::string ControlNetFileLayout::storedName(const std::string& name, const ControlNetConfig& config) const {
    if (names == ControlNetNames::Diffusers) return prefix + name;
    const std::string ldm = controlNetLdmName(name, config);
    return ldm.empty() ? std::string() : prefix + ldm;
}

ControlNetFileLayout detectControlNetLayout(const TensorShapes& file, const std::string& where) {
    if (has(file, "lora_controlnet"))
        refuse(where, "a Control-LoRA (it has " + inQuotes("lora_controlnet", kNameChars) +
                          "): its UNet-shaped layers are low-rank offsets from a base UNet, which is not supported");
    if (has(file, "difference"))
        refuse(where, "a difference ControlNet (it has " + inQuotes("difference", kNameChars) +
                          "): its weights are offsets to add to the base UNet's, which is not supported");
    const std::string union_ = firstPresent(file, {"task_embedding", "control_add_embedding.linear_1.weight"});
    if (!union_.empty())
        refuse(where,
               "a ControlNet++ union model (it has " + inQuotes(union_, kNameChars) + "), which is not supported");
    for (const char* prefix : kPrefixes) {
        const std::string ldm = std::string(prefix) + "input_hint_block.0.weight";
        const std::string diffusers = std::string(prefix) + "controlnet_cond_embedding.conv_in.weight";
        if (has(file, ldm)) return {ControlNetNames::Ldm, prefix, "it has " + inQuotes(ldm, kNameChars)};
        if (has(file, diffusers))
            return {ControlNetNames::Diffusers, prefix, "it has " + inQuotes(diffusers, kNameChars)};
    }
    const std::string other = firstPresent(
        file, {"controlnet_blocks.0.weight", "pos_embed_input.proj.weight", "controlnet_x_embedder.weight"});
    if (!other.empty()) refuse(where, "a ControlNet for SD3 or FLUX (it has " + inQuotes(other, kNameChars) + ")");
    const std::string unet = firstPresent(file, {"model.diffusion_model.input_blocks.0.0.weight", "conv_in.weight"});
    if (!unet.empty())
        refuse(where, "a diffusion model's weights (it has " + inQuotes(unet, kNameChars) +
                          ") without a ControlNet's hint encoder (" +
                          inQuotes("control_model.input_hint_block.0.weight", kNameChars) + " or " +
                          inQuotes("controlnet_cond_embedding.conv_in.weight", kNameChars) + ")");
    refuse(where, "not a ControlNet: no " + inQuotes("control_model.input_hint_block.0.weight", kNameChars) + ", " +
                      inQuotes("input_hint_block.0.weight", kNameChars) + " or " +
                      inQuotes("controlnet_cond_embedding.conv_in.weight", kNameChars) + "; it holds " +
                      someNames(file));
}

ControlNetConfig controlNetConfigFromShapes(const TensorShapes& file, const ControlNetFileLayout& layout,
                                            const std::string& where, SdFamily* family, std::string* reason) {
    ShapeReader reader(file, layout, where);
    SdFamily found = SdFamily::SD1;
    std::string why;
    const nlohmann::json j = derivedJson(reader, &found, &why);
    try {
        ControlNetConfig config = controlNetConfigFromJson(j);
        if (family != nullptr) *family = found;
        if (reason != nullptr) *reason = why;
        return config;
    } catch (const std::runtime_error& e) {
        throw ModelError(where + ": the configuration of a " + std::string(familyLabel(found)) +
                         " ControlNet (GroupNorm groups 32, " +
                         (found == SdFamily::SD1 ? "8 attention heads" : "64-wide attention heads") +
                         ", sizes from the tensors) does not fit this file: " +
                         withoutPrefix(e.what(), "config.json: ") + ". Give its config.json (the config folder)");
    }
}

}  // namespace tessera
