// ClipTextModel: a CLIP text encoder (SD 1.x / 2.x `text_encoder/`: config.json +
// model.safetensors, transformers' CLIPTextModel) bound to float32 host tensors, run on the CPU
// reference backend through buildClipTextGraph, and the prompt conditioning A1111 feeds the UNet:
// emphasis, 75-token chunks, clip skip (shared/spec/sd-pipeline.md §5.2-5.3). Qt-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ClipTextConfig.h"
#include "core/PromptParser.h"
#include "core/RunConfig.h"
#include "core/ModelWeights.h"

namespace tessera {

namespace clip_text_limits {
// 75-token chunks one prompt may take. Each adds 77 context tokens to every cross-attention of
// every UNet call; A1111 users rarely go past 4, and 64 (4,800 tokens) is far beyond.
inline constexpr int kMaxChunks = 64;
}  // namespace clip_text_limits

// What one encode() returns for a batch of B rows of 77 ids, D = hidden_size.
struct ClipTextOutputs {
    std::vector<float> lastHiddenState;            // [B, 77, D], after the final LayerNorm
    std::vector<float> pooled;                     // [B, D], last_hidden_state at the EOS position
    std::vector<std::vector<float>> hiddenStates;  // with hiddenStates: layersToRun + 1 of [B, 77, D]
};

class ClipTextModel {
public:
    // `dir`: a text_encoder/ folder (config.json, model.safetensors). Every tensor the config
    // needs is checked for presence and shape before any is read, then for NaN/Inf; names with
    // or without the "text_model." prefix are accepted (spec §3.5), position_ids is ignored.
    // Throws ModelError naming the file and the tensor ("…/model.safetensors: tensor
    // 'text_model.final_layer_norm.bias': expected [768], found [1024]").
    static ClipTextModel load(const std::filesystem::path& dir);
    // A model from tensors in memory under canonical names (a converted single-file checkpoint,
    // tests). Checked as load() checks; `digest` as in ModelWeights::fromTensors (this class
    // keeps no digest: Skip saves hashing the values).
    static ClipTextModel fromTensors(ClipTextConfig config, std::map<std::string, HostTensor> tensors,
                                     WeightsDigest digest = WeightsDigest::Compute);

    const ClipTextConfig& config() const { return config_; }
    // Canonical names ("text_model.encoder.layers.0.mlp.fc1.weight").
    const std::map<std::string, HostTensor>& tensors() const { return tensors_; }
    // Tensors in the file the model does not use (position_ids excluded).
    const std::vector<std::string>& extraTensors() const { return extra_; }
    std::int64_t parameterCount() const;

    // Runs `batch` rows of kClipTextTokens ids (row-major) through the first `layersToRun`
    // layers (0: all) on the CPU backend. Throws std::invalid_argument for a size mismatch or an
    // id outside the vocabulary (naming row, position and id), as buildClipTextGraph for
    // layersToRun.
    ClipTextOutputs encode(std::span<const std::int32_t> ids, int batch, int layersToRun = 0,
                           bool hiddenStates = false) const;

private:
    ClipTextConfig config_;
    std::map<std::string, HostTensor> tensors_;
    std::vector<std::string> extra_;
};

struct PromptConditioningOptions {
    // A1111's "Clip skip" (setting CLIP_stop_at_last_layers): 1 = the last layer; n uses the
    // output of layer N - (n - 1), then the final LayerNorm (diffusers' clip_skip = n - 1).
    int clipSkip = 1;
    EmphasisMode emphasis = EmphasisMode::Original;
    PromptChunkOptions chunking;
    // At least this many chunks: more are added as empty-prompt chunks (A1111 equalises the
    // chunk counts of the texts it encodes together, e.g. a prompt and its negative prompt).
    int minChunks = 1;
};

// The conditioning A1111 computes for one prompt (spec sd-pipeline §5.2-5.3): chunkPrompt's
// 77-id chunks, each encoded (layers per clipSkip), emphasis applied per chunk (Original: scale
// by the token weights, then restore the chunk's mean), concatenated along the tokens:
// [1, 77 * chunks, D] row-major. Throws ValidationError("prompt") as chunkPrompt does and for
// more than clip_text_limits::kMaxChunks chunks, ValidationError("clip skip") for clipSkip
// outside 1..N.
struct PromptConditioning {
    int chunks = 0;
    int channels = 0;
    std::vector<float> values;  // [prompts, 77 * chunks, channels]
};
PromptConditioning encodePrompt(const ClipTextModel& model, const ClipTokenizer& tokenizer, std::string_view prompt,
                                const PromptConditioningOptions& options = {});

// Several texts in one call, as A1111's FrozenCLIPEmbedderWithCustomWords.forward takes them
// (a batch of prompts): every text padded with empty-prompt chunks to the longest one's count
// (and at least options.minChunks); chunk i of all texts is one encoder batch whose emphasis
// mean is taken over the whole batch. values [texts, 77 * chunks, D], in the order given.
// (A1111 encodes a prompt and its negative prompt in separate calls: use encodePrompt for each
// and minChunks to equalise them when they go into one doubled UNet batch.)
PromptConditioning encodePrompts(const ClipTextModel& model, const ClipTokenizer& tokenizer,
                                 const std::vector<std::string>& prompts, const PromptConditioningOptions& options = {});

}  // namespace tessera
