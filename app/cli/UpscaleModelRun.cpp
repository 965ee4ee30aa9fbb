#include "app/cli/UpscaleModelRun.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string_view>
#include <utility>

#include "app/cli/InitImage.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"
#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"
#include "core/run/ModelName.h"
#include "core/run/UpscaleModelFile.h"

namespace tessera {

UpscaleDeviceRequest upscaleDeviceRequest(const RunConfig& config) {
    UpscaleDeviceRequest request;
    request.threads = config.threads;
    request.precision = config.precision;
    request.tuningCache = config.tuningCache;
    return request;
}

namespace {

constexpr char kField[] = "upscale_model";

[[noreturn]] void refuse(const std::string& field, const std::string& message) {
    throw ValidationError(field, field + ": " + message);
}

std::string sizeText(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

// The first bytes of a PyTorch checkpoint: a zip archive ("PK\3\4", torch.save since 1.6) or a
// pickle's PROTO opcode (0x80, the legacy format).
bool startsLikePickle(std::string_view first) {
    return first.substr(0, 4) == std::string_view("PK\3\4", 4) ||
           (!first.empty() && static_cast<unsigned char>(first[0]) == 0x80);
}

// The file's SHA-256, read in blocks from the file opened for it (regular files only, bounded).
std::string fileSha256(const BoundedFile& file) {
    Sha256 hash;
    std::vector<std::byte> block(std::size_t{4} << 20);
    for (std::uint64_t at = 0; at < file.size();) {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), file.size() - at));
        const std::size_t got = file.readInto(at, std::span<std::byte>(block.data(), want));
        if (got == 0) file.fail("it changed while it was read (it is shorter than when it was opened)");
        hash.update(block.data(), got);
        at += got;
    }
    return hash.hexDigest();
}

// The model in a safetensors file or, with `pickle`, a PyTorch checkpoint, through the one
// StateDict the loader takes (core/models/upscale/StateDict.h).
UpscaleModel readModel(const std::string& path, bool pickle) {
    try {
        if (pickle) {
            // The restricted reader: pickle opcodes parsed as data, nothing executed.
            const TorchCheckpointFile file(path);
            return UpscaleModel::load(StateDict::fromFile(file));
        }
        const SafetensorsFile file(path);
        return UpscaleModel::load(StateDict::fromFile(file));
    } catch (const SafetensorsError& e) {
        refuse(kField, e.what());
    } catch (const ModelError& e) {
        refuse(kField, e.what());
    } catch (const TorchCheckpointError& e) {
        refuse(kField, e.what());
    }
}

}  // namespace

std::vector<std::string> cliModelsFolders(const std::string& runModel) {
    const char* variable = std::getenv(kModelsFolderVariable);
    return modelsFolders(variable ? std::string_view(variable) : std::string_view(), runModel);
}

std::vector<std::string> cliUpscaleModelsFolders(const std::string& runModel) { return cliModelsFolders(runModel); }

UpscaleModelRun loadUpscaleModelRun(const std::string& given, const std::vector<std::string>& modelsFolders) {
    const UpscaleModelFile found = findUpscaleModel(given, modelsFolders);
    UpscaleModelRecord record;
    record.file = std::filesystem::path(found.path).filename().string();
    record.name = upscalerName(found.path);
    try {
        const BoundedFile file = BoundedFile::open(found.path, kField, kMaxUpscaleModelBytes);
        // By content first: a safetensors file renamed .pth is read as what it is.
        const std::string first = file.readAt(0, 9);
        const bool safetensors = first.size() == 9 && first[8] == '{';  // u64 header length, then its JSON
        record.pickle =
            startsLikePickle(first) || (!safetensors && hasFileExtension(found.path, {".pth", ".pt", ".ckpt"}));
        record.sha256 = fileSha256(file);
    } catch (const InputFileError& e) {
        throw ValidationError(kField, e.what());
    }
    UpscaleModel model = readModel(found.path, record.pickle);
    if (model.inputChannels() != 3 || model.outputChannels() != 3)
        refuse(kField, shownPath(found.path) + " is a model of " + std::to_string(model.inputChannels()) +
                           " channels in and " + std::to_string(model.outputChannels()) +
                           " out; Tessera upscales RGB images, with models of 3 channels in and out");
    record.architecture = model.description();
    record.scale = model.scale();
    return UpscaleModelRun{found.path, std::move(model), std::move(record)};
}

std::string resizeFilterName(int fromW, int fromH, int toW, int toH) {
    if (fromW == toW && fromH == toH) return {};
    return toW > fromW || toH > fromH ? "Catmull-Rom" : "area average";
}

