// LoraKeyMap: every name a LoRA file may give a module of one Stable Diffusion model, built from the
// model's own tensor list, so that kohya's underscored names ("lora_unet_down_blocks_0_attentions_0_
// proj_in", where "down_blocks", "proj_in" and "to_q" hold underscores themselves) are never split
// back into dots: they are looked up. A1111 does the same with its dictionary of the loaded model's
// modules (extensions-builtin/Lora/networks.py assign_network_names_to_compvis_modules,
// convert_diffusers_name_to_compvis), ComfyUI with its key_map (comfy/lora.py model_lora_keys_unet,
// model_lora_keys_clip). Qt-free.
//
// Names registered for a module of diffusers path P (UNet) or transformers path P (text encoders):
//   UNet     lora_unet_<P with "." -> "_">         kohya SD 1.x / 2.x (sd-scripts trains the diffusers UNet)
//            lora_unet_<LDM(P) with "." -> "_">    kohya SDXL (sd-scripts' SdxlUNet2DConditionModel has
//                                                  the SGM layout: input_blocks, in_layers, op, ...)
//            diffusion_model.<LDM(P)>              ComfyUI's generic key
//            lycoris_<P with "." -> "_">           LyCORIS' old prefix
//            unet.<P>, <P>                         diffusers / PEFT
//            unet.<…attnN.processor.to_q>, <…>     diffusers attention processors (to_out.0 -> to_out)
//   text     lora_te_ / lora_te1_ <P with "." -> "_">, text_encoder.<P>, <P>, text_encoder.<…self_attn.to_q>
//   text 2   lora_te2_ <P with "." -> "_">, text_encoder_2.<P>, text_encoder_2.<…self_attn.to_q>  (SDXL)
// LDM(P) is core/models/sd/LdmNames.h unetLdmName (kohya-ss sd-scripts library/sdxl_model_util.py
// make_unet_conversion_map; diffusers loaders/single_file_utils.py convert_ldm_unet_checkpoint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

enum class LoraComponent { UNet, TextEncoder, TextEncoder2 };
// "unet", "text_encoder", "text_encoder_2": diffusers' component names.
std::string_view toString(LoraComponent);

// A module of the model a LoRA stem names.
struct LoraTarget {
    LoraComponent component = LoraComponent::UNet;
    std::string module;                     // "down_blocks.0.attentions.0.proj_in"
    std::vector<std::int64_t> weightShape;  // of module + ".weight"
    bool hasBias = false;                   // module + ".bias" exists
    std::string weight() const { return module + ".weight"; }
    std::string bias() const { return module + ".bias"; }
};

class LoraKeyMap {
public:
    // From the tensor lists of a model of `family` (names and shapes; UNet under diffusers' names,
    // text encoders under transformers' CLIPTextModel names); `text2` for SDXL's second encoder
    // (empty otherwise). `unetConfig` gives the LDM names.
    LoraKeyMap(SdFamily family, const UNetCondConfig& unetConfig, const TensorList& unet, const TensorList& text,
               const TensorList& text2 = {});
    // The same for a loaded model (its tensors' names and shapes; no data is copied).
    static LoraKeyMap forModel(const SdModel& model);

    SdFamily family() const { return family_; }
    // The module `stem` names, or nullptr.
    const LoraTarget* find(std::string_view stem) const;
    // Every module that can be targeted (Linear, Conv2d, norm: every tensor ending in ".weight").
    const std::vector<LoraTarget>& targets() const { return targets_; }
    // Names registered for two different modules (kept out of the map); empty for every SD model.
    const std::vector<std::string>& ambiguousNames() const { return ambiguous_; }
    std::size_t nameCount() const { return byName_.size(); }

private:
    static constexpr std::size_t kAmbiguous = static_cast<std::size_t>(-1);
    void add(LoraComponent component, const TensorList& tensors, const UNetCondConfig* unetConfig);
    void name(std::string name, std::size_t target);

    SdFamily family_ = SdFamily::SD1;
    std::vector<LoraTarget> targets_;
    std::map<std::string, std::size_t, std::less<>> byName_;
    std::vector<std::string> ambiguous_;
};

// kohya's spelling of a module path: every "." replaced by "_" (sd-scripts networks/lora.py
// create_modules).
std::string underscored(std::string_view path);

}  // namespace tessera
