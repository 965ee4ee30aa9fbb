// FLUX.1 from the files users download rather than a diffusers folder:
//  - the transformer as Black Forest Labs ship it (flux1-dev.safetensors, flux1-schnell.safetensors:
//    BFL's names, FluxGraph's own), bare or under ComfyUI's "model.diffusion_model." prefix, in
//    F32/F16/BF16 or fp8 (plain casts, or ComfyUI's scaled fp8: core/formats/ScaledFp8.h);
//  - the 16-channel VAE, ae.safetensors (LDM names encoder.* / decoder.*, no quant convs), or the
//    same names under "vae." inside a ComfyUI all-in-one checkpoint beside the transformer;
//  - the text encoders' files (clip_l.safetensors, t5xxl_*.safetensors), only recorded here.
// Detection follows diffusers' loaders/single_file_utils.py infer_diffusers_model_type (the key
// double_blocks.0.img_attn.norm.key_norm.scale, bare or prefixed); the VAE's names are converted by
// the Stable Diffusion single-file loader's LDM map (core/models/sd/SingleFilePlan.h ldmVaePlan), as
// diffusers' convert_ldm_vae_checkpoint serves both. Every tensor is checked against the header
// before any data is read. Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/ScaledFp8.h"
#include "core/models/flux/FluxConfig.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera {

// The key that makes a file a FLUX.1 transformer (diffusers' CHECKPOINT_KEY_NAMES["flux"]).
inline constexpr const char* kFluxDetectionKey = "double_blocks.0.img_attn.norm.key_norm.scale";

// The files of one FLUX.1 model.
struct FluxFiles {
    std::string transformer;  // flux1-dev.safetensors, an fp8 file, or a ComfyUI all-in-one checkpoint
    std::string vae;          // ae.safetensors; empty: the transformer file's own "vae." tensors
    std::string clip;         // clip_l.safetensors: recorded for the text encoders' loader, not read here
    std::string t5;           // t5xxl_*.safetensors: likewise
};

// Whether `path` is a safetensors file holding a FLUX.1 transformer under BFL's names (bare or
// under "model.diffusion_model."). Reads the header alone; false for anything unreadable.
bool isFluxSingleFile(const std::string& path);

// FLUX.1's VAE (black-forest-labs/flux src/flux/util.py AutoEncoderParams; diffusers'
// scripts/convert_flux_to_diffusers.py): block_out_channels [128, 256, 512, 512], 2 resnets per
// block, GroupNorm 32, 16 latent channels, no quant_conv / post_quant_conv, scaling 0.3611, shift 0.1159.
VaeConfig fluxVaeConfig();

// What the transformer file's header tells; no tensor data read but the scaled-fp8 scales.
struct FluxSingleFileInfo {
    std::string path;
    std::string prefix;                // "" or "model.diffusion_model."
    FluxConfig config;                 // from the tensors' shapes (FluxConfig.h fluxConfigFromShapes)
    bool hasVae = false;               // the file also holds ae.safetensors' names (a ComfyUI all-in-one file)
    std::string vaePrefix;             // ... under this prefix ("vae." in ComfyUI's files)
    std::vector<std::string> ignored;  // tensors outside the transformer (the VAE, text encoders, ...)
};

// Reads and checks the transformer file's header: the prefix, the config (bounded by
// flux_config_bounds), every parameter FluxGraph declares present with its shape and a dtype that
// reads as float32, no unknown tensor among the transformer's modules, the scaled-fp8 scales.
// Throws ModelError naming the file and the tensor (the Fill variant's 384-wide img_in refused
// by name).
FluxSingleFileInfo inspectFluxSingleFile(const std::string& path);

struct FluxFilesOptions {
    // SHA-256 of the transformer file (FluxModel::sha256) and of a separate VAE file, computed on
    // a second thread while the tensors are read. Skip leaves them empty.
    FileDigest digest = FileDigest::Compute;
    LoadProgressCallback progress;    // "reading the transformer", "reading the VAE" by stored bytes
    VaeConfig vae = fluxVaeConfig();  // the VAE's sizes: FLUX.1's (smaller ones for tests)
};

// A FLUX.1 model loaded from files, and how, for the run record.
struct FluxFilesModel {
    std::shared_ptr<const FluxModel> model;
    FluxFiles files;              // as given, `vae` set to the file the VAE was read from
    FluxSingleFileInfo info;      // the transformer file
    WeightsReading transformer;   // its tensors' dtypes, which were fp8 and how they were read
    std::string vaePrefix;        // the VAE's names in its file: "" (ae.safetensors) or "vae."
    SingleFileComponent vaePart;  // the VAE's parameters, tensors read and their stored dtypes
    std::string vaeSha256;        // of a separate VAE file; "" for an all-in-one or when skipped
};

// Loads the transformer and the VAE (files.vae, else the transformer file's own "vae." tensors),
// both checked before either is read, into a FluxModel named after the transformer file. Throws
// ModelError naming the file and what is wrong: no VAE ("...: no VAE; give --vae ae.safetensors
// (the 16-channel FLUX.1 VAE)"), a VAE of other latent channels (an SD VAE's 4), a missing or
// misshapen tensor, a non-finite value, more weights than this process can hold as float32 (the
// check comes before any is read). clip and t5 are kept in `files` unread.
FluxFilesModel loadFluxFiles(const FluxFiles& files, const FluxFilesOptions& options = {});

}  // namespace tessera
