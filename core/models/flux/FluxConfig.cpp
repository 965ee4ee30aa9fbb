// FluxTransformer2DModel config.json reader and the single-file shape inference (FluxConfig.h).
#include "core/models/flux/FluxConfig.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/formats/ConfigJson.h"

namespace tessera {

namespace {

namespace bounds = flux_config_bounds;
using namespace config_json;

constexpr IntRange kInChannels{4, bounds::kMaxInChannels, "64 in FLUX.1 (16 latent channels x 2 x 2)"};
constexpr IntRange kBlocks{0, bounds::kMaxBlocks, "FLUX.1 has 19 double-stream and 38 single-stream blocks"};
constexpr IntRange kHeads{1, bounds::kMaxHeads, "24 in FLUX.1"};
constexpr IntRange kHeadDim{2, bounds::kMaxHeadDim, "128 in FLUX.1"};
constexpr IntRange kTextDim{1, bounds::kMaxTextDim, "4096 (T5-XXL) and 768 (CLIP-L's pooled output) in FLUX.1"};
constexpr IntRange kPatch{1, 1, "the FLUX pipelines pack 2 x 2 patches themselves and run patch_size 1"};
constexpr IntRange kAxis{0, bounds::kMaxHeadDim, "FLUX.1 has (16, 56, 56)"};

const std::set<std::string, std::less<>> kKeys{"patch_size",          "in_channels",         "out_channels",
                                               "num_layers",          "num_single_layers",   "attention_head_dim",
                                               "num_attention_heads", "joint_attention_dim", "pooled_projection_dim",
                                               "guidance_embeds",     "axes_dims_rope"};

}  // namespace

FluxConfig parseFluxConfig(const nlohmann::json& config) {
    requireObject(config);
    FluxConfig c;
    bool outGiven = false;
    std::vector<std::string> unknown;
    for (const auto& [key, value] : config.items()) {
        if (key.empty() || key[0] == '_') continue;
        if (key == "patch_size")
            readInt(value, key, kPatch);
        else if (key == "in_channels")
            c.inChannels = readInt(value, key, kInChannels);
        else if (key == "out_channels") {
            if (const auto v = readOptionalInt(value, key, kInChannels)) {
                c.outChannels = *v;
                outGiven = true;
            }
        } else if (key == "num_layers")
            c.layers = readInt(value, key, kBlocks);
        else if (key == "num_single_layers")
            c.singleLayers = readInt(value, key, kBlocks);
        else if (key == "attention_head_dim")
            c.headDim = readInt(value, key, kHeadDim);
        else if (key == "num_attention_heads")
            c.heads = readInt(value, key, kHeads);
        else if (key == "joint_attention_dim")
            c.jointAttentionDim = readInt(value, key, kTextDim);
        else if (key == "pooled_projection_dim")
            c.pooledProjectionDim = readInt(value, key, kTextDim);
        else if (key == "guidance_embeds")
            c.guidanceEmbeds = readBool(value, key);
        else if (key == "axes_dims_rope") {
            if (!value.is_array() || value.size() != 3) reject(key, value, "expected three position axes");
            for (std::size_t a = 0; a < 3; ++a) {
                c.axesDimsRope[a] = readInt(value[a], key, kAxis);
                if (c.axesDimsRope[a] % 2 != 0) reject(key, value, "every axis turns pairs of channels: even sizes");
            }
        } else if (!kKeys.contains(key))
            unknown.push_back(key);
    }
    if (!outGiven) c.outChannels = c.inChannels;
    if (c.inChannels % 4 != 0)
        reject("in_channels", given(config, "in_channels"), "a token holds 2 x 2 latent pixels: a multiple of 4");
    if (c.outChannels != c.inChannels)
        reject("out_channels", given(config, "out_channels"), "the FLUX pipelines unpack as many as in_channels");
    if (c.axesDimsRope[0] + c.axesDimsRope[1] + c.axesDimsRope[2] != c.headDim)
        reject("axes_dims_rope", given(config, "axes_dims_rope"),
               "the axes must sum to attention_head_dim (" + std::to_string(c.headDim) + ")");
    warnUnknownKeys(unknown);
    return c;
}

FluxConfig fluxConfigFromShapes(const std::map<std::string, std::vector<std::int64_t>>& shapes) {
    auto shapeOf = [&](const std::string& name, std::size_t rank) -> const std::vector<std::int64_t>& {
        const auto it = shapes.find(name);
        if (it == shapes.end()) throw std::runtime_error("no tensor '" + name + "' (a FLUX.1 transformer has one)");
        if (it->second.size() != rank)
            throw std::runtime_error("tensor '" + name + "' has " + std::to_string(it->second.size()) +
                                     " dimensions, expected " + std::to_string(rank));
        return it->second;
    };
    auto blocks = [&](const std::string& prefix) {
        int count = 0;
        for (const auto& [name, shape] : shapes) {
            if (name.rfind(prefix, 0) != 0) continue;
            const std::size_t end = name.find('.', prefix.size());
            const std::string index = name.substr(prefix.size(), end - prefix.size());
            if (index.empty() || index.size() > 4 || !std::all_of(index.begin(), index.end(), ::isdigit)) continue;
            count = std::max(count, std::stoi(index) + 1);
        }
        return count;
    };
    FluxConfig c;
    const auto& imgIn = shapeOf("img_in.weight", 2);
    const auto& txtIn = shapeOf("txt_in.weight", 2);
    const auto& vecIn = shapeOf("vector_in.in_layer.weight", 2);
    c.layers = blocks("double_blocks.");
    c.singleLayers = blocks("single_blocks.");
    if (c.layers < 1 && c.singleLayers < 1) throw std::runtime_error("no double_blocks.* or single_blocks.* tensors");
    const std::string norm =
        c.layers > 0 ? "double_blocks.0.img_attn.norm.query_norm.scale" : "single_blocks.0.norm.query_norm.scale";
    const std::int64_t hidden = imgIn[0], headDim = shapeOf(norm, 1)[0];
    if (headDim != 128)
        throw std::runtime_error("'" + norm + "' holds " + std::to_string(headDim) +
                                 " channels: FLUX.1 transformers have heads of 128 (other DiTs are not supported)");
    if (hidden % headDim != 0 || hidden / headDim > bounds::kMaxHeads)
        throw std::runtime_error("'img_in.weight' is " + std::to_string(hidden) + " wide: not a whole number of " +
                                 std::to_string(headDim) + "-wide heads");
    c.headDim = static_cast<int>(headDim);
    c.heads = static_cast<int>(hidden / headDim);
    c.axesDimsRope = {16, 56, 56};
    c.inChannels = c.outChannels = static_cast<int>(imgIn[1]);
    c.jointAttentionDim = static_cast<int>(txtIn[1]);
    c.pooledProjectionDim = static_cast<int>(vecIn[1]);
    c.guidanceEmbeds = shapes.contains("guidance_in.in_layer.weight");
    if (c.inChannels != 64)
        throw std::runtime_error("'img_in.weight' takes " + std::to_string(c.inChannels) +
                                 " features per token: FLUX.1 dev and schnell take 64 (Fill, Depth and Canny "
                                 "variants are not supported)");
    return c;
}

}  // namespace tessera
