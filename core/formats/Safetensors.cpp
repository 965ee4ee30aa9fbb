#include "core/formats/Safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"

namespace tessera {

// The format is little-endian; so is every machine Tessera targets. Reading is a plain copy.
static_assert(std::endian::native == std::endian::little, "safetensors reading assumes a little-endian host");

namespace {

struct DtypeInfo {
    SafetensorsDtype dtype;
    std::string_view name;
    int bits;
};

constexpr std::array<DtypeInfo, 22> kDtypes{{
    {SafetensorsDtype::BOOL, "BOOL", 8},
    {SafetensorsDtype::U8, "U8", 8},
    {SafetensorsDtype::I8, "I8", 8},
    {SafetensorsDtype::I16, "I16", 16},
    {SafetensorsDtype::U16, "U16", 16},
    {SafetensorsDtype::F16, "F16", 16},
    {SafetensorsDtype::BF16, "BF16", 16},
    {SafetensorsDtype::I32, "I32", 32},
    {SafetensorsDtype::U32, "U32", 32},
    {SafetensorsDtype::F32, "F32", 32},
    {SafetensorsDtype::F64, "F64", 64},
    {SafetensorsDtype::I64, "I64", 64},
    {SafetensorsDtype::U64, "U64", 64},
    {SafetensorsDtype::C64, "C64", 64},
    {SafetensorsDtype::F8_E4M3, "F8_E4M3", 8},
    {SafetensorsDtype::F8_E5M2, "F8_E5M2", 8},
    {SafetensorsDtype::F8_E8M0, "F8_E8M0", 8},
    {SafetensorsDtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {SafetensorsDtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {SafetensorsDtype::F4, "F4", 4},
    {SafetensorsDtype::F6_E2M3, "F6_E2M3", 6},
    {SafetensorsDtype::F6_E3M2, "F6_E3M2", 6},
}};

const DtypeInfo& infoOf(SafetensorsDtype dtype) {
    for (const auto& info : kDtypes)
        if (info.dtype == dtype) return info;
    return kDtypes[0];  // unreachable: the table lists every enumerator
}

// numel of a validated shape, or -1 when the product does not fit (checked by the caller).
std::int64_t productOf(std::span<const std::int64_t> shape) {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) {
        if (d < 0) return -1;
        if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return -1;
        n *= d;
    }
    return n;
}

// Byte size of numel elements, or nullopt-like false when it is not a whole number of bytes
// or would overflow.
bool byteSizeOf(SafetensorsDtype dtype, std::uint64_t numel, std::uint64_t& bytes) {
    const auto bits = static_cast<std::uint64_t>(bitsPerElement(dtype));
    if (numel > std::numeric_limits<std::uint64_t>::max() / bits) return false;
    const std::uint64_t totalBits = numel * bits;
    if (totalBits % 8 != 0) return false;
    bytes = totalBits / 8;
    return true;
}

}  // namespace

// ---------------------------------------------------------------------------

std::string_view toString(SafetensorsDtype dtype) { return infoOf(dtype).name; }

int bitsPerElement(SafetensorsDtype dtype) { return infoOf(dtype).bits; }

SafetensorsDtype parseSafetensorsDtype(std::string_view name) {
    for (const auto& info : kDtypes)
        if (info.name == name) return info.dtype;
    throw SafetensorsError("unknown dtype '" + std::string(name) + "'");
}

std::int64_t SafetensorsTensorInfo::numel() const { return productOf(shape); }

std::string shapeToString(std::span<const std::int64_t> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) text += ", ";
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

// ---------------------------------------------------------------------------
// Half and bfloat16 conversions (bit-exact, round to nearest even).

float halfToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    const std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) {
        // Zero or subnormal: mantissa * 2^-24, exact in float32.
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t floatToHalf(float value) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t magnitude = x & 0x7fffffffu;
    if (magnitude >= 0x7f800000u)  // Inf or NaN (NaN kept quiet)
        return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 -> Inf
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half (2^-14): a subnormal count of 2^-24 steps. Scaling by
        // 2^24 is exact; nearbyint rounds half to even; 1024 is the smallest normal's encoding.
        const float steps = std::nearbyint(std::bit_cast<float>(magnitude) * 16777216.0f);
        return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(steps));
    }
    const std::uint32_t exponent = (magnitude >> 23) - 112u;
    const std::uint32_t mantissa = magnitude & 0x7fffffu;
    std::uint32_t h = (exponent << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
    return static_cast<std::uint16_t>(sign | h);
}

