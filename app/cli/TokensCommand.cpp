#include "app/cli/TokensCommand.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <ostream>

#include "app/cli/CliOptions.h"
#include "app/cli/PathStatus.h"
#include "core/base/BoundedInput.h"
#include "core/formats/PipelinePart.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfig.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/PromptParser.h"

namespace fs = std::filesystem;

namespace tessera {

namespace {

constexpr const char* kBundledVocabulary = "clip/bpe_simple_vocab_16e6.txt.gz";

struct TokensOptions {
    std::optional<std::string> prompt;      // the positional argument
    std::optional<std::string> promptFile;  // --prompt-file
    std::string model;                      // --model, empty: the bundled vocabulary
    std::string embeddingsDir;              // --embeddings-dir
    bool weights = false;
    bool help = false;
};

// The installation lacks a file it should have (exit 1, not the user's input).
struct MissingResource {
    std::string message;
};

TokensOptions parseTokensOptions(const std::vector<std::string>& args) {
    TokensOptions o;
    bool optionsEnded = false;  // after "--" every word is the prompt (one starting with "--")
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--" && !optionsEnded) {
            optionsEnded = true;
            continue;
        }
        auto value = [&](const char* name) -> std::string {
            if (i + 1 >= args.size()) throw ValidationError("option", std::string("--") + name + " needs a value");
            return args[++i];
        };
        if (optionsEnded) {
            if (o.prompt) throw ValidationError("prompt", "prompt: tokens takes one prompt (quote it)");
            o.prompt = a;
        } else if (a == "--weights") {
            o.weights = true;
        } else if (a == "--help" || a == "-h") {
            o.help = true;
        } else if (a == "--model") {
            o.model = value("model");
            checkPathText("model", o.model, "a model folder or .safetensors file");
        } else if (a == "--embeddings-dir") {
            o.embeddingsDir = value("embeddings-dir");
            checkPathText("embeddings_dir", o.embeddingsDir, "an embeddings folder");
        } else if (a == "--prompt-file") {
            o.promptFile = value("prompt-file");
            checkPathText("prompt-file", *o.promptFile, "a prompt file");
        } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') {
            throw ValidationError(
                "option", "tokens: unknown option " + inQuotes(a) +
                              "; allowed: --weights, --model PATH, --embeddings-dir DIR, --prompt-file FILE, --help");
        } else if (o.prompt) {
            throw ValidationError("prompt",
                                  "prompt: tokens takes one prompt (quote it); a second one was given: " + inQuotes(a));
        } else {
            o.prompt = a;
        }
    }
    if (!o.help && o.prompt.has_value() == o.promptFile.has_value())
        throw ValidationError("prompt", o.prompt ? "prompt: give the prompt or --prompt-file, not both"
                                                 : "prompt: tokens needs a prompt: tessera-cli tokens \"PROMPT\"");
    return o;
}

// The tokenizer of `model` (see TokensCommand.h). A folder must hold tokenizer/ (or be one).
ClipTokenizer loadTokenizer(const std::string& model, const std::string& executableDir) {
    if (!model.empty()) {
        std::error_code ec;
        const fs::path path = fs::absolute(model, ec);
        // A link loop or a link to nothing is said as such (app/cli/PathStatus.h).
        const PathStatus status = pathStatus(ec ? fs::path(model) : path);
        if (!status.there()) throw ValidationError("model", "model: " + shownPath(model) + " " + status.problem);
        if (!ec && status.kind == PathStatus::Kind::Folder) {
            // Something named vocab.json or merges.txt (a link loop too): the tokenizer's reader says
            // what is wrong with it.
            const auto present = [](const fs::path& file) {
                return pathStatus(file).kind != PathStatus::Kind::Missing;
            };
            for (const fs::path& folder : {path / "tokenizer", path})
                if (present(folder / "vocab.json") || present(folder / "merges.txt"))
                    return ClipTokenizer::fromDiffusersFolder(folder);
            if (const std::optional<PipelinePart> part = pipelinePartOf(path))
                throw ValidationError("model", "model: " + describePipelinePart(path, *part, "--model"));
            throw ValidationError("model", "model: " + inQuotes(model) +
                                               " has no tokenizer/ folder with vocab.json and merges.txt (a diffusers "
                                               "pipeline folder has one); leave out --model for the bundled CLIP "
                                               "vocabulary");
        }
        if (status.kind != PathStatus::Kind::File || path.extension() != ".safetensors")
            throw ValidationError("model", "model: " + inQuotes(model) +
                                               " is neither a diffusers pipeline folder nor a .safetensors file");
        // A single-file checkpoint carries no tokenizer: SD's own vocabulary (openai CLIP's
        // bpe_simple_vocab_16e6.txt.gz), bundled.
    }
    const std::vector<std::string> candidates = resourceCandidates(executableDir, kBundledVocabulary);
    std::error_code ec;
    for (const std::string& candidate : candidates)
        if (fs::is_regular_file(candidate, ec)) return ClipTokenizer::fromMergesGz(candidate);
    std::string looked;
    for (const std::string& candidate : candidates) looked += "\n  " + candidate;
    throw MissingResource{"tokenizer: the bundled CLIP vocabulary is not installed (looked in:" + looked + ")"};
}

