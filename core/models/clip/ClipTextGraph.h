// The CLIP text encoder (transformers models/clip/modeling_clip.py, CLIPTextModel) as a
// ModelGraph: token + position embedding, pre-LN encoder layers with causal self-attention,
// the final LayerNorm and EOS pooling, with parameters under transformers' names in
// state-dict order. Qt-free.
#pragma once

#include "core/graph/ModelGraph.h"
#include "core/models/clip/ClipTextConfig.h"

namespace tessera {

// The text encoder's context: BOS, 75 tokens, EOS (SD's tokenizers frame every prompt to it).
inline constexpr int kClipTextTokens = 77;

// Which hidden states (layer outputs without the final norm) the graph outputs besides
// last_hidden_state and pooler_output: none; all of them, transformers' output_hidden_states;
// or hidden_states[-2] alone (the output of layer layersToRun - 1: what SDXL conditions on with
// both its encoders: diffusers pipeline_stable_diffusion_xl.py, encode_prompt).
enum class ClipHiddenStates { None, All, Penultimate };

// Inputs: "input_ids", tokens [B, 77, 1] holding the ids as floats (exact below 2^24).
// Outputs, in order: "last_hidden_state" [B, 77, D] = final_layer_norm(output of layer
// `layersToRun`); "pooler_output" [B, D], its row at the EOS position (CLIPTextTransformer.forward:
// config.poolsAtArgmax() ? the first largest id : the first eos_token_id, position 0 if none);
// then All: "hidden_states.0" (the embeddings) .. "hidden_states.<layersToRun>"; Penultimate:
// "hidden_states.<layersToRun - 1>". CLIPTextModelWithProjection's text_projection is not in
// the graph (ClipTextModel applies it to pooler_output on the host: the CUDA backend runs vector
// ops before token ops, so no op there may read the pooled vector).
// layersToRun < num_hidden_layers is clip skip: diffusers' clip_skip k (SD 1.x/2.x) is
// layersToRun = N - k; A1111's "Clip skip: n" is N - (n - 1). The graph holds only the layers
// it runs (its parameter list is then a prefix of the file's). Throws std::invalid_argument
// naming the setting for layersToRun outside 1..N or max_position_embeddings below 77.
ModelGraph buildClipTextGraph(const ClipTextConfig& config, int layersToRun,
                              ClipHiddenStates hiddenStates = ClipHiddenStates::None);

// Parameter names: "text_model." + the module path. transformers >= 5.6 may save CLIPTextModel
// without that prefix; loaders accept both spellings.
inline constexpr const char* kClipTextPrefix = "text_model.";
// CLIPTextModelWithProjection's projection of the pooled output, [projection_dim, hidden], no bias.
inline constexpr const char* kClipTextProjection = "text_projection.weight";

}  // namespace tessera