float bfloat16ToFloat(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t floatToBfloat16(float value) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(rounded >> 16);
}

// float8_e4m3fn (the OCP 8-bit float spec's E4M3, as torch and safetensors name it): a normal value
// is 2^(e - 7) (1 + m / 8), a subnormal 2^-6 (m / 8); the one all-ones pattern per sign is NaN.
float float8E4M3ToFloat(std::uint8_t bits) {
    const std::uint32_t exponent = (bits >> 3) & 0xfu, mantissa = bits & 0x7u;
    float magnitude = 0.0f;
    if (exponent == 15 && mantissa == 7)
        magnitude = std::numeric_limits<float>::quiet_NaN();
    else if (exponent == 0)
        magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    else
        magnitude = std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));
    return (bits & 0x80u) ? -magnitude : magnitude;
}

// float8_e5m2 has half's sign and exponent and its top two mantissa bits: a half with a zero low byte.
float float8E5M2ToFloat(std::uint8_t bits) { return halfToFloat(static_cast<std::uint16_t>(bits << 8)); }

std::vector<std::byte> encodeFloats(SafetensorsDtype dtype, std::span<const float> values) {
    std::vector<std::byte> bytes;
    if (dtype == SafetensorsDtype::F32) {
        bytes.resize(values.size() * sizeof(float));
        if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
        return bytes;
    }
    if (dtype != SafetensorsDtype::F16 && dtype != SafetensorsDtype::BF16)
        throw SafetensorsError("cannot encode floats as " + std::string(toString(dtype)) +
                               "; only F32, F16 and BF16 are supported");
    bytes.resize(values.size() * 2);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t h = dtype == SafetensorsDtype::F16 ? floatToHalf(values[i]) : floatToBfloat16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
}

// ---------------------------------------------------------------------------
// Reader

namespace {

// A short, escaped rendering of a header value or name for messages (a hostile header can
// hold a name or value megabytes long).
std::string shown(const nlohmann::json& value) { return excerptJson(value); }

// One linear pass over the header text before it is parsed into a tree: bounds the nesting,
// the number of tensors and metadata entries and every array's length, and finds a repeated
// tensor name (the tree keeps only the last of duplicate keys). Stops at the first problem.
// A syntax error is left to the parse that follows, which quotes an excerpt around it.
class HeaderScan {
public:
    std::string problem;  // empty while the header is within bounds

