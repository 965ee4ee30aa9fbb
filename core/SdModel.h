// SdModel: a whole Stable Diffusion 1.x / 2.x model in memory, the same whichever form it came
// from: a diffusers pipeline folder (model_index.json, unet/, vae/, text_encoder/, tokenizer/,
// scheduler/) or a single-file checkpoint in the original LDM layout (core/SingleFileCheckpoint.h).
// The UNet, VAE and text encoder are bound float32 host tensors under diffusers' names; the
// tokenizer is the folder's tokenizer/ or the bundled CLIP vocabulary. SDXL adds a second text
// encoder and tokenizer and the UNet's text-time embedding (the next issue): new members, not a
// rewrite. Qt-free. See shared/spec/sd-models.md §6 and sd-pipeline.md §2-§3.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/ClipTextModel.h"
#include "core/ClipTokenizer.h"
#include "core/RunConfig.h"
#include "core/UNetCondModel.h"
#include "core/VaeModel.h"

namespace tessera {

enum class SdFamily { SD1, SD2, SDXL };
std::string_view toString(SdFamily);   // "sd1", "sd2", "sdxl"

struct SdModel {
    SdFamily family = SdFamily::SD1;
    std::shared_ptr<const UNetCondModel> unet;
    std::shared_ptr<const VaeModel> vae;
    std::shared_ptr<const ClipTextModel> textEncoder;
    std::shared_ptr<const ClipTokenizer> tokenizer;
    SchedulerOptions scheduler;              // scheduler/scheduler_config.json, SD's defaults without one
    std::string schedulerClass = "PNDMScheduler";
    std::string source;                      // the folder or file it was loaded from; empty in memory
    std::string name;                        // folder or file name without extension ("random" in memory)
    std::string sha256;                      // single file: of the whole file; folder: of its parts' digests
    std::string modelHash() const { return sha256.substr(0, 10); }   // A1111's "Model hash"
    double loadSeconds = 0;                  // wall time of the load
    double hostPeakMiB = 0;                  // host memory the load needed at its peak (resident set)

    // The latent canvas: image pixels per latent pixel (8 for SD), latent channels (4).
    int vaeScale() const { return vae->config().scaleFactor(); }
    int latentChannels() const { return unet->config().inChannels; }
    std::int64_t parameterCount() const;
};

// True when `path` names something loadSdModel reads: a folder with model_index.json or a
// .safetensors file (a .ckpt / .pt / .pth / .bin is "something" too: loadSdModel refuses it with
// the reason). An unconditional UNet2DModel folder is not.
bool isSdModelPath(const std::string& path);

// Loads a pipeline folder or a single-file checkpoint. Throws ModelError naming the file and,
// for a tensor, its name and what was expected: missing parts (model_index.json lists them),
// a pickled checkpoint (refused unread: unpickling can run code; the message says how to
// convert it to .safetensors), an SDXL file (recognised, refused until supported), truncated
// files, shape mismatches, NaN or infinite weights.
// A folder without tokenizer/ (and every single-file checkpoint) uses the bundled CLIP
// vocabulary, openai's bpe_simple_vocab_16e6.txt.gz, at the path front ends set once at start.
SdModel loadSdModel(const std::string& path);
void setBundledClipVocabulary(std::string gzPath);
std::string bundledClipVocabulary();
// The tokenizer a family uses over the bundled vocabulary (SD 2.x pads with "!", id 0).
std::shared_ptr<const ClipTokenizer> bundledTokenizer(SdFamily family);

// Random weights at the real shapes (benchmarks, no file): "random:sd15" (SD 1.5: UNet 860M,
// CLIP ViT-L, the SD VAE) or "random:sd21" (SD 2.1-768: linear projections, heads 5/10/20/20,
// upcast attention, OpenCLIP ViT-H's 23 layers, v-prediction). Deterministic in `seed`.
// isSdModelPath and loadSdModel accept these names. Throws ValidationError("model") for another.
inline constexpr const char* kRandomModelPrefix = "random:";
SdModel randomSdModel(const std::string& name, std::uint64_t seed = 0);

// The SD scheduler settings diffusers' pipelines use when scheduler_config.json is absent
// (scaled_linear 0.00085..0.012, 1000 steps, leading, steps_offset 1, no clipping) with the
// given prediction type.
SchedulerOptions sdSchedulerDefaults(PredictionType prediction = PredictionType::Epsilon);

}  // namespace tessera
