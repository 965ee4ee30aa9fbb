#include "app/qt/ImportedParameters.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"
#include "app/cli/UpscaleModelRun.h"
#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/models/lora/LoraFile.h"
#include "core/run/ControlNetModelFile.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/LoraModelFile.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/VaeFile.h"
#include "core/text/ExtraNetworks.h"

namespace tessera {

namespace {

constexpr std::string_view kField = "parameters";

// Big- or little-endian reads inside one block, bounds checked.
class ByteView {
public:
    ByteView(std::string_view bytes, bool bigEndian) : bytes_(bytes), big_(bigEndian) {}
    std::optional<std::uint32_t> u16(std::size_t at) const { return read(at, 2); }
    std::optional<std::uint32_t> u32(std::size_t at) const { return read(at, 4); }
    std::string_view slice(std::size_t at, std::size_t n) const {
        return at <= bytes_.size() && n <= bytes_.size() - at ? bytes_.substr(at, n) : std::string_view();
    }
    bool bigEndian() const { return big_; }

private:
    std::optional<std::uint32_t> read(std::size_t at, std::size_t n) const {
        if (at > bytes_.size() || n > bytes_.size() - at) return std::nullopt;
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const auto b = static_cast<unsigned char>(bytes_[at + (big_ ? i : n - 1 - i)]);
            v = (v << 8) | b;
        }
        return v;
    }
    std::string_view bytes_;
    bool big_;
};

// The value bytes of tag `tag` in the IFD at `ifd` (type sizes of TIFF 6.0), or nothing.
std::optional<std::string_view> ifdValue(const ByteView& tiff, std::uint32_t ifd, std::uint32_t tag) {
    constexpr std::uint32_t kTypeBytes[] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8};
    const auto count = tiff.u16(ifd);
    if (!count) return std::nullopt;
    for (std::uint32_t i = 0; i < *count; ++i) {
        const std::size_t entry = ifd + 2 + std::size_t{12} * i;
        const auto t = tiff.u16(entry), type = tiff.u16(entry + 2), n = tiff.u32(entry + 4);
        if (!t || !type || !n) return std::nullopt;
        if (*t != tag) continue;
        if (*type == 0 || *type > 12) return std::nullopt;
        const std::uint64_t bytes = std::uint64_t{kTypeBytes[*type]} * *n;
        if (bytes <= 4) return tiff.slice(entry + 8, static_cast<std::size_t>(bytes));
        const auto offset = tiff.u32(entry + 8);
        if (!offset) return std::nullopt;
        const std::string_view value = tiff.slice(*offset, static_cast<std::size_t>(bytes));
        if (value.size() != bytes) return std::nullopt;
        return value;
    }
    return std::nullopt;
}

void appendUtf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

// UTF-16 as Python's decode(errors='replace'): unpaired surrogates become U+FFFD.
std::string utf16ToUtf8(std::string_view bytes, bool bigEndian) {
    const ByteView view(bytes, bigEndian);
    std::string out;
    out.reserve(bytes.size() / 2);
    const std::size_t units = bytes.size() / 2;
    for (std::size_t i = 0; i < units; ++i) {
        const std::uint32_t u = *view.u16(2 * i);
        if (u >= 0xd800 && u < 0xdc00 && i + 1 < units) {
            const std::uint32_t low = *view.u16(2 * (i + 1));
            if (low >= 0xdc00 && low < 0xe000) {
                appendUtf8(out, 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00));
                ++i;
                continue;
            }
        }
        appendUtf8(out, u >= 0xd800 && u < 0xe000 ? 0xfffd : u);
    }
    return out;
}

// piexif's UserComment.load as A1111 calls it (a value it cannot load is read as UTF-8).
std::string userCommentText(std::string_view data, bool bigEndian) {
    constexpr std::string_view kUnicode("UNICODE\0", 8), kAscii("ASCII\0\0\0", 8);
    std::string text;
    if (data.substr(0, 8) == kUnicode) {
        std::string_view body = data.substr(8);
        bool big = bigEndian;
        if (body.size() >= 2 && body[0] == '\xfe' && body[1] == '\xff') {
            big = true;
            body.remove_prefix(2);
        } else if (body.size() >= 2 && body[0] == '\xff' && body[1] == '\xfe') {
            big = false;
            body.remove_prefix(2);
        }
        text = utf16ToUtf8(body, big);
    } else if (data.substr(0, 8) == kAscii) {
        text = std::string(data.substr(8));
    } else {
        // An undefined or unknown character code: the whole value as UTF-8, as A1111 falls back.
        text = std::string(data);
        text.erase(0, text.find_first_not_of('\0') == std::string::npos ? text.size() : text.find_first_not_of('\0'));
    }
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return toValidUtf8(text);
}