    bool null() { return value(); }
    bool boolean(bool) { return value(); }
    bool number_integer(std::int64_t) { return value(); }
    bool number_unsigned(std::uint64_t) { return value(); }
    bool number_float(double, const std::string&) { return value(); }
    bool string(std::string&) { return value(); }
    bool binary(nlohmann::json::binary_t&) { return value(); }
    bool start_object(std::size_t) { return value() && enter(); }
    bool start_array(std::size_t) { return value() && enter(); }
    bool end_object() { return leave(); }
    bool end_array() { return leave(); }
    bool key(std::string& name) {
        if (depth_ == 1) {
            current_ = name;
            const bool metadata = name == "__metadata__";
            if (!metadata && ++tensors_ > SafetensorsFile::kMaxTensors)
                return fail("more than " + std::to_string(SafetensorsFile::kMaxTensors) +
                            " tensors; the largest real checkpoints have a few thousand");
            if (!names_.insert(name).second)
                return fail((metadata ? std::string("__metadata__") : "tensor " + inQuotes(name)) +
                            " appears twice in the header");
        } else if (depth_ == 2 && current_ == "__metadata__" && ++metadata_ > SafetensorsFile::kMaxMetadataEntries) {
            return fail("__metadata__ has more than " + std::to_string(SafetensorsFile::kMaxMetadataEntries) +
                        " entries");
        }
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) { return false; }

private:
    bool fail(std::string why) {
        problem = std::move(why);
        return false;
    }
    // Counts a value inside a shape/data_offsets array (depth 3).
    bool value() {
        if (depth_ == SafetensorsFile::kMaxHeaderDepth && ++elements_ > SafetensorsFile::kMaxRank)
            return fail("tensor " + inQuotes(current_) + ": an array of more than " +
                        std::to_string(SafetensorsFile::kMaxRank) + " entries; shapes have at most " +
                        std::to_string(SafetensorsFile::kMaxRank) + " dimensions");
        return true;
    }
    bool enter() {
        if (++depth_ > SafetensorsFile::kMaxHeaderDepth)
            return fail("header nested deeper than " + std::to_string(SafetensorsFile::kMaxHeaderDepth) +
                        " levels (header, tensor entry, shape); no valid file needs more");
        elements_ = 0;
        return true;
    }
    bool leave() {
        --depth_;
        return true;
    }

    int depth_ = 0;
    std::size_t tensors_ = 0, metadata_ = 0, elements_ = 0;
    std::string current_;
    std::unordered_set<std::string> names_;
};

// One tensor entry, checked against the data buffer's size.
SafetensorsTensorInfo parseEntry(const std::string& name, const nlohmann::json& entry, std::uint64_t dataSize,
                                 const std::string& where) {
    const std::string at = where + "tensor " + inQuotes(name) + ": ";
    if (!entry.is_object()) throw SafetensorsError(at + "entry is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field)) throw SafetensorsError(at + "no \"" + field + "\" field");

    SafetensorsTensorInfo info;
    info.name = name;
    const auto& dtype = entry.at("dtype");
    if (!dtype.is_string()) throw SafetensorsError(at + "dtype is not a string");
    try {
        info.dtype = parseSafetensorsDtype(dtype.get<std::string>());
    } catch (const SafetensorsError&) {
        throw SafetensorsError(at + "unknown dtype " + inQuotes(dtype.get<std::string>()));
    }

    const auto& shape = entry.at("shape");
    if (!shape.is_array()) throw SafetensorsError(at + "shape is not an array");
    for (const auto& d : shape) {
        if (!d.is_number_unsigned())
            throw SafetensorsError(at + "shape " + shown(shape) + " has an entry that is not a non-negative integer");
        if (d.get<std::uint64_t>() > SafetensorsFile::kMaxDimension)
            throw SafetensorsError(at + "shape " + shown(shape) + " has a dimension above " +
                                   std::to_string(SafetensorsFile::kMaxDimension));
        info.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
    }
    const std::int64_t numel = productOf(info.shape);
    std::uint64_t expectedBytes = 0;
    if (numel < 0 || !byteSizeOf(info.dtype, static_cast<std::uint64_t>(numel), expectedBytes))
        throw SafetensorsError(at + "shape " + shapeToString(info.shape) + " of dtype " +
                               std::string(toString(info.dtype)) + " has no valid byte size");

    const auto& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
        throw SafetensorsError(at + "data_offsets " + shown(offsets) + " is not a pair of non-negative integers");
    info.begin = offsets[0].get<std::uint64_t>();
    info.end = offsets[1].get<std::uint64_t>();
    const std::string range = "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
    if (info.end < info.begin) throw SafetensorsError(at + range + " end before begin");
    if (info.end > dataSize)
        throw SafetensorsError(at + range + " run past the end of the data buffer (" + std::to_string(dataSize) +
                               " bytes; truncated file?)");
    if (info.end - info.begin != expectedBytes)
        throw SafetensorsError(at + range + " hold " + std::to_string(info.end - info.begin) + " bytes but shape " +
                               shapeToString(info.shape) + " of " + std::string(toString(info.dtype)) + " needs " +
                               std::to_string(expectedBytes));
    return info;
}

// The ranges, sorted by begin, must tile the buffer: each starts where the previous ended.
void checkTiling(std::vector<SafetensorsTensorInfo>& tensors, std::uint64_t dataSize, const std::string& where) {
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
        return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
    });
    std::uint64_t covered = 0;
    const SafetensorsTensorInfo* previous = nullptr;
    for (const auto& info : tensors) {
        if (info.begin < covered)
            throw SafetensorsError(where + "tensor " + inQuotes(info.name) + " (bytes " + std::to_string(info.begin) +
                                   ".." + std::to_string(info.end) + ") overlaps tensor " + inQuotes(previous->name) +
                                   " (bytes " + std::to_string(previous->begin) + ".." + std::to_string(previous->end) +
                                   ")");
        if (info.begin > covered)
            throw SafetensorsError(where + "bytes " + std::to_string(covered) + ".." + std::to_string(info.begin) +
                                   " of the data buffer before tensor " + inQuotes(info.name) + " belong to no tensor");
        covered = info.end;
        previous = &info;
    }
    if (covered != dataSize)
        throw SafetensorsError(where + "the data buffer has " + std::to_string(dataSize) +
                               " bytes but the tensors cover " + std::to_string(covered));
}

}  // namespace

