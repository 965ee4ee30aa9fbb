// The textual-inversion embeddings a render's prompts name, read and checked before the model's
// weights are: a hostile file (a pickle the restricted reader refuses), one of NaN or infinite
// values, of more vectors than a 75-token chunk holds, or of vectors of another width than the
// model's text encoder(s) is refused (exit 2) without a multi-GB load for nothing. The engine reads
// them again with the model (core/models/sd/SdPipeline.h); this check only moves the refusal
// before the load. Qt-free.
#pragma once

#include <optional>

#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"

namespace tessera {

// Finds the embeddings config.prompt and config.negativePrompt name (core/run/EmbeddingFile.h:
// the folders of $TESSERA_MODELS, the model's and config.embeddingsDir), with the tokenizer(s) the
// model at config.model uses (its pipeline folder's tokenizer/ and tokenizer_2/, else the bundled
// vocabulary of its family), and reads each one named (core/models/clip/TextualInversionFile.h).
// `model`: the model's configurations read without weights (app/cli/RunMemoryCheck.h
// readSdModelConfigs); with them each embedding's vectors are checked against the text encoders'
// widths (SD 1.x / 2.x: one tensor; SDXL: clip_l and clip_g), as the pipeline checks them. Throws
// TextualInversionFileError naming the file and what is wrong with it, or ValidationError("prompt")
// naming the embedding, its file, its width and the encoder's. Does nothing where no embeddings
// folder holds a file, or where the model's tokenizer cannot be read (the model's load says why).
void checkPromptEmbeddings(const RunConfig& config, const std::optional<SdModelConfigs>& model);

}  // namespace tessera
