#include "core/formats/TorchCheckpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"

namespace tessera {

// Storages are little-endian unless the archive says otherwise; so is every machine Tessera targets.
static_assert(std::endian::native == std::endian::little, "checkpoint reading assumes a little-endian host");

namespace {

constexpr std::string_view kLocalHeader("PK\3\4", 4);
constexpr std::string_view kCentralHeader("PK\1\2", 4);
constexpr std::string_view kEndRecord("PK\5\6", 4);
constexpr std::string_view kZip64EndRecord("PK\6\6", 4);
constexpr std::string_view kZip64Locator("PK\6\7", 4);

// `n` little-endian bytes at `at` (the caller has checked the range).
std::uint64_t littleEndian(std::string_view bytes, std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
    return v;
}

// The legacy format's first pickle, MAGIC_NUMBER = 0x1950a86a20f9469cfc6c (torch/serialization.py):
// PROTO p [FRAME n] LONG1 10 <the number, little-endian> STOP. Its length, or 0 when `head` is not it.
std::size_t legacyMagicLength(std::string_view head) {
    static constexpr std::array<unsigned char, 10> kMagic{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    const auto at = [&](std::size_t i) { return static_cast<unsigned char>(head[i]); };
    if (head.size() < 2 || at(0) != 0x80 || at(1) < 2 || at(1) > 5) return 0;
    std::size_t p = 2;
    if (head.size() > p && at(p) == 0x95) p += 9;  // FRAME (protocol 4)
    if (head.size() < p + 13 || at(p) != 0x8a || at(p + 1) != 10 || at(p + 12) != '.') return 0;
    return std::memcmp(head.data() + p + 2, kMagic.data(), kMagic.size()) == 0 ? p + 13 : 0;
}

struct ZipEntry {
    std::string name;
    std::uint64_t header = 0;  // local header offset
    std::uint64_t data = 0;    // first byte of the stored data
    std::uint64_t size = 0;
};

// The file as the zip and legacy readers see it: exact reads and messages naming the file.
struct FileAccess {
    const BoundedFile& file;
    std::uint64_t size;
    const std::string& path;

    [[noreturn]] void fail(const std::string& why) const {
        throw TorchCheckpointError(excerpt(path, 200) + ": " + why);
    }
    // Exactly `n` bytes at `offset` (the caller has bounded n and checked the range).
    std::string read(std::uint64_t offset, std::uint64_t n) const {
        std::string out(static_cast<std::size_t>(n), '\0');
        std::size_t got = 0;
        std::uint64_t now = 0;
        try {
            got = file.readInto(offset, std::as_writable_bytes(std::span<char>(out)));
            now = file.currentSize();
        } catch (const InputFileError& e) {
            throw TorchCheckpointError(e.what());
        }
        if (got != out.size() || now != size)
            fail("the file changed while it was being read: it was " + std::to_string(size) +
                 " bytes when opened and is " + std::to_string(now) + " bytes now");
        return out;
    }
};

std::string compressionName(std::uint64_t method) {
    switch (method) {
        case 8:
            return "deflate";
        case 9:
            return "deflate64";
        case 12:
            return "bzip2";
        case 14:
            return "lzma";
        case 93:
            return "zstd";
        default:
            return "method " + std::to_string(method);
    }
}

struct EndRecord {
    std::uint64_t entries = 0, directorySize = 0, directoryOffset = 0;
    std::uint64_t directoryEnd = 0;  // where the record after the central directory starts
};

// The end of central directory record, and the ZIP64 end record that torch's writer adds
// (PKWARE APPNOTE.TXT 4.3.14-4.3.16; inline_container.cc writes with MZ_ZIP_FLAG_WRITE_ZIP64).
EndRecord readEndRecord(const FileAccess& f) {
    if (f.size < 22) f.fail("a zip file of " + std::to_string(f.size) + " bytes is too short for its end record");
    const std::uint64_t tailSize = std::min<std::uint64_t>(f.size, 22 + 0xFFFF);
    const std::string tail = f.read(f.size - tailSize, tailSize);
    std::optional<std::size_t> at;  // the last signature whose comment runs exactly to the end of the file
    for (std::size_t i = tail.size() - 22 + 1; i-- > 0;)
        if (tail.compare(i, 4, kEndRecord) == 0 && i + 22 + littleEndian(tail, i + 20, 2) == tail.size()) {
            at = i;
            break;
        }
    if (!at) f.fail("no zip end-of-central-directory record (the file is truncated or not a zip archive)");
    const std::uint64_t endOffset = f.size - tailSize + *at;
    std::uint64_t disk = littleEndian(tail, *at + 4, 2), directoryDisk = littleEndian(tail, *at + 6, 2);
    std::uint64_t diskEntries = littleEndian(tail, *at + 8, 2);
    EndRecord r{littleEndian(tail, *at + 10, 2), littleEndian(tail, *at + 12, 4), littleEndian(tail, *at + 16, 4),
                endOffset};
    const bool locator = endOffset >= 20 && f.read(endOffset - 20, 4) == kZip64Locator;
    const bool marked = disk == 0xFFFF || directoryDisk == 0xFFFF || diskEntries == 0xFFFF || r.entries == 0xFFFF ||
                        r.directorySize == 0xFFFFFFFF || r.directoryOffset == 0xFFFFFFFF;
    if (marked && !locator) f.fail("the zip end record has ZIP64 markers but there is no ZIP64 locator");
    if (locator) {
        const std::string loc = f.read(endOffset - 20, 20);
        const std::uint64_t recordOffset = littleEndian(loc, 8, 8);
        if (littleEndian(loc, 4, 4) != 0 || littleEndian(loc, 16, 4) > 1)
            f.fail("a zip archive spanning several disks");
        if (recordOffset > endOffset - 20 || endOffset - 20 - recordOffset < 56)
            f.fail("the ZIP64 locator points outside the file");
        const std::string z = f.read(recordOffset, 56);
        if (z.compare(0, 4, kZip64EndRecord) != 0) f.fail("no ZIP64 end record where the ZIP64 locator points");
        const std::uint64_t recordSize = littleEndian(z, 4, 8);
        if (recordSize < 44 || recordSize > endOffset - 20 - recordOffset - 12)
            f.fail("the ZIP64 end record's size (" + std::to_string(recordSize) + ") does not fit before its locator");
        const std::array<std::uint64_t, 6> wide{littleEndian(z, 16, 4), littleEndian(z, 20, 4), littleEndian(z, 24, 8),
                                                littleEndian(z, 32, 8), littleEndian(z, 40, 8), littleEndian(z, 48, 8)};
        const std::array<std::uint64_t, 6> classic{disk,      directoryDisk,   diskEntries,
                                                   r.entries, r.directorySize, r.directoryOffset};
        for (std::size_t i = 0; i < wide.size(); ++i) {
            const std::uint64_t marker = i < 4 ? 0xFFFF : 0xFFFFFFFF;
            if (classic[i] != marker && classic[i] != wide[i])
                f.fail("the ZIP64 end record disagrees with the zip end record (" + std::to_string(wide[i]) + " vs " +
                       std::to_string(classic[i]) + ")");
        }
        disk = wide[0];
        directoryDisk = wide[1];
        diskEntries = wide[2];
        r = EndRecord{wide[3], wide[4], wide[5], recordOffset};
    }
    if (disk != 0 || directoryDisk != 0 || diskEntries != r.entries) f.fail("a zip archive spanning several disks");
    if (r.entries == 0) f.fail("an empty zip archive");
    if (r.entries > TorchCheckpointFile::kMaxZipEntries)
        f.fail("a zip archive of " + std::to_string(r.entries) + " entries; the limit is " +
               std::to_string(TorchCheckpointFile::kMaxZipEntries));
    if (r.directorySize > TorchCheckpointFile::kMaxCentralDirectoryBytes)
        f.fail("a zip central directory of " + std::to_string(r.directorySize) + " bytes; the limit is " +
               std::to_string(TorchCheckpointFile::kMaxCentralDirectoryBytes));
    if (r.directoryOffset > r.directoryEnd || r.directoryEnd - r.directoryOffset != r.directorySize)
        f.fail("the zip central directory (offset " + std::to_string(r.directoryOffset) + ", " +
               std::to_string(r.directorySize) + " bytes) does not end where the end record starts (" +
               std::to_string(r.directoryEnd) + ")");
    if (r.entries > r.directorySize / 46) f.fail("the zip end record counts more entries than its directory can hold");
    return r;
}

// One central directory entry at `p` of `dir`; advances p.
ZipEntry readCentralEntry(const FileAccess& f, std::string_view dir, std::size_t& p, std::uint64_t index) {
    const std::string where = "zip central directory entry " + std::to_string(index);
    if (dir.size() - p < 46 || dir.compare(p, 4, kCentralHeader) != 0) f.fail(where + " is damaged");
    const std::uint64_t flags = littleEndian(dir, p + 8, 2), method = littleEndian(dir, p + 10, 2);
    std::uint64_t compressed = littleEndian(dir, p + 20, 4), size = littleEndian(dir, p + 24, 4);
    const std::size_t nameBytes = littleEndian(dir, p + 28, 2), extraBytes = littleEndian(dir, p + 30, 2);
    const std::size_t commentBytes = littleEndian(dir, p + 32, 2);
    std::uint64_t diskStart = littleEndian(dir, p + 34, 2), header = littleEndian(dir, p + 42, 4);
    if (dir.size() - p - 46 < nameBytes + extraBytes + commentBytes) f.fail(where + " runs past the directory's end");
    ZipEntry e;
    e.name = std::string(dir.substr(p + 46, nameBytes));
    const std::string_view extra = dir.substr(p + 46 + nameBytes, extraBytes);
    p += 46 + nameBytes + extraBytes + commentBytes;
    if (e.name.empty() || e.name.size() > TorchCheckpointFile::kMaxEntryNameBytes ||
        e.name.find('\0') != std::string::npos)
        f.fail(where + " has a name of " + std::to_string(e.name.size()) + " bytes or a NUL byte (limit " +
               std::to_string(TorchCheckpointFile::kMaxEntryNameBytes) + ")");
    // The ZIP64 extended information field (APPNOTE.TXT 4.5.3): the 64-bit values of the fields
    // whose 32-bit value is 0xFFFFFFFF, in this order.
    for (std::size_t q = 0; q + 4 <= extra.size();) {
        const std::uint64_t id = littleEndian(extra, q, 2), length = littleEndian(extra, q + 2, 2);
        if (length > extra.size() - q - 4) f.fail("entry " + inQuotes(e.name) + " has a damaged extra field");
        if (id == 1) {
            std::size_t r = q + 4;
            const auto widen = [&](std::uint64_t& field, std::uint64_t marker, int bytes) {
                if (field != marker) return;
                if (r + static_cast<std::size_t>(bytes) > q + 4 + length)
                    f.fail("entry " + inQuotes(e.name) + " has a ZIP64 field too short for its sizes");
                field = littleEndian(extra, r, bytes);
                r += static_cast<std::size_t>(bytes);
            };
            widen(size, 0xFFFFFFFF, 8);
            widen(compressed, 0xFFFFFFFF, 8);
            widen(header, 0xFFFFFFFF, 8);
            widen(diskStart, 0xFFFF, 4);
        }
        q += 4 + static_cast<std::size_t>(length);
    }
    if (size == 0xFFFFFFFF || compressed == 0xFFFFFFFF || header == 0xFFFFFFFF || diskStart == 0xFFFF)
        f.fail("entry " + inQuotes(e.name) + " has ZIP64 markers without a ZIP64 field");
    if ((flags & 1) != 0) f.fail("entry " + inQuotes(e.name) + " is encrypted");
    if (method != 0)
        f.fail("entry " + inQuotes(e.name) + " is compressed (" + compressionName(method) +
               "); torch.save stores entries uncompressed, and compressed ones are not read");
    if (compressed != size)
        f.fail("entry " + inQuotes(e.name) + " is stored with " + std::to_string(compressed) + " bytes but declares " +
               std::to_string(size));
    if (diskStart != 0) f.fail("a zip archive spanning several disks");
    e.header = header;
    e.size = size;
    return e;
}

// Every entry of the archive, each checked against its local header and lying before the central
// directory, none overlapping another, no name twice.
std::vector<ZipEntry> readZipEntries(const FileAccess& f) {
    const EndRecord end = readEndRecord(f);
    const std::string dir = f.read(end.directoryOffset, end.directorySize);
    std::vector<ZipEntry> entries;
    entries.reserve(static_cast<std::size_t>(end.entries));
    std::size_t p = 0;
    for (std::uint64_t i = 0; i < end.entries; ++i) entries.push_back(readCentralEntry(f, dir, p, i));
    if (p != dir.size())
        f.fail("the zip central directory has " + std::to_string(dir.size() - p) + " bytes after its last entry");
    std::unordered_set<std::string_view> names;
    for (ZipEntry& e : entries) {
        if (!names.insert(e.name).second) f.fail("the zip entry " + inQuotes(e.name) + " appears twice");
        if (e.header > end.directoryOffset || end.directoryOffset - e.header < 30 + e.name.size())
            f.fail("entry " + inQuotes(e.name) + " starts outside the archive's records");
        const std::string local = f.read(e.header, 30 + e.name.size());
        if (local.compare(0, 4, kLocalHeader) != 0) f.fail("entry " + inQuotes(e.name) + " has no local header");
        if (littleEndian(local, 8, 2) != 0)
            f.fail("entry " + inQuotes(e.name) + " is compressed (" + compressionName(littleEndian(local, 8, 2)) +
                   " in its local header); torch.save stores entries uncompressed");
        if (littleEndian(local, 26, 2) != e.name.size() || local.compare(30, e.name.size(), e.name) != 0)
            f.fail("the local header of entry " + inQuotes(e.name) + " names another entry");
        e.data = e.header + 30 + e.name.size() + littleEndian(local, 28, 2);
        if (e.data > end.directoryOffset || end.directoryOffset - e.data < e.size)
            f.fail("entry " + inQuotes(e.name) + " (" + std::to_string(e.size) + " bytes at " + std::to_string(e.data) +
                   ") runs into the central directory or past the end of the file (wrong size?)");
    }
    std::vector<const ZipEntry*> order;
    order.reserve(entries.size());
    for (const ZipEntry& e : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const ZipEntry* a, const ZipEntry* b) { return a->header < b->header; });
    for (std::size_t i = 1; i < order.size(); ++i)
        if (order[i]->header < order[i - 1]->data + order[i - 1]->size)
            f.fail("zip entries " + inQuotes(order[i - 1]->name) + " and " + inQuotes(order[i]->name) + " overlap");
    return entries;
}

std::string describeLeaf(const PickleDocument& doc, const PickleValue& v) {
    switch (v.kind) {
        case PickleKind::Bool:
            return v.integer != 0 ? "bool True" : "bool False";
        case PickleKind::Int:
            return "int " + std::to_string(v.integer);
        case PickleKind::Float:
            return "float " + std::to_string(v.real);
        case PickleKind::Str:
            return "str " + inQuotes(doc.text(v));
        case PickleKind::Bytes:
            return "bytes of " + std::to_string(doc.text(v).size());
        case PickleKind::Tuple:
        case PickleKind::List:
        case PickleKind::Set:
            return std::string(toString(v.kind)) + " of " + std::to_string(doc.container(v).items.size());
        case PickleKind::Object:
            return "object " + std::string(toString(doc.container(v).objectClass));
        case PickleKind::Global:
            return "global " + std::string(toString(static_cast<PickleGlobal>(v.slot)));
        default:
            return "a " + std::string(toString(v.kind));
    }
}

// Dict keys as name parts: strings as they are, integers (optimizer state) in decimal.
std::optional<std::string> keyText(const PickleDocument& doc, const PickleValue& key) {
    if (key.kind == PickleKind::Str) return doc.text(key);
    if (key.kind == PickleKind::Int) return std::to_string(key.integer);
    return std::nullopt;
}

// Converts stored elements to float32; `bytes` holds elements of `dtype`, little-endian.
void toFloat32(TorchDtype dtype, std::span<const std::byte> bytes, std::span<float> out) {
    for (std::size_t i = 0; i < out.size(); ++i) {
        switch (dtype) {
            case TorchDtype::Float32:
                std::memcpy(&out[i], bytes.data() + 4 * i, 4);
                break;
            case TorchDtype::Float64: {
                double d = 0;
                std::memcpy(&d, bytes.data() + 8 * i, 8);
                out[i] = static_cast<float>(d);
                break;
            }
            default: {
                std::uint16_t h = 0;
                std::memcpy(&h, bytes.data() + 2 * i, 2);
                out[i] = dtype == TorchDtype::Float16 ? halfToFloat(h) : bfloat16ToFloat(h);
                break;
            }
        }
    }
}

}  // namespace

TorchContainer detectTorchContainer(std::string_view head) {
    if (head.substr(0, 4) == kLocalHeader) return TorchContainer::Zip;
    if (legacyMagicLength(head) > 0) return TorchContainer::Legacy;
    if (head.size() >= 262 && head.substr(257, 5) == "ustar") return TorchContainer::Tar;
    return TorchContainer::Unknown;
}

std::string_view toString(TorchCheckpointFormat format) {
    return format == TorchCheckpointFormat::Zip ? "zip" : "legacy";
}

std::int64_t TorchTensorInfo::numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;  // bounded when the file was opened
    return n;
}

