// SafeName: which identifiers may become file names, and the one way to join such a name to
// the folder it belongs in. Run ids arrive from files Tessera did not necessarily write (a
// history manifest, a run PNG): a "../../x" there must never turn into a path outside the
// folder that is read, written or deleted. Qt-free.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace tessera {

// Run ids as newRunId() makes them: "YYYYMMDD-HHMMSS-xxxxxxxx", the UTC date and time of the
// start and 8 lowercase hexadecimal digits (e.g. "20261122-061500-3f2a9c1d").
inline constexpr std::size_t kRunIdChars = 24;
inline constexpr std::string_view kRunIdRule =
    "a run id is YYYYMMDD-HHMMSS-xxxxxxxx (UTC date and time of the start, then 8 lowercase hex digits)";

// True when `id` follows the run id grammar above (which also makes it a safe file name).
bool isSafeRunId(std::string_view id);

// The longest file name accepted by isSafeFileName (ext4 and most file systems allow 255 bytes).
inline constexpr std::size_t kFileNameChars = 255;

// True when `name` is one plain path component safe to create or remove inside a folder:
// 1 to kFileNameChars characters from [A-Za-z0-9._-], not starting with '.' (no ".", "..",
// hidden files) or '-' (never read as an option).
bool isSafeFileName(std::string_view name);

// `folder` / `name` after checking that `name` is a safe file name, so that the result lies
// directly inside `folder` (no separator, no "..", nothing absolute). Throws
// ValidationError(field, ...) quoting a short escaped excerpt of `name` otherwise, and for an
// empty `folder` (a bare name would land in the working directory).
std::filesystem::path fileInFolder(const std::filesystem::path& folder, std::string_view name, std::string_view field);

}  // namespace tessera
