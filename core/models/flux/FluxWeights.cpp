#include "core/models/flux/FluxWeights.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/models/flux/FluxGraph.h"

namespace tessera {

namespace {

// What a BFL parameter is made of: diffusers tensors whose rows are concatenated in order, or
// one whose two halves swap places.
struct Source {
    std::vector<std::string> names;
    bool swapHalves = false;
};

// `bfl` = module + "." + leaf (weight, bias or scale); the diffusers module(s) it comes from.
Source sourceOf(const std::string& bfl) {
    const std::size_t dot = bfl.rfind('.');
    const std::string module = bfl.substr(0, dot), leaf = bfl.substr(dot + 1);
    auto one = [&](const std::string& m) { return Source{{m + "." + leaf}}; };
    auto rows = [&](std::initializer_list<const char*> parts, const std::string& prefix) {
        Source s;
        for (const char* p : parts) s.names.push_back(prefix + p + "." + leaf);
        return s;
    };
    static const std::vector<std::pair<std::string, std::string>> kFixed{
        {"img_in", "x_embedder"},
        {"txt_in", "context_embedder"},
        {"time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"},
        {"time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"},
        {"guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"},
        {"guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"},
        {"vector_in.in_layer", "time_text_embed.text_embedder.linear_1"},
        {"vector_in.out_layer", "time_text_embed.text_embedder.linear_2"},
        {"final_layer.linear", "proj_out"},
    };
    for (const auto& [from, to] : kFixed)
        if (module == from) return one(to);
    if (module == "final_layer.adaLN_modulation.1") return Source{{"norm_out.linear." + leaf}, true};
    // double_blocks.N.<rest> / single_blocks.N.<rest>
    const bool isDouble = bfl.rfind("double_blocks.", 0) == 0;
    const std::size_t blockEnd = module.find('.', module.find('.') + 1);
    const std::string index = module.substr(module.find('.') + 1, blockEnd - module.find('.') - 1);
    const std::string rest = module.substr(blockEnd + 1);
    const std::string d = (isDouble ? "transformer_blocks." : "single_transformer_blocks.") + index + ".";
    if (isDouble) {
        static const std::vector<std::pair<std::string, std::string>> kDouble{
            {"img_mod.lin", "norm1.linear"},
            {"txt_mod.lin", "norm1_context.linear"},
            {"img_attn.proj", "attn.to_out.0"},
            {"txt_attn.proj", "attn.to_add_out"},
            {"img_mlp.0", "ff.net.0.proj"},
            {"img_mlp.2", "ff.net.2"},
            {"txt_mlp.0", "ff_context.net.0.proj"},
            {"txt_mlp.2", "ff_context.net.2"},
            {"img_attn.norm.query_norm", "attn.norm_q"},
            {"img_attn.norm.key_norm", "attn.norm_k"},
            {"txt_attn.norm.query_norm", "attn.norm_added_q"},
            {"txt_attn.norm.key_norm", "attn.norm_added_k"},
        };
        if (rest == "img_attn.qkv") return rows({"attn.to_q", "attn.to_k", "attn.to_v"}, d);
        if (rest == "txt_attn.qkv") return rows({"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}, d);
        for (const auto& [from, to] : kDouble)
            if (rest == from) return Source{{d + to + (leaf == "scale" ? std::string(".weight") : "." + leaf)}};
    } else {
        if (rest == "linear1") return rows({"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}, d);
        if (rest == "linear2") return one(d + "proj_out");
        if (rest == "modulation.lin") return one(d + "norm.linear");
        if (rest == "norm.query_norm") return Source{{d + "attn.norm_q.weight"}};
        if (rest == "norm.key_norm") return Source{{d + "attn.norm_k.weight"}};
    }
    throw std::logic_error("FluxWeights: no diffusers name for " + bfl);
}

// The shape of part `i` of `bfl` (rows split evenly for q, k, v; linear1's MLP rows the rest).
std::vector<std::int64_t> partShape(const FluxConfig& c, const std::vector<std::int64_t>& shape, std::size_t parts,
                                    std::size_t i) {
    std::vector<std::int64_t> s = shape;
    if (parts == 1) return s;
    const std::int64_t D = c.hidden();
    s[0] = parts == 4 && i == 3 ? shape[0] - 3 * D : D;
    return s;
}

}  // namespace

TensorList fluxDiffusersTensors(const FluxConfig& config) {
    TensorList list;
    for (const auto& [name, shape] : fluxParameters(config)) {
        const Source s = sourceOf(name);
        for (std::size_t i = 0; i < s.names.size(); ++i)
            list.emplace_back(s.names[i], partShape(config, shape, s.names.size(), i));
    }
    return list;
}

std::map<std::string, HostTensor> fluxTensorsFromDiffusers(const FluxConfig& config,
                                                           std::map<std::string, HostTensor> tensors) {
    std::map<std::string, HostTensor> out;
    for (const auto& [name, shape] : fluxParameters(config)) {
        const Source s = sourceOf(name);
        HostTensor t;
        t.shape = shape;
        for (const std::string& part : s.names) {
            const auto it = tensors.find(part);
            if (it == tensors.end()) throw ModelError("no tensor '" + part + "' (a FLUX transformer has one)");
            t.data.insert(t.data.end(), it->second.data.begin(), it->second.data.end());
            tensors.erase(it);
        }
        if (static_cast<std::int64_t>(t.data.size()) != t.numel())
            throw ModelError(name + ": the diffusers tensors hold " + std::to_string(t.data.size()) +
                             " values, expected " + std::to_string(t.numel()));
        if (s.swapHalves) {
            const auto half = t.data.size() / 2;
            std::rotate(t.data.begin(), t.data.begin() + static_cast<std::ptrdiff_t>(half), t.data.end());
        }
        out.emplace(name, std::move(t));
    }
    return out;
}

}  // namespace tessera
