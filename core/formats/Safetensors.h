// safetensors files (huggingface/safetensors README.md, safetensors/src/tensor.rs): a validating
// reader and a small writer for tests and tools. Qt-free.
//
// The reader checks everything a hostile or damaged file could get wrong before any tensor is
// touched: the header length is bounded and inside the file, the header is a JSON object, every
// tensor has a known dtype, a valid shape and data_offsets whose length equals numel *
// sizeof(dtype), and the ranges, sorted by their start, tile the data buffer exactly (no gap, no
// overlap, nothing after the last one). Only the header's padding and key order are taken as they
// come (older writers do not pad; the format's README says not to rely on order). Opening never
// blocks (a FIFO or device is refused before it is read), and the header is bounded (bytes,
// nesting, tensor count, rank, dimensions) before it is parsed, in time linear in its length.
//
// The file is read with pread, never memory-mapped: a mapped file that another process truncates
// kills the reader with SIGBUS, in whichever thread touches the lost pages. A read that comes up
// short, or a file whose size is no longer the size it had when opened, is a SafetensorsError
// saying the file changed while it was being read.
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

class BoundedFile;  // core/base/BoundedInput.h

// Every dtype the format defines (safetensors/src/tensor.rs Dtype). F32, F16, BF16 and the two
// 8-bit floats F8_E4M3 and F8_E5M2 can be read as float32.
enum class SafetensorsDtype {
    BOOL,
    U8,
    I8,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64,
    C64,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    F4,
    F6_E2M3,
    F6_E3M2
};

std::string_view toString(SafetensorsDtype);
// Throws SafetensorsError for a name the format does not define.
SafetensorsDtype parseSafetensorsDtype(std::string_view);
// Bits per element (4 and 6 for the sub-byte float formats, 8..64 otherwise).
int bitsPerElement(SafetensorsDtype);

// A file that is not valid safetensors, or a tensor that cannot be read as asked.
// what() names the file and, where it applies, the tensor.
class SafetensorsError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct SafetensorsTensorInfo {
    std::string name;
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::vector<std::int64_t> shape;  // [] = scalar
    std::uint64_t begin = 0;          // byte offsets inside the data buffer, end exclusive
    std::uint64_t end = 0;
    std::int64_t numel() const;
    std::uint64_t byteSize() const { return end - begin; }
};

// One open, validated safetensors file. Move-only; closes the file on destruction. Every read
// may run on several threads at once (the loader converts tensors while another thread hashes).
class SafetensorsFile {
public:
    // Bounds on what a header may hold, each far above what real files need.
    // The reference implementation's header limit.
    static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
    // An SDXL UNet file has ~2,500 tensors, a whole SD pipeline in one file up to ~3,000;
    // 100,000 is 30x that and keeps the parsed header under ~100 MB of memory.
    static constexpr std::size_t kMaxTensors = 100'000;
    // Diffusion weights have rank <= 4 (5 for 3-D convolutions); 8 leaves room.
    static constexpr std::size_t kMaxRank = 8;
    // Every dimension fits a 32-bit int, as cuDNN and cuBLAS take them; the largest real one
    // (a 256k-token embedding) is ~8,000x smaller.
    static constexpr std::uint64_t kMaxDimension = 2'147'483'647;
    // __metadata__ is a small string map ({"format": "pt"}; training tools write < 100 keys).
    static constexpr std::size_t kMaxMetadataEntries = 10'000;
    // header object > tensor entry > shape / data_offsets array.
    static constexpr int kMaxHeaderDepth = 3;
    // readFileInChunks' chunk: large enough that a read costs little beside hashing it, small
    // enough to stay a fixed, small buffer.
    static constexpr std::size_t kChunkBytes = std::size_t{4} << 20;

