// SingleFileLayout: which Stable Diffusion family a single-file (LDM / SGM layout) checkpoint is and
// under which prefixes its models sit, told from its tensor names and shapes as diffusers'
// loaders/single_file_utils.py infer_diffusers_model_type does (keys of CHECKPOINT_KEY_NAMES).
// Internal to the single-file loader (SingleFileCheckpoint.h). Qt-free.
#pragma once

#include <string>

#include "core/formats/TensorFile.h"
#include "core/models/sd/SdModel.h"

namespace tessera::single_file {

// The UNet's prefix in every family, and two of its tensors the configurations read.
inline constexpr const char* kUNet = "model.diffusion_model.";
inline constexpr const char* kConvInKey = "model.diffusion_model.input_blocks.0.0.weight";
inline constexpr const char* kXlAddEmbedding = "model.diffusion_model.label_emb.0.0.weight";
// OpenCLIP ViT-H, SD 2.x's text encoder, is 1024 wide: the width that tells SD 2.x.
inline constexpr int kVitHWidth = 1024;

struct Layout {
    SdFamily family = SdFamily::SD1;
    std::string reason;  // which tensor decided the family
    std::string vae;     // "first_stage_model." (or "vae.")
    // SD1: "cond_stage_model.transformer." + "text_model." when the file has it; SD2:
    // "cond_stage_model.model."; SDXL: "conditioner.embedders.0.transformer." (+ "text_model.").
    std::string text;
    std::string text2;  // SDXL: "conditioner.embedders.1.model."; empty otherwise
    bool openClip() const { return family == SdFamily::SD2; }  // the first text encoder's layout
};

// The family and prefixes of `file`; ModelError naming `where` for a family Tessera does not run
// (inpainting, refiner, upscaler, ControlNet, InstructPix2Pix, Playground: recognised and named)
// or a file missing one of the UNet, the VAE and the text encoder(s).
Layout detectLayout(const TensorFile& file, const std::string& where);

// The prefixes a checkpoint of `family` is written with (the first VAE prefix, transformers'
// text_model. names for CLIP ViT-L).
Layout standardLayout(SdFamily family);

}  // namespace tessera::single_file