std::uint64_t TorchTensorInfo::byteSize() const {
    return static_cast<std::uint64_t>(numel()) * static_cast<std::uint64_t>(elementBytes(dtype));
}

bool TorchTensorInfo::contiguous() const {
    if (numel() == 0) return true;
    std::int64_t expected = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && strides[i] != expected) return false;
        expected *= shape[i];
    }
    return true;
}

TorchCheckpointFile::TorchCheckpointFile(const std::string& path) : path_(path) {
    try {
        file_ = std::make_unique<const BoundedFile>(
            BoundedFile::open(path, "weights", std::numeric_limits<std::size_t>::max()));
    } catch (const InputFileError& e) {
        throw TorchCheckpointError(e.what());
    }
    fileSize_ = file_->size();
    const FileAccess f{*file_, fileSize_, path_};
    const std::string head = f.read(0, std::min<std::uint64_t>(fileSize_, 512));
    switch (detectTorchContainer(head)) {
        case TorchContainer::Zip:
            format_ = TorchCheckpointFormat::Zip;
            openZip();
            break;
        case TorchContainer::Legacy:
            format_ = TorchCheckpointFormat::Legacy;
            openLegacy();
            break;
        case TorchContainer::Tar:
            fail(
                "a tar-format checkpoint (PyTorch < 0.4), which is not read; load and re-save it with a current "
                "PyTorch");
        case TorchContainer::Unknown:
            if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80)
                fail("a pickle without the legacy checkpoint magic number: not a torch.save file");
            fail("not a PyTorch checkpoint: it starts with neither a zip header nor torch's legacy magic number");
    }
}

