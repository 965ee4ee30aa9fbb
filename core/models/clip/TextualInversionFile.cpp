#include "core/models/clip/TextualInversionFile.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "core/base/Sha256.h"
#include "core/formats/TensorFile.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
    throw TextualInversionFileError("embedding: " + path + ": " + why);
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// One tensor's vectors: 2-D [n, width], or 1-D [width] where diffusers' concept files allow it.
EmbeddingVectors readVectors(const TensorFile& file, const TensorFileEntry& entry, bool oneDimensional, int& vectors) {
    const std::vector<std::int64_t>& shape = entry.shape;
    const bool flat = shape.size() == 1 && oneDimensional;
    if (!flat && shape.size() != 2)
        fail(file.path(), "tensor '" + excerpt(entry.name, 80) + "' has shape " + shapeText(shape) +
                              "; an embedding's vectors are [count, width]");
    const std::int64_t rows = flat ? 1 : shape[0], width = shape.back();
    if (rows < 1 || rows > embedding_limits::kMaxVectors)
        fail(file.path(), "tensor '" + excerpt(entry.name, 80) + "' holds " + std::to_string(rows) +
                              " vectors; an embedding has 1 to " + std::to_string(embedding_limits::kMaxVectors) +
                              " (its vectors must fit one 75-token chunk)");
    if (width < 1 || width > embedding_file_limits::kMaxWidth)
        fail(file.path(), "tensor '" + excerpt(entry.name, 80) + "' has vectors of width " + std::to_string(width) +
                              "; text encoders take 768, 1024 or 1280");
    EmbeddingVectors v;
    v.width = static_cast<int>(width);
    try {
        v.values = file.readFloat32(entry);
    } catch (const TensorFileError& e) {
        fail(file.path(), std::string("tensor '") + excerpt(entry.name, 80) + "' (" + entry.dtype +
                              ") cannot be read as float: " + e.what());
    }
    for (const float x : v.values)
        if (!std::isfinite(x))
            fail(file.path(), "tensor '" + excerpt(entry.name, 80) + "' holds NaN or infinite values");
    vectors = static_cast<int>(rows);
    return v;
}

std::string fileSha256(const TensorFile& file) {
    Sha256 hash;
    try {
        file.readFileInChunks([&](std::span<const std::byte> bytes) {
            hash.update(bytes.data(), bytes.size());
            return true;
        });
    } catch (const TensorFileError& e) {
        fail(file.path(), e.what());
    }
    return hash.hexDigest();
}

}  // namespace

std::string textualInversionName(const std::string& path) { return fs::path(path).stem().string(); }

TextualInversion readTextualInversion(const std::string& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) fail(path, "cannot be read (" + ec.message() + ")");
    if (size > embedding_file_limits::kMaxFileBytes)
        fail(path, std::to_string(size) + " bytes; an embedding file is far smaller (at most " +
                       std::to_string(embedding_file_limits::kMaxFileBytes >> 20) + " MiB are read)");
    std::optional<TensorFile> opened;
    try {
        opened.emplace(path, StateDictWrapper::Keep);
    } catch (const TensorFileError& e) {
        throw TextualInversionFileError(
            std::string("embedding: ") + e.what() +
            (e.container() == TensorContainer::TorchCheckpoint
                 ? " (a pickle is read as data only; convert the embedding to .safetensors if it needs more)"
                 : ""));
    }
    const TensorFile& file = *opened;
    TextualInversion e;
    e.name = textualInversionName(path);
    e.path = path;
    std::vector<const TensorFileEntry*> params;
    for (const TensorFileEntry& t : file.tensors())
        if (t.name.rfind("string_to_param.", 0) == 0) params.push_back(&t);
    const TensorFileEntry* clipL = file.find("clip_l");
    const TensorFileEntry* clipG = file.find("clip_g");
    if (!params.empty()) {
        // A1111: assert len(param_dict) == 1, 'embedding file has multiple terms in it'.
        if (params.size() != 1)
            fail(path, std::to_string(params.size()) + " tensors under string_to_param; an embedding has one");
        e.byEncoder[""] = readVectors(file, *params.front(), false, e.vectors);
    } else if (clipL && clipG) {
        int vectorsL = 0, vectorsG = 0;
        e.byEncoder["clip_l"] = readVectors(file, *clipL, false, vectorsL);
        e.byEncoder["clip_g"] = readVectors(file, *clipG, false, vectorsG);
        if (vectorsL != vectorsG)
            fail(path, "clip_l holds " + std::to_string(vectorsL) + " vectors and clip_g " + std::to_string(vectorsG) +
                           "; SDXL's two encoders need as many each");
        e.vectors = vectorsG;
    } else if (file.tensors().size() == 1) {
        e.byEncoder[""] = readVectors(file, file.tensors().front(), true, e.vectors);
    } else {
        fail(path, file.tensors().empty()
                       ? "holds no tensor; an embedding holds string_to_param, clip_l and clip_g, or one tensor"
                       : std::to_string(file.tensors().size()) +
                             " tensors and neither string_to_param nor clip_l and clip_g; A1111 takes a file of "
                             "one tensor only (\"embedding file has multiple terms in it\")");
    }
    e.sha256 = fileSha256(file);
    return e;
}

std::vector<EmbeddingDatabase> loadPromptEmbeddings(const std::vector<const ClipTokenizer*>& tokenizers,
                                                    const std::vector<EmbeddingFileEntry>& files,
                                                    const std::vector<std::string>& texts,
                                                    PromptChunkOptions chunking) {
    // Which names the texts use does not depend on the vectors: placeholders of one vector each
    // find them, then only those files are read.
    std::vector<TextualInversion> stubs;
    for (const EmbeddingFileEntry& f : files) {
        TextualInversion stub;
        stub.name = f.name;
        stub.path = f.path;
        stub.vectors = 1;
        stubs.push_back(std::move(stub));
    }
    std::vector<TextualInversion> registered;  // after same-name replacement, in registration order
    std::vector<bool> used;
    for (const ClipTokenizer* tokenizer : tokenizers) {
        const EmbeddingDatabase names(*tokenizer, stubs);
        if (registered.empty()) {
            registered = names.embeddings();
            used.assign(registered.size(), false);
        }
        chunking.embeddings = &names;
        for (const std::string& text : texts)
            for (const PromptChunk& chunk : chunkPrompt(*tokenizer, text, chunking).chunks)
                for (const PromptChunkFix& fix : chunk.fixes) used[fix.embedding] = true;
    }
    for (std::size_t i = 0; i < registered.size(); ++i)
        if (used[i]) registered[i] = readTextualInversion(registered[i].path);
    std::vector<EmbeddingDatabase> out;
    out.reserve(tokenizers.size());
    for (const ClipTokenizer* tokenizer : tokenizers) out.emplace_back(*tokenizer, registered);
    return out;
}

}  // namespace tessera
