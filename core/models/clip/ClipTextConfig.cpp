// transformers CLIPTextConfig reader (models/clip/configuration_clip.py). The defaults are
// CLIPTextConfig.__init__'s, so a config.json that leaves a key out means what it means there.
#include "core/models/clip/ClipTextConfig.h"

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"
#include "core/formats/ModelWeights.h"
#include "core/text/ClipTokenizer.h"

namespace tessera {

namespace {

namespace bounds = clip_config_bounds;
using namespace config_json;

// One range per key with what SD's text encoders use: a table shaped like every config reader's.
constexpr IntRange kVocab{1, bounds::kMaxVocab, "49408 in SD's encoders"};
constexpr IntRange kHidden{1, bounds::kMaxHidden, "768 (SD 1.x), 1024 (SD 2.x), 1280 (SDXL's second encoder)"};
constexpr IntRange kIntermediate{1, bounds::kMaxIntermediate, "4 x hidden_size in published CLIPs"};
constexpr IntRange kLayers{1, bounds::kMaxLayers, "12 (SD 1.x), 23 (SD 2.x), 32 (SDXL's second encoder)"};
constexpr IntRange kHeads{1, bounds::kMaxHeads, "12, 16 or 20 in SD's encoders (64 channels each)"};
// Every prompt is framed to 77 tokens (BOS, 75, EOS: clip_limits::kContextLength), each with a
// position of its own, whatever the tokenizer's model_max_length says.
constexpr IntRange kPositions{clip_limits::kContextLength, bounds::kMaxPositions,
                              "each of the 77 tokens of a framed prompt needs a position; 77 in SD's encoders"};
constexpr IntRange kProjection{1, bounds::kMaxHidden, "768 or 1280 in SD's encoders"};
constexpr IntRange kTokenId{0, bounds::kMaxVocab - 1, "an id in the vocabulary"};

ClipActivation readActivation(const nlohmann::json& value, const std::string& key) {
    const std::string name = readString(value, key);
    if (name == "quick_gelu") return ClipActivation::QuickGelu;
    if (name == "gelu") return ClipActivation::Gelu;
    if (name == "gelu_pytorch_tanh" || name == "gelu_new") return ClipActivation::GeluTanh;
    reject(key, value, "not supported (quick_gelu as in SD 1.x, gelu as in SD 2.x, or gelu_pytorch_tanh)");
}

const char* toString(ClipActivation a) {
    switch (a) {
        case ClipActivation::QuickGelu:
            return "quick_gelu";
        case ClipActivation::Gelu:
            return "gelu";
        case ClipActivation::GeluTanh:
            return "gelu_pytorch_tanh";
    }
    return "quick_gelu";
}

// The config must describe a CLIP text model: not a whole CLIPConfig, nor another model.
void checkModelKind(const nlohmann::json& j) {
    if (j.contains("text_config"))
        reject("text_config", j["text_config"],
               "this is a whole CLIPConfig (text and vision); a text_encoder/config.json is a CLIPTextConfig");
    if (const auto it = j.find("model_type"); it != j.end() && readString(*it, "model_type") != "clip_text_model")
        reject("model_type", *it, "expected clip_text_model (a CLIP text encoder)");
    if (const auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
        if (!it->is_array() || it->size() != 1) reject("architectures", *it, "expected one class name");
        const std::string name = readString((*it)[0], "architectures");
        if (name != "CLIPTextModel" && name != "CLIPTextModelWithProjection")
            reject("architectures", *it, "expected CLIPTextModel or CLIPTextModelWithProjection");
    }
}

// Keys that relate two values, after every single value is in range.
void checkCrossKeys(const ClipTextConfig& c, const nlohmann::json& j) {
    if (c.hiddenSize % c.numAttentionHeads != 0)
        reject("num_attention_heads", j.value("num_attention_heads", nlohmann::json(c.numAttentionHeads)),
               "must divide hidden_size " + std::to_string(c.hiddenSize) + " (each head takes hidden_size / heads)");
    // The pooled row is found by this id (modeling_clip.py, CLIPTextTransformer.forward); BOS and
    // pad ids are never looked up.
    if (c.eosTokenId >= c.vocabSize)
        reject("eos_token_id", j.value("eos_token_id", nlohmann::json(c.eosTokenId)),
               "must be an id of the vocabulary (below vocab_size " + std::to_string(c.vocabSize) + ")");
}

}  // namespace

ClipTextConfig clipTextConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    checkModelKind(j);
    ClipTextConfig c;
    for (const auto& [key, value] : j.items()) {
        if (key == "vocab_size")
            c.vocabSize = readInt(value, key, kVocab);
        else if (key == "hidden_size")
            c.hiddenSize = readInt(value, key, kHidden);
        else if (key == "intermediate_size")
            c.intermediateSize = readInt(value, key, kIntermediate);
        else if (key == "projection_dim")
            c.projectionDim = readInt(value, key, kProjection);
        else if (key == "num_hidden_layers")
            c.numHiddenLayers = readInt(value, key, kLayers);
        else if (key == "num_attention_heads")
            c.numAttentionHeads = readInt(value, key, kHeads);
        else if (key == "max_position_embeddings")
            c.maxPositionEmbeddings = readInt(value, key, kPositions);
        else if (key == "hidden_act")
            c.hiddenAct = readActivation(value, key);
        else if (key == "layer_norm_eps")
            c.layerNormEps = static_cast<float>(readNumber(value, key, 1e-12, 0.1, "1e-5 in SD's encoders"));
        else if (key == "pad_token_id")
            c.padTokenId = value.is_null() ? 0 : readInt(value, key, kTokenId);
        else if (key == "bos_token_id")
            c.bosTokenId = readInt(value, key, kTokenId);
        else if (key == "eos_token_id")
            c.eosTokenId = readInt(value, key, kTokenId);
        else if (key == "architectures" && value.is_array() && value.size() == 1)
            c.withProjection = value[0] == "CLIPTextModelWithProjection";
    }
    checkCrossKeys(c, j);
    return c;
}

nlohmann::json toJson(const ClipTextConfig& c) {
    return nlohmann::json{
        {"architectures", nlohmann::json::array({c.withProjection ? "CLIPTextModelWithProjection" : "CLIPTextModel"})},
        {"model_type", "clip_text_model"},
        {"vocab_size", c.vocabSize},
        {"hidden_size", c.hiddenSize},
        {"intermediate_size", c.intermediateSize},
        {"projection_dim", c.projectionDim},
        {"num_hidden_layers", c.numHiddenLayers},
        {"num_attention_heads", c.numAttentionHeads},
        {"max_position_embeddings", c.maxPositionEmbeddings},
        {"hidden_act", toString(c.hiddenAct)},
        {"layer_norm_eps", shortestDecimal(c.layerNormEps)},
        {"pad_token_id", c.padTokenId},
        {"bos_token_id", c.bosTokenId},
        {"eos_token_id", c.eosTokenId},
    };
}

ClipTextConfig readClipTextConfig(const std::filesystem::path& folder) {
    const std::filesystem::path file = folder / "config.json";
    const nlohmann::json j = readModelJson(file);
    try {
        return clipTextConfigFromJson(j);
    } catch (const std::runtime_error& e) {
        throw ModelError(shownPath(file) + ": " + withoutPrefix(e.what(), "config.json: "));
    }
}

}  // namespace tessera
