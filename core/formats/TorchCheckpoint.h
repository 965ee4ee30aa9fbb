// TorchCheckpoint: PyTorch checkpoint files (.pth, .pt, .ckpt, .bin) read as data, never executed.
// The same API as SafetensorsFile (tensors() with name and shape, find(), readFloat32(name)), so
// loaders such as StateDict::fromFile take either.
//
// Containers (torch/serialization.py _load, _legacy_load, _is_zipfile):
// - zip (torch.save since 1.6): records <archive>/data.pkl (the pickle) and <archive>/data/<key>
//   (one per storage), plus version, byteorder and dot-records, all under one folder. Entries are
//   stored, not compressed (caffe2/serialize/inline_container.cc PyTorchStreamWriter); ZIP64
//   records are read as that writer emits them. A compressed entry, a TorchScript archive
//   (constants.pkl, code/) and entries that overlap, repeat a name or leave the archive folder are
//   refused by name.
// - legacy (_use_new_zipfile_serialization=False, and every file of PyTorch < 1.6): the magic
//   number, protocol version and sys_info pickles, the state pickle, the pickled list of storage
//   keys, then each storage as an int64 element count and its little-endian bytes.
// - the tar format of PyTorch < 0.4 is refused by name.
// The pickle is read by core/formats/Pickle.h, which names everything it refuses.
//
// The state: nested dicts are flattened, keys joined with "." ("params_ema.conv.weight"), so a
// caller sees and picks the wrapper a training tool saved (params_ema, params, state_dict); integer
// keys (optimizer state) are written in decimal. Leaves that are not tensors (step counts, strings,
// torch.Size, numpy scalars) are skipped and listed. A dict reached twice (shared or cyclic
// references) is refused: a state dict is a tree.
//
// Bounds, all checked before the allocation they protect. Opening reads the zip central directory
// (<= kMaxCentralDirectoryBytes) and the pickle (<= PickleLimits::kMaxBytes; for the legacy format
// windows of the stream, doubling up to that), and builds at most PickleLimits::kMaxBuiltBytes from
// it: under 900 MiB for any input, typically a few MiB. Every size the file declares is checked
// against the file: each storage must be exactly its record (zip) or its counted bytes (legacy),
// inside the file, and every tensor view (offset, shape, strides) inside its storage; so a file
// that claims a terabyte is refused having read only its directory and pickle. Reading a tensor
// allocates its contiguous bytes (numel x element size: at most its storage's bytes, which lie in
// the file, or PickleLimits::kMaxExpandedBytes for a stride-0 view), plus, for a non-contiguous
// view, the range of the storage it spans.
//
// The file is opened without blocking, must be a regular file, and is read with pread (no mapping;
// see Safetensors.h): a read that comes up short or a size that changed is an error saying the file
// changed. The zip records' CRC-32s are not verified (that would read every byte at open). Reads
// may run on several threads at once. Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/formats/Pickle.h"

namespace tessera {

class BoundedFile;  // core/base/BoundedInput.h

// A file that is not a readable PyTorch checkpoint, or asks for something refused. what() names
// the file and what was refused.
class TorchCheckpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What a file's first bytes say it is (torch/serialization.py _is_zipfile: the first four bytes;
// the legacy magic number pickle; "ustar" at byte 257 for the tar format).
enum class TorchContainer { Unknown, Zip, Legacy, Tar };
// `head`: the file's first bytes (512 suffice).
TorchContainer detectTorchContainer(std::string_view head);

enum class TorchCheckpointFormat { Zip, Legacy };
std::string_view toString(TorchCheckpointFormat);  // "zip", "legacy"

struct TorchTensorInfo {
    std::string name;  // dict keys joined with "."
    TorchDtype dtype = TorchDtype::Float32;
    std::vector<std::int64_t> shape;    // [] = 0-d
    std::vector<std::int64_t> strides;  // in elements
    std::string storageKey;
    std::uint64_t storageOffset = 0;  // in elements
    std::size_t storage = 0;          // index into TorchCheckpointFile::storages()
    std::int64_t numel() const;
    // Bytes of the tensor's values laid out contiguously (readBytes' size).
    std::uint64_t byteSize() const;
    // Row-major contiguous (strides of size-1 dimensions do not matter).
    bool contiguous() const;
};

struct TorchStorageInfo {
    std::string key;
    TorchDtype dtype = TorchDtype::Float32;  // uint8 for torch.UntypedStorage
    std::uint64_t numel = 0;
    std::uint64_t byteSize = 0;
    std::uint64_t fileOffset = 0;  // where its bytes start in the file
};

// A leaf of the state that is not a tensor, and what it is ("int 5", "str 'text'", "tuple of 2").
struct TorchSkippedEntry {
    std::string name;
    std::string what;
};

// One open, validated checkpoint. Move-only; closes the file on destruction.
class TorchCheckpointFile {
public:
    // A checkpoint has one record per storage plus ~7 others; 262,144 is 2.6x the 100,000 tensors
    // a safetensors file may hold.
    static constexpr std::size_t kMaxZipEntries = 262'144;
    // ~100 bytes per central directory entry: 64 MiB is far above kMaxZipEntries' worth.
    static constexpr std::uint64_t kMaxCentralDirectoryBytes = std::uint64_t{64} << 20;
    // Record names are "<archive>/data/<key>"; the archive is the saved file's stem (<= 255 bytes).
    static constexpr std::size_t kMaxEntryNameBytes = 1024;
    // Flattened tensor names: real ones reach ~150 bytes.
    static constexpr std::size_t kMaxTensorNameBytes = 4096;
    // Non-tensor leaves kept for skipped() (all are counted).
    static constexpr std::size_t kMaxSkippedListed = 1000;

