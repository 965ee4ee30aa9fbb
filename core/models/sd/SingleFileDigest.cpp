#include "core/models/sd/SingleFileDigest.h"

#include <cstddef>
#include <exception>
#include <span>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/formats/ModelWeights.h"

namespace tessera::single_file {

SingleFileDigest::SingleFileDigest(const TensorFile& file, bool compute) : file_(file) {
    if (compute) thread_ = std::thread([this] { run(); });
}

SingleFileDigest::~SingleFileDigest() {
    cancel_ = true;
    if (thread_.joinable()) thread_.join();
}

std::string SingleFileDigest::result() {
    if (thread_.joinable()) thread_.join();
    if (!failure_.empty()) throw ModelError(failure_);
    return digest_;
}

void SingleFileDigest::run() noexcept {
    try {
        Sha256 hash;
        const bool whole = file_.readFileInChunks([&](std::span<const std::byte> chunk) {
            if (cancel_) return false;
            hash.update(chunk.data(), chunk.size());
            return true;
        });
        if (whole) digest_ = hash.hexDigest();
    } catch (const std::exception& e) {
        failure_ = e.what();
        if (failure_.empty()) failure_ = shownPath(file_.path()) + ": cannot be hashed";
    }
}

}  // namespace tessera::single_file