namespace {

// Weights have no size bound; a FIFO or device is refused before anything is read.
std::unique_ptr<const BoundedFile> openWeights(const std::string& path) {
    try {
        return std::make_unique<const BoundedFile>(
            BoundedFile::open(path, "weights", std::numeric_limits<std::size_t>::max()));
    } catch (const InputFileError& e) {
        throw SafetensorsError(e.what());
    }
}

// A scratch buffer for upcasting F16/BF16 values: a tensor is read in pieces of this many.
constexpr std::size_t kConvertElements = std::size_t{1} << 20;

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(openWeights(path)), fileSize_(file_->size()) {
    const std::string where = excerpt(path, 200) + ": ";
    if (fileSize_ < 8)
        throw SafetensorsError(where + "file is " + std::to_string(fileSize_) +
                               " bytes; a safetensors file starts with an 8-byte header length");
    std::uint64_t headerLength = 0;
    readExactly(0, std::as_writable_bytes(std::span(&headerLength, 1)));
    if (headerLength > kMaxHeaderBytes)
        throw SafetensorsError(where + "header length " + std::to_string(headerLength) + " exceeds the limit of " +
                               std::to_string(kMaxHeaderBytes) + " bytes");
    if (headerLength > fileSize_ - 8)
        throw SafetensorsError(where + "header length " + std::to_string(headerLength) +
                               " runs past the end of the file (" + std::to_string(fileSize_) + " bytes; truncated?)");
    dataOffset_ = 8 + headerLength;
    const std::uint64_t dataSize = fileSize_ - dataOffset_;
    std::string text(static_cast<std::size_t>(headerLength), '\0');
    readExactly(8, std::as_writable_bytes(std::span<char>(text)));

    HeaderScan scan;
    (void)nlohmann::json::sax_parse(text.begin(), text.end(), &scan);
    if (!scan.problem.empty()) throw SafetensorsError(where + scan.problem);
    nlohmann::json header;
    try {
        header = parseBoundedJson(text, "weights", shownPath(path) + " header", kMaxHeaderDepth);
    } catch (const InputFileError& e) {
        throw SafetensorsError(e.what());
    }
    if (!header.is_object()) throw SafetensorsError(where + "header is not a JSON object");

    for (const auto& [name, entry] : header.items()) {
        if (name != "__metadata__") {
            tensors_.push_back(parseEntry(name, entry, dataSize, where));
            continue;
        }
        if (!entry.is_object()) throw SafetensorsError(where + "__metadata__ is not an object of strings");
        for (const auto& [key, value] : entry.items()) {
            if (!value.is_string())
                throw SafetensorsError(where + "__metadata__ value for " + inQuotes(key) + " is not a string");
            metadata_[key] = value.get<std::string>();
        }
    }
    checkTiling(tensors_, dataSize, where);
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

void SafetensorsFile::fail(const std::string& why) const { throw SafetensorsError(excerpt(path_, 200) + ": " + why); }

void SafetensorsFile::readExactly(std::uint64_t offset, std::span<std::byte> out) const {
    std::string why;
    try {
        why = file_->readExactly(offset, out);
    } catch (const InputFileError& e) {
        throw SafetensorsError(e.what());
    }
    if (!why.empty()) fail(why);
}

const SafetensorsTensorInfo* SafetensorsFile::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::readBytes(const SafetensorsTensorInfo& info, std::span<std::byte> out) const {
    if (out.size() != info.byteSize())
        fail("tensor " + inQuotes(info.name) + ": " + std::to_string(info.byteSize()) + " bytes cannot be read into " +
             std::to_string(out.size()));
    readExactly(dataOffset_ + info.begin, out);
}

std::vector<std::byte> SafetensorsFile::readBytes(const SafetensorsTensorInfo& info) const {
    std::vector<std::byte> bytes(static_cast<std::size_t>(info.byteSize()));
    readBytes(info, bytes);
    return bytes;
}

bool SafetensorsFile::readFileInChunks(const std::function<bool(std::span<const std::byte>)>& consume) const {
    std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, fileSize_)));
    for (std::uint64_t at = 0; at < fileSize_; at += buffer.size()) {
        const auto chunk =
            std::span(buffer).first(static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), fileSize_ - at)));
        readExactly(at, chunk);
        if (!consume(chunk)) return false;
    }
    return true;
}

