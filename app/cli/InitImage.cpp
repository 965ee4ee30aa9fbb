#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <png.h>

#include "core/base/BoundedInput.h"

// JPEG decoding needs libjpeg-turbo at link time (CMake: find_package(JPEG), JPEG::JPEG and
// TESSERA_HAVE_JPEG=1 on tessera_app). Without it a JPEG is refused with a clear message.
#if defined(TESSERA_HAVE_JPEG) && TESSERA_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#define TESSERA_INIT_JPEG 1
#else
#define TESSERA_INIT_JPEG 0
#endif

namespace tessera {

namespace {

namespace fs = std::filesystem;

// Paths are quoted as BoundedFile quotes them: a short escaped excerpt.
[[noreturn]] void fail(const std::string& path, const std::string& problem) {
    throw InitImageError(shownPath(path) + " " + problem);
}

constexpr char kField[] = "init";

// BoundedFile's "init: 'path': why" as this file's "'path': why".
[[noreturn]] void failFile(const InputFileError& e) {
    throw InitImageError(std::string(e.what()).substr(sizeof kField + 1));
}

std::string firstBytesText(std::string_view bytes);

std::string pixelsText(long long width, long long height) {
    return std::to_string(width) + "x" + std::to_string(height);
}

void checkPixelCount(const std::string& path, long long width, long long height) {
    if (width <= 0 || height <= 0) fail(path, "has no pixels (" + pixelsText(width, height) + ")");
    if (width * height > kMaxInitImagePixels)
        fail(path, "is " + pixelsText(width, height) + " pixels, more than the " +
                       std::to_string(kMaxInitImagePixels / 1000000) + " megapixels a start image may have");
}

// The file opened without blocking and bounded (core/base/BoundedInput.h); empty files refused.
BoundedFile openImageFile(const std::string& path) {
    try {
        BoundedFile file = BoundedFile::open(path, kField, kMaxInitFileBytes);
        if (file.size() == 0) fail(path, "is empty (0 bytes)");
        return file;
    } catch (const InputFileError& e) {
        failFile(e);
    }
}

std::string readWholeFile(const BoundedFile& file) {
    try {
        return file.readAt(0, static_cast<std::size_t>(file.size()));
    } catch (const InputFileError& e) {
        failFile(e);
    }
}

bool isPng(std::string_view b) {
    static constexpr char kSignature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
    return b.size() >= 8 && std::equal(kSignature, kSignature + 8, b.begin());
}

bool isJpeg(std::string_view b) { return b.size() >= 3 && b.substr(0, 3) == std::string_view("\xff\xd8\xff", 3); }

unsigned bigEndian(std::string_view bytes, std::size_t at, int count) {
    unsigned value = 0;
    for (int i = 0; i < count; ++i)
        value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
    return value;
}

// PNG: the signature, then the IHDR chunk, which must come first: width and height at bytes 16..23.
void readPngHeader(const std::string& path, const std::string& start, ImageHeader& header) {
    if (start.size() < 24 || start.compare(12, 4, "IHDR") != 0)
        fail(path, "is not a readable PNG: it does not start with an IHDR header chunk");
    const unsigned width = bigEndian(start, 16, 4), height = bigEndian(start, 20, 4);
    if (width > 0x7fffffffu || height > 0x7fffffffu)
        fail(path, "is not a readable PNG: its header gives " + std::to_string(width) + "x" + std::to_string(height));
    header.width = static_cast<int>(width);
    header.height = static_cast<int>(height);
}

// JPEG: walks the marker segments after SOI (each one's length, no payload read) to the frame
// header (SOF0..SOF15 but DHT, JPG and DAC), whose height and width follow the precision byte.
// Real files have a few dozen segments before it (APPn, DQT, DHT); 4096 bounds the walk.
void readJpegHeader(const std::string& path, const BoundedFile& file, ImageHeader& header) {
    std::uint64_t at = 2;
    for (int segment = 0; segment < 4096; ++segment) {
        std::string bytes = file.readAt(at, 2);
        if (!bytes.empty() && bytes[0] != '\xff') {
            // Extraneous bytes before a marker: libjpeg skips them (with a warning); so do we, within 64 KiB.
            const std::size_t next = file.readAt(at, 65536).find('\xff');
            if (next == std::string::npos) fail(path, "is not a readable JPEG: no marker where one should be");
            at += next;
            bytes = file.readAt(at, 2);
        }
        for (int fill = 0; fill < 64 && bytes == "\xff\xff"; ++fill)  // fill bytes before a marker
            bytes = file.readAt(++at, 2);
        if (bytes.size() < 2) fail(path, "is not a readable JPEG: no frame header before its end or its data");
        const unsigned marker = static_cast<unsigned char>(bytes[1]);
        if ((marker >= 0xd0 && marker <= 0xd7) || marker == 0x01) {  // standalone markers: no length
            at += 2;
            continue;
        }
        if (marker == 0xd9 || marker == 0xda)
            fail(path, "is not a readable JPEG: no frame header before its end or its data");
        const std::string body = file.readAt(at + 2, 7);
        if (body.size() < 2) fail(path, "is not a readable JPEG: it ends inside a marker segment");
        const unsigned length = bigEndian(body, 0, 2);
        if (length < 2) fail(path, "is not a readable JPEG: a marker segment has length " + std::to_string(length));
        const bool frame = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
        if (frame) {
            if (body.size() < 7 || length < 8) fail(path, "is not a readable JPEG: its frame header is cut short");
            header.height = static_cast<int>(bigEndian(body, 3, 2));
            header.width = static_cast<int>(bigEndian(body, 5, 2));
            return;
        }
        at += 2 + length;
    }
    fail(path, "is not a readable JPEG: no frame header within its first 4096 marker segments");
}

ImageHeader headerOf(const std::string& path, const BoundedFile& file) {
    ImageHeader header;
    header.fileBytes = file.size();
    try {
        const std::string start = file.readAt(0, 24);
        if (isPng(start)) {
            header.format = ImageHeader::Format::Png;
            readPngHeader(path, start, header);
        } else if (isJpeg(start)) {
            header.format = ImageHeader::Format::Jpeg;
            readJpegHeader(path, file, header);
        } else {
            fail(path, "is neither a PNG nor a JPEG file (it starts with bytes " + firstBytesText(start) + ")");
        }
    } catch (const InputFileError& e) {
        failFile(e);
    }
    checkPixelCount(path, header.width, header.height);
    return header;
}

// libpng's simplified API: errors come back as a message, no longjmp reaches our frames.
// Grey, palette, 16-bit and alpha are converted by libpng; alpha is composited onto the
// background given to png_image_finish_read.
Rgb8Image decodePng(const std::string& path, const std::string& bytes) {
    png_image png;
    std::memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    const std::string overlong =
        firstOverlongPngChunk(static_cast<std::int64_t>(bytes.size()), [&bytes](std::int64_t at, unsigned char* out) {
            std::memcpy(out, bytes.data() + at, 8);  // at + 8 <= size: checked by the walk
            return true;
        });
    if (!overlong.empty()) fail(path, "is a damaged or truncated PNG: " + overlong);
    if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
        fail(path, std::string("is not a readable PNG: ") + png.message);
    if (static_cast<long long>(png.width) * png.height > kMaxInitImagePixels || png.width == 0 || png.height == 0) {
        const long long w = png.width, h = png.height;
        png_image_free(&png);
        checkPixelCount(path, w, h);
    }
    png.format = PNG_FORMAT_RGB;
    // A 16-bit file without gAMA/sRGB is taken as sRGB-encoded, as image editors write them,
    // not as linear light (libpng's default, which would brighten the mid-tones).
    png.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    Rgb8Image image;
    image.width = static_cast<int>(png.width);
    image.height = static_cast<int>(png.height);
    image.pixels.resize(PNG_IMAGE_SIZE(png));
    const png_color white{255, 255, 255};
    if (!png_image_finish_read(&png, &white, image.pixels.data(), 0, nullptr)) {
        const std::string message = png.message;
        png_image_free(&png);
        fail(path, "is a damaged or truncated PNG: " + message);
    }
    return image;
}

#if TESSERA_INIT_JPEG

// libjpeg reports fatal errors by calling error_exit, which must not return: we longjmp
// back into decodeJpegPixels. That function is plain C in C++ clothing: only trivially
// destructible locals live between its setjmp and any longjmp ([csetjmp.syn]), and all it
// produces goes through the JpegPixels it is given.
struct JpegErrorManager {
    jpeg_error_mgr pub;  // first: libjpeg sees only this part
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool damaged;
};

struct JpegPixels {
    unsigned char* data;  // malloc'ed width * height * components, or null
    int width, height, components;
    bool cmyk, adobeInverted, damaged, tooLarge;
    char message[JMSG_LENGTH_MAX];
};

void onJpegError(j_common_ptr cinfo) {
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
}

// Warnings are not fatal to libjpeg: a file cut short, or damaged entropy-coded data, is
// filled with grey and "decodes". Those warnings stop the decode at once (as an error does)
// and the image is refused. Other warnings (extra bytes between markers, an unknown Adobe
// transform or JFIF revision, a bad ICC marker) leave the pixels intact and are common in
// real files.
bool isDamageWarning(j_common_ptr cinfo, const char* message) {
    switch (cinfo->err->msg_code) {
        case JWRN_JPEG_EOF:
        case JWRN_HIT_MARKER:
        case JWRN_HUFF_BAD_CODE:
        case JWRN_MUST_RESYNC:
        case JWRN_BOGUS_PROGRESSION:
            return true;
        case JWRN_BOGUS_ICC:
            return false;
        default:
            break;
    }
    // "Corrupt JPEG data: bad arithmetic code" has no code in every libjpeg build.
    return std::strncmp(message, "Corrupt JPEG data: bad ", 23) == 0;
}

void onJpegMessage(j_common_ptr cinfo, int level) {
    if (level >= 0) return;  // trace messages
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    ++cinfo->err->num_warnings;
    char message[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, message);
    if (!isDamageWarning(cinfo, message)) return;
    err->damaged = true;
    std::memcpy(err->message, message, sizeof err->message);
    std::longjmp(err->jump, 1);
}

bool decodeJpegPixels(const unsigned char* bytes, unsigned long size, JpegPixels* out) {
    jpeg_decompress_struct cinfo;
    JpegErrorManager err;
    std::memset(&err, 0, sizeof err);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = onJpegError;
    err.pub.emit_message = onJpegMessage;
    out->data = nullptr;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        std::free(out->data);
        out->data = nullptr;
        out->damaged = err.damaged;
        std::memcpy(out->message, err.message, sizeof out->message);
        return false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, bytes, size);
    jpeg_read_header(&cinfo, TRUE);
    out->cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    out->adobeInverted = cinfo.saw_Adobe_marker;
    // libjpeg converts grey and YCbCr to RGB itself, but not CMYK: that is done below.
    cinfo.out_color_space = out->cmyk ? JCS_CMYK : JCS_RGB;
    out->width = static_cast<int>(cinfo.image_width);
    out->height = static_cast<int>(cinfo.image_height);
    if (static_cast<long long>(cinfo.image_width) * cinfo.image_height > kMaxInitImagePixels) {
        out->tooLarge = true;
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    jpeg_start_decompress(&cinfo);
    out->components = cinfo.output_components;
    const std::size_t stride = static_cast<std::size_t>(cinfo.output_width) * cinfo.output_components;
    out->data = static_cast<unsigned char*>(std::malloc(stride * cinfo.output_height));
    if (!out->data) {
        jpeg_destroy_decompress(&cinfo);
        std::snprintf(out->message, sizeof out->message, "out of memory");
        return false;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = out->data + stride * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return true;
}

Rgb8Image decodeJpeg(const std::string& path, const std::string& bytes) {
    JpegPixels pixels;
    std::memset(&pixels, 0, sizeof pixels);
    const bool ok = decodeJpegPixels(reinterpret_cast<const unsigned char*>(bytes.data()),
                                     static_cast<unsigned long>(bytes.size()), &pixels);
    const std::unique_ptr<unsigned char, decltype(&std::free)> owned(pixels.data, &std::free);
    if (pixels.tooLarge) checkPixelCount(path, pixels.width, pixels.height);
    if (pixels.damaged) fail(path, std::string("is a damaged or truncated JPEG: ") + pixels.message);
    if (!ok) fail(path, std::string("is not a readable JPEG: ") + pixels.message);
    checkPixelCount(path, pixels.width, pixels.height);

    Rgb8Image image{pixels.width, pixels.height, {}};
    const std::size_t count = static_cast<std::size_t>(image.width) * image.height;
    image.pixels.resize(count * 3);
    const unsigned char* src = owned.get();
    if (!pixels.cmyk) {
        std::copy(src, src + count * 3, image.pixels.begin());
        return image;
    }
    // Adobe's CMYK JPEGs store inverted ink (255 = none); others store ink amounts.
    for (std::size_t i = 0; i < count; ++i) {
        const unsigned char* p = src + 4 * i;
        const int k = pixels.adobeInverted ? p[3] : 255 - p[3];
        for (int c = 0; c < 3; ++c) {
            const int v = pixels.adobeInverted ? p[c] : 255 - p[c];
            image.pixels[3 * i + c] = static_cast<unsigned char>((v * k + 127) / 255);
        }
    }
    return image;
}

#else

Rgb8Image decodeJpeg(const std::string& path, const std::string&) {
    fail(path,
         "is a JPEG, but this build of Tessera has no JPEG support (libjpeg-turbo was not found "
         "at build time); convert it to PNG");
}

#endif

std::string firstBytesText(std::string_view bytes) {
    std::string text;
    char hex[4];
    for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
        std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(bytes[i]));
        text += (i ? " " : "") + std::string(hex);
    }
    return text;
}

// One output position of a separable resampling: weights over source indices first..first+n-1.
struct Taps {
    int first = 0;
    std::vector<float> weights;
};

// Catmull-Rom (Keys' cubic convolution with a = -0.5): interpolates, reproduces linear ramps.
double catmullRom(double x) {
    x = std::abs(x);
    if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0;
}

std::vector<Taps> axisTaps(int in, int out) {
    std::vector<Taps> taps(static_cast<std::size_t>(out));
    const double scale = static_cast<double>(in) / out;
    for (int o = 0; o < out; ++o) {
        Taps& t = taps[static_cast<std::size_t>(o)];
        if (in == out) {
            t.first = o;
            t.weights = {1.0f};
        } else if (in > out) {
            // Area average: output pixel o covers source [o*scale, (o+1)*scale).
            const double lo = o * scale, hi = (o + 1) * scale;
            t.first = static_cast<int>(std::floor(lo));
            const int last = std::min(in - 1, static_cast<int>(std::ceil(hi)) - 1);
            for (int i = t.first; i <= last; ++i)
                t.weights.push_back(
                    static_cast<float>((std::min<double>(hi, i + 1) - std::max<double>(lo, i)) / scale));
        } else {
            // Pixel centres aligned: output centre o + 0.5 sits at source (o + 0.5) * scale.
            const double centre = (o + 0.5) * scale - 0.5;
            const int base = static_cast<int>(std::floor(centre));
            t.first = base - 1;
            for (int i = base - 1; i <= base + 2; ++i) t.weights.push_back(static_cast<float>(catmullRom(centre - i)));
        }
        float sum = 0;
        for (float w : t.weights) sum += w;
        for (float& w : t.weights) w /= sum;
    }
    return taps;
}

}  // namespace

