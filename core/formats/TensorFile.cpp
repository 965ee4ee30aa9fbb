// TensorFile: safetensors or a PyTorch checkpoint behind one listing.
#include "core/formats/TensorFile.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"
#include "core/run/ModelName.h"

namespace tessera {

namespace {

constexpr std::string_view kStateDict = "state_dict.";
constexpr std::size_t kChunkBytes = std::size_t{4} << 20;

// safetensors/torch.py _TYPES, read the other way.
std::string safetensorsName(TorchDtype dtype) {
    switch (dtype) {
        case TorchDtype::Float64:
            return "F64";
        case TorchDtype::Float32:
            return "F32";
        case TorchDtype::Float16:
            return "F16";
        case TorchDtype::BFloat16:
            return "BF16";
        case TorchDtype::Int64:
            return "I64";
        case TorchDtype::Int32:
            return "I32";
        case TorchDtype::Int16:
            return "I16";
        case TorchDtype::Int8:
            return "I8";
        case TorchDtype::UInt8:
            return "U8";
        case TorchDtype::Bool:
            return "BOOL";
        case TorchDtype::Complex64:
            return "C64";
        case TorchDtype::Float8E4M3FN:
            return "F8_E4M3";
        case TorchDtype::Float8E5M2:
            return "F8_E5M2";
        case TorchDtype::UInt16:
            return "U16";
        case TorchDtype::UInt32:
            return "U32";
        case TorchDtype::UInt64:
            return "U64";
        case TorchDtype::Complex128:
            break;
    }
    return std::string(toString(dtype));
}

// A pickle's PROTO opcode (protocol 2 to 5): a bare pickle stream, which the restricted reader
// names (torch.save's legacy format starts with one too; detectTorchContainer knows its magic).
bool startsWithPickleProtocol(std::string_view head) {
    return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5;
}

// BoundedFile's errors name the setting first ("weights: 'path': why"); the loaders name it themselves.
std::string withoutWeightsPrefix(const std::string& message) {
    constexpr std::string_view kPrefix = "weights: ";
    return message.rfind(kPrefix, 0) == 0 ? message.substr(kPrefix.size()) : message;
}

bool hasPickleExtension(const std::string& path) {
    return hasFileExtension(path, {".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle"});
}

}  // namespace

std::string_view toString(TensorContainer container) {
    return container == TensorContainer::Safetensors ? "safetensors" : "PyTorch checkpoint";
}

std::int64_t TensorFileEntry::numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;  // bounded by the container's reader
    return n;
}

TensorContainer TensorFile::containerOf(const std::string& path) {
    std::string head;
    try {
        head = BoundedFile::open(path, "weights", std::numeric_limits<std::size_t>::max()).readAt(0, 512);
    } catch (const InputFileError& e) {
        throw TensorFileError(
            hasPickleExtension(path) ? TensorContainer::TorchCheckpoint : TensorContainer::Safetensors,
            withoutWeightsPrefix(e.what()));
    }
    if (detectTorchContainer(head) != TorchContainer::Unknown || startsWithPickleProtocol(head))
        return TensorContainer::TorchCheckpoint;
    // safetensors starts with its header's length, then the header's "{".
    const bool safetensors = head.size() > 8 && head[8] == '{';
    return !safetensors && hasPickleExtension(path) ? TensorContainer::TorchCheckpoint : TensorContainer::Safetensors;
}

