// `tessera-cli tokens "PROMPT" [--weights] [--model PATH] [--prompt-file FILE]`: the token ids
// (and with --weights the A1111 weights) of a prompt, one line per 75-token chunk as the text
// encoder receives it (core/text/PromptParser.h: emphasis, BREAK, comma backtracking), start and
// end tokens included, padding left out:
//     chunk 1: 49406 320 1125 539 320 2368 49407
//     weights 1: 1 1 1 1 1 1.1 1
// The tokenizer is the pipeline folder's `tokenizer/` (vocab.json + merges.txt) with --model
// DIR, else the CLIP vocabulary bundled in resources/clip as SD 1.x uses it (also for a
// single-file .safetensors checkpoint, which carries no tokenizer). Qt-free.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class ClipTokenizer;

// Runs the command on `args` (the words after "tokens"); writes the chunks to `out` and errors
// to `err`. Returns the exit status: 0, 2 for invalid input (bad option, prompt not UTF-8 or
// too long, --model without tokenizer files; the message names the option or file), 1 when
// the bundled vocabulary is missing from the installation. `executableDir` is where
// tessera-cli lies (the bundled vocabulary is also looked for in <dir>/../share/tessera/clip).
int runTokensCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                     const std::string& executableDir);

// The command's output for `prompt` (valid UTF-8) with a tokenizer already loaded. Throws
// ValidationError("prompt") as chunkPrompt does.
void printTokenChunks(const ClipTokenizer& tokenizer, std::string_view prompt, bool weights, std::ostream& out);

// Usage text of the command.
std::string tokensUsage();

}  // namespace tessera
