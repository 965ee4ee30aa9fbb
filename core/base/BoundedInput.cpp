// BoundedInput: bounded, non-blocking reads of untrusted files and depth-checked JSON.
#include "core/base/BoundedInput.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera {

namespace {

// Length of the well-formed UTF-8 sequence starting at text[i], or 0 if it is not one
// (overlong forms, surrogates and code points above U+10FFFF are not well-formed).
std::size_t utf8SequenceLength(std::string_view text, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = byte(i);
    if (c < 0x80) return 1;
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + n > text.size()) return 0;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (std::size_t k = 2; k < n; ++k)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return n;
}

void appendHexByte(std::string& out, unsigned char c) {
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "\\x%02X", c);
    out += buffer;
}

std::string errnoText(int error) { return std::strerror(error); }

}  // namespace

bool isValidUtf8(std::string_view text) {
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t n = utf8SequenceLength(text, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string toValidUtf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t n = utf8SequenceLength(text, i);
        if (n == 0) {
            appendHexByte(out, static_cast<unsigned char>(text[i]));
            ++i;
        } else {
            out.append(text.substr(i, n));
            i += n;
        }
    }
    return out;
}

std::string excerpt(std::string_view text, std::size_t maxChars) {
    std::string out;
    std::size_t shown = 0, i = 0;
    for (; i < text.size() && shown < maxChars; ++shown) {
        const auto c = static_cast<unsigned char>(text[i]);
        const std::size_t n = utf8SequenceLength(text, i);
        if (n == 0 || c < 0x20 || c == 0x7F) {
            switch (c) {
                case '\n':
                    out += "\\n";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                default:
                    appendHexByte(out, c);
            }
            ++i;
        } else if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
            ++i;
        } else {
            out.append(text.substr(i, n));
            i += n;
        }
    }
    if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
    return out;
}

std::string inQuotes(std::string_view text, std::size_t maxChars) { return "'" + excerpt(text, maxChars) + "'"; }

std::string shownPath(const std::filesystem::path& path) { return inQuotes(path.string(), input_limits::kNameChars); }

BoundedFile BoundedFile::open(const std::filesystem::path& path, std::string_view field, std::size_t maxBytes) {
    BoundedFile file(-1, 0, std::string(field), shownPath(path));
    if (path.empty()) file.fail("no file named");
    if (path.native().size() > input_limits::kPathChars)
        file.fail("path is " + std::to_string(path.native().size()) + " characters long; at most " +
                  std::to_string(input_limits::kPathChars) + " are allowed");
    // O_NONBLOCK: opening a FIFO with no writer must not wait for one.
    file.fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (file.fd_ < 0) {
        const int error = errno;
        if (error == ELOOP) file.fail("too many levels of symbolic links (a link loop?)");
        if (error == ENAMETOOLONG) file.fail("a path component is too long");
        file.fail("cannot open: " + errnoText(error));
    }
    struct stat info {};
    if (::fstat(file.fd_, &info) != 0) file.fail("cannot stat: " + errnoText(errno));
    if (S_ISDIR(info.st_mode)) file.fail("is a folder; a regular file is needed");
    if (!S_ISREG(info.st_mode)) file.fail("is not a regular file (a FIFO, device or socket); a regular file is needed");
    if (static_cast<std::uint64_t>(info.st_size) > maxBytes)
        file.fail("is " + std::to_string(info.st_size) + " bytes; at most " + std::to_string(maxBytes) +
                  " bytes are allowed for this kind of file");
    file.size_ = static_cast<std::uint64_t>(info.st_size);
    return file;
}

BoundedFile::~BoundedFile() {
    if (fd_ >= 0) ::close(fd_);
}

BoundedFile::BoundedFile(BoundedFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      field_(std::move(other.field_)),
      shown_(std::move(other.shown_)) {}

BoundedFile& BoundedFile::operator=(BoundedFile&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(other.fd_, -1);
        size_ = other.size_;
        field_ = std::move(other.field_);
        shown_ = std::move(other.shown_);
    }
    return *this;
}

void BoundedFile::fail(const std::string& why) const {
    throw InputFileError(field_, field_ + ": " + shown_ + ": " + why);
}

std::uint64_t BoundedFile::currentSize() const {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) fail("cannot stat: " + errnoText(errno));
    return static_cast<std::uint64_t>(info.st_size);
}

