// SingleFileCheckpoint: a Stable Diffusion 1.x / 2.x checkpoint in the original LDM layout, one
// .safetensors file holding the UNet (model.diffusion_model.*), the VAE (first_stage_model.*) and
// the text encoder (cond_stage_model.*), or an SDXL base checkpoint in SGM's layout (text encoders
// conditioner.embedders.0.transformer.* = CLIP ViT-L in transformers' names and
// conditioner.embedders.1.model.* = OpenCLIP bigG with its fused q/k/v in_proj and transposed
// text_projection), as A1111 and ComfyUI users keep them: a .safetensors file, or a pickled
// PyTorch checkpoint (.ckpt, .pt, .pth; torch.save's zip or legacy format, the state dict under
// "state_dict" as training tools save it) read as data by the restricted reader, which runs
// nothing in the file and refuses, naming it, anything that would (core/formats/TensorFile.h,
// TorchCheckpoint.h). The file is read tensor by tensor (never mapped, never whole into a buffer);
// its family is told from its tensors as diffusers' infer_diffusers_model_type does, its
// configurations are the ones diffusers' single-file loader uses for that family (sizes read from
// the tensors), and every tensor is renamed to diffusers' names, checked and upcast into the same
// UNetCondModel, VaeModel and ClipTextModel a pipeline folder gives. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/formats/TensorFile.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera {

enum class FileDigest { Compute, Skip };

struct SingleFileOptions {
    // SHA-256 of the whole file, whichever container (SdModel::sha256; A1111's "model hash" is its
    // first 10 hex characters, modules/hashes.py sha256 of the file). Computed on a second thread while the tensors are converted, so a load costs
    // the longer of the two rather than their sum (SHA-256 runs at a few hundred MB/s on one
    // core: seconds for a 2-7 GB file). Skip leaves sha256 empty (model pickers, tests).
    FileDigest digest = FileDigest::Compute;
    // A diffusers pipeline folder whose unet/, vae/ and text_encoder/ config.json (and, when
    // present, scheduler/scheduler_config.json's prediction_type) replace the family's
    // configurations, as diffusers' from_single_file(config=...) does: for checkpoints that
    // differ from their family in what the tensors cannot show (GroupNorm groups, heads, an
    // SD 2.x-base checkpoint's epsilon prediction). Empty: the family's configurations.
    // (SDXL: text_encoder_2/config.json too.)
    std::string configFolder;
    // loadSingleFileCheckpoint's progress (core/base/LoadProgress.h): the stored bytes of the tensors
    // the models read, model by model ("reading the UNet", "reading the VAE", "reading the text
    // encoder", "reading the second text encoder"), after each tensor; then "hashing the file"
    // while the digest, if still running, finishes. Empty: none.
    LoadProgressCallback progress;
};

// One model inside the file.
struct SingleFileComponent {
    std::int64_t parameters = 0;
    std::size_t tensors = 0;                          // the file's tensors it reads (a fused q/k/v counts once)
    std::map<std::string, std::size_t> storedDtypes;  // "F16" -> tensor count
};

// What the header alone tells: every tensor is found and shape-checked, no data is read.
struct SingleFileCheckpointInfo {
    std::string path;
    std::uint64_t fileBytes = 0;
    TensorContainer container = TensorContainer::Safetensors;
    std::string reader;  // TensorFile::description(): "safetensors", or the restricted reader's words
    SdFamily family = SdFamily::SD1;
    std::string familyReason;  // which tensor decided it
    UNetCondConfig unet;
    VaeConfig vae;
    ClipTextConfig textEncoder;
    std::optional<ClipTextConfig> textEncoder2;  // SDXL: OpenCLIP bigG with its projection
    std::string configSource;                    // how the configurations were obtained
    PredictionType prediction = PredictionType::Epsilon;
    std::string predictionReason;  // the file cannot tell: which rule gave it
    std::string schedulerClass;    // the family's pipeline scheduler
    SingleFileComponent unetPart, vaePart, textEncoderPart, textEncoder2Part;
    std::vector<std::string> ignored;  // tensors no model uses (EMA copies, schedule buffers, ...)
    std::string sha256;                // of the whole file; empty when skipped

    std::int64_t parameterCount() const {
        return unetPart.parameters + vaePart.parameters + textEncoderPart.parameters + textEncoder2Part.parameters;
    }
};

// "F16", or "F16 (1,130 tensors), F32 (12)" for a mix (most frequent first).
std::string describeDtypes(const std::map<std::string, std::size_t>& counts);
// "model_ema (688), betas (1), ..." — ignored tensors grouped by their first name component.
std::string describeIgnored(const std::vector<std::string>& names, std::size_t maxGroups = 6);

// Reads and checks the header of `path` (family, configurations, every tensor's presence,
// shape and dtype) without reading tensor data; hashes the file when options.digest says so.
// Throws ModelError as loadSingleFileCheckpoint.
SingleFileCheckpointInfo inspectSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options = {});

// Loads `path` into an SdModel: family, the models (UNet, VAE, text encoder(s); float32,
// diffusers names, every value finite), the family's scheduler defaults with the prediction type above, the file's SHA-256
// (per options), loadSeconds and hostPeakMiB (the process's peak resident set after the load).
// The tokenizer is left null: the caller supplies the bundled vocabulary's (loadSdModel does).
// Throws ModelError naming the file and, for a tensor, its name in the file and in the model:
//  - a PyTorch checkpoint the restricted reader refuses (a pickle that would call a function,
//    lying sizes, a damaged archive), with the reader's words for what it found;
//  - an SDXL refiner, inpainting, instruct-pix2pix, the x4 upscaler, ControlNet, Playground:
//    recognised and refused ("... not supported yet");
//  - anything else that is not an SD 1.x/2.x LDM or SDXL base checkpoint, naming the tensors
//    looked for; SDXL parts that do not fit together (checkSdxlComponents);
//  - a missing model, a missing tensor, a wrong shape or dtype, a non-finite value, tensors of
//    a model that its configuration does not describe, a truncated or malformed file;
//  - a file that changed while it was read (truncated, say), by the conversion or the digest.
SdModel loadSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options = {});

// (name in the file, stored shape) of every tensor a checkpoint of this family and these
// configurations must hold (an OpenCLIP q/k/v triple is one fused tensor; text_projection
// transposed): what inspectSingleFileCheckpoint looks for. For tests and converters. SDXL needs
// textEncoder2 (std::invalid_argument without).
TensorList singleFileTensors(SdFamily family, const UNetCondConfig& unet, const VaeConfig& vae,
                             const ClipTextConfig& textEncoder,
                             const std::optional<ClipTextConfig>& textEncoder2 = std::nullopt);

}  // namespace tessera