std::string exifUserComment(std::string_view exif) {
    // "Exif\0\0", then a TIFF block: byte order, 42, the first IFD's offset.
    const std::string_view tiffBytes = exif.substr(6);
    if (tiffBytes.size() < 8) return {};
    const bool big = tiffBytes.substr(0, 2) == "MM";
    if (!big && tiffBytes.substr(0, 2) != "II") return {};
    const ByteView tiff(tiffBytes, big);
    const auto ifd0 = tiff.u32(4);
    if (tiff.u16(2) != 42u || !ifd0) return {};
    const auto exifPointer = ifdValue(tiff, *ifd0, 0x8769);  // ExifIFDPointer
    if (!exifPointer || exifPointer->size() != 4) return {};
    const auto exifIfd = ByteView(*exifPointer, big).u32(0);
    if (!exifIfd) return {};
    const auto comment = ifdValue(tiff, *exifIfd, 0x9286);  // UserComment
    return comment ? userCommentText(*comment, big) : std::string();
}

ImportedParameters applyText(const std::string& text, const RunConfig& base, std::string source) {
    ImportedParameters imported;
    imported.config = base;
    imported.source = std::move(source);
    const ParsedInfotext parsed = parseInfotext(text);
    const ImportedSettings settings = applyInfotext(parsed, imported.config);
    imported.fields = settings.fields;
    imported.unmapped = settings.unmapped;
    // "Lora hashes" belong to the LoRAs the prompt's tags name, checked against the files a run
    // finds (checkModelFiles), as tessera-cli --params-from does: read here, not a setting left out.
    if (const InfotextParam* hashes = parsed.find("Lora hashes")) {
        imported.loraHashes = parseLoraHashes(hashes->value);
        const std::string shown = "Lora hashes: ";
        std::erase_if(imported.unmapped, [&shown](const UnmappedSetting& u) { return u.shown.rfind(shown, 0) == 0; });
    }
    // "TI hashes" name the embeddings the prompts used, which a run finds by their names.
    if (const InfotextParam* hashes = parsed.find("TI hashes")) {
        imported.textualInversionHashes = parseTextualInversionHashes(hashes->value);
        const std::string shown = "TI hashes: ";
        std::erase_if(imported.unmapped, [&shown](const UnmappedSetting& u) { return u.shown.rfind(shown, 0) == 0; });
    }
    if (std::find(imported.fields.begin(), imported.fields.end(), "vae") != imported.fields.end())
        if (const InfotextParam* hash = parsed.find("VAE hash")) imported.vaeHash = hash->value;
    return imported;
}

