#include "core/base/Sha256.h"

#include <nettle/sha2.h>

#include <stdexcept>

namespace tessera {

struct Sha256::Context {
    sha256_ctx state;
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) { sha256_init(&ctx_->state); }

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
    if (finished_ || !ctx_) throw std::logic_error("Sha256::update after digest()");
    if (size == 0) return;
    sha256_update(&ctx_->state, size, static_cast<const std::uint8_t*>(data));
}

std::array<std::uint8_t, 32> Sha256::digest() {
    if (finished_ || !ctx_) throw std::logic_error("Sha256::digest called twice");
    finished_ = true;
    std::array<std::uint8_t, 32> out{};
    sha256_digest(&ctx_->state, out.size(), out.data());
    return out;
}

std::string Sha256::hexDigest() {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto bytes = digest();
    std::string hex;
    hex.reserve(64);
    for (const std::uint8_t b : bytes) {
        hex.push_back(kHex[b >> 4]);
        hex.push_back(kHex[b & 15]);
    }
    return hex;
}

std::string sha256Hex(const void* data, std::size_t size) {
    Sha256 hash;
    hash.update(data, size);
    return hash.hexDigest();
}

}  // namespace tessera
