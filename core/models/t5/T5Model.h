// T5Model: a T5 v1.1 encoder (FLUX.1's `text_encoder_2/`: config.json + model.safetensors,
// transformers' T5EncoderModel; or one safetensors file such as ComfyUI's t5xxl_fp16.safetensors)
// bound to float32 host tensors and run through buildT5EncoderGraph on the Backend its caller
// gives (a float32 CPU backend so far: the CUDA lowering refuses T5's ops). The tensors are held
// as float32 whatever the file stores: T5-XXL's 4.76 B parameters take 19 GB of host memory. Qt-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/t5/T5Config.h"
#include "core/models/t5/T5Graph.h"

namespace tessera {

class Backend;  // core/graph/Backend.h

// The other spellings a file may store T5 encoder tensors under.
// T5EncoderModel ties encoder.embed_tokens to shared; a file may keep either name (or both).
inline constexpr const char* kT5EmbedTokensAlias = "encoder.embed_tokens.weight";
// ComfyUI's all-in-one checkpoints keep the T5-XXL encoder under this prefix
// (comfy/text_encoders/flux.py's state-dict keys).
inline constexpr const char* kT5ComfyPrefix = "text_encoders.t5xxl.transformer.";

class T5Model {
public:
    // `dir`: a text_encoder_2/ folder (config.json, model.safetensors or its shards). Every
    // tensor the config needs is checked for presence and shape before any is read, then for
    // NaN/Inf; shared.weight may be stored as encoder.embed_tokens.weight. Throws ModelError
    // naming the file and the tensor; `meter` (optional) counts the bytes read.
    static T5Model load(const std::filesystem::path& dir, LoadMeter* meter = nullptr);
    // One safetensors file holding an encoder under transformers' names (shared.weight,
    // encoder.*), optionally below kT5ComfyPrefix. The file has no config: the sizes come from
    // the tensors' shapes (shared.weight, block 0's q and relative_attention_bias, wi_0, the
    // number of blocks), epsilon 1e-6 and max distance 128 as in every T5 v1.1; they are then
    // checked as config.json would be. Throws ModelError naming the file and what is missing
    // or wrong (T5 1.0's non-gated DenseReluDense.wi is refused by name).
    static T5Model loadSingleFile(const std::filesystem::path& file, LoadMeter* meter = nullptr);
    // A model from tensors in memory under canonical names (tests, converters), checked as load().
    static T5Model fromTensors(T5Config config, std::map<std::string, HostTensor> tensors,
                               WeightsDigest digest = WeightsDigest::Compute);

    const T5Config& config() const { return config_; }
    // Canonical names ("encoder.block.0.layer.1.DenseReluDense.wi_0.weight").
    const std::map<std::string, HostTensor>& tensors() const { return tensors_; }
    // Tensors in the source the model does not use.
    const std::vector<std::string>& extraTensors() const { return extra_; }
    const std::string& sha256() const { return sha256_; }
    std::int64_t parameterCount() const;
    // (name, shape) of every tensor a model of `config` holds, in state-dict order.
    static TensorList expectedTensors(const T5Config& config);

    // Runs `batch` rows of ids.size() / batch ids each (row-major; 1..kT5MaxTokens a row, ids in
    // 0..vocab_size-1) on `backend`, which it prepares for them (a backend used for other graphs
    // is prepared again by their next user): last_hidden_state [batch, tokens, d_model]; with
    // hiddenStates also the entries of buildT5EncoderGraph's hidden states, in order. Throws
    // std::invalid_argument naming the row, position and id, or the sizes, before any work.
    // Const and stateless: runs sharing one model may encode at once, each on its own backend.
    std::vector<float> encode(Backend& backend, std::span<const std::int32_t> ids, int batch) const;
    std::vector<std::vector<float>> encodeWithHiddenStates(Backend& backend, std::span<const std::int32_t> ids,
                                                           int batch) const;

private:
    std::vector<std::vector<float>> run(Backend& backend, std::span<const std::int32_t> ids, int batch,
                                        bool hiddenStates) const;

    T5Config config_;
    std::map<std::string, HostTensor> tensors_;
    std::vector<std::string> extra_;
    std::string sha256_;
};

}  // namespace tessera