// SHA-256 of a file, lowercase hex; "" when it cannot be read.
std::string fileSha256(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    Sha256 hash;
    std::vector<char> buffer(std::size_t{1} << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        if (in.gcount() > 0) hash.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
    return in.bad() ? std::string() : hash.hexDigest();
}

// A1111's "Lora hashes" name of a tag's name: ':' and ',' removed (extra_networks_lora.py remove_symbols).
std::string hashName(const std::string& name) {
    std::string out;
    for (const char c : name)
        if (c != ':' && c != ',') out += c;
    return out;
}

// "'folder A', 'folder B'" of a lookup's message is long; the reason beside a setting says what to do.
std::string withoutField(const std::string& message, std::string_view field) {
    const std::string prefix = std::string(field) + ": ";
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// "TI hashes" against the embeddings a run of `config` finds (as tessera-cli --params-from checks
// them): each name found nowhere, or found with another hash, is listed.
void checkTextualInversions(ImportedParameters& imported) {
    if (imported.textualInversionHashes.empty()) return;
    const char* models = std::getenv(kModelsFolderVariable);
    const std::vector<std::string> folders = embeddingFolders(imported.config, models ? models : "");
    const std::vector<EmbeddingFileEntry> files = listEmbeddingFiles(folders);
    std::vector<std::string> checked;
    for (const auto& entry : imported.textualInversionHashes) {
        const std::string& name = entry.first;
        const std::string& hash = entry.second;
        if (std::find(checked.begin(), checked.end(), name) != checked.end()) continue;  // SDXL writes each twice
        checked.push_back(name);
        const std::string shown = "TI hashes: " + excerpt(name, 80);
        const EmbeddingFileEntry* found = nullptr;
        for (const EmbeddingFileEntry& f : files)  // the last of a name is the one registered
            if (f.name == name) found = &f;
        if (!found) {
            imported.unmapped.push_back(UnmappedSetting{
                shown,
                "names an embedding found in no embeddings folder here: its name in the prompt is read as "
                "words, so the image may differ"});
            continue;
        }
        try {
            const std::string sha = readTextualInversion(found->path).shortHash();
            if (sha != hash)
                imported.unmapped.push_back(UnmappedSetting{
                    shown, "is " + shownPath(found->path) + " here (hash " + sha + "); the image was made with hash " +
                               excerpt(hash, 40) + ": another file or version, so the image may differ"});
        } catch (const InputFileError& e) {
            imported.unmapped.push_back(UnmappedSetting{shown, "cannot be read: " + excerpt(e.what(), 400)});
        }
    }
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
    throw InputFileError(std::string(kField), std::string(kField) + ": " + shownPath(path) + ": " + why);
}

}  // namespace

std::vector<std::string> windowModelsFolders(const std::string& runModel, const std::string& windowModelsFolder) {
    std::vector<std::string> folders = cliModelsFolders(runModel);
    if (!windowModelsFolder.empty() && std::find(folders.begin(), folders.end(), windowModelsFolder) == folders.end())
        folders.push_back(windowModelsFolder);
    return folders;
}

void checkModelFiles(ImportedParameters& imported, const std::vector<std::string>& modelsFolders) {
    RunConfig& config = imported.config;
    std::vector<std::string> seen;
    for (const LoraTag& tag : loraTags(parseExtraNetworks(config.prompt).tags)) {
        if (std::find(seen.begin(), seen.end(), tag.name) != seen.end()) continue;
        seen.push_back(tag.name);
        const std::string shown = "<lora:" + excerpt(tag.name, 80) + ">";
        ModelFile found;
        try {
            found = findLoraFile(tag.name, modelsFolders);
        } catch (const ValidationError& e) {
            imported.unmapped.push_back(UnmappedSetting{
                shown, "names no LoRA found here, so a run refuses it: " + withoutField(e.what(), "lora")});
            continue;
        }
        const std::string name = hashName(tag.name);
        const auto given = std::find_if(imported.loraHashes.begin(), imported.loraHashes.end(),
                                        [&name](const auto& entry) { return entry.first == name; });
        if (given == imported.loraHashes.end() || given->second.empty()) continue;
        try {
            const LoraFile file = LoraFile::open(found.path);
            if (file.a1111ShortHash() != given->second)
                imported.unmapped.push_back(
                    UnmappedSetting{shown, "is " + shownPath(found.path) + " here (hash " + file.a1111ShortHash() +
                                               "); the image was made with hash " + excerpt(given->second, 40) +
                                               ": another file or version, so the image may differ"});
        } catch (const LoraFileError& e) {
            imported.unmapped.push_back(
                UnmappedSetting{shown, "cannot be read, so a run refuses it: " + withoutField(e.what(), "lora")});
        }
    }

    // Each ControlNet unit's model, looked up as a run looks it up (core/run/ControlNetModelFile.h):
    // one found nowhere is listed; the unit stays, named, and a run refuses it until the file is there.
    for (std::size_t i = 0; i < config.controlNets.size(); ++i) {
        const std::string& model = config.controlNets[i].model;
        if (model.empty()) continue;
        try {
            (void)findModelFile(controlNetKind(), model, modelsFolders);
        } catch (const ValidationError& e) {
            imported.unmapped.push_back(UnmappedSetting{
                "ControlNet " + std::to_string(i) + ": " + excerpt(model, 80),
                "names no ControlNet found here, so a run refuses it: " + withoutField(e.what(), "controlnet")});
        }
    }

    checkTextualInversions(imported);

    if (std::find(imported.fields.begin(), imported.fields.end(), "vae") == imported.fields.end() || config.vae.empty())
        return;
    const std::string shown = "VAE: " + excerpt(config.vae, 80);
    ModelFile found;
    try {
        found = findVaeFile(config.vae, modelsFolders);
    } catch (const ValidationError& e) {
        imported.unmapped.push_back(UnmappedSetting{
            shown, "is not applied: the model's own VAE is used (" + withoutField(e.what(), "vae") + ")"});
        config.vae.clear();
        std::erase(imported.fields, std::string("vae"));
        return;
    }
    config.vae = found.path;
    std::error_code ec;
    if (imported.vaeHash.empty() || !std::filesystem::is_regular_file(found.path, ec)) return;
    const std::string hash = fileSha256(found.path);
    if (hash.rfind(imported.vaeHash, 0) != 0)
        imported.unmapped.push_back(UnmappedSetting{
            "VAE hash: " + excerpt(imported.vaeHash, 20),
            "is not that of " + shownPath(found.path) + " (" + hash.substr(0, 10) + "): the image may differ"});
}

std::string jpegParametersText(std::string_view bytes) {
    if (bytes.size() < 4 || static_cast<unsigned char>(bytes[0]) != 0xff ||
        static_cast<unsigned char>(bytes[1]) != 0xd8)
        return {};
    const ByteView view(bytes, true);
    std::string comment;
    std::size_t at = 2;
    while (at + 4 <= bytes.size()) {
        if (static_cast<unsigned char>(bytes[at]) != 0xff) return comment;  // not a marker: damaged
        const auto marker = static_cast<unsigned char>(bytes[at + 1]);
        if (marker == 0xff) {  // fill byte
            ++at;
            continue;
        }
        if (marker == 0xd8 || marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {  // no length
            at += 2;
            continue;
        }
        if (marker == 0xda || marker == 0xd9) break;  // the image data (or its end): no metadata after it
        const std::uint32_t length = *view.u16(at + 2);
        if (length < 2) break;
        const std::string_view payload = view.slice(at + 4, length - 2);
        if (payload.size() != length - 2) break;
        if (marker == 0xe1 && payload.substr(0, 6) == std::string_view("Exif\0\0", 6)) {
            std::string text = exifUserComment(payload);
            if (!text.empty()) return text;
        } else if (marker == 0xfe && comment.empty()) {
            comment = toValidUtf8(payload);
        }
        at += 2 + length;
    }
    return comment;
}

ImportedParameters parametersFromImage(const std::string& path, const RunConfig& base,
                                       const std::string& windowModelsFolder) {
    checkPathText(kField, path, "the image path");
    ImageFile file;
    try {
        // As a start image is read: a regular file within the limits, recognised by content.
        file = readImageFile(path);
    } catch (const InitImageError& e) {
        throw InputFileError(std::string(kField), std::string(kField) + ": " + excerpt(e.what(), 400));
    }
    std::string text, source;
    if (file.header.format == ImageHeader::Format::Jpeg) {
        text = jpegParametersText(file.bytes);
        source = "JPEG EXIF UserComment";
        if (text.empty())
            refuse(path,
                   "the JPEG has no EXIF UserComment and no comment (A1111 writes its parameters there): no "
                   "settings to read");
    } else {
        PngFile png;
        try {
            png = readPng(path);
        } catch (const PngError& e) {
            throw InputFileError(std::string(kField), std::string(kField) + ": " + excerpt(e.what(), 400));
        }
        // As tessera-cli --params-from: "parameters" (A1111, Tessera), else ComfyUI's "prompt".
        text = png.text("parameters");
        source = "PNG parameters";
        if (text.empty()) {
            const std::string comfy = png.text("prompt");
            if (comfy.empty())
                refuse(path,
                       "the PNG has no 'parameters' text chunk (A1111, Tessera) and no 'prompt' chunk (ComfyUI): no "
                       "settings to read");
            if (comfy.size() > input_limits::kJsonBytes)
                refuse(path, "its 'prompt' chunk is " + std::to_string(comfy.size()) + " bytes; at most " +
                                 std::to_string(input_limits::kJsonBytes) + " are read");
            ImportedParameters imported;
            imported.config = base;
            imported.source = "ComfyUI prompt";
            try {
                const ImportedSettings settings = applyComfyPrompt(comfy, imported.config, kField);
                imported.fields = settings.fields;
                imported.unmapped = settings.unmapped;
            } catch (const InputFileError& e) {
                const std::string what = e.what(), prefix = std::string(kField) + ": ";
                refuse(path, what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
            }
            checkModelFiles(imported, windowModelsFolders(imported.config.model, windowModelsFolder));
            return imported;
        }
    }
    if (text.size() > input_limits::kJsonBytes)
        refuse(path, "its parameters are " + std::to_string(text.size()) + " bytes; at most " +
                         std::to_string(input_limits::kJsonBytes) + " are read");
    ImportedParameters imported = applyText(text, base, source);
    checkModelFiles(imported, windowModelsFolders(imported.config.model, windowModelsFolder));
    return imported;
}

ImportedParameters parametersFromText(std::string_view text, const RunConfig& base) {
    if (text.size() > input_limits::kJsonBytes)
        throw InputFileError(std::string(kField), std::string(kField) + ": the text is " + std::to_string(text.size()) +
                                                      " bytes; at most " + std::to_string(input_limits::kJsonBytes) +
                                                      " are read");
    const std::string valid = toValidUtf8(text);
    if (valid.find_first_not_of(" \t\r\n") == std::string::npos)
        throw InputFileError(std::string(kField), std::string(kField) +
                                                      ": the clipboard holds no text (copy A1111's PNG Info text, or a "
                                                      "run's parameters from the history)");
    return applyText(valid, base, "text");
}

}  // namespace tessera
