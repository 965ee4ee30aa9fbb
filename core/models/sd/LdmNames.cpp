// diffusers / transformers names -> LDM / SGM names: diffusers' loaders/single_file_utils.py
// (convert_ldm_unet_checkpoint, update_unet_resnet_ldm_to_diffusers, convert_ldm_vae_checkpoint,
// update_vae_resnet_ldm_to_diffusers, update_vae_attentions_ldm_to_diffusers,
// convert_open_clip_checkpoint), each run the other way round.
#include "core/models/sd/LdmNames.h"

#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/models/clip/ClipTextGraph.h"

namespace tessera::single_file {

namespace {

using Renames = std::vector<std::pair<std::string_view, std::string_view>>;

// `rest` with the first matching prefix replaced; empty when none matches.
std::string renamed(std::string_view rest, const Renames& table) {
    for (const auto& [from, to] : table)
        if (rest.starts_with(from)) return std::string(to) + std::string(rest.substr(from.size()));
    return {};
}

// "<kind>.<index>.<rest>" ("resnets.0.conv1.weight") and "<head><block>.<kind>.<index>.<rest>"
// ("down_blocks.1.resnets.0.conv1.weight"); nullopt for another shape of name.
struct BlockName {
    int block = 0;
    std::string kind;
    int index = 0;
    std::string rest;
};

// The decimal number ending at the next dot from `at` (moved past the dot); nullopt if none.
std::optional<int> numberAt(std::string_view text, std::size_t& at) {
    const std::size_t dot = text.find('.', at);
    if (dot == std::string_view::npos || dot == at || dot - at > 6) return std::nullopt;
    int value = 0;
    for (std::size_t i = at; i < dot; ++i) {
        if (text[i] < '0' || text[i] > '9') return std::nullopt;
        value = value * 10 + (text[i] - '0');
    }
    at = dot + 1;
    return value;
}

std::optional<BlockName> parseKindIndex(std::string_view text) {
    const std::size_t dot = text.find('.');
    if (dot == std::string_view::npos) return std::nullopt;
    std::size_t at = dot + 1;
    const std::optional<int> index = numberAt(text, at);
    if (!index) return std::nullopt;
    return BlockName{0, std::string(text.substr(0, dot)), *index, std::string(text.substr(at))};
}

std::optional<BlockName> parseBlockName(std::string_view name, std::string_view head) {
    if (!name.starts_with(head)) return std::nullopt;
    std::size_t at = head.size();
    const std::optional<int> block = numberAt(name, at);
    if (!block) return std::nullopt;
    std::optional<BlockName> parsed = parseKindIndex(name.substr(at));
    if (parsed) parsed->block = *block;
    return parsed;
}

const Renames kUNetFixed{{"time_embedding.linear_1.", "time_embed.0."},
                         {"time_embedding.linear_2.", "time_embed.2."},
                         {"conv_in.", "input_blocks.0.0."},
                         {"conv_norm_out.", "out.0."},
                         {"conv_out.", "out.2."},
                         // SDXL's text-time embedding (SGM: label_emb = Sequential(Sequential(Linear, SiLU, Linear)))
                         {"add_embedding.linear_1.", "label_emb.0.0."},
                         {"add_embedding.linear_2.", "label_emb.0.2."}};
const Renames kUNetResnet{{"norm1.", "in_layers.0."},          {"conv1.", "in_layers.2."},
                          {"time_emb_proj.", "emb_layers.1."}, {"norm2.", "out_layers.0."},
                          {"conv2.", "out_layers.3."},         {"conv_shortcut.", "skip_connection."}};

const Renames kVaeAttention{
    {"group_norm.", "norm."}, {"to_q.", "q."}, {"to_k.", "k."}, {"to_v.", "v."}, {"to_out.0.", "proj_out."}};

std::string vaeResnetRest(const std::string& rest) {
    return rest.starts_with("conv_shortcut.") ? "nin_shortcut." + rest.substr(14) : rest;
}

const Renames kOpenClipFixed{{"embeddings.token_embedding.weight", "token_embedding.weight"},
                             {"embeddings.position_embedding.weight", "positional_embedding"},
                             {"final_layer_norm.", "ln_final."}};
const Renames kOpenClipLayer{{"layer_norm1.", "ln_1."},
                             {"layer_norm2.", "ln_2."},
                             {"mlp.fc1.", "mlp.c_fc."},
                             {"mlp.fc2.", "mlp.c_proj."},
                             {"self_attn.out_proj.", "attn.out_proj."}};

}  // namespace

// `head` + `piece`, or empty when the piece is (a name with no counterpart).
std::string joined(const std::string& head, const std::string& piece) { return piece.empty() ? piece : head + piece; }

// convert_ldm_unet_checkpoint read backwards: block b's slot l is input_blocks.(1 + b(n+1) + l) /
// output_blocks.(b(n+1) + l); a level's downsampler fills slot n, an up block's upsampler sits
// after its resnet (.1) or, with attention, after that (.2).
std::string unetLdmName(const std::string& name, const UNetCondConfig& c) {
    const int n = c.layersPerBlock, slots = n + 1;
    std::string fixed = renamed(name, kUNetFixed);
    if (!fixed.empty()) return fixed;
    if (const auto d = parseBlockName(name, "down_blocks.")) {
        const std::string block = "input_blocks." + std::to_string(1 + d->block * slots + d->index);
        if (d->kind == "resnets") return joined(block + ".0.", renamed(d->rest, kUNetResnet));
        if (d->kind == "attentions") return block + ".1." + d->rest;
        if (d->kind == "downsamplers" && d->rest.starts_with("conv."))
            return "input_blocks." + std::to_string((d->block + 1) * slots) + ".0.op." + d->rest.substr(5);
    }
    if (const auto m = name.starts_with("mid_block.") ? parseKindIndex(name.substr(10)) : std::nullopt) {
        if (m->kind == "resnets")
            return joined("middle_block." + std::to_string(2 * m->index) + ".", renamed(m->rest, kUNetResnet));
        if (m->kind == "attentions") return "middle_block.1." + m->rest;
    }
    if (const auto u = parseBlockName(name, "up_blocks.")) {
        const std::string block = "output_blocks." + std::to_string(u->block * slots + u->index);
        if (u->kind == "resnets") return joined(block + ".0.", renamed(u->rest, kUNetResnet));
        if (u->kind == "attentions") return block + ".1." + u->rest;
        if (u->kind == "upsamplers") {
            const bool attention = c.upBlocks.at(static_cast<std::size_t>(u->block)) == CondUpBlock::CrossAttnUp;
            return "output_blocks." + std::to_string(u->block * slots + n) + (attention ? ".2." : ".1.") + u->rest;
        }
    }
    return {};
}

// convert_ldm_vae_checkpoint read backwards; LDM numbers the decoder's levels by resolution
// (up.0 is the last to run), diffusers by execution order.
std::string vaeLdmName(const std::string& name, const VaeConfig& c) {
    const std::size_t dot = name.find('.');
    const std::string side = name.substr(0, dot), rest = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (side == "quant_conv" || side == "post_quant_conv") return name;
    if (rest.starts_with("conv_in.") || rest.starts_with("conv_out.")) return name;
    if (rest.starts_with("conv_norm_out.")) return side + ".norm_out." + rest.substr(14);
    if (const auto m = rest.starts_with("mid_block.") ? parseKindIndex(rest.substr(10)) : std::nullopt) {
        if (m->kind == "resnets")
            return side + ".mid.block_" + std::to_string(m->index + 1) + "." + vaeResnetRest(m->rest);
        if (m->kind == "attentions" && m->index == 0)
            return joined(side + ".mid.attn_1.", renamed(m->rest, kVaeAttention));
    }
    if (const auto d = parseBlockName(rest, "down_blocks.")) {
        const std::string level = side + ".down." + std::to_string(d->block);
        if (d->kind == "resnets") return level + ".block." + std::to_string(d->index) + "." + vaeResnetRest(d->rest);
        if (d->kind == "downsamplers") return level + ".downsample." + d->rest;
    }
    if (const auto u = parseBlockName(rest, "up_blocks.")) {
        const std::string level = side + ".up." + std::to_string(c.levels() - 1 - u->block);
        if (u->kind == "resnets") return level + ".block." + std::to_string(u->index) + "." + vaeResnetRest(u->rest);
        if (u->kind == "upsamplers") return level + ".upsample." + u->rest;
    }
    return {};
}

// The OpenCLIP tensor (and q/k/v part) that holds a CLIPTextModel(WithProjection) tensor; empty
// name when none. text_projection is used as x @ W in OpenCLIP: the transpose of the Linear weight.
LdmTensor openClipTensor(const std::string& name) {
    LdmTensor b;
    if (name == kClipTextProjection) {
        b.name = "text_projection";
        b.transpose = true;
        return b;
    }
    const std::string local = name.substr(std::strlen(kClipTextPrefix));
    b.name = renamed(local, kOpenClipFixed);
    if (!b.name.empty()) return b;
    const std::string head = "encoder.layers.";
    std::size_t at = head.size();
    const std::optional<int> layer = local.starts_with(head) ? numberAt(local, at) : std::nullopt;
    if (!layer) return b;
    const std::string block = "transformer.resblocks." + std::to_string(*layer) + ".";
    const std::string rest = local.substr(at);
    for (const char* qkv : {"q", "k", "v"})
        for (const char* part : {"weight", "bias"})
            if (rest == std::string("self_attn.") + qkv + "_proj." + part) {
                b.name = block + "attn.in_proj_" + part;
                b.part = static_cast<int>(std::string("qkv").find(*qkv));
                b.parts = 3;
                return b;
            }
    const std::string other = renamed(rest, kOpenClipLayer);
    b.name = joined(block, other);
    return b;
}

}  // namespace tessera::single_file
