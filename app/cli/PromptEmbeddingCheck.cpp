#include "app/cli/PromptEmbeddingCheck.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/base/ValidationError.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/ModelFileLookup.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// The tokenizer of text encoder `encoder` (1, or 2 for SDXL's second) as loadSdModel picks it: the
// pipeline folder's `component` with its vocab.json, else the bundled vocabulary. nullptr where it
// cannot be read: the model's load, which follows, says why.
std::shared_ptr<const ClipTokenizer> modelTokenizer(const std::string& modelPath, const char* component,
                                                    SdFamily family, int encoder) {
    try {
        const fs::path dir = fs::path(modelPath) / component;
        std::error_code ec;
        if (fs::is_regular_file(dir / "vocab.json", ec))
            return std::make_shared<const ClipTokenizer>(ClipTokenizer::fromDiffusersFolder(dir));
        return bundledTokenizer(family, encoder);
    } catch (const std::exception&) {
        return nullptr;
    }
}

struct TextEncoderWidth {
    std::string key;  // TextualInversion::byEncoder's: "" (SD 1.x / 2.x), "clip_l", "clip_g"
    int width = 0;
};

// An embedding the prompts use, read, against each text encoder of the model; the message as the
// pipeline's (core/models/clip/TextualInversionEncoding.h encodeEachPromptWithEmbeddings).
void checkWidths(const TextualInversion& e, const std::vector<TextEncoderWidth>& encoders) {
    for (const TextEncoderWidth& encoder : encoders) {
        const EmbeddingVectors* v = e.vectorsFor(encoder.key);
        std::string found;
        if (!v) {
            found = e.byEncoder.count("clip_l")
                        ? "SDXL's clip_l and clip_g vectors"
                        : "one tensor of vectors of width " + std::to_string(e.byEncoder.begin()->second.width) +
                              " (an SD 1.x / 2.x embedding), no " + encoder.key + " vectors";
        } else if (v->width != encoder.width) {
            found = "vectors of width " + std::to_string(v->width);
        } else {
            continue;
        }
        const std::string name = encoder.key.empty() ? "the text encoder" : "the " + encoder.key + " text encoder";
        throw ValidationError("prompt", "prompt: the embedding '" + e.name + "' (" + e.path + ") holds " + found +
                                            "; " + name + " of this model takes " + std::to_string(encoder.width) +
                                            (encoder.key.empty() ? "" : " (SDXL embeddings hold clip_l and clip_g)") +
                                            ". A1111 leaves such an embedding out and reads its name as words: take "
                                            "the name out of the prompt, or move the file out of the embeddings "
                                            "folders");
    }
}

}  // namespace

void checkPromptEmbeddings(const RunConfig& config, const std::optional<SdModelConfigs>& model) {
    const char* variable = std::getenv(kModelsFolderVariable);
    const std::vector<EmbeddingFileEntry> files =
        listEmbeddingFiles(embeddingFolders(config, variable ? variable : ""));
    if (files.empty()) return;
    const SdFamily family = model ? model->family : SdFamily::SD1;
    std::vector<std::shared_ptr<const ClipTokenizer>> tokenizers{modelTokenizer(config.model, "tokenizer", family, 1)};
    if (model && model->textEncoder2) tokenizers.push_back(modelTokenizer(config.model, "tokenizer_2", family, 2));
    std::vector<const ClipTokenizer*> names;
    for (const auto& tokenizer : tokenizers) {
        if (!tokenizer) return;
        names.push_back(tokenizer.get());
    }
    // Reads (and so checks) every file the prompts name; the others are registered by name only.
    const std::vector<EmbeddingDatabase> databases =
        loadPromptEmbeddings(names, files, {config.prompt, config.negativePrompt});
    if (!model || databases.empty()) return;
    std::vector<TextEncoderWidth> encoders;
    if (model->textEncoder2) {
        encoders = {{"clip_l", model->textEncoder.hiddenSize}, {"clip_g", model->textEncoder2->hiddenSize}};
    } else {
        encoders = {{"", model->textEncoder.hiddenSize}};
    }
    for (const TextualInversion& e : databases.front().embeddings())
        if (!e.sha256.empty()) checkWidths(e, encoders);  // read: one the prompts name
}

}  // namespace tessera