TensorFile::TensorFile(const std::string& path, StateDictWrapper wrapper) : path_(path), container_(containerOf(path)) {
    std::vector<TensorFileEntry> listed;
    try {
        if (container_ == TensorContainer::Safetensors) {
            safetensors_ = std::make_unique<SafetensorsFile>(path);
            fileSize_ = safetensors_->fileSize();
            for (const SafetensorsTensorInfo& t : safetensors_->tensors())
                listed.push_back({t.name, std::string(toString(t.dtype)), t.shape, t.begin, t.byteSize()});
        } else {
            checkpoint_ = std::make_unique<TorchCheckpointFile>(path);
            fileSize_ = checkpoint_->fileSize();
            for (const TorchTensorInfo& t : checkpoint_->tensors()) {
                const std::uint64_t bytes = t.byteSize();
                const auto numel = static_cast<std::uint64_t>(t.numel());
                const std::uint64_t element = numel > 0 ? bytes / numel : 0;
                listed.push_back({t.name, safetensorsName(t.dtype), t.shape,
                                  checkpoint_->storages()[t.storage].fileOffset + t.storageOffset * element, bytes});
            }
            raw_ = std::make_unique<const BoundedFile>(
                BoundedFile::open(path, "weights", std::numeric_limits<std::size_t>::max()));
            if (raw_->size() != fileSize_)
                throw TensorFileError(container_, shownPath(path) + ": the file changed while it was being read");
        }
    } catch (const SafetensorsError& e) {
        throw TensorFileError(container_, e.what());
    } catch (const TorchCheckpointError& e) {
        throw TensorFileError(container_, e.what());
    } catch (const InputFileError& e) {
        throw TensorFileError(container_, withoutWeightsPrefix(e.what()));
    }
    std::vector<std::size_t> source(listed.size());
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = i;
    // As diffusers' loader: while a "state_dict" entry is there, only what it holds is the state dict
    // (the optimizer states, step counts and callbacks beside it are not).
    while (container_ == TensorContainer::TorchCheckpoint && wrapper == StateDictWrapper::Unwrap) {
        const bool wrapped = std::any_of(source.begin(), source.end(), [&](std::size_t i) {
            return std::string_view(listed[i].name).substr(wrapper_.size()).starts_with(kStateDict);
        });
        if (!wrapped) break;
        std::erase_if(source, [&](std::size_t i) {
            return !std::string_view(listed[i].name).substr(wrapper_.size()).starts_with(kStateDict);
        });
        wrapper_ += kStateDict;
    }
    for (const std::size_t i : source) {
        TensorFileEntry entry = listed[i];
        entry.name.erase(0, wrapper_.size());
        index_.emplace(entry.name, tensors_.size());
        tensors_.push_back(std::move(entry));
        source_.push_back(i);
    }
}

TensorFile::~TensorFile() = default;
TensorFile::TensorFile(TensorFile&&) noexcept = default;
TensorFile& TensorFile::operator=(TensorFile&&) noexcept = default;

std::string TensorFile::description() const {
    if (!checkpoint_) return "safetensors";
    std::string text = checkpoint_->description();
    if (!wrapper_.empty()) text += "; the state dict under " + inQuotes(wrapper_.substr(0, wrapper_.size() - 1));
    return text;
}

const TensorFileEntry* TensorFile::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<float> TensorFile::readFloat32(const TensorFileEntry& entry, std::size_t first, std::size_t count) const {
    const auto found = index_.find(entry.name);
    if (found == index_.end())
        throw TensorFileError(container_, shownPath(path_) + ": no tensor " + inQuotes(entry.name));
    const std::size_t at = found->second;
    try {
        if (safetensors_) return safetensors_->readFloat32(safetensors_->tensors()[source_[at]], first, count);
        return checkpoint_->readFloat32(checkpoint_->tensors()[source_[at]], first, count);
    } catch (const SafetensorsError& e) {
        throw TensorFileError(container_, e.what());
    } catch (const TorchCheckpointError& e) {
        throw TensorFileError(container_, e.what());
    }
}

std::vector<float> TensorFile::readFloat32(const TensorFileEntry& entry) const {
    return readFloat32(entry, 0, static_cast<std::size_t>(entry.numel()));
}

bool TensorFile::readFileInChunks(const std::function<bool(std::span<const std::byte>)>& consume) const {
    if (safetensors_) {
        try {
            return safetensors_->readFileInChunks(consume);
        } catch (const SafetensorsError& e) {
            throw TensorFileError(container_, e.what());
        }
    }
    const auto changed = [&] {
        return TensorFileError(container_, shownPath(path_) + ": the file changed while it was being read");
    };
    std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, fileSize_)));
    for (std::uint64_t at = 0; at < fileSize_;) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), fileSize_ - at));
        const std::size_t got = raw_->readInto(at, std::span<std::byte>(buffer.data(), want));
        if (got != want) throw changed();
        if (!consume(std::span<const std::byte>(buffer.data(), got))) return false;
        at += got;
    }
    if (raw_->currentSize() != fileSize_) throw changed();
    return true;
}

}  // namespace tessera
