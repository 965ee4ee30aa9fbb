// ClipTextModel: a CLIP text encoder (SD 1.x / 2.x / XL `text_encoder/`, SDXL's
// `text_encoder_2/`: config.json + model.safetensors, transformers' CLIPTextModel or
// CLIPTextModelWithProjection) bound to float32 host tensors, run through buildClipTextGraph on
// the Backend its caller gives (the engines give a float32 CPU backend, TileDevice::textBackend),
// and the prompt conditioning A1111 feeds the UNet: emphasis, 75-token chunks, clip skip
// (A1111 modules/sd_hijack_clip.py, FrozenCLIPEmbedderWithCustomWords), SDXL's penultimate
// layer and pooled text (diffusers pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl.py,
// encode_prompt). Qt-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/run/RunConfig.h"
#include "core/text/PromptParser.h"

namespace tessera {

class Backend;   // core/graph/Backend.h
struct SdModel;  // core/models/sd/SdModel.h: changes the weights in place (SdModel::changeWeights)

namespace clip_text_limits {
// 75-token chunks one prompt may take. Each adds 77 context tokens to every cross-attention of
// every UNet call; A1111 users rarely go past 4, and 64 (4,800 tokens) is far beyond.
inline constexpr int kMaxChunks = 64;
}  // namespace clip_text_limits

// What one encode() returns for a batch of B rows of 77 ids, D = hidden_size.
struct ClipTextOutputs {
    std::vector<float> lastHiddenState;  // [B, 77, D], after the final LayerNorm
    std::vector<float> pooled;           // [B, D], last_hidden_state at the EOS position
    // [B, P]: text_projection(pooled), CLIPTextModelWithProjection's text_embeds (SDXL's pooled
    // text); empty for a model without projection.
    std::vector<float> textEmbeds;
    // All: layersToRun + 1 of [B, 77, D]; Penultimate: one, hidden_states[-2]; None: empty.
    std::vector<std::vector<float>> hiddenStates;
};

class ClipTextModel {
public:
    // `dir`: a text_encoder/ folder (config.json, model.safetensors). Every tensor the config
    // needs is checked for presence and shape before any is read, then for NaN/Inf; names with
    // or without the "text_model." prefix are accepted (transformers >= 5.6 may leave it
    // out), position_ids is ignored.
    // Throws ModelError naming the file and the tensor ("…/model.safetensors: tensor
    // 'text_model.final_layer_norm.bias': expected [768], found [1024]").
    // `meter` (optional) counts the tensors read (core/base/LoadProgress.h).
    static ClipTextModel load(const std::filesystem::path& dir, LoadMeter* meter = nullptr);
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
    // (name, shape) of every tensor a model of `config` holds: the graph's parameters, then
    // text_projection.weight [projection_dim, hidden_size] when config.withProjection.
    static TensorList expectedTensors(const ClipTextConfig& config);

    // Runs `batch` rows of kClipTextTokens ids (row-major) through the first `layersToRun`
    // layers (0: all) on `backend`, which it prepares for the rows it runs (a backend used for
    // other graphs is prepared again by their next user); textEmbeds when the model has a
    // projection. Throws std::invalid_argument for a size mismatch or an id outside the
    // vocabulary (naming row, position and id), as buildClipTextGraph for layersToRun.
    // A row's outputs depend on its ids alone (the CPU backend gives every image of a batch the
    // same bits at any batch size and thread count), so the model remembers the rows it encoded
    // (per ids, layers and hidden states; the least recently used go past the bound, 64 MiB) and
    // runs only rows it has not seen, each distinct row once: a prompt re-run with another seed,
    // the usual negative prompt and the empty padding chunk cost nothing the second time. The
    // memo does not tell backends apart: encode one model on one kind of backend (both engines
    // encode on a float32 CPU backend).
    // Thread-safe for the model: runs sharing one model may encode at once, each on its own backend.
    ClipTextOutputs encode(Backend& backend, std::span<const std::int32_t> ids, int batch, int layersToRun = 0,
                           ClipHiddenStates hiddenStates = ClipHiddenStates::None) const;

    // What the row memo holds: distinct rows and their bytes; rowsEncoded counts the rows this
    // model ran through the backend since it was made (tests, the run record's text line).
    struct RowMemoStats {
        std::size_t rows = 0, bytes = 0;
        std::uint64_t rowsEncoded = 0, rowsRemembered = 0;
    };
    RowMemoStats rowMemoStats() const;
    // The memo's bound (default kRowMemoBytes); 0 empties it and keeps nothing (every row runs).
    void setRowMemoBytes(std::size_t bytes);
    static constexpr std::size_t kRowMemoBytes = std::size_t{64} << 20;

private:
    struct RowMemo;  // ClipTextModel.cpp
    std::vector<float> project(const std::vector<float>& pooled, int batch) const;

