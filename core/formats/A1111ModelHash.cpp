#include "core/formats/A1111ModelHash.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/base/Sha256.h"

namespace tessera {

namespace fs = std::filesystem;

std::string a1111ModelHash(const std::string& path) {
    std::error_code ec;
    fs::path file(path);
    if (fs::is_directory(file, ec)) {
        file.clear();
        for (const char* name : {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin"})
            if (fs::is_regular_file(fs::path(path) / name, ec)) {
                file = fs::path(path) / name;
                break;
            }
    }
    if (file.empty() || !fs::is_regular_file(file, ec)) return {};
    std::ifstream in(file, std::ios::binary);
    if (!in) return {};
    constexpr std::streamoff kOffset = 0x100000;
    std::array<char, 0x10000> block{};
    std::streamsize got = 0;
    if (const std::uintmax_t size = fs::file_size(file, ec); !ec && size > static_cast<std::uintmax_t>(kOffset)) {
        in.seekg(kOffset);
        in.read(block.data(), block.size());
        got = in.gcount();
        if (got <= 0) return {};
    }
    return sha256Hex(block.data(), static_cast<std::size_t>(got)).substr(0, 8);
}

}  // namespace tessera
