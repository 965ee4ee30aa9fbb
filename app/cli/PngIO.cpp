#include "app/cli/PngIO.h"

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include <unistd.h>

#include <png.h>

#include "app/cli/ImageLimits.h"
#include "core/base/BoundedInput.h"
#include "core/base/UnicodeText.h"
#include "core/run/Infotext.h"
#include "core/run/OutputSet.h"

namespace tessera {

namespace {

// The largest chunk libpng may allocate: a run PNG's manifest (iTXt) is a few hundred KB even
// for thousands of tiles; 64 MiB leaves room and refuses the claims of hostile files.
constexpr png_alloc_size_t kMaxPngChunkBytes = 64u << 20;
// Everything libpng allocates while reading one file (its structs, row buffers, the chunk read
// buffer and every text chunk it keeps, decompressed): a file of a thousand 64 KB zTXt chunks,
// each inflating to 64 MiB, would otherwise ask for 64 GB. The pixels are ours, not counted.
constexpr std::size_t kMaxPngReadBytes = 256u << 20;

// libpng's allocator while reading, counting against kMaxPngReadBytes. Each block carries its
// size in front (max_align_t keeps the block aligned). A refused allocation is libpng's
// "out of memory": a text chunk is then dropped with a warning, anything else fails the read.
struct PngMemoryBudget {
    std::size_t used = 0;
};

png_voidp budgetMalloc(png_structp png, png_alloc_size_t size) {
    auto* budget = static_cast<PngMemoryBudget*>(png_get_mem_ptr(png));
    constexpr std::size_t kHeader = alignof(std::max_align_t);
    if (size > kMaxPngReadBytes - budget->used) return nullptr;
    auto* block = static_cast<unsigned char*>(std::malloc(size + kHeader));
    if (!block) return nullptr;
    std::memcpy(block, &size, sizeof size);
    budget->used += size;
    return block + kHeader;
}

void budgetFree(png_structp png, png_voidp pointer) {
    if (!pointer) return;
    auto* budget = static_cast<PngMemoryBudget*>(png_get_mem_ptr(png));
    unsigned char* block = static_cast<unsigned char*>(pointer) - alignof(std::max_align_t);
    std::size_t size = 0;
    std::memcpy(&size, block, sizeof size);
    budget->used -= size;
    std::free(block);
}

// UTF-8 text as Latin-1 bytes when every character is U+0000..U+00FF (what Pillow's add_text
// stores as tEXt), else nullopt.
std::optional<std::string> latin1Of(std::string_view utf8) {
    std::string out;
    out.reserve(utf8.size());
    for (char32_t c : unicode::decodeUtf8(utf8)) {
        if (c > 0xFF) return std::nullopt;
        out.push_back(static_cast<char>(c));
    }
    return out;
}

std::string utf8OfLatin1(std::string_view latin1) {
    std::string out;
    out.reserve(latin1.size());
    for (char c : latin1) unicode::appendUtf8(out, static_cast<unsigned char>(c));
    return out;
}

// libpng reports errors by longjmp. The functions below that call setjmp keep every
// object with a destructor outside the jump's reach (created before setjmp, never
// re-created after), and report through this POD buffer.
struct PngErrorSink {
    char message[256] = {};
};

void onPngError(png_structp png, png_const_charp message) {
    auto* sink = static_cast<PngErrorSink*>(png_get_error_ptr(png));
    if (sink) std::snprintf(sink->message, sizeof sink->message, "%s", message ? message : "unknown libpng error");
    png_longjmp(png, 1);
}

void onPngWarning(png_structp, png_const_charp) {}  // warnings (e.g. bad sRGB profile) are not fatal

void appendBytes(png_structp png, png_bytep data, png_size_t length) {
    auto* out = static_cast<std::vector<unsigned char>*>(png_get_io_ptr(png));
    out->insert(out->end(), data, data + length);
}

void flushNothing(png_structp) {}

bool isAscii(const std::string& s) {
    for (unsigned char c : s)
        if (c >= 0x80) return false;
    return true;
}

// Encodes into `out`; returns false with sink->message set on failure.
bool encode(const Rgb8Image& image, std::vector<png_text>& texts, std::vector<png_bytep>& rows,
            std::vector<unsigned char>& out, PngErrorSink& sink) {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, onPngError, onPngWarning);
    if (!png) {
        std::snprintf(sink.message, sizeof sink.message, "out of memory");
        return false;
    }
    png_infop info = png_create_info_struct(png);
    if (!info || setjmp(png_jmpbuf(png))) {
        if (!info) std::snprintf(sink.message, sizeof sink.message, "out of memory");
        png_destroy_write_struct(&png, info ? &info : nullptr);
        return false;
    }
    png_set_write_fn(png, &out, appendBytes, flushNothing);
    png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
                 PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (!texts.empty()) png_set_text(png, info, texts.data(), static_cast<int>(texts.size()));
    png_write_info(png, info);
    png_write_image(png, rows.data());
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return true;
}

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

struct DecodeState {
    png_uint_32 width = 0, height = 0;
};

bool decode(std::FILE* file, std::vector<unsigned char>& pixels, std::vector<png_bytep>& rows,
            std::vector<PngTextChunk>& texts, DecodeState& state, PngErrorSink& sink) {
    PngMemoryBudget budget;
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &sink, onPngError, onPngWarning, &budget,
                                               budgetMalloc, budgetFree);
    if (!png) {
        std::snprintf(sink.message, sizeof sink.message, "out of memory");
        return false;
    }
    png_infop info = png_create_info_struct(png);
    png_infop endInfo = info ? png_create_info_struct(png) : nullptr;
    if (!info || !endInfo || setjmp(png_jmpbuf(png))) {
        if (!info || !endInfo) std::snprintf(sink.message, sizeof sink.message, "out of memory");
        png_destroy_read_struct(&png, info ? &info : nullptr, endInfo ? &endInfo : nullptr);
        return false;
    }
    // Bounds before libpng allocates from what the file claims: a 69-byte file may claim
    // 100000x100000 pixels, a 200-byte one a 1.9 GB text chunk.
    png_set_user_limits(png, 65535, 65535);
    png_set_chunk_malloc_max(png, kMaxPngChunkBytes);
    png_init_io(png, file);
    png_read_info(png, info);
    if (static_cast<long long>(png_get_image_width(png, info)) * png_get_image_height(png, info) >
        kMaxInitImagePixels) {
        std::snprintf(sink.message, sizeof sink.message, "the image is %ux%u; at most %lld megapixels are read",
                      png_get_image_width(png, info), png_get_image_height(png, info), kMaxInitImagePixels / 1000000);
        png_destroy_read_struct(&png, &info, &endInfo);
        return false;
    }
    png_set_expand(png);  // palette -> RGB, grey < 8 bit -> 8 bit, tRNS -> alpha
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    state.width = png_get_image_width(png, info);
    state.height = png_get_image_height(png, info);
    if (png_get_rowbytes(png, info) != static_cast<png_size_t>(state.width) * 3) {
        std::snprintf(sink.message, sizeof sink.message, "unexpected row layout after conversion to RGB8");
        png_destroy_read_struct(&png, &info, &endInfo);
        return false;
    }
    pixels.resize(static_cast<std::size_t>(state.width) * state.height * 3);
    rows.resize(state.height);
    for (png_uint_32 y = 0; y < state.height; ++y)
        rows[y] = pixels.data() + static_cast<std::size_t>(y) * state.width * 3;
    png_read_image(png, rows.data());
    png_read_end(png, endInfo);
    for (png_infop source : {info, endInfo}) {
        png_textp chunks = nullptr;
        const int count = png_get_text(png, source, &chunks, nullptr);
        for (int i = 0; i < count; ++i) {
            // tEXt and zTXt hold Latin-1, iTXt UTF-8 (made valid: "\xNN" for a bad byte).
            const bool international = chunks[i].compression >= PNG_ITXT_COMPRESSION_NONE;
            const std::size_t length = international ? chunks[i].itxt_length : chunks[i].text_length;
            const std::string_view raw = chunks[i].text ? std::string_view(chunks[i].text, length) : std::string_view();
            texts.push_back(PngTextChunk{chunks[i].key ? utf8OfLatin1(chunks[i].key) : std::string(),
                                         international ? toValidUtf8(raw) : utf8OfLatin1(raw), international});
        }
    }
    png_destroy_read_struct(&png, &info, &endInfo);
    return true;
}

}  // namespace