ImageHeader readImageHeader(const std::string& path) { return headerOf(path, openImageFile(path)); }

std::optional<StartImageSize> checkStartImageHeader(const RunConfig& config, int modelChannels) {
    if (config.initImage.empty()) return std::nullopt;
    if (modelChannels != 1 && modelChannels != 3)
        throw ValidationError("init", "init: image-to-image needs a model with 1 or 3 input channels; this one has " +
                                          std::to_string(modelChannels));
    try {
        const ImageHeader header = readImageHeader(config.initImage);
        return StartImageSize{header.width, header.height, header.fileBytes};
    } catch (const InitImageError& e) {
        throw ValidationError("init", std::string("init: ") + e.what());
    }
}

ImageFile readImageFile(const std::string& path) {
    const BoundedFile file = openImageFile(path);
    ImageFile read;
    read.header = headerOf(path, file);
    read.bytes = readWholeFile(file);
    return read;
}

Rgb8Image decodeImage(const std::string& path, const ImageFile& file) {
    return file.header.format == ImageHeader::Format::Png ? decodePng(path, file.bytes) : decodeJpeg(path, file.bytes);
}

Rgb8Image decodeImageFile(const std::string& path) { return decodeImage(path, readImageFile(path)); }

int upscaledCanvasSide(int side, double factor) { return std::max(8, static_cast<int>(side * factor) / 8 * 8); }

