#include "core/Sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace tessera {

struct Sha256::Context {
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
    if (!ctx_->md || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("Sha256: OpenSSL could not start a SHA-256 digest");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
    if (finished_ || !ctx_) throw std::logic_error("Sha256::update after digest()");
    if (size == 0) return;
    if (EVP_DigestUpdate(ctx_->md, data, size) != 1) throw std::runtime_error("Sha256: OpenSSL's digest update failed");
}

std::array<std::uint8_t, 32> Sha256::digest() {
    if (finished_ || !ctx_) throw std::logic_error("Sha256::digest called twice");
    finished_ = true;
    std::array<std::uint8_t, 32> out{};
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx_->md, out.data(), &length) != 1 || length != out.size())
        throw std::runtime_error("Sha256: OpenSSL's digest did not finish");
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
