// FluxModel: a FLUX.1 transformer (BFL names, core/models/flux/FluxGraph.h) with its 16-channel
// VAE, loaded from a diffusers FluxPipeline folder (transformer/, vae/), and what a run needs from
// it: the run's checks and latent canvas, the VAE's latent scaling with FLUX's shift, the
// conditioning the transformer reads. Qt-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/ModelWeights.h"
#include "core/models/flux/FluxConfig.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct FluxModel {
    FluxConfig config;
    std::map<std::string, HostTensor> tensors;  // the transformer's, under BFL's names
    std::shared_ptr<const VaeModel> vae;
    std::string name;    // the folder's name, for records
    std::string sha256;  // of the transformer's weights

    static constexpr int kVaeScale = 8;    // image pixels per latent pixel
    static constexpr int kPixelUnit = 16;  // image pixels per token (8 x the 2 x 2 patch)
};

// A diffusers FluxPipeline folder: model_index.json naming a Flux pipeline class, or a
// transformer/config.json naming FluxTransformer2DModel. Reads at most those files.
bool isFluxModelPath(const std::string& path);

// Loads `path` (a FluxPipeline folder): the transformer's config and every tensor checked before
// any is read (ModelError naming the file and tensor), diffusers' names converted to BFL's, the
// VAE from vae/. Throws ModelError when the VAE's latent channels do not fill the transformer's
// tokens (an SD VAE of 4 channels beside a FLUX transformer of 16: "...: the VAE has 4 latent
// channels; the transformer reads 16 (a FLUX.1 VAE, ae.safetensors)").
std::shared_ptr<const FluxModel> loadFluxModel(const std::string& path, LoadMeter* meter = nullptr);

// A model from tensors in memory (tests, random-weight benchmarks); the same VAE check.
std::shared_ptr<const FluxModel> makeFluxModel(FluxConfig config, std::map<std::string, HostTensor> tensors,
                                               std::shared_ptr<const VaeModel> vae, std::string name);

// validate(config) for this model, then FLUX's own: width, height, tile and overlap multiples of
// 16 px (a token is 2 x 2 latent pixels, so overlapping tiles share one patch grid). Returns the
// latent canvas's sizes (width, height, tile, overlap divided by 8). ValidationError names the field.
RunConfig checkFluxRun(const RunConfig& config, const FluxModel& model);

// The text a FLUX transformer reads for a run: the T5 encoder's output (tokens x
// joint_attention_dim), CLIP's pooled output, and dev's embedded guidance scale.
struct FluxConditioning {
    int tokens = 0;
    std::vector<float> text;    // [tokens, joint_attention_dim]
    std::vector<float> pooled;  // [pooled_projection_dim]
    float guidance = 3.5f;      // FluxPipeline's default; schnell ignores it
};
// Throws ValidationError("prompt") when the sizes do not fit the model.
void checkFluxConditioning(const FluxConditioning& c, const FluxConfig& config);

// FLUX's latent scaling around its VAE (diffusers pipeline_flux.py before vae.decode:
// latents / scaling_factor + shift_factor; pipeline_flux_img2img.py after encode:
// (z - shift_factor) * scaling_factor), per element in float32.
HostTensor fluxLatentsForDecoder(const VaeConfig& vae, HostTensor latents);
HostTensor fluxLatentsFromEncoder(const VaeConfig& vae, HostTensor z);

}  // namespace tessera
