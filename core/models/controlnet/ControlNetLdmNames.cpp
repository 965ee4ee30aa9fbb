// diffusers convert_controlnet_checkpoint (loaders/single_file_utils.py) read backwards, with the
// hint encoder's last index following its width list rather than fixed at 14.
#include "core/models/controlnet/ControlNetLdmNames.h"

#include <cstring>
#include <optional>
#include <string_view>

#include "core/models/sd/LdmNames.h"

namespace tessera {

namespace {

// "<head><k>.<rest>" -> (k, rest); nullopt for another shape of name.
std::optional<std::pair<int, std::string>> indexedName(std::string_view name, std::string_view head) {
    if (!name.starts_with(head)) return std::nullopt;
    const std::size_t dot = name.find('.', head.size());
    if (dot == std::string_view::npos || dot == head.size() || dot - head.size() > 6) return std::nullopt;
    int k = 0;
    for (std::size_t i = head.size(); i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9') return std::nullopt;
        k = k * 10 + (name[i] - '0');
    }
    return std::make_pair(k, std::string(name.substr(dot + 1)));
}

}  // namespace

std::string controlNetLdmName(const std::string& name, const ControlNetConfig& config) {
    const std::string hint = "controlnet_cond_embedding.";
    if (name.starts_with(hint)) {
        const std::string rest = name.substr(hint.size());
        const int steps = static_cast<int>(config.conditioningEmbeddingOutChannels.size()) - 1;
        if (rest.starts_with("conv_in.")) return "input_hint_block.0." + rest.substr(8);
        if (rest.starts_with("conv_out."))
            return "input_hint_block." + std::to_string(2 * (2 * steps + 1)) + "." + rest.substr(9);
        if (const auto block = indexedName(rest, "blocks."); block && block->first < 2 * steps)
            return "input_hint_block." + std::to_string(2 * block->first + 2) + "." + block->second;
        return {};
    }
    if (const auto zero = indexedName(name, "controlnet_down_blocks."))
        return "zero_convs." + std::to_string(zero->first) + ".0." + zero->second;
    if (name.starts_with("controlnet_mid_block.")) return "middle_block_out.0." + name.substr(21);
    return single_file::unetLdmName(name, config.unet);
}

}  // namespace tessera
