// TextualInversionEncoding: prompts encoded with textual-inversion embeddings in them, as A1111 does
// (modules/sd_hijack_clip.py tokenize_line places them, modules/sd_hijack.py EmbeddingsWithFixes
// puts their vectors in place of the token embeddings): each chunk that holds an embedding runs
// through the text encoder from its input embeddings (the token table's rows, the embedding's
// vectors over its slots, plus the position embeddings: transformers' CLIPTextModel with
// inputs_embeds), every other chunk as encodeEachPrompt runs it (and its row memo keeps it). A chunk
// whose embedding's vectors equal token-table rows gives exactly the bits of the prompt with those
// tokens. Qt-free.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/graph/ModelGraph.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/text/EmbeddingDatabase.h"

namespace tessera {

// The text encoder's graph with "input_ids" [B, 77, 1] (for the EOS pooling) and "hidden_states.0"
// [B, 77, hidden] (token plus position embeddings, made by the caller) as inputs, in that order,
// in place of the token-embedding lookup; parameters, ops and outputs otherwise
// buildClipTextGraph's. Throws as buildClipTextGraph does.
ModelGraph buildClipTextGraphFromEmbeddings(const ClipTextConfig& config, int layersToRun,
                                            ClipHiddenStates hiddenStates = ClipHiddenStates::None);

// What encodeEachPromptWithEmbeddings returns: encodeEachPrompt's conditionings, and per text the
// embeddings its chunks used, in the order of first use (for "TI hashes").
struct EmbeddedPromptConditioning {
    std::vector<PromptConditioning> texts;
    std::vector<std::vector<const TextualInversion*>> used;
};

// encodeEachPrompt with the embeddings of options.chunking.embeddings (none: encodeEachPrompt
// itself), their vectors for the encoder under `encoderKey` ("" SD 1.x / 2.x, "clip_l" and "clip_g"
// SDXL's first and second). Before any encoding, throws ValidationError("prompt") naming the
// embedding, its file, its width and the encoder's for an embedding the prompt uses that has no
// vectors for this encoder or vectors of another width (A1111 leaves such a file out and reads its
// name as words; here the run is refused, so that the prompt means what it says), besides what
// encodeEachPrompt throws.
EmbeddedPromptConditioning encodeEachPromptWithEmbeddings(const ClipTextModel& model, Backend& backend,
                                                          const ClipTokenizer& tokenizer,
                                                          const std::vector<std::string>& prompts,
                                                          const PromptConditioningOptions& options,
                                                          const std::string& encoderKey);

}  // namespace tessera