std::string shortest(float value) {
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, value);
    return std::string(text, result.ptr);
}

}  // namespace

namespace {

// The chunks, and with embeddings where each one went and A1111's token count (each vector one token).
void printChunks(const ClipTokenizer& tokenizer, std::string_view text, bool weights, std::ostream& out,
                 const EmbeddingDatabase* embeddings) {
    PromptChunkOptions options;
    options.embeddings = embeddings;
    const PromptChunks prompt = chunkPrompt(tokenizer, text, options);
    bool used = false;
    for (std::size_t n = 0; n < prompt.chunks.size(); ++n) {
        const PromptChunk& chunk = prompt.chunks[n];
        // BOS, the prompt's tokens, and the EOS that follows them (index contentTokens + 1).
        const std::size_t shown = static_cast<std::size_t>(chunk.contentTokens) + 2;
        out << "chunk " << n + 1 << ":";
        for (std::size_t i = 0; i < shown; ++i) out << ' ' << chunk.ids[i];
        out << '\n';
        if (weights) {
            out << "weights " << n + 1 << ":";
            for (std::size_t i = 0; i < shown; ++i) out << ' ' << shortest(chunk.weights[i]);
            out << '\n';
        }
        if (chunk.fixes.empty()) continue;
        used = true;
        // Their slots hold id 0 above; the vectors take the place of its token embedding.
        out << "embeddings " << n + 1 << ":";
        for (const PromptChunkFix& fix : chunk.fixes) {
            const TextualInversion& e = embeddings->embeddings()[fix.embedding];
            out << (&fix == &chunk.fixes.front() ? " " : ", ") << e.name << " at " << fix.offset + 1 << " ("
                << e.vectors << " vector" << (e.vectors == 1 ? "" : "s") << ", " << e.shortHash() << ")";
        }
        out << '\n';
    }
    if (used) out << "tokens: " << prompt.tokenCount << " (each embedding vector counts as a token, as in A1111)\n";
}

}  // namespace

void printTokenChunks(const ClipTokenizer& tokenizer, std::string_view text, bool weights, std::ostream& out) {
    printChunks(tokenizer, text, weights, out, nullptr);
}

std::string tokensUsage() {
    return "usage: tessera-cli tokens \"PROMPT\" [--weights] [--model PATH]\n"
           "       tessera-cli tokens --prompt-file FILE [--weights] [--model PATH]\n"
           "\n"
           "Prints the CLIP token ids of a prompt as the text encoder receives them, one line\n"
           "'chunk N: ...' per 75-token chunk (A1111's chunking: emphasis such as (word:1.2), [word],\n"
           "BREAK, commas), with the start and end tokens and without padding.\n"
           "\n"
           "  --weights           after each chunk, a line 'weights N: ...' with each token's weight\n"
           "  --model PATH        a diffusers pipeline folder: its tokenizer/ (vocab.json + merges.txt);\n"
           "                      a .safetensors checkpoint, or no --model: the bundled CLIP vocabulary\n"
           "                      as SD 1.x uses it\n"
           "  --embeddings-dir DIR  textual-inversion embeddings named in the prompt, found by file name\n"
           "                      in DIR and in embeddings/ in and beside $TESSERA_MODELS and the models\n"
           "                      folder holding --model's folder: their vectors take id 0 slots, and a\n"
           "                      line 'embeddings N: NAME at P (V vectors, HASH)' follows the chunk\n"
           "  --prompt-file FILE  read the prompt from a UTF-8 file (at most 1 MiB)\n"
           "  --                  the next word is the prompt even if it starts with --\n";
}

int runTokensCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                     const std::string& executableDir) {
    try {
        const TokensOptions options = parseTokensOptions(args);
        if (options.help) {
            out << tokensUsage();
            return kExitOk;
        }
        const std::string prompt =
            options.promptFile ? readBoundedFile(*options.promptFile, "prompt-file", prompt_limits::kMaxPromptBytes)
                               : *options.prompt;
        // The tokenizer would read ill-formed bytes as U+FFFD; a command that shows ids refuses them instead.
        if (!isValidUtf8(prompt))
            throw ValidationError(options.promptFile ? "prompt-file" : "prompt",
                                  "prompt: is not valid UTF-8 (" + inQuotes(prompt) + "); give UTF-8 text");
        const ClipTokenizer tokenizer = loadTokenizer(options.model, executableDir);
        RunConfig config;
        config.model = options.model;
        config.embeddingsDir = options.embeddingsDir;
        const char* models = std::getenv(kModelsFolderVariable);
        const std::vector<EmbeddingFileEntry> files =
            listEmbeddingFiles(embeddingFolders(config, models ? models : ""));
        std::vector<EmbeddingDatabase> embeddings;
        if (!files.empty()) embeddings = loadPromptEmbeddings({&tokenizer}, files, {prompt});
        printChunks(tokenizer, prompt, options.weights, out, embeddings.empty() ? nullptr : &embeddings.front());
        return kExitOk;
    } catch (const FieldError& e) {  // a bad option or prompt, an unreadable file
        err << "tessera-cli: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const MissingResource& e) {
        err << "tessera-cli: " << e.message << "\n";
        return kExitFailure;
    }
}

}  // namespace tessera
