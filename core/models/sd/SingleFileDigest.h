// SingleFileDigest: the SHA-256 of a weights file (A1111's model and VAE hashes are its first 10
// hex digits, modules/hashes.py sha256 of the file), computed on its own thread while the loader
// converts the tensors, so that a load costs the longer of the two rather than their sum. Internal
// to the single-file loaders (SingleFileCheckpoint.h, SingleFileVae.h). Qt-free.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "core/formats/TensorFile.h"

namespace tessera::single_file {

// Starts hashing `file` (which must outlive it) when `compute`; cancelled and joined when dropped.
// A failure on the thread (the file changed while it was read, a read error) is kept and thrown by
// result() on the caller's thread: an exception must never leave the thread's function.
class SingleFileDigest {
public:
    SingleFileDigest(const TensorFile& file, bool compute);
    ~SingleFileDigest();
    SingleFileDigest(const SingleFileDigest&) = delete;
    SingleFileDigest& operator=(const SingleFileDigest&) = delete;
    // The digest (lowercase hex); empty when not computed. Throws ModelError naming the file when
    // it could not be read to its end.
    std::string result();

private:
    void run() noexcept;
    const TensorFile& file_;
    std::atomic<bool> cancel_{false};
    std::string digest_, failure_;
    std::thread thread_;
};

}  // namespace tessera::single_file
