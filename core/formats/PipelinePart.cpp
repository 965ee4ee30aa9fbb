// Which component of a diffusers pipeline a folder is: the classes diffusers' save_pretrained
// records (config.json's _class_name for models, transformers' architectures for the CLIP text
// encoders) and the files of the tokenizer and the scheduler.
#include "core/formats/PipelinePart.h"

#include <system_error>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

bool isFile(const fs::path& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

// Anything (a file, a folder, a FIFO, a dangling link) is there.
bool present(const fs::path& path) {
    std::error_code ec;
    return fs::symlink_status(path, ec).type() != fs::file_type::not_found && !ec;
}

// The part a config.json describes; empty role for a model that is not a pipeline's part.
PipelinePart partOfConfig(const nlohmann::json& json, bool second) {
    if (!json.is_object()) return {};
    const auto className = json.find("_class_name");
    if (className != json.end() && className->is_string()) {
        const std::string name = className->get<std::string>();
        const std::string found = "config.json's _class_name is " + inQuotes(name);
        if (name == "UNet2DConditionModel") return {"the UNet", found, {}};
        if (name == "AutoencoderKL") return {"the VAE", found, {}};
        return {};
    }
    const auto architectures = json.find("architectures");
    if (architectures == json.end() || !architectures->is_array()) return {};
    for (const nlohmann::json& entry : *architectures)
        if (entry.is_string() && entry.get<std::string>().starts_with("CLIPTextModel"))
            return {second ? "the second text encoder" : "the text encoder",
                    "config.json's architectures names " + inQuotes(entry.get<std::string>()),
                    {}};
    return {};
}

}  // namespace

std::optional<PipelinePart> pipelinePartOf(const fs::path& dir) {
    std::error_code ec;
    fs::path folder = fs::absolute(dir, ec).lexically_normal();
    if (ec) return std::nullopt;
    if (!folder.has_filename()) folder = folder.parent_path();  // "a/unet/" names "a/unet"
    // SDXL's second text encoder and tokenizer sit in text_encoder_2/ and tokenizer_2/.
    const bool second = folder.filename().string().ends_with("_2");
    PipelinePart part;
    // A config.json that is not a plain file, or weights without a config.json: a broken model
    // folder, which its loader describes.
    if (present(folder / "config.json")) {
        if (!isFile(folder / "config.json")) return std::nullopt;
        try {
            part = partOfConfig(readBoundedJson(folder / "config.json", "model"), second);
        } catch (const InputFileError&) {
            return std::nullopt;
        }
    } else if (present(folder / "diffusion_pytorch_model.safetensors")) {
        return std::nullopt;
    } else if (isFile(folder / "scheduler_config.json")) {
        part = {"the scheduler", "scheduler_config.json and no config.json", {}};
    } else if (isFile(folder / "vocab.json") && isFile(folder / "merges.txt")) {
        part = {second ? "the second tokenizer" : "the tokenizer", "vocab.json and merges.txt and no config.json", {}};
    }
    if (part.role.empty()) return std::nullopt;
    if (isFile(folder.parent_path() / "model_index.json")) part.pipeline = folder.parent_path().string();
    return part;
}

std::string describePipelinePart(const fs::path& dir, const PipelinePart& part, std::string_view modelSetting) {
    return shownPath(dir) + " is one part (" + part.role + ": " + part.found +
           ") of a Stable Diffusion pipeline, not a model of its own; point " + std::string(modelSetting) +
           " at the pipeline folder that holds model_index.json" +
           (part.pipeline.empty() ? std::string() : " (here the folder above, " + shownPath(part.pipeline) + ")") +
           ", or at a single-file checkpoint (.safetensors)";
}

}  // namespace tessera