void checkUpscaleModelRun(UpscaleModelRun& run, int inW, int inH, int targetW, int targetH,
                          const UpscaleDeviceChoice& device, const UpscaleTiling& tiling) {
    UpscaleModelRecord& r = run.record;
    const int s = run.model.scale();
    const std::int64_t outW = std::int64_t(inW) * s, outH = std::int64_t(inH) * s;
    if (targetW > outW || targetH > outH)
        refuse("upscale", sizeText(inW, inH) + " upscaled to " + sizeText(targetW, targetH) + " needs more than " +
                              r.name + " gives (" + std::to_string(s) + "x: " + sizeText(int(outW), int(outH)) +
                              "); a model's output is only ever shrunk to the asked size, never enlarged: ask for " +
                              std::to_string(s) + " or less, or use a model of a larger scale");
    if (outW > kMaxImageSidePx || outH > kMaxImageSidePx)
        refuse("init", sizeText(inW, inH) + " times " + std::to_string(s) + " (" + r.name + ") would be " +
                           std::to_string(outW) + "x" + std::to_string(outH) +
                           " pixels; an image side may be at most " + std::to_string(kMaxImageSidePx) +
                           ": use a smaller start image or a model of a smaller scale");
    UpscalePlan plan;
    try {
        plan = UpscaleTiler(run.model, *device.device, tiling).plan(inW, inH);
    } catch (const std::invalid_argument& e) {
        refuse("tile", e.what());
    }
    r.backend = device.backendName;
    r.precision = std::string(toString(device.precision));
    r.tile = plan.tile;
    r.overlap = plan.overlap;
    r.tiles = plan.tiles();
    r.planBytes = plan.bytes();
    r.budgetBytes = plan.budget;
    r.tileNote = plan.note;
    r.inputW = inW;
    r.inputH = inH;
    r.outputW = int(outW);
    r.outputH = int(outH);
    r.resizeFilter = resizeFilterName(int(outW), int(outH), targetW, targetH);
    r.resizedW = targetW;
    r.resizedH = targetH;

    // The host memory of the pass at its peak: the decoded start image and its float copy, the
    // tiler's plan, the 8-bit output, and the resize to the target (the float RGB pass over one
    // axis, at most the output's size since the target is not larger, the float target and its
    // 8-bit copy).
    const std::uint64_t inPixels = std::uint64_t(inW) * inH, outPixels = std::uint64_t(outW) * outH;
    const std::uint64_t targetPixels = std::uint64_t(targetW) * targetH;
    const std::uint64_t resize = r.resizeFilter.empty() ? 0 : outPixels * 12 + targetPixels * 15;
    const std::uint64_t need = inPixels * 15 + plan.bytes() + outPixels * 3 + resize;
    if (const std::optional<HostMemory> host = availableHostMemory(); host && need > host->availableBytes)
        refuse("init", "upscaling " + sizeText(inW, inH) + " with " + r.name + " to " + sizeText(int(outW), int(outH)) +
                           " needs about " + formatBytes(need) + " of host memory (the tiles " +
                           formatBytes(plan.bytes()) + ", the output image " + formatBytes(outPixels * 3) + "); " +
                           formatBytes(host->availableBytes) + " is available (" + host->source +
                           "): use a smaller start image");
}

Rgb8Image runUpscaleModel(UpscaleModelRun& run, const Rgb8Image& image, const UpscaleDeviceChoice& device,
                          const UpscaleTiling& tiling) {
    const auto start = std::chrono::steady_clock::now();
    const std::size_t plane = std::size_t(image.width) * image.height;
    ImageTensor input;
    input.channels = 3;
    input.height = image.height;
    input.width = image.width;
    input.data.resize(plane * 3);
    for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t c = 0; c < 3; ++c) input.data[c * plane + p] = image.pixels[3 * p + c] / 255.0f;

    const int s = run.model.scale();
    Rgb8Image out;
    out.width = image.width * s;
    out.height = image.height * s;
    out.pixels.resize(std::size_t(out.width) * out.height * 3);
    const std::size_t width = std::size_t(out.width);
    UpscaleTiler tiler(run.model, *device.device, tiling);
    tiler.run(input, [&out, width](int firstRow, int rows, const float* band) {
        // The band is [rows][3][width]; the image [rows][width][3].
        parallelRows(rows, std::int64_t(rows) * 3 * static_cast<std::int64_t>(width), [&](int r0, int r1) {
            for (int y = r0; y < r1; ++y) {
                const float* row = band + std::size_t(y) * 3 * width;
                std::uint8_t* px = out.pixels.data() + (std::size_t(firstRow) + std::size_t(y)) * width * 3;
                for (std::size_t c = 0; c < 3; ++c)
                    for (std::size_t x = 0; x < width; ++x) {
                        const float v = std::clamp(row[c * width + x], 0.0f, 1.0f);
                        px[3 * x + c] =
                            static_cast<std::uint8_t>(static_cast<int>(static_cast<double>(255.0f * v) + 0.5));
                    }
            }
        });
    });
    run.record.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
}

namespace {

UpscaleModelRun loadForRun(const RunConfig& config, const std::optional<StartImageSize>& start) {
    if (!start)
        refuse(kField, "an upscale model runs on a start image: give --init FILE (and --upscale X for the canvas)");
    return loadUpscaleModelRun(config.upscaleModel, cliUpscaleModelsFolders(config.model));
}

}  // namespace

StartImageUpscale::StartImageUpscale(const RunConfig& config, const std::optional<StartImageSize>& start,
                                     std::ostream& notes)
    : run_(loadForRun(config, start)) {
    std::string note;
    device_ = createUpscaleDevice(config.backend, upscaleDeviceRequest(config), &note);
    if (!note.empty()) notes << "note: " << note << "\n";
    checkUpscaleModelRun(run_, start->width, start->height, config.width, config.height, device_, tiling_);
}

ImageTensor StartImageUpscale::startImage(const RunConfig& config, int channels, std::ostream& notes) {
    Rgb8Image decoded;
    try {
        decoded = decodeImageFile(config.initImage);
    } catch (const InitImageError& e) {
        refuse("init", e.what());
    }
    const Rgb8Image upscaled = runUpscaleModel(run_, decoded, device_, tiling_);
    notes << "note: " << describe(run_.record) << "\n";
    return resampleToModelSpace(upscaled, config.width, config.height, channels);
}

void StartImageUpscale::addTo(RunRecord& record) const {
    record.upscaleModel = run_.record;
    record.messages.push_back(describe(run_.record));
}

}  // namespace tessera
