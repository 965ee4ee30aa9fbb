// SingleFileVae: a separate VAE that replaces a Stable Diffusion model's own for the decode and the
// encode, as A1111's "SD VAE" setting does (modules/sd_vae.py load_vae, _load_vae_dict: the file's
// state dict loaded strictly into the model's first_stage_model). Read from:
//  - a single file in the original LDM names (encoder.down.0.block.0.norm1.weight, mid.attn_1's
//    q/k/v/proj_out as 1x1 convolutions), bare as vae-ft-mse-840000-ema-pruned and sdxl_vae keep
//    them, or under "first_stage_model." / "vae." as diffusers' single-file loader strips them
//    (loaders/single_file_utils.py LDM_VAE_KEYS, convert_ldm_vae_checkpoint);
//  - a single file in diffusers' AutoencoderKL names (diffusion_pytorch_model.safetensors; ComfyUI
//    tells them by decoder.up_blocks.0.resnets.0.norm1.weight, comfy/sd.py VAE);
//  - a diffusers AutoencoderKL folder (config.json and its weights), or a pipeline folder's vae/.
// A file is .safetensors, or a pickled .pt/.ckpt read by the restricted reader (core/formats/
// TensorFile.h: nothing in it runs), its state dict under "state_dict" where a training run saved
// it; tensors outside the VAE (A1111 drops the "loss." discriminator and model_ema's counters) are
// ignored. Every tensor is checked against the model's VAE configuration before any is read, and
// the VAE keeps that configuration: its latent scaling stays the model's (A1111 loads only the
// weights). Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/TensorFile.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/vae/VaeConfig.h"
#include "core/models/vae/VaeModel.h"

namespace tessera {

// The names a VAE's tensors are held under.
enum class VaeNames { Ldm, Diffusers };
std::string_view toString(VaeNames);  // "LDM", "diffusers"

// What the file's header (or the folder's config.json and header) tells; no tensor data read.
struct SingleFileVaeInfo {
    std::string path;         // as given: the file or the folder
    std::string weightsFile;  // the file read: `path`, or the folder's weights file (the first shard)
    VaeNames names = VaeNames::Ldm;
    std::string prefix;  // LDM names under it: "", "first_stage_model." or "vae."
    TensorContainer container = TensorContainer::Safetensors;
    std::string reader;                // TensorFile::description(): "safetensors", or the restricted reader's words
    SingleFileComponent part;          // the VAE's parameters, tensors read and stored dtypes
    std::vector<std::string> ignored;  // tensors the VAE does not use (loss.*, model_ema.*, ...)
    std::string sha256;                // of the weights file; "" when skipped
    bool pickle() const { return container == TensorContainer::TorchCheckpoint; }
};

struct SingleFileVaeOptions {
    FileDigest digest = FileDigest::Compute;  // the weights file's SHA-256 (A1111's "VAE hash")
    // "reading the VAE" by bytes of tensor data, then "hashing the file" while the digest finishes.
    LoadProgressCallback progress;
};

// `modelVae`'s sizes for messages: "block_out_channels [8, 8, 16, 16], 1 resnet per block, GroupNorm
// 4, 4 latent channels".
std::string describeVaeSizes(const VaeConfig& modelVae);

// Reads and checks `path` against `modelVae`, the configuration of the VAE it replaces (`model`
// names that model in messages), without reading tensor data; hashes the weights file when
// options.digest says so. Throws ModelError:
//  - naming the VAE and the model ("'x.safetensors' does not fit the VAE of 'sd1' (block_out_channels
//    [8, 8, 16, 16], ...): tensor 'encoder.conv_in.weight' ...: expected [8, 3, 3, 3], found
//    [128, 3, 3, 3]") for a missing tensor, a wrong shape, tensors inside the encoder or decoder
//    that configuration has no place for, or a folder whose config.json differs in a size;
//  - for a file that holds no VAE (naming the keys looked for), a dtype other than F32/F16/BF16, a
//    checkpoint the restricted reader refuses (its words), an unreadable file or folder.
SingleFileVaeInfo inspectSingleFileVae(const std::string& path, const VaeConfig& modelVae, const std::string& model,
                                       const SingleFileVaeOptions& options = {});

struct SingleFileVae {
    std::shared_ptr<const VaeModel> vae;  // with `modelVae`'s configuration, float32, every value finite
    SingleFileVaeInfo info;
};

// inspectSingleFileVae, then every tensor read, upcast to float32 and checked finite (ModelError
// naming the tensor otherwise).
SingleFileVae loadSingleFileVae(const std::string& path, const VaeConfig& modelVae, const std::string& model,
                                const SingleFileVaeOptions& options = {});

}  // namespace tessera