std::vector<float> SafetensorsFile::readFloat32(const std::string& name) const {
    const SafetensorsTensorInfo* info = find(name);
    if (info == nullptr) throw SafetensorsError(path_ + ": no tensor " + inQuotes(name));
    return readFloat32(*info);
}

std::vector<float> SafetensorsFile::readFloat32(const SafetensorsTensorInfo& info) const {
    return readFloat32(info, 0, static_cast<std::size_t>(info.numel()));
}

std::vector<float> SafetensorsFile::readFloat32(const SafetensorsTensorInfo& info, std::size_t first,
                                                std::size_t count) const {
    const auto numel = static_cast<std::size_t>(info.numel());
    if (first > numel || count > numel - first)
        throw SafetensorsError(path_ + ": tensor " + inQuotes(info.name) + ": elements " + std::to_string(first) +
                               ".." + std::to_string(first + count) + " are outside its " + std::to_string(numel));
    if (info.dtype != SafetensorsDtype::F32 && info.dtype != SafetensorsDtype::F16 &&
        info.dtype != SafetensorsDtype::BF16 && info.dtype != SafetensorsDtype::F8_E4M3 &&
        info.dtype != SafetensorsDtype::F8_E5M2)
        throw SafetensorsError(path_ + ": tensor " + inQuotes(info.name) + " has dtype " +
                               std::string(toString(info.dtype)) +
                               "; only F32, F16, BF16, F8_E4M3 and F8_E5M2 can be read as float32");
    std::vector<float> values(count);
    const std::uint64_t start = dataOffset_ + info.begin;
    if (info.dtype == SafetensorsDtype::F32) {
        readExactly(start + first * sizeof(float), std::as_writable_bytes(std::span(values)));
        return values;
    }
    if (info.dtype == SafetensorsDtype::F8_E4M3 || info.dtype == SafetensorsDtype::F8_E5M2) {
        // fp8 checkpoints (ComfyUI's, Kijai's flux-fp8) are read by a 256-entry table per format.
        static const auto kTables = [] {
            std::array<std::array<float, 256>, 2> t{};
            for (std::uint32_t bits = 0; bits < 256; ++bits) {
                t[0][bits] = float8E4M3ToFloat(static_cast<std::uint8_t>(bits));
                t[1][bits] = float8E5M2ToFloat(static_cast<std::uint8_t>(bits));
            }
            return t;
        }();
        const auto& table = kTables[info.dtype == SafetensorsDtype::F8_E4M3 ? 0 : 1];
        std::vector<std::uint8_t> stored(std::min(count, kConvertElements));
        for (std::size_t done = 0; done < count;) {
            const auto piece = std::span(stored).first(std::min(stored.size(), count - done));
            readExactly(start + first + done, std::as_writable_bytes(piece));
            float* out = values.data() + done;
            for (std::size_t i = 0; i < piece.size(); ++i) out[i] = table[piece[i]];
            done += piece.size();
        }
        return values;
    }
    // Every half value's float, once per process (256 KiB): a lookup beats the branches of
    // halfToFloat by several times over the billion values of an SD checkpoint.
    static const std::vector<float> kHalves = [] {
        std::vector<float> table(65536);
        for (std::uint32_t bits = 0; bits < 65536; ++bits) table[bits] = halfToFloat(static_cast<std::uint16_t>(bits));
        return table;
    }();
    const bool half = info.dtype == SafetensorsDtype::F16;
    std::vector<std::uint16_t> stored(std::min(count, kConvertElements));
    for (std::size_t done = 0; done < count;) {
        const auto piece = std::span(stored).first(std::min(stored.size(), count - done));
        readExactly(start + 2 * (first + done), std::as_writable_bytes(piece));
        float* out = values.data() + done;
        if (half)
            for (std::size_t i = 0; i < piece.size(); ++i) out[i] = kHalves[piece[i]];
        else
            for (std::size_t i = 0; i < piece.size(); ++i) out[i] = bfloat16ToFloat(piece[i]);
        done += piece.size();
    }
    return values;
}

