// PipelinePart: a folder that is one component of a diffusers Stable Diffusion pipeline (its
// unet/, vae/, text_encoder/, tokenizer/ or scheduler/ folder, laid out as diffusers'
// DiffusionPipeline.save_pretrained writes them) rather than a model of its own, told from what
// it holds, so that a message can say which part it is and what to give instead. Qt-free.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

struct PipelinePart {
    std::string role;      // "the UNet", "the VAE", "the text encoder", "the tokenizer", "the scheduler"
    std::string found;     // what told it: "config.json's _class_name is 'UNet2DConditionModel'"
    std::string pipeline;  // the folder above, when it holds model_index.json; empty otherwise
};

// The part `dir` is: config.json naming UNet2DConditionModel, AutoencoderKL or a CLIP text
// model; no config.json but scheduler_config.json, or vocab.json and merges.txt. nullopt for
// anything else (a UNet2DModel folder, a pipeline folder, a folder that cannot be read: the
// loader says why). Reads at most one bounded config.json.
std::optional<PipelinePart> pipelinePartOf(const std::filesystem::path& dir);

// "'<dir>' is one part (the UNet: config.json's _class_name is 'UNet2DConditionModel') of a
// Stable Diffusion pipeline, not a model of its own; point <modelSetting> at the pipeline folder
// that holds model_index.json (here the folder above, '<pipeline>'), or at a single-file
// checkpoint (.safetensors)". `modelSetting` is how the front end names the model: "--model",
// "the model".
std::string describePipelinePart(const std::filesystem::path& dir, const PipelinePart& part,
                                 std::string_view modelSetting = "the model");

}  // namespace tessera