TorchCheckpointFile::~TorchCheckpointFile() = default;
TorchCheckpointFile::TorchCheckpointFile(TorchCheckpointFile&&) noexcept = default;
TorchCheckpointFile& TorchCheckpointFile::operator=(TorchCheckpointFile&&) noexcept = default;

void TorchCheckpointFile::fail(const std::string& why) const {
    throw TorchCheckpointError(excerpt(path_, 200) + ": " + why);
}

// torch/serialization.py _load (zip) over caffe2/serialize/inline_container.cc PyTorchStreamReader.
void TorchCheckpointFile::openZip() {
    const FileAccess f{*file_, fileSize_, path_};
    const std::vector<ZipEntry> entries = readZipEntries(f);
    const std::size_t slash = entries.front().name.find('/');
    if (slash == std::string::npos || slash == 0)
        fail("the zip entry " + inQuotes(entries.front().name) +
             " is not inside an archive folder: not a torch.save file");
    archive_ = entries.front().name.substr(0, slash);
    const std::string folder = archive_ + "/";
    std::unordered_map<std::string_view, const ZipEntry*> byName;
    for (const ZipEntry& e : entries) {
        if (e.name.compare(0, folder.size(), folder) != 0)
            fail("the zip entry " + inQuotes(e.name) + " lies outside the archive folder " + inQuotes(folder) +
                 " (torch.save writes one folder)");
        const std::string_view inner = std::string_view(e.name).substr(folder.size());
        if (inner == "constants.pkl" || inner.substr(0, 5) == "code/")
            fail("a TorchScript archive (" + std::string(inner.substr(0, 13)) +
                 "): it holds code and is not read; save the model's state_dict() with torch.save instead");
        byName.emplace(inner, &e);
    }
    const auto pickleAt = byName.find("data.pkl");
    if (pickleAt == byName.end()) fail("no " + inQuotes(folder + "data.pkl") + " record: not a torch.save checkpoint");
    if (const auto order = byName.find("byteorder"); order != byName.end()) {
        const std::string text = order->second->size <= 16 ? f.read(order->second->data, order->second->size) : "";
        if (text != "little" && text != "big") fail("the byteorder record is neither 'little' nor 'big'");
        bigEndian_ = text == "big";
    }
    const ZipEntry& record = *pickleAt->second;
    if (record.size > PickleLimits::kMaxBytes)
        fail(inQuotes(record.name) + " is " + std::to_string(record.size) + " bytes; the limit is " +
             std::to_string(PickleLimits::kMaxBytes));
    const std::string pickle = f.read(record.data, record.size);
    PickleDocument doc;
    std::size_t consumed = 0;
    try {
        doc = parsePickle(pickle, PicklePersistentIds::Zip, &consumed);
    } catch (const PickleError& e) {
        fail(inQuotes(record.name) + ": " + e.what());
    }
    if (consumed != pickle.size())
        fail(inQuotes(record.name) + " has " + std::to_string(pickle.size() - consumed) +
             " bytes after the pickle's STOP");
    for (const PickleStorage& s : doc.storages) {
        const auto it = byName.find("data/" + s.key);
        if (it == byName.end())
            fail("storage " + inQuotes(s.key) + " has no record " + inQuotes(folder + "data/" + s.key));
        if (it->second->size != s.byteSize)
            fail("storage " + inQuotes(s.key) + " declares " + std::to_string(s.numel) + " " +
                 std::string(toString(s.dtype)) + " elements (" + std::to_string(s.byteSize) +
                 " bytes) but its record holds " + std::to_string(it->second->size) + " bytes");
        storages_.push_back({s.key, s.dtype, s.numel, s.byteSize, it->second->data});
    }
    flatten(doc);
}

