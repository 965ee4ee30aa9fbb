// What the fuzz targets share: the checks every rejection must pass, the round-trip check,
// and a file in memory for readers that take a path. A broken check aborts, which libFuzzer
// reports as a crash and saves the input that caused it.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"

namespace tessera::fuzz {

// Longest rejection message accepted: what is wrong and what is allowed, plus at most a short
// excerpt of the input (STYLE: messages quote at most a short escaped excerpt).
inline constexpr std::size_t kMaxMessageBytes = 1024;

[[noreturn]] inline void violation(const std::string& what) {
    std::fprintf(stderr, "\n*** fuzz check failed: %s\n", what.c_str());
    std::abort();
}

// A rejection must be readable wherever it is shown (terminal, window, log): not empty, at
// most kMaxMessageBytes, valid UTF-8 and free of control characters other than newline and
// tab (an escape sequence from the input must not reach a terminal).
inline void checkRejection(const std::exception& e) {
    const std::string_view message = e.what();
    if (message.empty()) violation("an exception with an empty message");
    if (message.size() > kMaxMessageBytes)
        violation("a message of " + std::to_string(message.size()) + " bytes (at most " +
                  std::to_string(kMaxMessageBytes) + "): " + excerpt(message, 200));
    if (!isValidUtf8(message)) violation("a message that is not valid UTF-8: " + excerpt(message, 200));
    for (const char c : message) {
        const auto byte = static_cast<unsigned char>(c);
        if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7F)
            violation("a message with the raw control character " + excerpt(std::string_view(&c, 1)) + ": " +
                      excerpt(message, 200));
    }
}

// Writing `written` as text and reading it back with `read` must give the same JSON: what
// Tessera saves (presets, manifests, model settings) it must be able to open unchanged.
template <typename Read, typename Write>
void checkRoundTrip(const nlohmann::json& written, Read&& read, Write&& write, std::string_view what) {
    const std::string text = written.dump();
    std::string again;
    try {
        again = write(read(parseBoundedJson(text, "round trip", "the written JSON"))).dump();
    } catch (const std::exception& e) {
        violation(std::string(what) + ": the written JSON cannot be read back: " + excerpt(e.what(), 300) +
                  "\nwritten: " + excerpt(text, 600));
    }
    if (again != text)
        violation(std::string(what) + ": the JSON changed on the way back\nwritten: " + excerpt(text, 600) +
                  "\nread back and written again: " + excerpt(again, 600));
}

// One in-memory file (memfd_create), reused for every input; path() names it for readers
// that take a path (/proc/self/fd/N opens the same file again).
class MemoryFile {
public:
    MemoryFile() : fd_(::memfd_create("tessera-fuzz-input", MFD_CLOEXEC)) {
        if (fd_ < 0) violation(std::string("memfd_create failed: ") + std::strerror(errno));
    }
    ~MemoryFile() { ::close(fd_); }
    MemoryFile(const MemoryFile&) = delete;
    MemoryFile& operator=(const MemoryFile&) = delete;

    // Replaces the contents with bytes[0, size).
    void assign(const void* bytes, std::size_t size) {
        if (::ftruncate(fd_, 0) != 0) violation(std::string("ftruncate failed: ") + std::strerror(errno));
        std::size_t done = 0;
        while (done < size) {
            const ssize_t n =
                ::pwrite(fd_, static_cast<const char*>(bytes) + done, size - done, static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) violation(std::string("writing the memory file failed: ") + std::strerror(errno));
            done += static_cast<std::size_t>(n);
        }
    }
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
    int fd_;
};

inline std::string_view asText(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tessera::fuzz
