// LoraKeyMap: the names of every module, registered from the model's tensor list (A1111
// extensions-builtin/Lora/networks.py load_network's lookups; ComfyUI comfy/lora.py
// model_lora_keys_unet / model_lora_keys_clip; kohya-ss sd-scripts networks/lora.py create_modules).
#include "core/models/lora/LoraKeyMap.h"

#include <algorithm>
#include <array>
#include <set>
#include <utility>

#include "core/models/sd/LdmNames.h"

namespace tessera {

namespace {

constexpr std::string_view kWeight = ".weight";

// diffusers' attention-processor spelling of an attention projection ("…attn1.to_q" ->
// "…attn1.processor.to_q", "…attn2.to_out.0" -> "…attn2.processor.to_out"); empty for other modules.
std::string processorPath(std::string_view path) {
    for (const std::string_view attn : {".attn1.", ".attn2."}) {
        const std::size_t at = path.rfind(attn);
        if (at == std::string_view::npos) continue;
        const std::string_view head = path.substr(0, at + attn.size());
        const std::string_view tail = path.substr(at + attn.size());
        if (tail == "to_q" || tail == "to_k" || tail == "to_v")
            return std::string(head) + "processor." + std::string(tail);
        if (tail == "to_out.0") return std::string(head) + "processor.to_out";
    }
    return {};
}

// The text encoder's attention in diffusers' old processor spelling ("self_attn.q_proj" ->
// "self_attn.to_q"; diffusers loaders/lora_conversion_utils.py _convert_text_encoder_lora_key).
std::string textProcessorPath(std::string_view path) {
    constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kRenames{
        {{".self_attn.q_proj", ".self_attn.to_q"},
         {".self_attn.k_proj", ".self_attn.to_k"},
         {".self_attn.v_proj", ".self_attn.to_v"},
         {".self_attn.out_proj", ".self_attn.to_out"}}};
    for (const auto& [from, to] : kRenames)
        if (path.ends_with(from)) return std::string(path.substr(0, path.size() - from.size())) + std::string(to);
    return {};
}

}  // namespace

std::string_view toString(LoraComponent c) {
    switch (c) {
        case LoraComponent::UNet:
            return "unet";
        case LoraComponent::TextEncoder:
            return "text_encoder";
        case LoraComponent::TextEncoder2:
            return "text_encoder_2";
    }
    return "?";
}

std::string underscored(std::string_view path) {
    std::string out(path);
    std::replace(out.begin(), out.end(), '.', '_');
    return out;
}

LoraKeyMap::LoraKeyMap(SdFamily family, const UNetCondConfig& unetConfig, const TensorList& unet,
                       const TensorList& text, const TensorList& text2)
    : family_(family) {
    add(LoraComponent::UNet, unet, &unetConfig);
    add(LoraComponent::TextEncoder, text, nullptr);
    if (!text2.empty()) add(LoraComponent::TextEncoder2, text2, nullptr);
    std::sort(ambiguous_.begin(), ambiguous_.end());
}

LoraKeyMap LoraKeyMap::forModel(const SdModel& model) {
    const auto listOf = [](const std::map<std::string, HostTensor>& tensors) {
        TensorList list;
        list.reserve(tensors.size());
        for (const auto& [name, t] : tensors) list.emplace_back(name, t.shape);
        return list;
    };
    return LoraKeyMap(model.family, model.unet->config(), listOf(model.unet->tensors()),
                      listOf(model.textEncoder->tensors()),
                      model.textEncoder2 ? listOf(model.textEncoder2->tensors()) : TensorList{});
}

const LoraTarget* LoraKeyMap::find(std::string_view stem) const {
    const auto it = byName_.find(stem);
    return it == byName_.end() || it->second == kAmbiguous ? nullptr : &targets_[it->second];
}

void LoraKeyMap::name(std::string name, std::size_t target) {
    const auto [it, added] = byName_.emplace(std::move(name), target);
    if (added || it->second == target) return;
    // Two modules under one name: neither is reachable by it, and the map says so.
    if (it->second != kAmbiguous) ambiguous_.push_back(it->first);
    it->second = kAmbiguous;
}

void LoraKeyMap::add(LoraComponent component, const TensorList& tensors, const UNetCondConfig* unetConfig) {
    std::set<std::string> biases;
    for (const auto& [name, shape] : tensors)
        if (name.ends_with(".bias")) biases.insert(name.substr(0, name.size() - 5));
    for (const auto& [name, shape] : tensors) {
        if (!name.ends_with(kWeight)) continue;
        const std::string path = name.substr(0, name.size() - kWeight.size());
        const std::size_t index = targets_.size();
        targets_.push_back(LoraTarget{component, path, shape, biases.count(path) != 0});
        const std::string flat = underscored(path);
        switch (component) {
            case LoraComponent::UNet: {
                const std::string ldmWeight = single_file::unetLdmName(name, *unetConfig);
                if (ldmWeight.ends_with(kWeight)) {
                    const std::string ldm = ldmWeight.substr(0, ldmWeight.size() - kWeight.size());
                    this->name("lora_unet_" + underscored(ldm), index);
                    this->name("diffusion_model." + ldm, index);
                }
                this->name("lora_unet_" + flat, index);
                this->name("lycoris_" + flat, index);
                this->name("unet." + path, index);
                this->name(path, index);
                if (const std::string processor = processorPath(path); !processor.empty()) {
                    this->name("unet." + processor, index);
                    this->name(processor, index);
                }
                break;
            }
            case LoraComponent::TextEncoder:
                this->name("lora_te_" + flat, index);
                this->name("lora_te1_" + flat, index);
                this->name("text_encoder." + path, index);
                this->name(path, index);
                if (const std::string processor = textProcessorPath(path); !processor.empty())
                    this->name("text_encoder." + processor, index);
                break;
            case LoraComponent::TextEncoder2:
                this->name("lora_te2_" + flat, index);
                this->name("text_encoder_2." + path, index);
                if (const std::string processor = textProcessorPath(path); !processor.empty())
                    this->name("text_encoder_2." + processor, index);
                break;
        }
    }
}

}  // namespace tessera
