// BoundedInput: the one way Tessera reads a file it did not write itself in this process
// (presets, compare A/B files, model config.json / scheduler_config.json, manifests, saved
// settings, history entries). Every input is untrusted: it is opened without blocking and
// refused unless it is a regular file, its size is bounded before a byte is read, JSON
// nesting depth is bounded before the parser sees it, and messages quote at most a short,
// escaped excerpt of what was found. Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/ValidationError.h"

namespace tessera {

// Limits chosen from what real files need, with a margin; each says why.
namespace input_limits {
// Settings, presets, manifests, diffusers config.json: the largest real ones are a few
// KiB (a manifest with 10,000 timing rows is ~2 MiB); 16 MiB leaves a wide margin.
inline constexpr std::size_t kJsonBytes = 16u << 20;
// No real Tessera, diffusers or safetensors JSON nests deeper than 8 levels; 64 keeps
// every recursive consumer far from the stack's end.
inline constexpr int kJsonDepth = 64;
// Characters of a bad value quoted back in an error message.
inline constexpr std::size_t kExcerptChars = 60;
// Characters of a path or tensor name quoted back: real ones reach about 120.
inline constexpr std::size_t kNameChars = 200;
// Longest path accepted anywhere (Linux PATH_MAX is 4096).
inline constexpr std::size_t kPathChars = 4096;
}  // namespace input_limits

// Thrown for a file that cannot be read as asked or whose contents break a bound.
// what() is the whole message, naming the file; field() the setting it came from
// ("preset", "model", ...) so front ends can say which and exit with "invalid input".
class InputFileError : public FieldError {
public:
    using FieldError::FieldError;
};

// `text` shortened to at most `maxChars` characters (then "..." and the total length) with
// control characters, quotes, backslashes and invalid UTF-8 escaped, for error messages.
std::string excerpt(std::string_view text, std::size_t maxChars = input_limits::kExcerptChars);

// `text` as a short escaped excerpt between single quotes ("'abc'"), to name a value, key or
// option in a message.
std::string inQuotes(std::string_view text, std::size_t maxChars = input_limits::kExcerptChars);

// A path as messages show it: inQuotes with room for input_limits::kNameChars characters.
std::string shownPath(const std::filesystem::path& path);

// A JSON value as compact ASCII text of at most `maxChars` characters (invalid UTF-8 replaced),
// for messages that quote a value from an untrusted file.
std::string excerptJson(const nlohmann::json& value, std::size_t maxChars = input_limits::kExcerptChars);

// "'a', 'b', 'c' and 4997 more": the first `maxShown` names, each a short escaped excerpt,
// for messages about lists of any length.
std::string excerptList(const std::vector<std::string>& names, std::size_t maxShown = 5);

// `text` as valid UTF-8: well-formed sequences kept, every other byte written as the
// three characters "\xNN". Idempotent on valid UTF-8 input.
std::string toValidUtf8(std::string_view text);
bool isValidUtf8(std::string_view text);

// A file opened as readBoundedFile opens it (regular files only, without blocking, size
// bounded), for readers that need only part of it: an image's header before its pixels.
// Move-only; closes the file when destroyed. Errors are InputFileError naming the file.
class BoundedFile {
public:
    static BoundedFile open(const std::filesystem::path& path, std::string_view field, std::size_t maxBytes);
    ~BoundedFile();
    BoundedFile(BoundedFile&& other) noexcept;
    BoundedFile& operator=(BoundedFile&& other) noexcept;
    BoundedFile(const BoundedFile&) = delete;
    BoundedFile& operator=(const BoundedFile&) = delete;

    // The size when opened, which every read is bounded by.
    std::uint64_t size() const { return size_; }
    // The size now (fstat): differs from size() when the file was changed since it was opened.
    std::uint64_t currentSize() const;
    int fd() const noexcept { return fd_; }
    // Up to `count` bytes starting at `offset`: fewer where the file ends (or shrank).
    std::string readAt(std::uint64_t offset, std::size_t count) const;
    // The same into `out`; returns how many bytes were read. Safe to call from several threads.
    std::size_t readInto(std::uint64_t offset, std::span<std::byte> out) const;
    // All of `out` from `offset`, the file still of its size at open: "" when so, else why not ("the
    // file changed while it was being read: ..."), for the caller's own error. A file that shrinks
    // or grows while a model is read must fail the read, never give a mix of two files.
    std::string readExactly(std::uint64_t offset, std::span<std::byte> out) const;
    // Throws InputFileError "field: 'path': why".
    [[noreturn]] void fail(const std::string& why) const;

private:
    BoundedFile(int fd, std::uint64_t size, std::string field, std::string shown)
        : fd_(fd), size_(size), field_(std::move(field)), shown_(std::move(shown)) {}
    int fd_ = -1;
    std::uint64_t size_ = 0;
    std::string field_, shown_;
};

// Reads the whole of `path`, which must name a regular file (after following symbolic
// links; a FIFO, device, socket or directory is refused without blocking) of at most
// `maxBytes` bytes. `field` names the setting for the error.
std::string readBoundedFile(const std::filesystem::path& path, std::string_view field,
                            std::size_t maxBytes = input_limits::kJsonBytes);

// The deepest nesting of arrays/objects in `text`, scanning it once (strings skipped),
// stopping early once `limit` is exceeded (then returns limit + 1).
int jsonNestingDepth(std::string_view text, int limit = input_limits::kJsonDepth);

// Parses `text` as JSON after checking its depth. `where` names the source for messages
// ("preset '/x/y.json'"); parse errors quote at most a short excerpt.
nlohmann::json parseBoundedJson(std::string_view text, std::string_view field, std::string_view where,
                                int maxDepth = input_limits::kJsonDepth);

// readBoundedFile + parseBoundedJson.
nlohmann::json readBoundedJson(const std::filesystem::path& path, std::string_view field,
                               std::size_t maxBytes = input_limits::kJsonBytes,
                               int maxDepth = input_limits::kJsonDepth);

}  // namespace tessera
