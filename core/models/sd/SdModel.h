// SdModel: a whole Stable Diffusion 1.x / 2.x / XL (base) model in memory, the same whichever form
// it came from: a diffusers pipeline folder (model_index.json, unet/, vae/, text_encoder/,
// tokenizer/, scheduler/; SDXL adds text_encoder_2/ and tokenizer_2/) or a single-file checkpoint
// in the original LDM / SGM layout (core/models/sd/SingleFileCheckpoint.h). The UNet, VAE and text
// encoders are bound float32 host tensors under diffusers' / transformers' names; the tokenizers
// are the folder's or the bundled CLIP vocabulary. Qt-free. Follows diffusers'
// DiffusionPipeline.from_pretrained and StableDiffusion(XL)Pipeline.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/base/LoadProgress.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/ModelName.h"
#include "core/run/RunConfig.h"
#include "core/text/ClipTokenizer.h"

namespace tessera {

enum class SdFamily { SD1, SD2, SDXL };
std::string_view toString(SdFamily);     // "sd1", "sd2", "sdxl"
std::string_view familyLabel(SdFamily);  // "Stable Diffusion 1.x", "Stable Diffusion 2.x", "Stable Diffusion XL"
// The family of a model with this (first) text encoder and no second one, as loadSdModel tells it:
// SD 1.x's OpenAI CLIP ViT-L (quick_gelu, under 1024 wide), else SD 2.x's OpenCLIP ViT-H.
SdFamily familyOfTextEncoder(const ClipTextConfig& encoder);

// What SdModel::changeWeights hands its change: the UNet's tensors under diffusers' names, the text
// encoders' under transformers' (textEncoder2 null without a second encoder), writable in place.
struct SdWeightsToChange {
    std::map<std::string, HostTensor>* unet = nullptr;
    std::map<std::string, HostTensor>* textEncoder = nullptr;
    std::map<std::string, HostTensor>* textEncoder2 = nullptr;
};

struct SdModel {
    SdFamily family = SdFamily::SD1;
    std::shared_ptr<const UNetCondModel> unet;
    std::shared_ptr<const VaeModel> vae;
    std::shared_ptr<const ClipTextModel> textEncoder;
    std::shared_ptr<const ClipTokenizer> tokenizer;
    // SDXL only (null otherwise): OpenCLIP bigG as CLIPTextModelWithProjection (its
    // text_projection gives the pooled text) and its tokenizer, which pads with "!" (id 0).
    std::shared_ptr<const ClipTextModel> textEncoder2;
    std::shared_ptr<const ClipTokenizer> tokenizer2;
    // SDXL: an empty negative prompt conditions on zeros, text and pooled (model_index.json's
    // force_zeros_for_empty_prompt, true for SDXL base and for single files; A1111 always).
    bool forceZerosForEmptyPrompt = true;
    SchedulerOptions scheduler;  // scheduler/scheduler_config.json, SD's defaults without one
    std::string schedulerClass = "PNDMScheduler";
    std::string source;  // the folder or file it was loaded from; empty in memory
    std::string name;    // folder or file name without extension ("random" in memory)
    std::string sha256;  // single file: of the whole file; folder: of its parts' digests
    std::string modelHash() const { return sha256.substr(0, 10); }  // A1111's "Model hash"
    double loadSeconds = 0;                                         // wall time of the load
    double hostPeakMiB = 0;  // host memory the load needed at its peak (resident set)

    // The latent canvas: image pixels per latent pixel (8 for SD), latent channels (4).
    int vaeScale() const { return vae->config().scaleFactor(); }
    int latentChannels() const { return unet->config().inChannels; }
    std::int64_t parameterCount() const;

