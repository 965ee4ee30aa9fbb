// Fuzz target: a prompt as the pipeline reads it — A1111's attention syntax (core/PromptParser)
// and the CLIP BPE tokenizer (core/ClipTokenizer) on the bundled vocabulary, through chunkPrompt.
//   - every chunk has BOS first, EOS at the end of its content, ids inside the vocabulary and
//     77 finite weights (A1111 allows negative ones) of which framing and padding are 1;
//   - the token count is 75 per closed chunk plus the last chunk's tokens (75 if BREAK closed it);
//   - a rejection (ValidationError "prompt": too long, a weight that is not a number, an
//     infinite weight, too many nested brackets) has a readable message (checkRejection);
//   - -timeout=1 holds the tokenizer to its linear-time bound.
#include "tests/fuzz/FuzzSupport.h"

#include <cmath>
#include <memory>

#include "core/run/RunConfig.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/PromptParser.h"

using namespace tessera;

namespace {
std::unique_ptr<ClipTokenizer> tokenizer;
std::int32_t vocabularySize = 0;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // The source tree of the build, or $TESSERA_SOURCE_DIR where the targets run elsewhere.
    const char* env = std::getenv("TESSERA_SOURCE_DIR");
    const std::string root = env && *env ? env : TESSERA_SOURCE_DIR;
    tokenizer = std::make_unique<ClipTokenizer>(
        ClipTokenizer::fromMergesGz(root + "/resources/clip/bpe_simple_vocab_16e6.txt.gz"));
    vocabularySize = tokenizer->eosId() + 1;  // CLIP: EOS is the last id (49407)
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view prompt(reinterpret_cast<const char*>(data), size);
    for (const bool emphasis : {true, false}) {
        PromptChunkOptions options;
        options.parseEmphasis = emphasis;
        PromptChunks result;
        try {
            result = chunkPrompt(*tokenizer, prompt, options);
        } catch (const ValidationError& e) {
            fuzz::checkRejection(e);
            continue;
        }
        if (result.chunks.empty()) fuzz::violation("no chunk");
        int tokens = 0;
        for (std::size_t c = 0; c < result.chunks.size(); ++c) {
            const PromptChunk& chunk = result.chunks[c];
            if (chunk.contentTokens < 0 || chunk.contentTokens > clip_limits::kChunkTokens)
                fuzz::violation("a chunk of " + std::to_string(chunk.contentTokens) + " content tokens");
            if (chunk.ids[0] != tokenizer->bosId()) fuzz::violation("a chunk without BOS first");
            if (chunk.ids[static_cast<std::size_t>(chunk.contentTokens) + 1] != tokenizer->eosId())
                fuzz::violation("a chunk without EOS after its content");
            for (std::size_t i = 0; i < chunk.ids.size(); ++i) {
                if (chunk.ids[i] < 0 || chunk.ids[i] >= vocabularySize) fuzz::violation("an id outside the vocabulary");
                const float w = chunk.weights[i];
                if (!std::isfinite(w)) fuzz::violation("a weight that is not finite");
                const bool content = i >= 1 && i <= static_cast<std::size_t>(chunk.contentTokens);
                if (!content && w != 1.0f) fuzz::violation("a framing or padding weight other than 1");
                if (!emphasis && w != 1.0f) fuzz::violation("a weight other than 1 with emphasis off");
            }
            tokens += c + 1 < result.chunks.size() ? clip_limits::kChunkTokens : chunk.contentTokens;
        }
        // A1111 counts 75 for a last chunk closed by BREAK (or by filling up) and its tokens otherwise.
        const int closed = clip_limits::kChunkTokens * static_cast<int>(result.chunks.size());
        if (tokens != result.tokenCount && closed != result.tokenCount)
            fuzz::violation("token count " + std::to_string(result.tokenCount) + ", chunks say " +
                            std::to_string(tokens) + " or " + std::to_string(closed));
    }
    return 0;
}