    // Adapters (LoRA, core/models/lora/MergedLoraSet.h) are merged into a loaded model's weights in
    // place, through SdModel::changeWeights alone, which holds its components as const (engines
    // share them) and keeps every other reader away meanwhile: the tensors, writable, and the
    // row memo replaced by an empty one (it is keyed by token ids, not by weights; copies that
    // shared it keep theirs).
    friend struct SdModel;
    std::map<std::string, HostTensor>& weightsToChange() const { return tensors_; }
    void forgetEncodedRows() const;

    ClipTextConfig config_;
    mutable std::map<std::string, HostTensor> tensors_;  // mutable: weightsToChange()
    std::vector<std::string> extra_;
    // Shared by copies (same weights, same rows); never null for a loaded or built model.
    mutable std::shared_ptr<RowMemo> memo_;  // mutable: forgetEncodedRows()
};

// Which layer's output conditions the UNet.
enum class PromptLayer {
    // The output of layer N - (clipSkip - 1), then the final LayerNorm (SD 1.x / 2.x).
    Last,
    // hidden_states[-2], the output of layer N - 1 without the final LayerNorm: SDXL, both
    // encoders (A1111's FrozenCLIPEmbedder layer_idx 11 and FrozenOpenCLIPEmbedder2
    // "penultimate"; diffusers' clip_skip None). clipSkip must be 1.
    Penultimate,
};

struct PromptConditioningOptions {
    PromptLayer layer = PromptLayer::Last;
    // A1111's "Clip skip" (setting CLIP_stop_at_last_layers): 1 = the last layer; n uses the
    // output of layer N - (n - 1), then the final LayerNorm (diffusers' clip_skip = n - 1).
    int clipSkip = 1;
    EmphasisMode emphasis = EmphasisMode::Original;
    PromptChunkOptions chunking;
    // At least this many chunks: more are added as empty-prompt chunks (A1111 equalises the
    // chunk counts of the texts it encodes together, e.g. a prompt and its negative prompt).
    int minChunks = 1;
};

// The conditioning A1111 computes for one prompt (modules/sd_hijack_clip.py, process_tokens;
// modules/sd_emphasis.py, EmphasisOriginal): chunkPrompt's 77-id chunks, each encoded on
// `backend` (the layer per options.layer and clipSkip), emphasis applied per chunk (Original:
// scale by the token weights, then restore the chunk's mean), concatenated along the tokens:
// [1, 77 * chunks, D] row-major. Throws ValidationError("prompt") as
// chunkPrompt does and for more than clip_text_limits::kMaxChunks chunks,
// ValidationError("clip skip") for clipSkip outside 1..N (or other than 1 with Penultimate).
struct PromptConditioning {
    int chunks = 0;
    int channels = 0;
    std::vector<float> values;  // [prompts, 77 * chunks, channels]
    // [prompts, pooledWidth]: each text's pooled output of its FIRST chunk, before emphasis,
    // through text_projection when the model has one (SDXL's text_embeds, as A1111 takes it:
    // zs[0].pooled), else the final-LayerNorm EOS row of the layers run (all but clip skip's).
    int pooledWidth = 0;
    std::vector<float> pooled;
};
PromptConditioning encodePrompt(const ClipTextModel& model, Backend& backend, const ClipTokenizer& tokenizer,
                                std::string_view prompt, const PromptConditioningOptions& options = {});

// Several texts in one call, as A1111's FrozenCLIPEmbedderWithCustomWords.forward takes them
// (a batch of prompts): every text padded with empty-prompt chunks to the longest one's count
// (and at least options.minChunks); chunk i of all texts is one encoder batch whose emphasis
// mean is taken over the whole batch. values [texts, 77 * chunks, D], in the order given.
// (A1111 encodes a prompt and its negative prompt in separate calls: use encodePrompt for each
// and minChunks to equalise them when they go into one doubled UNet batch.)
PromptConditioning encodePrompts(const ClipTextModel& model, Backend& backend, const ClipTokenizer& tokenizer,
                                 const std::vector<std::string>& prompts,
                                 const PromptConditioningOptions& options = {});

// Each text as encodePrompt encodes it on its own (emphasis normalised per text and chunk, each
// text's own pooled output), all padded to one chunk count (the longest text's, at least
// options.minChunks), in a single encoder batch: a prompt and its negative prompt in one pass
// instead of two, with the same bits as two encodePrompt calls with minChunks equalised.
std::vector<PromptConditioning> encodeEachPrompt(const ClipTextModel& model, Backend& backend,
                                                 const ClipTokenizer& tokenizer,
                                                 const std::vector<std::string>& prompts,
                                                 const PromptConditioningOptions& options = {});

}  // namespace tessera