// torch/serialization.py _legacy_load: five pickles, then the storages in the key list's order,
// each an int64 element count and its bytes (torch/csrc/serialization.cpp THPStorage_readFileRaw).
void TorchCheckpointFile::openLegacy() {
    const FileAccess f{*file_, fileSize_, path_};
    std::uint64_t at = legacyMagicLength(f.read(0, std::min<std::uint64_t>(fileSize_, 64)));
    // A pickle from `at`, read in windows that double until its STOP is inside one (the legacy
    // stream has no lengths).
    const auto next = [&](PicklePersistentIds ids, const std::string& what) {
        const std::uint64_t available = std::min<std::uint64_t>(fileSize_ - at, PickleLimits::kMaxBytes);
        for (std::uint64_t window = std::min<std::uint64_t>(available, 64 << 10);;
             window = std::min(available, 2 * window)) {
            const std::string bytes = f.read(at, window);
            try {
                std::size_t consumed = 0;
                PickleDocument doc = parsePickle(bytes, ids, &consumed);
                at += consumed;
                return doc;
            } catch (const PickleError& e) {
                if (e.truncated() && window < available) continue;
                if (e.truncated() && available == PickleLimits::kMaxBytes)
                    fail(what + " at byte " + std::to_string(at) + " is longer than " +
                         std::to_string(PickleLimits::kMaxBytes) + " bytes, the limit");
                fail(what + " at byte " + std::to_string(at) + ": " + e.what());
            }
        }
    };
    const PickleDocument protocol = next(PicklePersistentIds::None, "the protocol-version pickle");
    if (protocol.root.kind != PickleKind::Int || protocol.root.integer != 1001)
        fail("legacy protocol version " +
             (protocol.root.kind == PickleKind::Int ? std::to_string(protocol.root.integer) : "missing") +
             "; torch writes and reads only 1001");
    const PickleDocument sysInfo = next(PicklePersistentIds::None, "the sys_info pickle");
    if (sysInfo.root.kind != PickleKind::Dict) fail("the sys_info pickle is not a dict");
    const PickleDocument doc = next(PicklePersistentIds::Legacy, "the state pickle");
    const PickleDocument keys = next(PicklePersistentIds::None, "the storage-key list pickle");
    if (keys.root.kind != PickleKind::List) fail("the storage-key list pickle is not a list");
    std::unordered_map<std::string_view, std::size_t> pending;  // key -> index in doc.storages
    for (std::size_t i = 0; i < doc.storages.size(); ++i) pending.emplace(doc.storages[i].key, i);
    storages_.resize(doc.storages.size());
    for (const PickleValue& key : keys.container(keys.root).items) {
        if (key.kind != PickleKind::Str) fail("the storage-key list holds a " + std::string(toString(key.kind)));
        const auto it = pending.find(keys.text(key));
        if (it == pending.end())
            fail("the storage-key list names " + inQuotes(keys.text(key)) +
                 ", which the state does not use or lists twice");
        const std::size_t index = it->second;
        const PickleStorage& s = doc.storages[index];
        pending.erase(it);
        if (fileSize_ - at < 8) fail("storage " + inQuotes(s.key) + " runs past the end of the file (truncated?)");
        const std::uint64_t count = littleEndian(f.read(at, 8), 0, 8);
        if (count != s.numel)
            fail("storage " + inQuotes(s.key) + " is declared with " + std::to_string(s.numel) + " " +
                 std::string(toString(s.dtype)) + " elements (" + std::to_string(s.byteSize) +
                 " bytes) but the file counts " + std::to_string(count));
        if (fileSize_ - at - 8 < s.byteSize)
            fail("storage " + inQuotes(s.key) + " (" + std::to_string(s.byteSize) + " bytes at byte " +
                 std::to_string(at + 8) + ") runs past the end of the file (truncated?)");
        storages_[index] = {s.key, s.dtype, s.numel, s.byteSize, at + 8};
        at += 8 + s.byteSize;
    }
    if (!pending.empty())
        fail("storage " + inQuotes(pending.begin()->first) + " is used by the state but missing from the key list");
    if (at != fileSize_) fail(std::to_string(fileSize_ - at) + " bytes after the last storage");
    flatten(doc);
}