    // Opens and validates `path`. Throws SafetensorsError naming the file on any defect.
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(SafetensorsFile&&) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    // The optional "__metadata__" string map (typically {"format": "pt"}).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // All tensors, ordered by their position in the data buffer.
    const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
    // nullptr when absent.
    const SafetensorsTensorInfo* find(const std::string& name) const;
    bool has(const std::string& name) const { return find(name) != nullptr; }

    // The file's size when it was opened, which every tensor was checked against.
    std::uint64_t fileSize() const { return fileSize_; }
    // A tensor's raw little-endian bytes, copied into `out` (exactly info.byteSize() bytes, else
    // SafetensorsError) or into a new vector.
    void readBytes(const SafetensorsTensorInfo& info, std::span<std::byte> out) const;
    std::vector<std::byte> readBytes(const SafetensorsTensorInfo& info) const;
    // The whole file from its first byte, in order, in chunks of at most kChunkBytes read into one
    // buffer, each handed to `consume` (e.g. for hashing); stops early, returning false, when
    // `consume` returns false. Returns true once every byte was handed over.
    bool readFileInChunks(const std::function<bool(std::span<const std::byte>)>& consume) const;

    // The tensor upcast to float32 (F32, F16, BF16, F8_E4M3, F8_E5M2: every value exact, an 8-bit
    // float's NaN patterns NaN). Throws SafetensorsError naming the file, the tensor and its dtype
    // for a missing tensor or any other dtype.
    std::vector<float> readFloat32(const std::string& name) const;
    std::vector<float> readFloat32(const SafetensorsTensorInfo&) const;
    // `count` elements from element `first` on (row-major), upcast the same way: a row block of
    // a fused tensor. Throws SafetensorsError naming the file and tensor for a range outside it.
    std::vector<float> readFloat32(const SafetensorsTensorInfo&, std::size_t first, std::size_t count) const;

private:
    // Exactly out.size() bytes at `offset` of the file, or SafetensorsError: the file changed.
    void readExactly(std::uint64_t offset, std::span<std::byte> out) const;
    [[noreturn]] void fail(const std::string& why) const;

    std::string path_;
    std::unique_ptr<const BoundedFile> file_;  // never null but after a move
    std::uint64_t fileSize_ = 0;
    std::uint64_t dataOffset_ = 0;  // 8 + header length
    std::map<std::string, std::string> metadata_;
    std::vector<SafetensorsTensorInfo> tensors_;
    std::map<std::string, std::size_t, std::less<>> index_;
};

// One tensor to write: bytes must hold exactly numel * sizeof(dtype) little-endian bytes.
struct SafetensorsTensorData {
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
};

// Writes a safetensors file the way the reference writer does: header padded with spaces
// to a multiple of 8, tensors laid out by descending dtype alignment, then name.
// Throws SafetensorsError naming the tensor whose byte count does not match its shape,
// or the file when it cannot be written.
void writeSafetensors(const std::string& path, const std::map<std::string, SafetensorsTensorData>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// float32 values encoded as F32, F16 (round to nearest even) or BF16 (round to nearest even)
// bytes; throws SafetensorsError for other dtypes. For tests and tools.
std::vector<std::byte> encodeFloats(SafetensorsDtype, std::span<const float>);
float halfToFloat(std::uint16_t bits);
std::uint16_t floatToHalf(float value);
float bfloat16ToFloat(std::uint16_t bits);
std::uint16_t floatToBfloat16(float value);
// The 8-bit floats (torch float8_e4m3fn: sign, 4 exponent bits of bias 7, 3 mantissa bits, no
// infinity, S.1111.111 NaN, 448 the largest; float8_e5m2: the top byte of a half, bias 15, with
// infinities and NaNs), exactly, subnormals included.
float float8E4M3ToFloat(std::uint8_t bits);
float float8E5M2ToFloat(std::uint8_t bits);

// "[256, 128, 3, 3]" — the format used in every shape message.
std::string shapeToString(std::span<const std::int64_t>);

}  // namespace tessera
