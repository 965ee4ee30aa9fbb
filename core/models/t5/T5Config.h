// T5Config: a transformers T5Config (FLUX.1's `text_encoder_2/config.json`, google/t5-v1_1-xxl),
// the keys the encoder reads, with transformers' defaults for missing ones and every value
// range-checked before anything is sized from it (transformers models/t5/configuration_t5.py).
// Only the T5 v1.1 encoder is built: feed_forward_proj must be "gated-gelu". Qt-free.
#pragma once

#include <filesystem>

#include <nlohmann/json_fwd.hpp>

namespace tessera {

// The values Tessera accepts: T5 v1.1 from small to XXL, with room to spare.
namespace t5_config_bounds {
// 32128 in every T5 v1.1 (32000 SentencePiece pieces, 100 sentinels, padding to a multiple of 128);
// mT5 has 250112.
inline constexpr int kMaxVocab = 1 << 18;
// d_model: 512 (small) .. 4096 (XXL).
inline constexpr int kMaxModel = 16384;
// d_kv: 64 in every size.
inline constexpr int kMaxKv = 1024;
// num_heads: 6 .. 64.
inline constexpr int kMaxHeads = 256;
// d_ff: 1024 .. 10240.
inline constexpr int kMaxFeedForward = 65536;
// num_layers: 8 .. 24.
inline constexpr int kMaxLayers = 128;
// heads x d_kv: 4096 in XXL.
inline constexpr int kMaxInner = 16384;
// 32 buckets, max distance 128 in every T5.
inline constexpr int kMaxBuckets = 1024;
inline constexpr int kMaxDistance = 1 << 16;
}  // namespace t5_config_bounds

// T5Config's encoder fields with its defaults (a missing feed_forward_proj means "relu", T5 1.0's,
// which is refused): a plain field list.
struct T5Config {
    int vocabSize = 32128;
    int dModel = 512;
    int dKv = 64;
    int dFf = 2048;
    int numLayers = 6;
    int numHeads = 8;
    int relativeAttentionNumBuckets = 32;
    int relativeAttentionMaxDistance = 128;
    float layerNormEpsilon = 1e-6f;

    int innerDim() const { return numHeads * dKv; }
};

// Parses config.json. Throws std::runtime_error "config.json: <key> = <excerpt>: <why>" naming
// what is allowed, for a value out of range or of the wrong type, a feed_forward_proj other than
// "gated-gelu" (a missing one is T5Config's default "relu"), a dense_act_fn other than gelu_new,
// an odd or too small bucket count, or a config of another model (model_type, architectures).
// Unknown keys are ignored (transformers writes many, decoder ones among them).
T5Config t5ConfigFromJson(const nlohmann::json&);
nlohmann::json toJson(const T5Config&);
// The checks t5ConfigFromJson makes, on a config made otherwise (inferred from a file's shapes);
// the same messages.
void checkT5Config(const T5Config&);

// `folder`/config.json read through BoundedInput and parsed; throws ModelError naming the file.
T5Config readT5Config(const std::filesystem::path& folder);

}  // namespace tessera
