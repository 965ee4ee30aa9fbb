// SHA-256 (FIPS 180-4), for image and weights fingerprints in run manifests: Nettle's (libnettle8,
// on every Debian and Ubuntu system through GnuTLS; its x86-64 code runs about 3.3x the plain C this
// file held before, and a 2 GB checkpoint's hash was seconds of every load).
// Streaming: update() any number of times, then digest(); a finished Sha256 cannot be reused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessera {

class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(Sha256&&) noexcept;
    Sha256& operator=(Sha256&&) noexcept;
    void update(const void* data, std::size_t size);
    // Finishes the hash; further update()/digest() calls throw std::logic_error.
    std::array<std::uint8_t, 32> digest();
    std::string hexDigest();  // lowercase, 64 characters

private:
    struct Context;  // Nettle's sha256_ctx
    std::unique_ptr<Context> ctx_;
    bool finished_ = false;
};

// SHA-256 of a byte range, lowercase hex.
std::string sha256Hex(const void* data, std::size_t size);

}  // namespace tessera