std::string BoundedFile::readAt(std::uint64_t offset, std::size_t count) const {
    if (offset >= size_) return {};
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(count, size_ - offset)), '\0');
    text.resize(readInto(offset, std::as_writable_bytes(std::span<char>(text))));
    return text;
}

std::string BoundedFile::readExactly(std::uint64_t offset, std::span<std::byte> out) const {
    const std::size_t got = readInto(offset, out);
    const std::uint64_t now = currentSize();
    if (got == out.size() && now == size_) return {};
    return "the file changed while it was being read: it was " + std::to_string(size_) + " bytes when opened and is " +
           std::to_string(now) + " bytes now" + (got < out.size() ? " (it shrank)" : "") +
           "; do not modify the file while Tessera loads it (renaming a finished copy over it is safe)";
}

std::size_t BoundedFile::readInto(std::uint64_t offset, std::span<std::byte> out) const {
    if (offset >= size_) return 0;
    const auto wanted = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), size_ - offset));
    std::size_t got = 0;
    while (got < wanted) {
        const ssize_t n = ::pread(fd_, out.data() + got, wanted - got, static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("read failed: " + errnoText(errno));
        if (n == 0) break;  // the file shrank while being read: take what is there
        got += static_cast<std::size_t>(n);
    }
    return got;
}

std::string excerptJson(const nlohmann::json& value, std::size_t maxChars) {
    // ASCII only, so cutting anywhere leaves valid text; invalid UTF-8 in a string is replaced.
    std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    if (text.size() > maxChars) text = text.substr(0, maxChars) + "... (" + std::to_string(text.size()) + " bytes)";
    return text;
}

std::string excerptList(const std::vector<std::string>& names, std::size_t maxShown) {
    std::string text;
    for (std::size_t i = 0; i < names.size() && i < maxShown; ++i) text += (i ? ", " : "") + inQuotes(names[i]);
    if (names.size() > maxShown) text += " and " + std::to_string(names.size() - maxShown) + " more";
    return text;
}

std::string readBoundedFile(const std::filesystem::path& path, std::string_view field, std::size_t maxBytes) {
    const BoundedFile file = BoundedFile::open(path, field, maxBytes);
    return file.readAt(0, static_cast<std::size_t>(file.size()));
}

int jsonNestingDepth(std::string_view text, int limit) {
    int depth = 0, deepest = 0;
    bool inString = false, escaped = false;
    for (const char c : text) {
        if (inString) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                inString = false;
            continue;
        }
        if (c == '"')
            inString = true;
        else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > limit) return limit + 1;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

nlohmann::json parseBoundedJson(std::string_view text, std::string_view field, std::string_view where, int maxDepth) {
    const auto fail = [&](const std::string& why) {
        throw InputFileError(std::string(field), std::string(field) + ": " + std::string(where) + ": " + why);
    };
    if (jsonNestingDepth(text, maxDepth) > maxDepth)
        fail("JSON nested deeper than " + std::to_string(maxDepth) + " levels; no valid file needs that many");
    // nlohmann stops at a NUL byte as at the end of the input, so "{...}\0<anything>" would be
    // taken as valid; a NUL never belongs in JSON text (strings write it as \u0000).
    if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
        fail("not valid JSON at byte " + std::to_string(nul + 1) +
             ": a NUL byte, which JSON text never holds (a binary or damaged file?)");
    try {
        return nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::parse_error& e) {
        // nlohmann's own message can quote a whole (huge) token: say where, and show a little.
        const std::size_t at = e.byte > 0 ? std::min<std::size_t>(e.byte - 1, text.size()) : 0;
        const std::size_t from = at > 20 ? at - 20 : 0;
        fail("not valid JSON at byte " + std::to_string(e.byte) + " (near \"" + excerpt(text.substr(from, 40), 40) +
             "\")");
    } catch (const nlohmann::json::exception& e) {
        // out_of_range 406: a number beyond double's range; the message quotes the whole number.
        fail("not valid JSON: " + excerpt(e.what(), 120));
    }
    return {};
}

nlohmann::json readBoundedJson(const std::filesystem::path& path, std::string_view field, std::size_t maxBytes,
                               int maxDepth) {
    const std::string text = readBoundedFile(path, field, maxBytes);
    return parseBoundedJson(text, field, shownPath(path), maxDepth);
}

}  // namespace tessera
