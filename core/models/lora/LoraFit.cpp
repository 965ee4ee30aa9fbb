// LoraFit: names and shapes against the model; the family from widths, key layout and metadata
// (A1111 extensions-builtin/Lora/network.py NetworkOnDisk.detect_version: ss_base_model_version
// "sdxl_*" -> SDXL, ss_v2 "True" -> SD 2.x; kohya-ss sd-scripts networks/lora.py LORA_PREFIX_TEXT_ENCODER1/2
// for SDXL's two encoders; library/sdxl_original_unet.py for SDXL's SGM UNet names).
#include "core/models/lora/LoraFit.h"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>
#include <utility>

#include "core/formats/Safetensors.h"
#include "core/models/lora/LoraDelta.h"

namespace tessera {

namespace {

bool startsWithAny(std::string_view text, std::initializer_list<std::string_view> heads) {
    return std::any_of(heads.begin(), heads.end(), [&](std::string_view h) { return text.starts_with(h); });
}

bool endsWithAny(std::string_view text, std::initializer_list<std::string_view> tails) {
    return std::any_of(tails.begin(), tails.end(), [&](std::string_view t) { return text.ends_with(t); });
}

// What the file's modules say about the model they were trained on.
struct Observations {
    std::set<std::int64_t> contextWidths, textWidths, text2Widths;
    bool secondEncoderKeys = false, sgmUNetKeys = false;

