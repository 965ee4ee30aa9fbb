// FluxModel: a FLUX.1 transformer (BFL names, core/models/flux/FluxGraph.h) with its 16-channel
// VAE, loaded from a diffusers FluxPipeline folder (transformer/, vae/), and what a run needs from
// it: the run's checks and latent canvas, the VAE's latent scaling with FLUX's shift, the
// conditioning the transformer reads. Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/flux/FluxConfig.h"
#include "core/models/t5/T5Model.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/Engine.h"
#include "core/run/RunConfig.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/T5Tokenizer.h"

namespace tessera {

struct FluxModel {
    FluxConfig config;
    std::map<std::string, HostTensor> tensors;  // the transformer's, under BFL's names
    std::shared_ptr<const VaeModel> vae;
    std::string name;    // the folder's name, for records
    std::string sha256;  // of the transformer's weights
    // The text encoders (all four, or none: a run then needs its encodings given): CLIP-L for its
    // pooled output, T5 v1.1 XXL for the token states.
    std::shared_ptr<const ClipTextModel> clip;
    std::shared_ptr<const ClipTokenizer> clipTokenizer;
    std::shared_ptr<const T5Model> t5;
    // Null for random models (Google's spiece.model is not shipped): their T5 ids are the CLIP
    // tokenizer's, folded into T5's vocabulary (foldedT5Ids).
    std::shared_ptr<const T5Tokenizer> t5Tokenizer;
    bool hasTextEncoders() const { return clip && t5 && (t5Tokenizer || clipTokenizer); }
    // T5 tokens a prompt is framed to: 512 for dev, 256 for schnell (black-forest-labs/flux
    // cli.py load_t5(max_length=256 if schnell else 512); diffusers' docs say the same for schnell).
    int textTokens() const { return config.guidanceEmbeds ? 512 : 256; }

    static constexpr int kVaeScale = 8;    // image pixels per latent pixel
    static constexpr int kPixelUnit = 16;  // image pixels per token (8 x the 2 x 2 patch)
};

// A diffusers FluxPipeline folder: model_index.json naming a Flux pipeline class, or a
// transformer/config.json naming FluxTransformer2DModel; or random:flux-dev / random:flux-schnell.
// Reads at most those files.
bool isFluxModelPath(const std::string& path);

// Random weights at FLUX.1's real shapes (benchmarks, trying the window without the files):
// "random:flux-dev" / "random:flux-schnell" (black-forest-labs/flux util.py configs: the transformer
// of 11.9 G parameters, schnell without guidance_in), FLUX's VAE (ae.safetensors' AutoencoderKL: 16
// latent channels, no quant convs, scaling 0.3611, shift 0.1159), CLIP-L and T5 v1.1 XXL (4.76 G):
// about 67 GB of float32 on the host. No T5 vocabulary is bundled: a prompt's T5 ids are the
// bundled CLIP tokenizer's folded into T5's (foldedT5Ids; with random weights any ids time alike).
struct RandomFluxShapes {
    std::string name;  // "random:flux-dev"
    FluxConfig transformer;
    VaeConfig vae;
    ClipTextConfig clip;
    T5Config t5;
};
bool isRandomFluxName(const std::string& name);
// Throws ValidationError("model") for another name, naming the two.
RandomFluxShapes randomFluxShapes(const std::string& name);
// Deterministic in `seed`; `meter` advances by each tensor's float32 bytes (randomFluxBytes in all).
std::shared_ptr<const FluxModel> randomFluxModel(const RandomFluxShapes& shapes, std::uint64_t seed,
                                                 LoadMeter* meter = nullptr);
std::uint64_t randomFluxBytes(const RandomFluxShapes& shapes);
// T5 ids for a model without a T5 tokenizer: the CLIP tokenizer's ids of `prompt` mapped to
// 3 + id mod (vocabulary - 103) (past pad, EOS and unk; short of the 100 sentinels), cut to
// maxLength - 1, then EOS and padding to maxLength, as T5Tokenizer::encode frames them.
std::vector<std::int32_t> foldedT5Ids(const ClipTokenizer& clip, const std::string& prompt, int maxLength,
                                      int vocabulary);

// Loads `path` (a FluxPipeline folder): the transformer's config and every tensor checked before
// any is read (ModelError naming the file and tensor), diffusers' names converted to BFL's, the
// VAE from vae/. Throws ModelError when the VAE's latent channels do not fill the transformer's
// tokens (an SD VAE of 4 channels beside a FLUX transformer of 16: "...: the VAE has 4 latent
// channels; the transformer reads 16 (a FLUX.1 VAE, ae.safetensors)").
std::shared_ptr<const FluxModel> loadFluxModel(const std::string& path, LoadMeter* meter = nullptr);

// A model from tensors in memory (tests, random-weight benchmarks); the same VAE check.
std::shared_ptr<const FluxModel> makeFluxModel(FluxConfig config, std::map<std::string, HostTensor> tensors,
                                               std::shared_ptr<const VaeModel> vae, std::string name);

// The text encoders of a FLUX model: CLIP and T5 with their tokenizers. Throws ModelError when one
// is missing ("...: no T5 text encoder (text_encoder_2/, t5xxl_fp16.safetensors) beside CLIP-L"),
// or when a width does not fit the transformer (a T5 of another size: "the T5 encoder is 1024 wide;
// the transformer reads 4096 (T5 v1.1 XXL)"; CLIP's hidden size against pooled_projection_dim).
void setFluxTextEncoders(FluxModel& model, std::shared_ptr<const ClipTextModel> clip,
                         std::shared_ptr<const ClipTokenizer> clipTokenizer, std::shared_ptr<const T5Model> t5,
                         std::shared_ptr<const T5Tokenizer> t5Tokenizer, const std::string& where);

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

// The prompt through the model's text encoders on `backend` (FluxPipeline.encode_prompt): CLIP-L's
// pooled output of the first 75 tokens (framed to 77: its attention is causal, so the padding
// after EOS cannot reach the pooled EOS state), T5's states of the prompt framed to
// textTokens() (EOS, then padding, unmasked as in every FLUX pipeline), and `guidance`. Throws
// ValidationError("model") when the model has no text encoders, ValidationError("prompt") for
// a prompt the tokenizers refuse.
FluxConditioning encodeFluxPrompt(const FluxModel& model, Backend& backend, const std::string& prompt, float guidance);

// FLUX's latent scaling around its VAE (diffusers pipeline_flux.py before vae.decode:
// latents / scaling_factor + shift_factor; pipeline_flux_img2img.py after encode:
// (z - shift_factor) * scaling_factor), per element in float32.
HostTensor fluxLatentsForDecoder(const VaeConfig& vae, HostTensor latents);
HostTensor fluxLatentsFromEncoder(const VaeConfig& vae, HostTensor z);

// The live preview of FLUX latents (as the transformer sees them, shifted and scaled): per latent
// pixel rgb = bias + latent . factors with ComfyUI's published FLUX.1 factors (comfy/latent_formats.py,
// class Flux, latent_rgb_factors and latent_rgb_factors_bias, what its Latent2RGB previewer applies),
// in model space ([-1, 1] nominal), each latent pixel an 8 x 8 block. (The VAE decodes the result.)
ImageTensor fluxLatentPreview(const ImageTensor& latents);

}  // namespace tessera