// The state's dicts flattened into tensors_ and skipped_, in the pickle's order.
void TorchCheckpointFile::flatten(const PickleDocument& doc) {
    if (doc.root.kind != PickleKind::Dict)
        fail("the pickle holds " + describeLeaf(doc, doc.root) + ", not a dict of tensors");
    std::vector<std::pair<std::string, PickleValue>> found;
    std::unordered_set<std::uint32_t> visited{doc.root.slot};
    walk(doc, doc.root, "", 1, visited, found);
    tensors_.reserve(found.size());
    for (auto& [name, value] : found) {
        const PickleTensor& t = doc.tensor(value);
        TorchTensorInfo info;
        info.name = std::move(name);
        info.dtype = t.dtype;
        info.shape = t.shape;
        info.strides = t.strides;
        info.storage = t.storage;
        info.storageKey = doc.storages[t.storage].key;
        info.storageOffset = t.offset;
        if (!index_.emplace(info.name, tensors_.size()).second)
            fail("two tensors are named " + inQuotes(info.name) + " (a key with a '.' and a nested dict)");
        tensors_.push_back(std::move(info));
    }
}

// One dict's entries: tensors to `found`, other leaves to skipped_, dicts walked in place. Each
// dict is walked once: one reached again (shared or cyclic references) is refused, so the walk is
// linear in the pickle, whatever its references.
void TorchCheckpointFile::walk(const PickleDocument& doc, const PickleValue& dict, const std::string& prefix, int depth,
                               std::unordered_set<std::uint32_t>& visited,
                               std::vector<std::pair<std::string, PickleValue>>& found) {
    const std::vector<PickleValue>& items = doc.container(dict).items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        const std::optional<std::string> key = keyText(doc, items[i]);
        std::string name = prefix.empty() ? key.value_or("") : prefix + "." + key.value_or("");
        if (name.size() > kMaxTensorNameBytes)
            fail("an entry name of " + std::to_string(name.size()) + " bytes; the limit is " +
                 std::to_string(kMaxTensorNameBytes));
        const PickleValue& value = items[i + 1];
        if (!key) {
            ++skippedCount_;
            if (skipped_.size() < kMaxSkippedListed)
                skipped_.push_back({name + "<" + describeLeaf(doc, items[i]) + " key>", describeLeaf(doc, value)});
        } else if (value.kind == PickleKind::Dict) {
            if (!visited.insert(value.slot).second)
                fail("the dict at " + inQuotes(name) +
                     " is also reached through another key (shared or cyclic references; a state dict is a tree)");
            if (depth + 1 > PickleLimits::kMaxNesting)
                fail("dicts nested deeper than " + std::to_string(PickleLimits::kMaxNesting));
            walk(doc, value, name, depth + 1, visited, found);
        } else if (value.kind == PickleKind::Tensor) {
            found.emplace_back(std::move(name), value);
            if (found.size() > PickleLimits::kMaxTensors)
                fail("more than " + std::to_string(PickleLimits::kMaxTensors) + " tensor entries");
        } else {
            ++skippedCount_;
            if (skipped_.size() < kMaxSkippedListed) skipped_.push_back({name, describeLeaf(doc, value)});
        }
    }
}