    void observe(const LoraModule& m) {
        const std::string_view stem = m.stem;
        const bool text2 = startsWithAny(stem, {"lora_te2_", "text_encoder_2."});
        const bool text1 = !text2 && startsWithAny(stem, {"lora_te_", "lora_te1_", "text_encoder.", "text_model."});
        if (startsWithAny(stem, {"lora_te1_", "lora_te2_", "text_encoder_2."})) secondEncoderKeys = true;
        if (startsWithAny(stem, {"lora_unet_input_blocks_", "lora_unet_middle_block_", "lora_unet_output_blocks_"}))
            sgmUNetKeys = true;
        const LoraTensorInfo* down = m.algorithm == LoraAlgorithm::LoRA ? m.part(LoraPart::Down) : nullptr;
        if (down == nullptr || down->shape.size() < 2) return;
        const std::int64_t width = down->shape[1];
        if ((text1 || text2) && endsWithAny(stem, {"q_proj", "k_proj", "v_proj", "mlp_fc1", "mlp.fc1"}))
            (text2 ? text2Widths : textWidths).insert(width);
        else if (!text1 && !text2 &&
                 endsWithAny(stem, {"attn2_to_k", "attn2_to_v", "attn2.to_k", "attn2.to_v", "attn2.processor.to_k",
                                    "attn2.processor.to_v"}))
            contextWidths.insert(width);
    }
};

std::string metadataValue(const LoraFile& file, const std::string& key) {
    const auto it = file.metadata().find(key);
    return it == file.metadata().end() ? std::string() : it->second;
}

// The family the evidence points to, strongest first: widths, then key layout, then metadata.
void decideFamily(const LoraFile& file, const Observations& o, LoraFit& fit) {
    std::optional<SdFamily> byWidth, byKeys, byMetadata;
    // The context widths of SD 1.x (CLIP ViT-L), SD 2.x (OpenCLIP ViT-H) and SDXL (both encoders side by side).
    constexpr std::array<std::tuple<std::int64_t, SdFamily, std::string_view>, 3> kContexts{
        {{768, SdFamily::SD1, " (CLIP ViT-L, SD 1.x)"},
         {1024, SdFamily::SD2, " (OpenCLIP ViT-H, SD 2.x)"},
         {2048, SdFamily::SDXL, " (SDXL's two encoders)"}}};
    for (const std::int64_t w : o.contextWidths)
        for (const auto& [width, family, why] : kContexts)
            if (w == width) {
                byWidth = family;
                fit.evidence.push_back("attn2.to_k takes " + std::to_string(w) + "-wide text" + std::string(why));
            }
    for (const std::int64_t w : o.text2Widths)
        if (w == 1280) {
            if (!byWidth) byWidth = SdFamily::SDXL;
            fit.evidence.push_back("the second text encoder is 1280 wide (OpenCLIP bigG, SDXL)");
        }
    for (const std::int64_t w : o.textWidths) {
        if (w == 1024) {
            if (!byWidth) byWidth = SdFamily::SD2;
            fit.evidence.push_back("the text encoder is 1024 wide (OpenCLIP ViT-H, SD 2.x)");
        }
        if (w == 768) {
            if (!byWidth && !o.secondEncoderKeys) byWidth = SdFamily::SD1;
            fit.evidence.push_back("the text encoder is 768 wide (CLIP ViT-L)");
        }
    }
    if (o.secondEncoderKeys) {
        byKeys = SdFamily::SDXL;
        fit.evidence.push_back("keys lora_te1_* / lora_te2_* / text_encoder_2.*: two text encoders (SDXL)");
    }
    if (o.sgmUNetKeys) {
        byKeys = SdFamily::SDXL;
        fit.evidence.push_back("UNet keys in the SGM layout (lora_unet_input_blocks_*: kohya's SDXL names)");
    }
    const std::string base = metadataValue(file, "ss_base_model_version");
    const std::string arch = metadataValue(file, "modelspec.architecture");
    if (base.starts_with("sdxl_") || arch.starts_with("stable-diffusion-xl"))
        byMetadata = SdFamily::SDXL;
    else if (metadataValue(file, "ss_v2") == "True" || base.starts_with("sd_v2") ||
             arch.starts_with("stable-diffusion-v2"))
        byMetadata = SdFamily::SD2;
    else if (base.starts_with("sd_v1") || arch.starts_with("stable-diffusion-v1"))
        byMetadata = SdFamily::SD1;
    if (byMetadata) {
        std::string text = "metadata";
        if (!base.empty()) text += " ss_base_model_version = " + inQuotes(base);
        if (!metadataValue(file, "ss_v2").empty()) text += " ss_v2 = " + inQuotes(metadataValue(file, "ss_v2"));
        if (!arch.empty()) text += " modelspec.architecture = " + inQuotes(arch);
        fit.evidence.push_back(text);
    }
    fit.fileFamily = byWidth ? byWidth : byKeys ? byKeys : byMetadata;
}

}  // namespace

bool LoraFit::fits(SdFamily model) const {
    return matched > 0 && shapeMismatches.empty() && (!fileFamily || *fileFamily == model);
}

std::string LoraFit::verdict(SdFamily model) const {
    const std::string label(familyLabel(model));
    std::string text;
    if (fits(model)) {
        text = "fits " + label + ": " + std::to_string(matched) + " of " + std::to_string(modules) + " modules";
    } else if (fileFamily && *fileFamily != model) {
        std::string why;
        for (const std::string& e : evidence) why += (why.empty() ? "" : "; ") + e;
        text = "this LoRA is for " + std::string(familyLabel(*fileFamily)) + " (" + why + "), the model is " + label;
    } else if (!shapeMismatches.empty()) {
        text = std::to_string(shapeMismatches.size()) + " of " + std::to_string(modules) + " modules do not fit this " +
               label + " model: " + excerptList(shapeMismatches, 3);
    } else {
        text = "none of the LoRA's " + std::to_string(modules) + " modules names a module of this " + label + " model";
    }
    if (!unmatchedKeys.empty())
        text += "; " + std::to_string(unmatchedKeys.size()) + " keys name nothing: " + excerptList(unmatchedKeys, 3);
    return text;
}

LoraFit checkLoraFit(const LoraFile& file, const LoraNetwork& network, const LoraKeyMap& keys) {
    LoraFit fit;
    fit.unmatchedKeys = network.unknownKeys;
    Observations seen;
    for (const LoraModule& m : network.modules) {
        seen.observe(m);
        if (!isMergeable(m.algorithm)) {
            fit.notMerged.push_back(m.stem + " (" + std::string(toString(m.algorithm)) + ")");
            continue;
        }
        ++fit.modules;
        const LoraTarget* target = keys.find(m.stem);
        if (target == nullptr) {
            fit.unmatchedKeys.insert(fit.unmatchedKeys.end(), m.keys.begin(), m.keys.end());
            continue;
        }
        std::string why;
        const std::optional<LoraDeltaShape> shape = loraDeltaShape(m, why);
        std::int64_t numel = 1;
        for (const std::int64_t d : target->weightShape) numel *= d;
        if (!shape) {
            fit.shapeMismatches.push_back(why);
        } else if (target->weightShape.empty() || shape->rows != target->weightShape[0] || shape->numel != numel) {
            fit.shapeMismatches.push_back(m.stem + ": a delta of " + std::to_string(shape->rows) + " rows and " +
                                          std::to_string(shape->numel) + " elements for " + target->weight() + " " +
                                          shapeToString(target->weightShape));
        } else if ((m.part(LoraPart::DiffBias) || m.part(LoraPart::NormBias)) && !target->hasBias) {
            fit.shapeMismatches.push_back(m.stem + ": a bias difference for " + target->module + ", which has no bias");
        } else {
            ++fit.matched;
        }
    }
    std::sort(fit.unmatchedKeys.begin(), fit.unmatchedKeys.end());
    decideFamily(file, seen, fit);
    return fit;
}

}  // namespace tessera
