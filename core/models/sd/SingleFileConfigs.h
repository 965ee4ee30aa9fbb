// SingleFileConfigs: the configurations of a single-file checkpoint's models, as diffusers'
// single-file loader builds them (loaders/single_file_utils.py fetch_diffusers_config,
// create_unet_diffusers_config_from_ldm, create_vae_diffusers_config_from_ldm): what the tensors
// cannot show from the family's default pipeline, every size from the tensors; or, as
// from_single_file(config=FOLDER) does, from a pipeline folder. Internal to the single-file loader
// (SingleFileCheckpoint.h). Qt-free.
#pragma once

#include <optional>
#include <string>

#include "core/formats/TensorFile.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/sd/SingleFileLayout.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeConfig.h"
#include "core/run/RunConfig.h"

namespace tessera::single_file {

// What the tensors cannot show, per family: the values of the configurations diffusers' single-file
// loader takes from the family's default pipeline (its unet/, vae/, text_encoder/ and scheduler/
// configurations).
struct FamilyDefaults {
    int unetSampleSize;  // latent pixels: 512 / 8, 768 / 8, 1024 / 8
    int vaeSampleSize;
    double vaeScalingFactor;
    bool upcastAttention;
    const char* textActivation;
    int textProjectionDim;  // recorded only: CLIPTextModel has no projection
    PredictionType prediction;
    const char* predictionReason;
    const char* schedulerClass;
};

// The defaults of `family` (SD 1.x: stable-diffusion-v1-5, SD 2.x: stable-diffusion-2-1, SDXL:
// stable-diffusion-xl-base-1.0, as diffusers' DIFFUSERS_DEFAULT_PIPELINE_PATHS).
const FamilyDefaults& defaultsOf(SdFamily family);

// The text encoders' layouts in a checkpoint.
enum class TextLayout {
    Clip,         // transformers' CLIPTextModel names (SD 1.x, SDXL's first)
    OpenClipH,    // OpenCLIP, its last block dropped (SD 2.x conditions on the penultimate)
    OpenClipBigG  // OpenCLIP with text_projection, every block (SDXL's second)
};

// The models' configurations and the prediction type, and where they came from.
struct Configs {
    UNetCondConfig unet;
    VaeConfig vae;
    ClipTextConfig text;
    std::optional<ClipTextConfig> text2;  // SDXL's second text encoder
    std::string source;
    PredictionType prediction = PredictionType::Epsilon;
    std::string predictionReason;
};

// The configurations read from the tensors' shapes with the family's defaults for the rest;
// ModelError naming `where` when a tensor they read is missing or the sizes do not fit them.
Configs derivedConfigs(const TensorFile& file, const Layout& layout, const std::string& where);

// diffusers' from_single_file(config=FOLDER): the folder's component configurations.
Configs folderConfigs(const std::string& folder, const Layout& layout);

}  // namespace tessera::single_file
