// transformers T5Config reader (models/t5/configuration_t5.py). The defaults are
// T5Config.__init__'s, so a config.json that leaves a key out means what it means there.
#include "core/models/t5/T5Config.h"

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"
#include "core/formats/ModelWeights.h"

namespace tessera {

namespace {

namespace bounds = t5_config_bounds;
using namespace config_json;

// One range per key with what T5 v1.1 uses: a table shaped like every config reader's.
constexpr IntRange kVocab{1, bounds::kMaxVocab, "32128 in T5 v1.1"};
constexpr IntRange kModel{1, bounds::kMaxModel, "4096 in T5 v1.1 XXL (FLUX.1's text_encoder_2)"};
constexpr IntRange kKv{1, bounds::kMaxKv, "64 in T5 v1.1"};
constexpr IntRange kFeedForward{1, bounds::kMaxFeedForward, "10240 in T5 v1.1 XXL"};
constexpr IntRange kLayers{1, bounds::kMaxLayers, "24 in T5 v1.1 XXL"};
constexpr IntRange kHeads{1, bounds::kMaxHeads, "64 in T5 v1.1 XXL"};
constexpr IntRange kBuckets{4, bounds::kMaxBuckets, "32 in every T5"};
constexpr IntRange kDistance{2, bounds::kMaxDistance, "128 in every T5"};

// The config must describe a T5 (the encoder of which is built).
void checkModelKind(const nlohmann::json& j) {
    if (const auto it = j.find("model_type"); it != j.end() && readString(*it, "model_type") != "t5")
        reject("model_type", *it, "expected t5 (a T5 v1.1 text encoder)");
    if (const auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
        if (!it->is_array() || it->size() != 1) reject("architectures", *it, "expected one class name");
        const std::string name = readString((*it)[0], "architectures");
        if (name != "T5EncoderModel" && name != "T5ForConditionalGeneration" && name != "T5Model")
            reject("architectures", *it, "expected T5EncoderModel, T5ForConditionalGeneration or T5Model");
    }
}

// T5 v1.1's feed-forward: wo(gelu_new(wi_0 x) * wi_1 x). configuration_t5.py maps
// "gated-gelu" to dense_act_fn "gelu_new" and is_gated_act true; those two keys, when written,
// must agree.
void checkFeedForward(const nlohmann::json& j) {
    const auto it = j.find("feed_forward_proj");
    if (it == j.end())
        reject("feed_forward_proj", nlohmann::json(),
               "missing: T5Config's default \"relu\" is T5 1.0's feed-forward; only T5 v1.1's \"gated-gelu\" is "
               "supported");
    if (readString(*it, "feed_forward_proj") != "gated-gelu")
        reject("feed_forward_proj", *it,
               "not supported: only \"gated-gelu\" (T5 v1.1, FLUX.1's text encoder: wo(gelu_new(wi_0 x) * wi_1 x))");
    if (const auto act = j.find("dense_act_fn"); act != j.end()) {
        const std::string name = readString(*act, "dense_act_fn");
        if (name != "gelu_new" && name != "gelu_pytorch_tanh")
            reject("dense_act_fn", *act, "must be gelu_new (the tanh GELU of \"gated-gelu\")");
    }
    if (const auto gated = j.find("is_gated_act"); gated != j.end() && !readBool(*gated, "is_gated_act"))
        reject("is_gated_act", *gated, "must be true for \"gated-gelu\"");
}

}  // namespace

void checkT5Config(const T5Config& c) {
    if (c.innerDim() > bounds::kMaxInner)
        reject("num_heads", nlohmann::json(c.numHeads),
               "num_heads x d_kv = " + std::to_string(c.innerDim()) + " is above " + std::to_string(bounds::kMaxInner) +
                   " (4096 in T5 v1.1 XXL)");
    // transformers' bucket function halves the buckets (bidirectional), then takes a quarter of
    // them as exact distances and divides by log(max_distance / that quarter).
    if (c.relativeAttentionNumBuckets % 2 != 0)
        reject("relative_attention_num_buckets", nlohmann::json(c.relativeAttentionNumBuckets),
               "must be even (half for keys before the query, half after; 32 in every T5)");
    if (c.relativeAttentionMaxDistance <= c.relativeAttentionNumBuckets / 4)
        reject("relative_attention_max_distance", nlohmann::json(c.relativeAttentionMaxDistance),
               "must be above a quarter of relative_attention_num_buckets (" +
                   std::to_string(c.relativeAttentionNumBuckets / 4) + "; 128 in every T5)");
}

T5Config t5ConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    checkModelKind(j);
    checkFeedForward(j);
    T5Config c;
    for (const auto& [key, value] : j.items()) {
        if (key == "vocab_size")
            c.vocabSize = readInt(value, key, kVocab);
        else if (key == "d_model")
            c.dModel = readInt(value, key, kModel);
        else if (key == "d_kv")
            c.dKv = readInt(value, key, kKv);
        else if (key == "d_ff")
            c.dFf = readInt(value, key, kFeedForward);
        else if (key == "num_layers")
            c.numLayers = readInt(value, key, kLayers);
        else if (key == "num_heads")
            c.numHeads = readInt(value, key, kHeads);
        else if (key == "relative_attention_num_buckets")
            c.relativeAttentionNumBuckets = readInt(value, key, kBuckets);
        else if (key == "relative_attention_max_distance")
            c.relativeAttentionMaxDistance = readInt(value, key, kDistance);
        else if (key == "layer_norm_epsilon")
            c.layerNormEpsilon = static_cast<float>(readNumber(value, key, 1e-12, 0.1, "1e-6 in T5 v1.1"));
    }
    checkT5Config(c);
    return c;
}

nlohmann::json toJson(const T5Config& c) {
    return nlohmann::json{
        {"architectures", nlohmann::json::array({"T5EncoderModel"})},
        {"model_type", "t5"},
        {"vocab_size", c.vocabSize},
        {"d_model", c.dModel},
        {"d_kv", c.dKv},
        {"d_ff", c.dFf},
        {"num_layers", c.numLayers},
        {"num_heads", c.numHeads},
        {"relative_attention_num_buckets", c.relativeAttentionNumBuckets},
        {"relative_attention_max_distance", c.relativeAttentionMaxDistance},
        {"layer_norm_epsilon", shortestDecimal(c.layerNormEpsilon)},
        {"feed_forward_proj", "gated-gelu"},
    };
}

T5Config readT5Config(const std::filesystem::path& folder) {
    const std::filesystem::path file = folder / "config.json";
    const nlohmann::json j = readModelJson(file);
    try {
        return t5ConfigFromJson(j);
    } catch (const std::runtime_error& e) {
        throw ModelError(shownPath(file) + ": " + withoutPrefix(e.what(), "config.json: "));
    }
}

}  // namespace tessera
