// The T5 v1.1 encoder (transformers models/t5/modeling_t5.py, T5EncoderModel: FLUX.1's
// text_encoder_2) as a ModelGraph: the token embedding `shared` (no positions, no scaling), per
// block RMSNorm -> self-attention with the relative position bias of block 0's table (no 1/sqrt(d)
// scaling, no biases) -> residual, RMSNorm -> wo(gelu_tanh(wi_0 x) * wi_1 x) -> residual, then
// the final RMSNorm; parameters under transformers' names in state-dict order. Qt-free.
#pragma once

#include "core/graph/ModelGraph.h"
#include "core/models/t5/T5Config.h"

namespace tessera {

// The longest sequence the encoder takes: FLUX.1 [dev] pads its prompts to 512 (BFL and
// diffusers' max_sequence_length), [schnell] to 256.
inline constexpr int kT5MaxTokens = 512;

// Parameter names of the shared token table and of the encoder (T5EncoderModel's state dict).
inline constexpr const char* kT5SharedEmbedding = "shared.weight";
inline constexpr const char* kT5EncoderPrefix = "encoder.";

// Inputs: "input_ids", tokens [B, tokens, 1] holding the ids as floats (exact below 2^24).
// Outputs, in order: "last_hidden_state" [B, tokens, d_model] (after the final RMSNorm; called
// without an attention mask, as the FLUX pipelines call it); with hiddenStates also
// "hidden_states.0" (the embeddings) .. "hidden_states.<num_layers - 1>" (the output of block
// k - 1), transformers' output_hidden_states without its last entry (last_hidden_state itself).
// Every block's attention reads block 0's relative_attention_bias (T5Stack passes block 0's
// position_bias to the others). Throws std::invalid_argument for tokens outside 1..kT5MaxTokens.
ModelGraph buildT5EncoderGraph(const T5Config& config, int tokens, bool hiddenStates = false);

}  // namespace tessera