    // Opens and validates `path`. Throws TorchCheckpointError naming the file on any defect.
    explicit TorchCheckpointFile(const std::string& path);
    ~TorchCheckpointFile();
    TorchCheckpointFile(TorchCheckpointFile&&) noexcept;
    TorchCheckpointFile& operator=(TorchCheckpointFile&&) noexcept;
    TorchCheckpointFile(const TorchCheckpointFile&) = delete;
    TorchCheckpointFile& operator=(const TorchCheckpointFile&) = delete;

    const std::string& path() const { return path_; }
    TorchCheckpointFormat format() const { return format_; }
    // The zip archive's folder name ("archive", or the saved file's stem); "" for legacy files.
    const std::string& archiveName() const { return archive_; }
    // Storages were written big-endian (zip record "byteorder" = "big"); reads swap them.
    bool bigEndian() const { return bigEndian_; }
    // For the run record and messages: that the file is a pickled PyTorch checkpoint read as data
    // by the restricted reader (nothing executed), its format, tensor and skipped-entry counts.
    std::string description() const;

    // All tensors, in the order the pickle holds them.
    const std::vector<TorchTensorInfo>& tensors() const { return tensors_; }
    // nullptr when absent.
    const TorchTensorInfo* find(const std::string& name) const;
    bool has(const std::string& name) const { return find(name) != nullptr; }
    const std::vector<TorchStorageInfo>& storages() const { return storages_; }
    // Non-tensor leaves: the first kMaxSkippedListed, and how many there were.
    const std::vector<TorchSkippedEntry>& skipped() const { return skipped_; }
    std::size_t skippedCount() const { return skippedCount_; }
    // The file's size when opened, which every read is checked against.
    std::uint64_t fileSize() const { return fileSize_; }

    // The tensor's values in its own dtype, contiguous row-major, little-endian (strides,
    // storage offset and byte order applied): byteSize() bytes.
    std::vector<std::byte> readBytes(const TorchTensorInfo& info) const;
    // The tensor as float32 (float32, float16, bfloat16, float64). Throws TorchCheckpointError
    // naming the file, the tensor and its dtype for a missing tensor or any other dtype.
    std::vector<float> readFloat32(const std::string& name) const;
    std::vector<float> readFloat32(const TorchTensorInfo& info) const;
    // `count` elements from element `first` on (row-major), converted the same way.
    std::vector<float> readFloat32(const TorchTensorInfo& info, std::size_t first, std::size_t count) const;

private:
    void openZip();
    void openLegacy();
    void flatten(const PickleDocument& doc);
    void walk(const PickleDocument& doc, const PickleValue& dict, const std::string& prefix, int depth,
              std::unordered_set<std::uint32_t>& visited, std::vector<std::pair<std::string, PickleValue>>& found);
    // Exactly out.size() bytes at `offset`, or TorchCheckpointError: the file changed.
    void readExactly(std::uint64_t offset, std::span<std::byte> out) const;
    // `count` elements from element `first` (row-major) as contiguous bytes in the file's order.
    std::vector<std::byte> readElements(const TorchTensorInfo& info, std::uint64_t first, std::uint64_t count) const;
    [[noreturn]] void fail(const std::string& why) const;

    std::string path_;
    std::unique_ptr<const BoundedFile> file_;  // never null but after a move
    std::uint64_t fileSize_ = 0;
    TorchCheckpointFormat format_ = TorchCheckpointFormat::Zip;
    std::string archive_;
    bool bigEndian_ = false;
    std::vector<TorchTensorInfo> tensors_;
    std::vector<TorchStorageInfo> storages_;
    std::vector<TorchSkippedEntry> skipped_;
    std::size_t skippedCount_ = 0;
    std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace tessera
