// LoraFile: one LoRA / LyCORIS file as a merge reads it: a safetensors file (nearly every LoRA) or a
// PyTorch pickle (.pt/.pth/.ckpt, read as data by the restricted reader, core/formats/TorchCheckpoint.h),
// its tensors listed by name and shape and read as float32 on demand, its metadata (kohya's ss_*,
// modelspec.*), and the fingerprints A1111 and Tessera key it by. Qt-free.
//
// Hashes (A1111 extensions-builtin/Lora/network.py NetworkOnDisk.__init__ / read_hash and
// modules/hashes.py): sha256 of the whole file; for safetensors files also kohya's "addnet" hash
// (sd-scripts library/train_util.py addnet_hash_safetensors, copied by A1111's hashes.py: the SHA-256
// of every byte after the 8-byte length and the JSON header, so metadata edits do not change it).
// A1111's network hash is the metadata's sshs_model_hash when present, else the addnet hash for
// .safetensors, else the whole-file SHA-256; its "Lora hashes" infotext value takes the first 12
// hex characters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/BoundedInput.h"

namespace tessera {

// A LoRA file that cannot be read: what() names the file and why; field() is "lora".
class LoraFileError : public InputFileError {
public:
    explicit LoraFileError(const std::string& message) : InputFileError("lora", message) {}
};

enum class LoraContainer { Safetensors, TorchPickle };
std::string_view toString(LoraContainer);  // "safetensors", "pickle"

struct LoraTensorInfo {
    std::string key;                  // as the file names it (a pickle's "state_dict." wrapper removed)
    std::vector<std::int64_t> shape;  // [] for a 0-d tensor (kohya's alpha)
    std::int64_t numel() const;
};

class LoraFile {
public:
    // Far above real files: kohya LoRAs are 2-400 MB, full-rank LyCORIS for SDXL a few GB.
    static constexpr std::uint64_t kMaxFileBytes = std::uint64_t{16} << 30;

    // Opens `path` (a .safetensors file by its extension or content; otherwise a PyTorch pickle),
    // validates its container (the readers' bounds: header, tensor count, every range inside the
    // file), lists its float tensors and hashes the file in one pass. Tensors of other dtypes, and a
    // pickle's non-tensor entries, are listed in skipped(). Throws LoraFileError naming the file.
    static LoraFile open(const std::string& path);

    LoraFile(LoraFile&&) noexcept;
    LoraFile& operator=(LoraFile&&) noexcept;
    LoraFile(const LoraFile&) = delete;
    LoraFile& operator=(const LoraFile&) = delete;
    ~LoraFile();

    const std::string& path() const { return path_; }
    // The file name without its extension: A1111's network name, what <lora:name:...> looks up.
    std::string stem() const;
    LoraContainer container() const { return container_; }
    // safetensors "__metadata__" (kohya ss_*, sshs_model_hash, modelspec.*); empty for pickles.
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // A1111's alias of the network (metadata ss_output_name), empty when none.
    std::string alias() const;

    // The float tensors (F32, F16, BF16; a pickle's float64 too), in the file's order.
    const std::vector<LoraTensorInfo>& tensors() const { return tensors_; }
    const LoraTensorInfo* find(std::string_view key) const;
    // "<key>: <why>" for every entry that is not a float tensor.
    const std::vector<std::string>& skipped() const { return skipped_; }
    // A tensor as float32, row-major. Thread-safe. Throws LoraFileError (the file changed, or
    // a key it does not hold).
    std::vector<float> readFloat32(const LoraTensorInfo& tensor) const;

    std::uint64_t fileSize() const { return fileSize_; }
    const std::string& sha256() const { return sha256_; }  // of the whole file, lowercase hex
    // kohya / A1111 addnet hash (safetensors only; empty for pickles).
    const std::string& addnetHash() const { return addnetHash_; }
    // A1111's NetworkOnDisk.hash: metadata sshs_model_hash, else addnetHash for safetensors, else sha256.
    std::string a1111Hash() const;
    // Its first 12 characters: the value A1111 writes in "Lora hashes".
    std::string a1111ShortHash() const { return a1111Hash().substr(0, 12); }

private:
    struct Reader;  // LoraFile.cpp: the safetensors or pickle reader
    LoraFile();

    std::string path_;
    LoraContainer container_ = LoraContainer::Safetensors;
    std::unique_ptr<Reader> reader_;
    std::map<std::string, std::string> metadata_;
    std::vector<LoraTensorInfo> tensors_;
    std::map<std::string, std::size_t, std::less<>> index_;
    std::vector<std::string> fileKeys_;  // tensors_[i]'s key inside the container
    std::vector<std::string> skipped_;
    std::uint64_t fileSize_ = 0;
    std::string sha256_, addnetHash_;
};

}  // namespace tessera