std::string TorchCheckpointFile::description() const {
    std::string text =
        "PyTorch checkpoint (" + std::string(toString(format_)) +
        (archive_.empty() ? "" : " archive " + inQuotes(archive_)) + (bigEndian_ ? ", big-endian" : "") +
        "), a pickle read as data by the restricted reader (nothing executed): " + std::to_string(tensors_.size()) +
        " tensors";
    if (skippedCount_ > 0) text += ", " + std::to_string(skippedCount_) + " other entries skipped";
    return text;
}

const TorchTensorInfo* TorchCheckpointFile::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

void TorchCheckpointFile::readExactly(std::uint64_t offset, std::span<std::byte> out) const {
    std::string why;
    try {
        why = file_->readExactly(offset, out);
    } catch (const InputFileError& e) {
        throw TorchCheckpointError(e.what());
    }
    if (!why.empty()) fail(why);
}

std::vector<std::byte> TorchCheckpointFile::readElements(const TorchTensorInfo& info, std::uint64_t first,
                                                         std::uint64_t count) const {
    const auto esize = static_cast<std::uint64_t>(elementBytes(info.dtype));
    const TorchStorageInfo& storage = storages_[info.storage];
    std::vector<std::byte> out(static_cast<std::size_t>(count * esize));
    if (count == 0) return out;
    const std::uint64_t base = storage.fileOffset + info.storageOffset * esize;
    if (info.contiguous()) {
        readExactly(base + first * esize, out);
    } else {
        // Every element lies in [offset, last] of the storage (checked when the file was opened):
        // read that range once and gather the view from it in row-major order.
        std::uint64_t span = 1;
        for (std::size_t d = 0; d < info.shape.size(); ++d)
            span += static_cast<std::uint64_t>(info.shape[d] - 1) * static_cast<std::uint64_t>(info.strides[d]);
        std::vector<std::byte> window(static_cast<std::size_t>(span * esize));
        readExactly(base, window);
        std::vector<std::int64_t> index(info.shape.size(), 0);
        std::uint64_t element = 0;
        std::uint64_t rest = first;
        for (std::size_t d = info.shape.size(); d-- > 0;) {
            index[d] = static_cast<std::int64_t>(rest % static_cast<std::uint64_t>(info.shape[d]));
            rest /= static_cast<std::uint64_t>(info.shape[d]);
            element += static_cast<std::uint64_t>(index[d] * info.strides[d]);
        }
        for (std::uint64_t k = 0; k < count; ++k) {
            std::memcpy(out.data() + k * esize, window.data() + element * esize, esize);
            for (std::size_t d = info.shape.size(); d-- > 0;) {
                element += static_cast<std::uint64_t>(info.strides[d]);
                if (++index[d] < info.shape[d]) break;
                element -= static_cast<std::uint64_t>(info.strides[d] * info.shape[d]);
                index[d] = 0;
            }
        }
    }
    if (bigEndian_) {  // torch/serialization.py _load: storages are byteswapped by element (complex: by part)
        const bool complex = info.dtype == TorchDtype::Complex64 || info.dtype == TorchDtype::Complex128;
        const std::size_t width = complex ? esize / 2 : esize;
        for (std::size_t at = 0; at < out.size(); at += width) std::reverse(out.begin() + at, out.begin() + at + width);
    }
    return out;
}

