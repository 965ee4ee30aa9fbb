// For the suites that need a diffusers tokenizer/ folder (tests/core/tst_cliptokenizer,
// tst_sdxltext): one written from the bundled vocabulary. Header-only; tests/CMakeLists.txt builds
// only tst_*.cpp.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <zlib.h>
#include <nlohmann/json.hpp>

#include "core/text/ClipTokenizer.h"

namespace tokenizer_test {

// The text of a gzip file (the bundled merges file, for folders and damaged copies).
inline std::string unpackedMerges(const std::string& gzPath) {
    gzFile f = gzopen(gzPath.c_str(), "rb");
    std::string text;
    char buffer[1 << 16];
    int n = 0;
    while (f != nullptr && (n = gzread(f, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<std::size_t>(n));
    if (f != nullptr) gzclose(f);
    return text;
}

inline void writeFile(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A diffusers tokenizer/ folder holding the same tables as `tok` (vocab.json from its ids,
// merges.txt = header + the merges transformers reads), in the existing folder `dir`.
inline void writeFolder(const std::string& dir, const tessera::ClipTokenizer& tok, const std::string& merges) {
    nlohmann::json vocab = nlohmann::json::object();
    for (std::int32_t id = 0; id < static_cast<std::int32_t>(tok.vocabSize()); ++id) vocab[tok.tokenString(id)] = id;
    writeFile(dir + "/vocab.json", vocab.dump());
    std::size_t end = 0;
    for (std::size_t line = 0; line <= tessera::clip_limits::kMerges; ++line) end = merges.find('\n', end) + 1;
    writeFile(dir + "/merges.txt",
              "#version: 0.2\n" + merges.substr(merges.find('\n') + 1, end - merges.find('\n') - 1));
}

}  // namespace tokenizer_test