// ---------------------------------------------------------------------------
// Writer

void writeSafetensors(const std::string& path, const std::map<std::string, SafetensorsTensorData>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    std::vector<std::pair<const std::string*, const SafetensorsTensorData*>> order;
    for (const auto& [name, data] : tensors) {
        const std::int64_t numel = productOf(data.shape);
        std::uint64_t expected = 0;
        if (numel < 0 || !byteSizeOf(data.dtype, static_cast<std::uint64_t>(numel), expected) ||
            expected != data.bytes.size())
            throw SafetensorsError(path + ": tensor " + inQuotes(name) + ": " + std::to_string(data.bytes.size()) +
                                   " bytes do not match shape " + shapeToString(data.shape) + " of " +
                                   std::string(toString(data.dtype)));
        if (name == "__metadata__") throw SafetensorsError(path + ": '__metadata__' is not a tensor name");
        order.emplace_back(&name, &data);
    }
    // Reference layout: larger alignment first, then by name (the map is already by name).
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return bitsPerElement(a.second->dtype) > bitsPerElement(b.second->dtype);
    });

    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const auto& [name, data] : order) {
        header[*name] = {{"dtype", std::string(toString(data->dtype))},
                         {"shape", data->shape},
                         {"data_offsets", {offset, offset + data->bytes.size()}}};
        offset += data->bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    const std::uint64_t length = text.size();

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw SafetensorsError(path + ": cannot open for writing: " + std::strerror(errno));
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, data] : order)
        out.write(reinterpret_cast<const char*>(data->bytes.data()), static_cast<std::streamsize>(data->bytes.size()));
    out.flush();
    if (!out) throw SafetensorsError(path + ": write failed: " + std::strerror(errno));
}

}  // namespace tessera
