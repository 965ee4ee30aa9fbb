// Fuzz target: a safetensors file (core/Safetensors), as the model loader reads it. The input's
// first byte picks how the rest becomes the file, so that mutations of the JSON header are not
// all wasted on a header length that no longer matches:
//   odd:  the rest is the whole file, 8-byte header length included;
//   even: the rest is the header up to its last '}' and then the data; the length is prepended.
// The file goes through a memfd (/proc/self/fd/N), since the reader takes a path. Input may only
// be rejected with SafetensorsError and a readable message; an accepted file's tensors must lie
// inside the file and read back whole, the whole file must read in chunks, and reading a tensor
// as float32 must give numel values or a SafetensorsError.
#include "tests/fuzz/FuzzSupport.h"

#include "core/formats/Safetensors.h"

using namespace tessera;

namespace {

std::string fileFromInput(std::string_view input) {
    if (input.empty()) return {};
    const bool whole = (static_cast<unsigned char>(input.front()) & 1) != 0;
    input.remove_prefix(1);
    if (whole) return std::string(input);
    const std::size_t close = input.rfind('}');
    const std::size_t headerLength = close == std::string_view::npos ? input.size() : close + 1;
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((headerLength >> (8 * i)) & 0xFF);
    file.append(input);
    return file;
}

void checkTensors(const SafetensorsFile& file) {
    std::uint64_t covered = 0;
    for (const SafetensorsTensorInfo& tensor : file.tensors()) {
        if (file.find(tensor.name) != &tensor) fuzz::violation("find() does not return tensor " + excerpt(tensor.name));
        if (tensor.end < tensor.begin || tensor.end > file.fileSize())
            fuzz::violation("tensor " + excerpt(tensor.name) + " lies outside the file");
        try {  // the file does not change: its tensors must read
            if (file.readBytes(tensor).size() != tensor.byteSize())
                fuzz::violation("readBytes gave the wrong size for tensor " + excerpt(tensor.name));
        } catch (const SafetensorsError& e) {
            fuzz::violation("readBytes failed for tensor " + excerpt(tensor.name) + ": " + e.what());
        }
        covered += tensor.byteSize();
        try {
            const std::vector<float> values = file.readFloat32(tensor);
            if (static_cast<std::int64_t>(values.size()) != tensor.numel())
                fuzz::violation("readFloat32 gave " + std::to_string(values.size()) + " values for tensor " +
                                excerpt(tensor.name) + " of " + std::to_string(tensor.numel()) + " elements");
        } catch (const SafetensorsError& e) {
            fuzz::checkRejection(e);
        }
    }
    if (covered > file.fileSize()) fuzz::violation("the tensors cover more bytes than the file has");
    std::uint64_t streamed = 0;
    try {
        (void)file.readFileInChunks([&](std::span<const std::byte> chunk) {
            streamed += chunk.size();
            return true;
        });
    } catch (const SafetensorsError& e) {
        fuzz::violation(std::string("readFileInChunks failed: ") + e.what());
    }
    if (streamed != file.fileSize()) fuzz::violation("readFileInChunks did not hand over the whole file");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static fuzz::MemoryFile memory;
    const std::string bytes = fileFromInput(fuzz::asText(data, size));
    memory.assign(bytes.data(), bytes.size());
    try {
        const SafetensorsFile file(memory.path());
        checkTensors(file);
    } catch (const SafetensorsError& e) {
        fuzz::checkRejection(e);
    }
    return 0;
}
