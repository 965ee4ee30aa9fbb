// TensorFile: the named tensors of one weights file, whichever container holds them: a safetensors
// file (core/formats/Safetensors.h) or a pickled PyTorch checkpoint (.ckpt, .pt, .pth) read as data
// by the restricted reader (core/formats/TorchCheckpoint.h: pickle opcodes parsed, nothing
// executed). One listing (name, dtype, shape, where the bytes lie), float32 reads of a tensor or a
// row block of it, and the whole file in chunks for its digest, so that a loader (the single-file
// Stable Diffusion checkpoints, separate VAE files) is written once for both. The container is
// told by content, as torch/serialization.py _is_zipfile and the legacy magic number do, the
// extension deciding only for bytes that are neither. Qt-free; reads may run on several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class BoundedFile;          // core/base/BoundedInput.h
class SafetensorsFile;      // core/formats/Safetensors.h
class TorchCheckpointFile;  // core/formats/TorchCheckpoint.h

enum class TensorContainer { Safetensors, TorchCheckpoint };
// "safetensors", "PyTorch checkpoint".
std::string_view toString(TensorContainer);

// A file that is neither readable container, or that its reader refuses (a pickle asking to run
// code, a lying size, a truncated file). what() is the reader's message: it names the file and what
// was found.
class TensorFileError : public std::runtime_error {
public:
    TensorFileError(TensorContainer container, const std::string& message)
        : std::runtime_error(message), container_(container) {}
    // The container the file was read as when it was refused.
    TensorContainer container() const { return container_; }

private:
    TensorContainer container_;
};

// What a PyTorch checkpoint's tensors are named by. Training tools save the model's state dict
// under "state_dict" beside optimizer states and step counts; loaders descend into it while it is
// there (diffusers loaders/single_file_utils.py load_single_file_checkpoint, A1111
// modules/sd_models.py get_state_dict_from_checkpoint). Safetensors files hold flat names and are
// never unwrapped.
enum class StateDictWrapper { Unwrap, Keep };

struct TensorFileEntry {
    std::string name;   // in the file (dict keys joined with "."), the state_dict wrapper removed when unwrapped
    std::string dtype;  // as safetensors spells it ("F32", "F16", "BF16", "F64", "I64", ...; safetensors/torch.py
                        // _TYPES for a checkpoint's torch dtypes; "complex128", which safetensors lacks, as torch)
    std::vector<std::int64_t> shape;  // [] = 0-d
    std::uint64_t position = 0;       // where its first byte lies in the file: reads in this order are one pass
    std::uint64_t bytes = 0;          // its stored bytes
    std::int64_t numel() const;
};

class TensorFile {
public:
    // Opens and validates `path`: a zip archive ("PK\3\4"), a legacy pickle stream or a tar archive
    // is a PyTorch checkpoint; any other bytes are safetensors, unless the name ends in .ckpt, .pt,
    // .pth, .bin, .pkl or .pickle, where the restricted reader says what it found. Throws
    // TensorFileError with the reader's message.
    explicit TensorFile(const std::string& path, StateDictWrapper wrapper = StateDictWrapper::Unwrap);
    ~TensorFile();
    TensorFile(TensorFile&&) noexcept;
    TensorFile& operator=(TensorFile&&) noexcept;
    TensorFile(const TensorFile&) = delete;
    TensorFile& operator=(const TensorFile&) = delete;

    // The container `path` would be opened as (its first bytes and its name), without opening it as
    // one. Throws TensorFileError for a file that cannot be read (missing, a folder, a FIFO).
    static TensorContainer containerOf(const std::string& path);

    const std::string& path() const { return path_; }
    TensorContainer container() const { return container_; }
    bool pickle() const { return container_ == TensorContainer::TorchCheckpoint; }
    // For the run record and messages: "safetensors", or the restricted reader's words ("PyTorch
    // checkpoint (zip), a pickle read as data by the restricted reader (nothing executed): 1,130
    // tensors, 2 other entries skipped"), with the wrapper it descended into.
    std::string description() const;
    // The wrapper removed from every name ("state_dict."); "" for none.
    const std::string& wrapper() const { return wrapper_; }
    // The file's size when opened, which every read is checked against.
    std::uint64_t fileSize() const { return fileSize_; }

    // Every tensor, in the order the container lists them.
    const std::vector<TensorFileEntry>& tensors() const { return tensors_; }
    // nullptr when absent.
    const TensorFileEntry* find(const std::string& name) const;
    bool has(const std::string& name) const { return find(name) != nullptr; }

    // The tensor as float32 (F32, F16, BF16; a safetensors file's F8_E4M3 and F8_E5M2; a
    // checkpoint's F64): `count` elements from element `first` on (row-major), or the whole tensor.
    // Throws TensorFileError naming the file and the tensor for another dtype or a range outside
    // it, or when the file changed.
    std::vector<float> readFloat32(const TensorFileEntry& entry, std::size_t first, std::size_t count) const;
    std::vector<float> readFloat32(const TensorFileEntry& entry) const;
    // The whole file from its first byte, in order, handed to `consume` in chunks of at most 4 MiB
    // (e.g. for hashing); stops early, returning false, when `consume` does. Returns true once
    // every byte was handed over. TensorFileError when the file changed while it was read.
    bool readFileInChunks(const std::function<bool(std::span<const std::byte>)>& consume) const;

private:
    std::string path_;
    TensorContainer container_ = TensorContainer::Safetensors;
    std::unique_ptr<SafetensorsFile> safetensors_;
    std::unique_ptr<TorchCheckpointFile> checkpoint_;
    std::unique_ptr<const BoundedFile> raw_;  // a checkpoint's bytes for readFileInChunks
    std::uint64_t fileSize_ = 0;
    std::string wrapper_;
    std::vector<TensorFileEntry> tensors_;
    std::vector<std::size_t> source_;  // each entry's index in its container's listing
    std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace tessera
