#include "core/run/ModelName.h"

#include <cctype>
#include <filesystem>
#include <system_error>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace fs = std::filesystem;

bool hasFileExtension(const std::string& path, std::initializer_list<const char*> extensions) {
    std::string ext = fs::path(path).extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* e : extensions)
        if (ext == e) return true;
    return false;
}

bool isSdModelPath(const std::string& path) {
    if (path.rfind(kRandomModelPrefix, 0) == 0) return true;
    if (path.empty() || path.size() > input_limits::kPathChars) return false;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "model_index.json", ec);
    return hasFileExtension(path, {".safetensors", ".ckpt", ".pt", ".pth", ".bin"});
}

}  // namespace tessera