ImageTensor resampleToModelSpace(const Rgb8Image& image, int width, int height, int channels) {
    if (channels != 1 && channels != 3)
        throw std::invalid_argument("init: " + std::to_string(channels) + " channels are not supported (1 or 3)");
    if (width <= 0 || height <= 0) throw std::invalid_argument("init: cannot resample to " + pixelsText(width, height));
    if (image.width <= 0 || image.height <= 0 ||
        image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3)
        throw std::invalid_argument("init: the decoded image is empty or its size does not match " +
                                    pixelsText(image.width, image.height));
    const int inW = image.width, inH = image.height;
    const std::vector<Taps> across = axisTaps(inW, width);
    const std::vector<Taps> down = axisTaps(inH, height);
    ImageTensor tensor;
    tensor.channels = channels;
    tensor.height = height;
    tensor.width = width;
    const std::size_t plane = static_cast<std::size_t>(width) * height;
    tensor.data.assign(plane * channels, 0.0f);
    // 0..255 -> [-1, 1], as fromRgb8 (v / 255 * 2 - 1), without rounding to 8 bits.
    const auto store = [&tensor, plane, channels, width](int x, int y, float(&acc)[3]) {
        for (int c = 0; c < 3; ++c) acc[c] = std::clamp(acc[c], 0.0f, 255.0f) / 255.0f * 2.0f - 1.0f;
        const std::size_t at = static_cast<std::size_t>(y) * width + x;
        if (channels == 3) {
            for (int c = 0; c < 3; ++c) tensor.data[c * plane + at] = acc[c];
        } else {
            tensor.data[at] = (acc[0] + acc[1] + acc[2]) / 3.0f;
        }
    };
    // Source indices out of range repeat the edge pixel. The pass held in between is the smaller
    // one (core/sampling/ImageOps.h resizeColumnsFirst): a tall, narrow image widened and made
    // shorter would otherwise hold its every row at the run's width.
    if (resizeColumnsFirst(inW, inH, width, height)) {
        // Columns first (height x inW x 3), then rows (height x width x 3).
        std::vector<float> columns(static_cast<std::size_t>(height) * inW * 3);
        for (int y = 0; y < height; ++y) {
            const Taps& t = down[static_cast<std::size_t>(y)];
            float* dst = columns.data() + static_cast<std::size_t>(y) * inW * 3;
            for (int x = 0; x < inW; ++x) {
                float acc[3] = {0, 0, 0};
                for (std::size_t k = 0; k < t.weights.size(); ++k) {
                    const int i = std::clamp(t.first + static_cast<int>(k), 0, inH - 1);
                    const unsigned char* src = image.pixels.data() + (static_cast<std::size_t>(i) * inW + x) * 3;
                    for (int c = 0; c < 3; ++c) acc[c] += t.weights[k] * src[c];
                }
                for (int c = 0; c < 3; ++c) dst[3 * x + c] = acc[c];
            }
        }
        for (int y = 0; y < height; ++y) {
            const float* src = columns.data() + static_cast<std::size_t>(y) * inW * 3;
            for (int x = 0; x < width; ++x) {
                const Taps& t = across[static_cast<std::size_t>(x)];
                float acc[3] = {0, 0, 0};
                for (std::size_t k = 0; k < t.weights.size(); ++k) {
                    const int i = std::clamp(t.first + static_cast<int>(k), 0, inW - 1);
                    for (int c = 0; c < 3; ++c) acc[c] += t.weights[k] * src[3 * i + c];
                }
                store(x, y, acc);
            }
        }
        return tensor;
    }

    // Rows first (inH x width x 3), then columns (height x width x 3).
    std::vector<float> rows(static_cast<std::size_t>(inH) * width * 3);
    for (int y = 0; y < inH; ++y) {
        const unsigned char* src = image.pixels.data() + static_cast<std::size_t>(y) * inW * 3;
        float* dst = rows.data() + static_cast<std::size_t>(y) * width * 3;
        for (int x = 0; x < width; ++x) {
            const Taps& t = across[static_cast<std::size_t>(x)];
            float acc[3] = {0, 0, 0};
            for (std::size_t k = 0; k < t.weights.size(); ++k) {
                const int i = std::clamp(t.first + static_cast<int>(k), 0, inW - 1);
                for (int c = 0; c < 3; ++c) acc[c] += t.weights[k] * src[3 * i + c];
            }
            for (int c = 0; c < 3; ++c) dst[3 * x + c] = acc[c];
        }
    }
    for (int y = 0; y < height; ++y) {
        const Taps& t = down[static_cast<std::size_t>(y)];
        for (int x = 0; x < width; ++x) {
            float acc[3] = {0, 0, 0};
            for (std::size_t k = 0; k < t.weights.size(); ++k) {
                const int i = std::clamp(t.first + static_cast<int>(k), 0, inH - 1);
                const float* src = rows.data() + (static_cast<std::size_t>(i) * width + x) * 3;
                for (int c = 0; c < 3; ++c) acc[c] += t.weights[k] * src[c];
            }
            store(x, y, acc);
        }
    }
    return tensor;
}

ImageTensor loadInitImage(const std::string& path, int width, int height, int channels) {
    return loadInitImage(path, readImageFile(path), width, height, channels);
}

ImageTensor loadInitImage(const std::string& path, const ImageFile& file, int width, int height, int channels) {
    const Rgb8Image decoded = decodeImage(path, file);
    try {
        return resampleToModelSpace(decoded, width, height, channels);
    } catch (const std::invalid_argument& e) {
        fail(path, std::string("cannot be used: ") + e.what());
    }
}

}  // namespace tessera
