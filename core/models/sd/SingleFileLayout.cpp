// Family detection of single-file checkpoints: diffusers' loaders/single_file_utils.py
// infer_diffusers_model_type (its tests in their order), then Tessera's own tests for what diffusers
// would read as SD 1.x without a word.
#include "core/models/sd/SingleFileLayout.h"

#include <cstring>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/models/clip/ClipTextGraph.h"

namespace tessera::single_file {

namespace {

using input_limits::kNameChars;

// The keys diffusers' infer_diffusers_model_type tests (CHECKPOINT_KEY_NAMES), and the prefixes.
constexpr const char* kV2Key = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight";
constexpr const char* kXlBaseKey = "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias";
constexpr const char* kXlRefinerKey = "conditioner.embedders.0.model.transformer.resblocks.9.mlp.c_proj.bias";
constexpr const char* kUpscaleKey = "model.diffusion_model.input_blocks.10.0.skip_connection.bias";
constexpr const char* kPlaygroundKey = "edm_mean";
constexpr const char* kControlNetKeys[] = {"control_model.time_embed.0.weight",
                                           "controlnet_cond_embedding.conv_in.weight"};
constexpr const char* kClip = "cond_stage_model.transformer.";
constexpr const char* kClipKey = "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight";
constexpr const char* kOpenClip = "cond_stage_model.model.";
constexpr const char* kOpenClipKey = "cond_stage_model.model.token_embedding.weight";
// SDXL base (SGM's GeneralConditioner): CLIP ViT-L in transformers' names, OpenCLIP bigG.
constexpr const char* kXlClip = "conditioner.embedders.0.transformer.";
constexpr const char* kXlOpenClip = "conditioner.embedders.1.model.";
constexpr const char* kXlOpenClipKey = "conditioner.embedders.1.model.token_embedding.weight";
constexpr const char* kXlRefinerOpenClipKey = "conditioner.embedders.0.model.token_embedding.weight";
constexpr const char* kVaePrefixes[] = {"first_stage_model.", "vae."};  // diffusers' LDM_VAE_KEYS

[[noreturn]] void refuseFamily(const std::string& where, const std::string& what, const char* key) {
    throw ModelError(where + ": " + what + " (it has " + inQuotes(key, kNameChars) +
                     "), which is not supported yet; Tessera runs Stable Diffusion 1.x, 2.x and SDXL base checkpoints");
}

// An example of the file's names for messages about what it is not.
std::string someNames(const TensorFile& file) {
    std::string names;
    for (std::size_t i = 0; i < file.tensors().size() && i < 3; ++i)
        names += (i ? ", " : "") + inQuotes(file.tensors()[i].name, kNameChars);
    return names.empty() ? "no tensors" : names;
}

// SDXL's refiner UNet takes 5 size ids of 256 besides bigG's 1280-wide pooled text (SGM's
// adm_in_channels 2560; SDXL base: 2816, six ids).
constexpr std::int64_t kXlRefinerAdmChannels = 2560;

// A UNet with SGM's text-time embedding (label_emb: SDXL's pooled text and size ids; no SD 1.x or
// 2.x text-to-image UNet has one) in a file without the text encoder that tells SDXL apart: an SDXL
// checkpoint with a part missing, named as such rather than read as SD 1.x without a text encoder.
void refuseSdxlWithoutTextEncoders(const TensorFile& file, const std::string& where) {
    const TensorFileEntry* add = file.find(kXlAddEmbedding);
    if (add == nullptr) return;
    const std::string unet = std::string("by its UNet (it has ") + inQuotes(kXlAddEmbedding, kNameChars) +
                             ", the text-time embedding only SDXL's UNet has)";
    if (add->shape.size() == 2 && add->shape[1] == kXlRefinerAdmChannels)
        throw ModelError(where + ": an SDXL refiner checkpoint " + unet +
                         " without its text encoder; SDXL refiners are not supported yet; Tessera runs Stable "
                         "Diffusion 1.x, 2.x and SDXL base checkpoints");
    const std::string position = std::string(kClipTextPrefix) + "embeddings.position_embedding.weight";
    const bool clipL = file.has(std::string(kXlClip) + position) ||
                       file.has(std::string(kXlClip) + position.substr(std::strlen(kClipTextPrefix)));
    std::string missing =
        clipL ? std::string() : "its first text encoder (CLIP ViT-L under " + inQuotes(kXlClip, kNameChars) + ") and ";
    missing += "its second text encoder (OpenCLIP bigG under " + inQuotes(kXlOpenClip, kNameChars) + "; looked for " +
               inQuotes(kXlOpenClipKey, kNameChars) + ")";
    throw ModelError(where + ": an SDXL checkpoint " + unet + " without " + missing +
                     "; Tessera needs the UNet, the VAE and both text encoders of SDXL base in one file");
}

// The diffusers tests in their order, then Tessera's: the model must be an SD 1.x/2.x UNet in LDM
// names. diffusers falls back to "v1" for anything unmatched; Tessera names what it looked for.
SdFamily detectFamily(const TensorFile& file, const std::string& where, std::string& reason) {
    const TensorFileEntry* convIn = file.find(kConvInKey);
    const TensorFileEntry* v2 = file.find(kV2Key);
    const bool v2Wide = v2 != nullptr && !v2->shape.empty() && v2->shape.back() == kVitHWidth;
    if (convIn != nullptr && convIn->shape.size() == 4 && convIn->shape[1] == 9)
        throw ModelError(where + ": an inpainting checkpoint (" + inQuotes(kConvInKey, kNameChars) +
                         " takes 9 input channels), which is not supported yet; Tessera runs text-to-image and "
                         "image-to-image Stable Diffusion 1.x and 2.x checkpoints (4 input channels)");
    if (v2Wide) {
        reason = std::string(inQuotes(kV2Key, kNameChars)) +
                 " attends to 1024-wide text (OpenCLIP ViT-H), as diffusers tests";
        return SdFamily::SD2;
    }
    if (file.has(kPlaygroundKey))
        refuseFamily(where, "a Playground v2.5 checkpoint (an SDXL-type model)", kPlaygroundKey);
    // diffusers tests SDXL by block 9 of an OpenCLIP encoder; a smaller (test) model is told by the
    // same encoder's token table.
    for (const char* key : {kXlBaseKey, kXlOpenClipKey})
        if (file.has(key)) {
            reason = std::string("it has ") + inQuotes(key, kNameChars) +
                     ", the second (OpenCLIP bigG) text encoder of SDXL base" +
                     (key == kXlBaseKey ? ", as diffusers tests" : "");
            return SdFamily::SDXL;
        }
    for (const char* key : {kXlRefinerKey, kXlRefinerOpenClipKey})
        if (file.has(key))
            throw ModelError(where + ": an SDXL refiner checkpoint (it has " + inQuotes(key, kNameChars) +
                             ", OpenCLIP bigG as its only text encoder). SDXL refiners are not supported yet; Tessera "
                             "runs Stable Diffusion 1.x, 2.x and SDXL base checkpoints");
    if (file.has(kUpscaleKey)) refuseFamily(where, "a Stable Diffusion x4 upscaler checkpoint", kUpscaleKey);
    for (const char* key : kControlNetKeys)
        if (file.has(key)) refuseFamily(where, "a ControlNet checkpoint", key);
    refuseSdxlWithoutTextEncoders(file, where);
    if (convIn == nullptr) {
        const bool diffusersNames = file.has("conv_in.weight") || file.has("down_blocks.0.resnets.0.conv1.weight");
        throw ModelError(where + ": not a Stable Diffusion checkpoint in the original (LDM) layout: no " +
                         inQuotes(kConvInKey, kNameChars) + " (the UNet), nor SDXL's " +
                         inQuotes(kXlBaseKey, kNameChars) + "; it holds " + someNames(file) +
                         (diffusersNames ? ". These are diffusers names (a UNet2DModel or UNet2DConditionModel "
                                           "weights file): give the folder that holds it with its config.json"
                                         : ""));
    }
    if (convIn->shape.size() == 4 && convIn->shape[1] == 8)
        refuseFamily(where, "an InstructPix2Pix checkpoint (8 input channels)", kConvInKey);
    // diffusers would say "v1" here. A UNet narrower than SD 2.x's with SD 2.x's OpenCLIP text
    // encoder (test models) is SD 2.x by its layout; real checkpoints give the same answer.
    if (file.has(kOpenClipKey) && !file.has(kClipKey)) {
        reason = std::string("the text encoder is OpenCLIP (") + inQuotes(kOpenClipKey, kNameChars) + ") and " +
                 inQuotes(kV2Key, kNameChars) + (v2 ? " is narrower than 1024" : " is absent");
        return SdFamily::SD2;
    }
    reason = std::string("no SD 2.x / SDXL marker (") + inQuotes(kV2Key, kNameChars) + " " +
             (v2 ? "attends to " + std::to_string(v2->shape.back()) + "-wide text" : std::string("absent")) +
             "): diffusers' default, SD 1.x";
    return SdFamily::SD1;
}

}  // namespace

Layout detectLayout(const TensorFile& file, const std::string& where) {
    Layout layout;
    layout.family = detectFamily(file, where, layout.reason);
    for (const char* prefix : kVaePrefixes)
        if (file.has(std::string(prefix) + "encoder.conv_in.weight")) layout.vae = prefix;
    if (layout.vae.empty())
        throw ModelError(where + ": no VAE: looked for " +
                         inQuotes("first_stage_model.encoder.conv_in.weight", kNameChars) + " (or " +
                         inQuotes("vae.encoder.conv_in.weight", kNameChars) +
                         "); Tessera needs the UNet, the VAE and the text "
                         "encoder in one file");
    if (layout.family == SdFamily::SD2) {
        if (!file.has(kOpenClipKey))
            throw ModelError(where + ": no text encoder: an SD 2.x checkpoint holds OpenCLIP ViT-H under " +
                             inQuotes(kOpenClip, kNameChars) + "; looked for " + inQuotes(kOpenClipKey, kNameChars));
        layout.text = kOpenClip;
        return layout;
    }
    const bool xl = layout.family == SdFamily::SDXL;
    const std::string clip = xl ? kXlClip : kClip;
    const std::string position = std::string(kClipTextPrefix) + "embeddings.position_embedding.weight";
    if (file.has(clip + position)) {
        layout.text = clip + kClipTextPrefix;
    } else if (file.has(clip + position.substr(std::strlen(kClipTextPrefix)))) {
        layout.text = clip;  // a flattened CLIPTextModel's names, which diffusers accepts too
    } else {
        throw ModelError(
            where + ": no text encoder: " +
            (xl ? "an SDXL checkpoint holds CLIP ViT-L under " : "an SD 1.x checkpoint holds CLIP ViT-L under ") +
            inQuotes(clip, kNameChars) + "; looked for " + inQuotes(clip + position, kNameChars) +
            (xl || file.has(kOpenClipKey) ? "" : std::string(" (SD 2.x: ") + inQuotes(kOpenClipKey, kNameChars) + ")"));
    }
    if (xl) layout.text2 = kXlOpenClip;
    return layout;
}

Layout standardLayout(SdFamily family) {
    Layout layout;
    layout.family = family;
    layout.vae = kVaePrefixes[0];
    layout.text = family == SdFamily::SD2    ? std::string(kOpenClip)
                  : family == SdFamily::SDXL ? std::string(kXlClip) + kClipTextPrefix
                                             : std::string(kClip) + kClipTextPrefix;
    if (family == SdFamily::SDXL) layout.text2 = kXlOpenClip;
    return layout;
}

}  // namespace tessera::single_file