std::vector<std::byte> TorchCheckpointFile::readBytes(const TorchTensorInfo& info) const {
    return readElements(info, 0, static_cast<std::uint64_t>(info.numel()));
}

std::vector<float> TorchCheckpointFile::readFloat32(const std::string& name) const {
    const TorchTensorInfo* info = find(name);
    if (info == nullptr) fail("no tensor " + inQuotes(name));
    return readFloat32(*info);
}

std::vector<float> TorchCheckpointFile::readFloat32(const TorchTensorInfo& info) const {
    return readFloat32(info, 0, static_cast<std::size_t>(info.numel()));
}

std::vector<float> TorchCheckpointFile::readFloat32(const TorchTensorInfo& info, std::size_t first,
                                                    std::size_t count) const {
    const auto numel = static_cast<std::size_t>(info.numel());
    if (first > numel || count > numel - first)
        fail("tensor " + inQuotes(info.name) + ": elements " + std::to_string(first) + ".." +
             std::to_string(first + count) + " are outside its " + std::to_string(numel));
    if (info.dtype != TorchDtype::Float32 && info.dtype != TorchDtype::Float16 && info.dtype != TorchDtype::BFloat16 &&
        info.dtype != TorchDtype::Float64)
        fail("tensor " + inQuotes(info.name) + " has dtype " + std::string(toString(info.dtype)) +
             "; only float32, float16, bfloat16 and float64 can be read as float32");
    std::vector<float> values(count);
    if (info.dtype == TorchDtype::Float32 && !bigEndian_ && info.contiguous()) {
        const TorchStorageInfo& storage = storages_[info.storage];
        readExactly(storage.fileOffset + (info.storageOffset + first) * 4, std::as_writable_bytes(std::span(values)));
        return values;
    }
    const std::vector<std::byte> bytes = readElements(info, first, count);
    toFloat32(info.dtype, bytes, values);
    return values;
}

}  // namespace tessera
