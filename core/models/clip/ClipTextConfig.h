// ClipTextConfig: a transformers CLIPTextConfig (the `text_encoder/config.json` of a diffusers
// pipeline folder), with transformers' defaults for missing keys and every value range-checked
// before anything is sized from it (transformers models/clip/configuration_clip.py). Qt-free.
#pragma once

#include <cstdint>
#include <filesystem>

#include <nlohmann/json_fwd.hpp>

namespace tessera {

// The values Tessera accepts: what SD 1.x/2.x and SDXL's encoders use, with room to spare (a
// table shaped like every family's bounds on purpose).
namespace clip_config_bounds {
// 49408 in every SD encoder; multilingual CLIPs go to ~250k.
inline constexpr int kMaxVocab = 1 << 18;
// 768 (SD1), 1024 (SD2), 1280 (SDXL bigG).
inline constexpr int kMaxHidden = 8192;
// 4 x hidden in every published CLIP.
inline constexpr int kMaxIntermediate = 4 * kMaxHidden;
// 12 (SD1), 23 (SD2), 32 (bigG).
inline constexpr int kMaxLayers = 128;
// 12, 16, 20.
inline constexpr int kMaxHeads = 256;
// 77 in every SD encoder; longer-context CLIPs use up to 248.
inline constexpr int kMaxPositions = 4096;
}  // namespace clip_config_bounds

enum class ClipActivation { QuickGelu, Gelu, GeluTanh };

// CLIPTextConfig's fields with its defaults: a plain field list, alike in shape to other records.
struct ClipTextConfig {
    int vocabSize = 49408;
    int hiddenSize = 512;
    int intermediateSize = 2048;
    int projectionDim = 512;
    int numHiddenLayers = 12;
    int numAttentionHeads = 8;
    int maxPositionEmbeddings = 77;
    ClipActivation hiddenAct = ClipActivation::QuickGelu;
    float layerNormEps = 1e-5f;
    int padTokenId = 1, bosTokenId = 49406, eosTokenId = 49407;
    // CLIPTextModelWithProjection (SDXL's text_encoder_2): text_projection [projection_dim, hidden].
    bool withProjection = false;

    int headDim() const { return hiddenSize / numAttentionHeads; }
    // transformers' pooling rule (modeling_clip.py, CLIPTextTransformer.forward): eos_token_id 2
    // is the legacy value of the openai configs, pooled at the argmax of the ids; otherwise at
    // the first position holding eos.
    bool poolsAtArgmax() const { return eosTokenId == 2; }
};

// Parses config.json. Throws std::runtime_error "config.json: <key> = <excerpt>: <why>" naming
// what is allowed for a value out of range or of the wrong type, a hidden_size not divisible by
// num_attention_heads, an eos_token_id outside the vocabulary, a hidden_act other than quick_gelu,
// gelu or gelu_pytorch_tanh/gelu_new, or a config of another model (model_type, architectures,
// a whole CLIPConfig with text_config). Unknown keys are ignored (transformers writes many).
ClipTextConfig clipTextConfigFromJson(const nlohmann::json&);
nlohmann::json toJson(const ClipTextConfig&);

// `folder`/config.json read through BoundedInput and parsed; throws ModelError naming the file.
ClipTextConfig readClipTextConfig(const std::filesystem::path& folder);

}  // namespace tessera