    // Changes the UNet's and text encoders' weights in place: adapters merged into them or taken
    // out again (LoRA: core/models/lora/SdModelLoras.h). `change` gets their tensors, writable. A
    // component this model shares with another holder (a copy of this SdModel) is copied first,
    // so that only this model's weights change. Afterwards (also when `change` throws) the text
    // encoders have forgotten the rows they encoded, and, unless `change` threw, weightsVariant()
    // is `variant` (the digest of what is merged; "" for the file's own weights) and the UNet's
    // weightsSha256 a fingerprint of its file's and `variant` (the file's again for ""), so that
    // nothing keyed by it takes these weights for others. sha256 (the checkpoint's, A1111's
    // "Model hash") stays. Nothing may run on this model meanwhile, and an engine that holds it
    // must be given it again (Engine::setSdModel) to prepare the new weights.
    void changeWeights(const std::string& variant, const std::function<void(const SdWeightsToChange&)>& change);
    // The digest of what changeWeights merged into the weights; "" for the file's own.
    const std::string& weightsVariant() const { return weightsVariant_; }

private:
    std::string weightsVariant_;
};

// Loads a pipeline folder or a single-file checkpoint. Throws ModelError naming the file and,
// for a tensor, its name and what was expected: missing parts (model_index.json lists them;
// SDXL: text_encoder_2 too), a pickled checkpoint (refused unread: unpickling can run code; the
// message says how to convert it to .safetensors), an SDXL refiner (recognised, refused until
// supported), components that do not fit together (the UNet's context width is not the text
// encoders' widths; SDXL: its add_embedding does not take the second encoder's pooled text and
// six size ids), truncated files, shape mismatches, NaN or infinite weights. A folder's
// model_index.json keys of the wrong type, component folders that are symbolic-link loops (or
// links to nothing, or files), text encoder configs out of range and a tokenizer/ whose ids
// exceed its text encoder's vocab_size are refused before any weights are read.
// A folder without tokenizer/ (tokenizer_2/), and every single-file checkpoint, uses the bundled
// CLIP vocabulary, openai's bpe_simple_vocab_16e6.txt.gz, at the path front ends set once at start.
// `progress` (optional, on the calling thread) hears the load as bytes of tensor data done out of
// the whole load's (core/base/LoadProgress.h), in phases "reading the UNet", "reading the VAE",
// "reading the text encoder" (SDXL: "reading the second text encoder"; a folder's components in
// that order, a single file's in its own), or "random weights for the UNet", ... for random:*;
// it ends with done == total once every tensor is in (a failed load stops short of it).
SdModel loadSdModel(const std::string& path, const LoadProgressCallback& progress = {});
void setBundledClipVocabulary(std::string gzPath);
std::string bundledClipVocabulary();
// The tokenizer of a family's text encoder `encoder` (1, or 2 for SDXL's second) over the
// bundled vocabulary: SD 1.x's and SDXL's first pad with the end token; SD 2.x's and SDXL's
// second with "!" (id 0), reading "!" in text as text, as open_clip (and A1111) do.
std::shared_ptr<const ClipTokenizer> bundledTokenizer(SdFamily family, int encoder = 1);

// Random weights at the real shapes (benchmarks, no file): "random:sd15" (SD 1.5: UNet 860M,
// CLIP ViT-L, the SD VAE), "random:sd21" (SD 2.1-768: linear projections, heads 5/10/20/20,
// upcast attention, OpenCLIP ViT-H's 23 layers, v-prediction) or "random:sdxl" (SDXL base 1.0:
// UNet 2.57G with the text-time embedding, CLIP ViT-L 12 x 768 and OpenCLIP bigG 32 x 1280 with
// its 1280-wide projection, the VAE at scaling factor 0.13025; about 14 GB of float32).
// Deterministic in `seed`. isSdModelPath and loadSdModel accept these names. Throws
// ValidationError("model") for another.
SdModel randomSdModel(const std::string& name, std::uint64_t seed = 0, const LoadProgressCallback& progress = {});

// The configurations randomSdModel builds for `name` (nothing allocated): for shapes, parameter
// counts and memory estimates. textEncoder2 is set for random:sdxl only.
struct SdModelConfigs {
    SdFamily family = SdFamily::SD1;
    UNetCondConfig unet;
    VaeConfig vae;
    ClipTextConfig textEncoder;
    std::optional<ClipTextConfig> textEncoder2;
    PredictionType prediction = PredictionType::Epsilon;
    std::string schedulerClass;
};
SdModelConfigs randomSdModelConfigs(const std::string& name);

// Throws ModelError("<where>: ...") unless SDXL base's parts fit together (as diffusers'
// StableDiffusionXLPipeline.encode_prompt and UNet2DConditionModel use them): text2 is a
// CLIPTextModelWithProjection, the UNet attends to both encoders' widths side by side
// (cross_attention_dim = hidden + hidden2) and its add_embedding takes text2's projected pooled
// text and six size ids (addition_embed_type "text_time", projection_class_embeddings_input_dim =
// projection_dim + 6 x addition_time_embed_dim; a refiner's 5 ids do not fit).
void checkSdxlComponents(const UNetCondConfig& unet, const ClipTextConfig& text, const ClipTextConfig& text2,
                         const std::string& where);

// The SD scheduler settings diffusers' pipelines use when scheduler_config.json is absent
// (scaled_linear 0.00085..0.012, 1000 steps, leading, steps_offset 1, no clipping) with the
// given prediction type.
SchedulerOptions sdSchedulerDefaults(PredictionType prediction = PredictionType::Epsilon);

}  // namespace tessera
