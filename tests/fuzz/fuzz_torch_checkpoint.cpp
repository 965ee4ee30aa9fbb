// Fuzz target: a PyTorch checkpoint (core/formats/TorchCheckpoint.h and the pickle reader under it,
// core/formats/Pickle.h), as model loaders open it. The input's first byte picks how the rest
// becomes the file, so that mutations of the pickle are not all spent on zip structure:
//   odd:  the rest is the whole file (zip, legacy or anything else);
//   even: the rest is the data.pkl of a torch.save zip archive written here, whose records
//         data/0 .. data/3 hold 64 bytes each (16 float32, 32 float16, ...); bit 1 set writes the
//         byteorder record "big". The rest is also parsed directly as a pickle with the zip's and
//         the legacy format's persistent ids.
// The file goes through a memfd (/proc/self/fd/N), since the reader takes a path. Input may only
// be rejected with TorchCheckpointError (PickleError from the parser) and a readable message; an
// accepted file's tensors must be found by name, lie inside the file, read back whole, and read
// as float32 or be refused by dtype.
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/formats/Pickle.h"
#include "core/formats/TorchCheckpoint.h"

using namespace tessera;

namespace {

void putLittleEndian(std::string& out, std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(i < 8 ? static_cast<char>((value >> (8 * i)) & 0xFF) : '\0');
}

// A stored zip as torch.save lays it out (without alignment padding; CRCs left 0, as the reader
// does not check them).
std::string torchZip(std::string_view pickle, bool bigEndian) {
    std::vector<std::pair<std::string, std::string>> records{{"archive/data.pkl", std::string(pickle)},
                                                             {"archive/byteorder", bigEndian ? "big" : "little"}};
    for (int key = 0; key < 4; ++key) {
        std::string data;
        for (int i = 0; i < 64; ++i) data.push_back(static_cast<char>(key * 64 + i));
        records.emplace_back("archive/data/" + std::to_string(key), data);
    }
    records.emplace_back("archive/version", "3\n");
    std::string out, central;
    for (const auto& [name, data] : records) {
        const std::uint64_t offset = out.size();
        out += std::string("PK\3\4", 4);
        putLittleEndian(out, 20, 2);  // version needed
        putLittleEndian(out, 0, 2);   // flags
        putLittleEndian(out, 0, 2);   // stored
        putLittleEndian(out, 0, 8);   // time, date, crc
        putLittleEndian(out, data.size(), 4);
        putLittleEndian(out, data.size(), 4);
        putLittleEndian(out, name.size(), 2);
        putLittleEndian(out, 0, 2);
        out += name + data;
        central += std::string("PK\1\2", 4);
        putLittleEndian(central, 20, 2);  // version made by
        putLittleEndian(central, 20, 2);  // version needed
        putLittleEndian(central, 0, 4);   // flags, stored
        putLittleEndian(central, 0, 8);   // time, date, crc
        putLittleEndian(central, data.size(), 4);
        putLittleEndian(central, data.size(), 4);
        putLittleEndian(central, name.size(), 2);
        putLittleEndian(central, 0, 12);  // extra, comment, disk, attributes
        putLittleEndian(central, offset, 4);
        central += name;
    }
    const std::uint64_t directory = out.size();
    out += central;
    out += std::string("PK\5\6", 4);
    putLittleEndian(out, 0, 4);
    putLittleEndian(out, records.size(), 2);
    putLittleEndian(out, records.size(), 2);
    putLittleEndian(out, central.size(), 4);
    putLittleEndian(out, directory, 4);
    putLittleEndian(out, 0, 2);
    return out;
}

void checkTensors(const TorchCheckpointFile& file) {
    if (file.description().empty()) fuzz::violation("an empty description");
    for (const TorchTensorInfo& tensor : file.tensors()) {
        const std::string name = excerpt(tensor.name);
        if (file.find(tensor.name) != &tensor) fuzz::violation("find() does not return tensor " + name);
        if (tensor.storage >= file.storages().size()) fuzz::violation("tensor " + name + " has no storage");
        const TorchStorageInfo& storage = file.storages()[tensor.storage];
        if (storage.fileOffset > file.fileSize() || file.fileSize() - storage.fileOffset < storage.byteSize)
            fuzz::violation("the storage of tensor " + name + " lies outside the file");
        if (tensor.byteSize() > storage.byteSize && tensor.byteSize() > PickleLimits::kMaxExpandedBytes)
            fuzz::violation("tensor " + name + " is larger than its storage beyond the bound for views");
        try {  // the file does not change: its tensors must read
            if (file.readBytes(tensor).size() != tensor.byteSize())
                fuzz::violation("readBytes gave the wrong size for tensor " + name);
        } catch (const TorchCheckpointError& e) {
            fuzz::violation("readBytes failed for tensor " + name + ": " + e.what());
        }
        try {
            const std::vector<float> values = file.readFloat32(tensor);
            if (static_cast<std::int64_t>(values.size()) != tensor.numel())
                fuzz::violation("readFloat32 gave " + std::to_string(values.size()) + " values for tensor " + name);
        } catch (const TorchCheckpointError& e) {
            fuzz::checkRejection(e);
        }
    }
}

void parseDirectly(std::string_view pickle, PicklePersistentIds ids) {
    try {
        (void)parsePickle(pickle, ids);
    } catch (const PickleError& e) {
        fuzz::checkRejection(e);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static fuzz::MemoryFile memory;
    std::string_view input = fuzz::asText(data, size);
    if (input.empty()) return 0;
    const auto mode = static_cast<unsigned char>(input.front());
    input.remove_prefix(1);
    std::string bytes;
    if ((mode & 1) != 0) {
        bytes = std::string(input);
    } else {
        parseDirectly(input, PicklePersistentIds::Zip);
        parseDirectly(input, PicklePersistentIds::Legacy);
        bytes = torchZip(input, (mode & 2) != 0);
    }
    memory.assign(bytes.data(), bytes.size());
    try {
        const TorchCheckpointFile file(memory.path());
        checkTensors(file);
    } catch (const TorchCheckpointError& e) {
        fuzz::checkRejection(e);
    }
    return 0;
}
