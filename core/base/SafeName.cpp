// SafeName: the run id grammar and folder-confined file names.
#include "core/base/SafeName.h"

#include <string>

#include "core/base/BoundedInput.h"
#include "core/base/ValidationError.h"

namespace tessera {

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isLowerHex(char c) { return isDigit(c) || (c >= 'a' && c <= 'f'); }
bool isNameChar(char c) {
    return isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '-';
}

}  // namespace

bool isSafeRunId(std::string_view id) {
    if (id.size() != kRunIdChars || id[8] != '-' || id[15] != '-') return false;
    for (std::size_t i = 0; i < id.size(); ++i) {
        if (i == 8 || i == 15) continue;
        if (i < 15 ? !isDigit(id[i]) : !isLowerHex(id[i])) return false;
    }
    return true;
}

bool isSafeFileName(std::string_view name) {
    if (name.empty() || name.size() > kFileNameChars || name.front() == '.' || name.front() == '-') return false;
    for (const char c : name)
        if (!isNameChar(c)) return false;
    return true;
}

std::filesystem::path fileInFolder(const std::filesystem::path& folder, std::string_view name, std::string_view field) {
    const auto refuse = [&](const std::string& why) {
        throw ValidationError(std::string(field),
                              std::string(field) + ": the file name \"" + excerpt(name) + "\" " + why);
    };
    if (!isSafeFileName(name))
        refuse("is not allowed; a file name is 1 to " + std::to_string(kFileNameChars) +
               " characters from A-Z a-z 0-9 . _ -, not starting with '.' or '-'");
    if (folder.empty()) refuse("has no folder to go in");
    // One component without separators that is not "." or "..": the result is directly inside.
    return folder / std::string(name);
}

}  // namespace tessera
