// SHA-256 (FIPS 180-4), for image and weights fingerprints in run manifests.
// Streaming: update() any number of times, then digest(); a finished Sha256 cannot be reused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

class Sha256 {
public:
    Sha256();
    void update(const void* data, std::size_t size);
    // Finishes the hash; further update()/digest() calls throw std::logic_error.
    std::array<std::uint8_t, 32> digest();
    std::string hexDigest();  // lowercase, 64 characters

private:
    void compress(const std::uint8_t* block);

    std::array<std::uint32_t, 8> state_;
    std::array<std::uint8_t, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t totalBytes_ = 0;
    bool finished_ = false;
};

// SHA-256 of a byte range, lowercase hex.
std::string sha256Hex(const void* data, std::size_t size);

}  // namespace tessera
