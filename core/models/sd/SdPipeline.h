// SdPipeline: the parts of a Stable Diffusion run around the tiled loop (core/sampling/TiledLoop.h):
// the run's checks and its latent canvas, the text conditioning of the prompt and negative
// prompt, the VAE's encode (image-to-image) and decode, and the cheap latent-to-RGB preview
// (diffusers pipelines/stable_diffusion/pipeline_stable_diffusion.py: check_inputs,
// prepare_latents, encode_prompt, the VAE's decode; pipeline_stable_diffusion_img2img.py for
// the encode). Qt-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/models/sd/SdModel.h"
#include "core/models/vae/TiledVae.h"
#include "core/run/Engine.h"

namespace tessera {

class Backend;

// The checks of checkSdRun that need no model: width, height and overlap are multiples of the
// VAE's cell (8 px for every supported family). Front ends run it before loading anything.
void checkSdCells(const RunConfig& config, int vaeScale = 8);

// Checks `config` for `model` (ValidationError naming the field): every run check with the
// model's limits (tiles multiples of the VAE's 8 pixels times the UNet's downsampling), width,
// height and overlap multiples of the VAE's scale, a context of at most
// unet_cond_bounds::kMaxContextTokens tokens. Returns the latent canvas: the config with width,
// height, tile and overlap divided by the VAE's scale (overlap in pixels).
RunConfig checkSdRun(const RunConfig& config, const SdModel& model);

// The prompt and negative prompt as A1111 encodes them (emphasis, 75-token chunks, BREAK, clip
// skip; modules/sd_hijack_clip.py), the prompt's extra-network tags (<lora:name:1>, <hypernet:...>:
// core/text/ExtraNetworks.h) taken out first (the front end merges the LoRAs they name; a message
// names the tags), on `textBackend` (core/models/clip/ClipTextModel.h encode),
// as many chunks each (the shorter padded with empty chunks), for a doubled batch. Without
// guidance (cfg 1) the negative prompt is not encoded.
// SDXL (A1111 modules/sd_models_xl.py; diffusers pipeline_stable_diffusion_xl.py, encode_prompt):
// each text through both encoders, each chunking and weighting on its own (its own tokenizer,
// emphasis normalised per encoder), their penultimate layers side by side per token (768 + 1280
// = 2048 wide); the pooled text is the second encoder's projected pooled output of the FIRST
// chunk, before emphasis; clip skip does not apply (A1111 ignores it for SDXL; the messages say
// so); an empty negative prompt is all zeros, text and pooled, where
// model.forceZerosForEmptyPrompt (A1111 always; diffusers for a negative prompt of None).
// Textual-inversion embeddings (core/run/EmbeddingFile.h: the models folders' embeddings/ and
// config.embeddingsDir) named in either text are put in place of their names, as A1111 does
// (core/models/clip/TextualInversionEncoding.h); one the model's encoders cannot take, or a file
// that cannot be read, is refused (ValidationError "prompt", TextualInversionFileError).
struct SdConditioning {
    int tokens = 0, channels = 0;                 // per row: [tokens, channels]
    std::vector<float> cond, uncond;              // uncond empty without guidance
    std::vector<float> pooledCond, pooledUncond;  // SDXL: the pooled, projected text (empty otherwise)
    std::vector<std::string> messages;            // what the record says about them
    // A1111's "TI hashes" value of the textual-inversion embeddings the encoders used
    // (core/text/EmbeddingDatabase.h addTextualInversionHashes); "" when none.
    std::string textualInversionHashes;
};
SdConditioning encodeSdPrompts(const SdModel& model, Backend& textBackend, const RunConfig& config);

// How a decode or encode runs: tiled, whole, or by the budget (core/models/vae/TiledVae.h planVaePass).
struct VaePassOptions {
    VaeTiling tiling = VaeTiling::Off;
    std::optional<VaeMemoryBudget> budget;
};

// latents (C x h x w, scaled as the UNet sees them) -> image (3 x h*f x w*f in [-1, 1]) with the
// VAE's decoder on `backend`, whole or tiled as `options` say (f = the VAE's scale).
// `description` (when non-null) receives which, for the run record (core/models/vae/TiledVae.h runVaePass).
ImageTensor decodeLatents(const SdModel& model, Backend& backend, const ImageTensor& latents,
                          const VaePassOptions& options = {}, std::string* description = nullptr);
// image (3 x H x W in [-1, 1]) -> scaled latents: the VAE's encoder, the posterior's mean times
// the scaling factor (what img2img starts from); whole or tiled as for decodeLatents.
ImageTensor encodeImage(const SdModel& model, Backend& backend, const ImageTensor& image,
                        const VaePassOptions& options = {}, std::string* description = nullptr);
// A preview of latents as RGB at image size: a linear map per latent pixel (4 x 3 coefficients and
// a bias) chosen by the model's family: SD 1.x / 2.x A1111's "Approx cheap", SDXL ComfyUI's SDXL
// latent_rgb_factors and bias (its VAE's latent space differs); each latent pixel an f x f block.
ImageTensor latentPreview(const SdModel& model, const ImageTensor& latents);
// Each pixel of `image` as a factor x factor block.
ImageTensor upsampleNearest(const ImageTensor& image, int factor);

}  // namespace tessera
