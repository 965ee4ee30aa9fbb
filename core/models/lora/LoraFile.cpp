// LoraFile: the two containers behind one listing, and the hashes of A1111's Lora extension
// (extensions-builtin/Lora/network.py NetworkOnDisk, modules/hashes.py addnet_hash_safetensors).
#include "core/models/lora/LoraFile.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>

#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"

namespace tessera {

namespace {

// A pickle's tensors all under this key are a training tool's wrapper around the state dict.
constexpr std::string_view kStateDictWrapper = "state_dict.";
// Bytes hashed per read: a fixed buffer, large enough that reading costs little beside hashing.
constexpr std::size_t kHashChunkBytes = std::size_t{4} << 20;

bool isSafetensorsFloat(SafetensorsDtype d) {
    return d == SafetensorsDtype::F32 || d == SafetensorsDtype::F16 || d == SafetensorsDtype::BF16;
}

bool isTorchFloat(TorchDtype d) {
    return d == TorchDtype::Float32 || d == TorchDtype::Float16 || d == TorchDtype::BFloat16 ||
           d == TorchDtype::Float64;
}

std::string lowercase(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

}  // namespace

std::string_view toString(LoraContainer c) { return c == LoraContainer::Safetensors ? "safetensors" : "pickle"; }

std::int64_t LoraTensorInfo::numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
}

struct LoraFile::Reader {
    std::unique_ptr<SafetensorsFile> safetensors;
    std::unique_ptr<TorchCheckpointFile> pickle;
};

LoraFile::LoraFile() = default;
LoraFile::LoraFile(LoraFile&&) noexcept = default;
LoraFile& LoraFile::operator=(LoraFile&&) noexcept = default;
LoraFile::~LoraFile() = default;

LoraFile LoraFile::open(const std::string& path) {
    LoraFile f;
    f.path_ = path;
    f.reader_ = std::make_unique<Reader>();
    // One open for the hashes, bounded and non-blocking; the container reader opens its own.
    BoundedFile raw = [&] {
        try {
            return BoundedFile::open(path, "lora", kMaxFileBytes);
        } catch (const InputFileError& e) {
            throw LoraFileError(e.what());
        }
    }();
    const std::string head = raw.readAt(0, 512);
    const bool bySuffix = lowercase(std::filesystem::path(path).extension().string()) == ".safetensors";
    const TorchContainer torch = detectTorchContainer(head);
    f.container_ =
        !bySuffix && (torch == TorchContainer::Zip || torch == TorchContainer::Legacy || torch == TorchContainer::Tar)
            ? LoraContainer::TorchPickle
            : LoraContainer::Safetensors;
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> listed;  // container key, shape
    try {
        if (f.container_ == LoraContainer::Safetensors) {
            f.reader_->safetensors = std::make_unique<SafetensorsFile>(path);
            const SafetensorsFile& s = *f.reader_->safetensors;
            f.metadata_ = s.metadata();
            f.fileSize_ = s.fileSize();
            for (const SafetensorsTensorInfo& t : s.tensors()) {
                if (isSafetensorsFloat(t.dtype))
                    listed.emplace_back(t.name, t.shape);
                else
                    f.skipped_.push_back(t.name + ": dtype " + std::string(toString(t.dtype)) + " is not a float type");
            }
        } else {
            f.reader_->pickle = std::make_unique<TorchCheckpointFile>(path);
            const TorchCheckpointFile& p = *f.reader_->pickle;
            f.fileSize_ = p.fileSize();
            for (const TorchTensorInfo& t : p.tensors()) {
                if (isTorchFloat(t.dtype))
                    listed.emplace_back(t.name, t.shape);
                else
                    f.skipped_.push_back(t.name + ": dtype " + std::string(toString(t.dtype)) + " is not a float type");
            }
            for (const TorchSkippedEntry& s : p.skipped())
                f.skipped_.push_back(s.name + ": " + s.what + ", not a tensor");
        }
    } catch (const SafetensorsError& e) {
        throw LoraFileError(e.what());
    } catch (const TorchCheckpointError& e) {
        throw LoraFileError(e.what());
    }
    if (f.fileSize_ != raw.size())
        throw LoraFileError("lora: " + shownPath(path) + ": the file changed while it was being read");

    const bool wrapped = f.container_ == LoraContainer::TorchPickle && !listed.empty() &&
                         std::all_of(listed.begin(), listed.end(), [](const auto& t) {
                             return std::string_view(t.first).starts_with(kStateDictWrapper);
                         });
    for (auto& [key, shape] : listed) {
        std::string shown = wrapped ? key.substr(kStateDictWrapper.size()) : key;
        f.index_.emplace(shown, f.tensors_.size());
        f.tensors_.push_back(LoraTensorInfo{std::move(shown), std::move(shape)});
        f.fileKeys_.push_back(key);
    }

    // The whole file once: its SHA-256 and, for safetensors, the addnet hash of the bytes after the header.
    std::uint64_t dataStart = 0;
    if (f.container_ == LoraContainer::Safetensors && head.size() >= 8) {
        std::uint64_t n = 0;
        std::memcpy(&n, head.data(), 8);  // little-endian on every platform Tessera builds for
        dataStart = 8 + n;
    }
    Sha256 whole, addnet;
    std::vector<std::byte> buffer(kHashChunkBytes);
    for (std::uint64_t at = 0; at < raw.size();) {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), raw.size() - at));
        const std::size_t got = raw.readInto(at, std::span<std::byte>(buffer.data(), want));
        if (got != want) throw LoraFileError("lora: " + shownPath(path) + ": the file changed while it was being read");
        whole.update(buffer.data(), got);
        if (at + got > dataStart) {
            const std::uint64_t skip = dataStart > at ? dataStart - at : 0;
            addnet.update(buffer.data() + skip, got - static_cast<std::size_t>(skip));
        }
        at += got;
    }
    f.sha256_ = whole.hexDigest();
    if (f.container_ == LoraContainer::Safetensors) f.addnetHash_ = addnet.hexDigest();
    return f;
}

std::string LoraFile::stem() const { return std::filesystem::path(path_).stem().string(); }

std::string LoraFile::alias() const {
    const auto it = metadata_.find("ss_output_name");
    return it == metadata_.end() ? std::string() : it->second;
}

const LoraTensorInfo* LoraFile::find(std::string_view key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<float> LoraFile::readFloat32(const LoraTensorInfo& tensor) const {
    const auto it = index_.find(tensor.key);
    if (it == index_.end()) throw LoraFileError("lora: " + shownPath(path_) + ": no tensor " + inQuotes(tensor.key));
    const std::string& key = fileKeys_[it->second];
    try {
        return reader_->safetensors ? reader_->safetensors->readFloat32(key) : reader_->pickle->readFloat32(key);
    } catch (const SafetensorsError& e) {
        throw LoraFileError(e.what());
    } catch (const TorchCheckpointError& e) {
        throw LoraFileError(e.what());
    }
}

std::string LoraFile::a1111Hash() const {
    const auto it = metadata_.find("sshs_model_hash");
    if (it != metadata_.end() && !it->second.empty()) return it->second;
    return container_ == LoraContainer::Safetensors ? addnetHash_ : sha256_;
}

}  // namespace tessera