std::string firstOverlongPngChunk(std::int64_t size, const std::function<bool(std::int64_t, unsigned char*)>& read8) {
    std::int64_t at = 8;
    unsigned char header[8];
    while (at + 8 <= size) {
        if (!read8(at, header)) return {};
        const std::uint32_t length = png_get_uint_32(header);
        const char name[5] = {char(header[4]), char(header[5]), char(header[6]), char(header[7]), 0};
        const std::int64_t end = at + 12 + static_cast<std::int64_t>(length);  // length, name, data, CRC
        if (end > size)
            return "chunk " + excerpt(name) + " claims " + std::to_string(length) + " bytes but the file has " +
                   std::to_string(std::max<std::int64_t>(0, size - at - 12)) +
                   " after its header (truncated or corrupt)";
        if (std::memcmp(name, "IEND", 4) == 0) break;
        at = end;
    }
    return {};
}

std::string PngFile::text(const std::string& keyword) const {
    for (const auto& chunk : texts)
        if (chunk.keyword == keyword) return chunk.text;
    return {};
}

std::string encodePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts) {
    if (image.width <= 0 || image.height <= 0 ||
        image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3)
        throw PngError(path + ": the image buffer does not match " + std::to_string(image.width) + "x" +
                       std::to_string(image.height) + " RGB");
    // Valid UTF-8 before libpng sees it: iTXt must be UTF-8, and escaped bytes are ASCII. A
    // chunk that is not `international` is stored as Pillow's add_text stores it: tEXt in
    // Latin-1 when every character has a Latin-1 byte, else uncompressed iTXt.
    std::vector<std::string> storedTexts;
    std::vector<bool> asTExt;
    storedTexts.reserve(texts.size());
    for (const auto& t : texts) {
        std::string text = toValidUtf8(t.text);
        std::optional<std::string> latin1 = t.international ? std::nullopt : latin1Of(text);
        asTExt.push_back(latin1.has_value());
        storedTexts.push_back(latin1 ? std::move(*latin1) : std::move(text));
    }
    std::vector<png_text> chunks;
    chunks.reserve(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const PngTextChunk& t = texts[i];
        const std::string& text = storedTexts[i];
        if (t.keyword.empty() || t.keyword.size() > 79 || !isAscii(t.keyword))
            throw PngError(path + ": text keyword " + inQuotes(t.keyword) + " must be 1 to 79 ASCII characters");
        png_text chunk{};
        chunk.key = const_cast<char*>(t.keyword.c_str());
        chunk.text = const_cast<char*>(text.c_str());
        if (!asTExt[i]) {
            chunk.compression =
                t.international && text.size() > 1024 ? PNG_ITXT_COMPRESSION_zTXt : PNG_ITXT_COMPRESSION_NONE;
            chunk.itxt_length = text.size();
            chunk.lang = const_cast<char*>("");
            chunk.lang_key = const_cast<char*>("");
        } else {
            chunk.compression = PNG_TEXT_COMPRESSION_NONE;
            chunk.text_length = text.size();
        }
        chunks.push_back(chunk);
    }
    std::vector<png_bytep> rows(static_cast<std::size_t>(image.height));
    for (int y = 0; y < image.height; ++y)
        rows[y] = const_cast<png_bytep>(image.pixels.data()) + static_cast<std::size_t>(y) * image.width * 3;
    std::vector<unsigned char> bytes;
    PngErrorSink sink;
    if (!encode(image, chunks, rows, bytes, sink)) throw PngError(path + ": cannot encode PNG: " + sink.message);
    return std::string(bytes.begin(), bytes.end());
}

void writePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts) {
    const std::string bytes = encodePng(path, image, texts);
    try {
        writeFileAtomically(path, bytes);
    } catch (const std::runtime_error& e) {
        throw PngError(e.what());
    }
}

namespace {
std::vector<PngTextChunk> runTexts(const std::string& parameters, const std::string& manifestJson) {
    return {PngTextChunk{"parameters", parameters, false}, PngTextChunk{"tessera-manifest", manifestJson, true}};
}
}  // namespace

std::string encodeRunPng(const std::string& path, const Rgb8Image& image, const RunConfig& config,
                         const std::string& manifestJson) {
    return encodePng(path, image, runTexts(parametersLine(config), manifestJson));
}

std::string encodeRunPng(const std::string& path, const Rgb8Image& image, const RunRecord& record,
                         const std::string& manifestJson) {
    return encodePng(path, image, runTexts(infotext(record.config, infotextExtras(record)), manifestJson));
}

PngFile readPng(const std::string& path) {
    // Opened as every untrusted file is (core/base/BoundedInput.h): a FIFO or device is refused
    // without blocking, a file over kMaxInitFileBytes unread.
    std::unique_ptr<std::FILE, FileCloser> file;
    try {
        constexpr char kField[] = "png";
        const BoundedFile bounded = BoundedFile::open(path, kField, kMaxInitFileBytes);
        const int fd = ::dup(bounded.fd());
        if (fd >= 0) file.reset(::fdopen(fd, "rb"));
        if (!file) {
            if (fd >= 0) ::close(fd);
            throw PngError(path + ": cannot open: " + std::strerror(errno));
        }
    } catch (const InputFileError& e) {
        throw PngError(std::string(e.what()).substr(std::strlen("png: ")));  // "'path': why"
    }
    unsigned char signature[8] = {};
    if (std::fread(signature, 1, 8, file.get()) != 8 || png_sig_cmp(signature, 0, 8) != 0)
        throw PngError(path + ": not a PNG file");
    std::FILE* f = file.get();
    long size = -1;
    if (std::fseek(f, 0, SEEK_END) == 0) size = std::ftell(f);
    const std::string bad = firstOverlongPngChunk(size, [f](std::int64_t at, unsigned char* out) {
        return std::fseek(f, static_cast<long>(at), SEEK_SET) == 0 && std::fread(out, 1, 8, f) == 8;
    });
    if (!bad.empty()) throw PngError(path + ": " + bad);
    std::rewind(file.get());
    PngFile result;
    std::vector<png_bytep> rows;
    DecodeState state;
    PngErrorSink sink;
    if (!decode(file.get(), result.image.pixels, rows, result.texts, state, sink))
        throw PngError(path + ": cannot decode PNG: " + sink.message);
    result.image.width = static_cast<int>(state.width);
    result.image.height = static_cast<int>(state.height);
    return result;
}

}  // namespace tessera
