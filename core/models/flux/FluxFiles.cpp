// FLUX.1 single files: the transformer under BFL's names (bare or ComfyUI-prefixed, fp8 or not),
// the VAE through the Stable Diffusion single-file loader's LDM plan, both checked before either
// is read.
#include "core/models/flux/FluxFiles.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"
#include "core/formats/Safetensors.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxWeights.h"
#include "core/models/sd/SingleFileDigest.h"
#include "core/models/sd/SingleFilePlan.h"
#include "core/models/sd/SingleFileVae.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;
using namespace single_file;

namespace {

using input_limits::kNameChars;

// Where a file keeps BFL's names: bare (BFL's own files) or under ComfyUI's diffusion-model prefix.
constexpr const char* kFluxPrefixes[] = {"", kFluxComfyPrefix};
// A diffusers FluxTransformer2DModel's tensor, to tell such a file apart in a message.
constexpr const char* kDiffusersKey = "transformer_blocks.0.attn.norm_added_k.weight";
// The transformer's top-level modules (FluxGraph's parameters): a tensor under one of them that the
// config has no place for means the file is another variant.
constexpr const char* kFluxModules[] = {"img_in.",      "txt_in.",        "time_in.",       "vector_in.",
                                        "guidance_in.", "double_blocks.", "single_blocks.", "final_layer."};
// ae.safetensors' first resnet conv, bare or under the prefixes a checkpoint keeps a VAE under
// (ComfyUI's all-in-one files: "vae."; diffusers' LDM_VAE_KEYS also strip "first_stage_model.").
constexpr const char* kVaePrefixes[] = {"", "vae.", "first_stage_model."};
constexpr const char* kVaeKey = "encoder.down.0.block.0.conv1.weight";
constexpr const char* kVaeHint = "give --vae ae.safetensors (the 16-channel FLUX.1 VAE)";

bool readableDtype(const std::string& dtype) {
    return dtype == "F32" || dtype == "F16" || dtype == "BF16" || isFp8Dtype(dtype);
}

std::optional<std::string> transformerPrefix(const TensorFile& file) {
    for (const char* p : kFluxPrefixes)
        if (file.has(std::string(p) + kFluxDetectionKey)) return std::string(p);
    return std::nullopt;
}

std::optional<std::string> vaePrefix(const TensorFile& file) {
    for (const char* p : kVaePrefixes)
        if (file.has(std::string(p) + kVaeKey)) return std::string(p);
    return std::nullopt;
}

TensorFile openFile(const std::string& path, const char* field, const char* what) {
    checkPathText(field, path, what);
    std::error_code ec;
    if (fs::is_directory(path, ec))
        throw ModelError(shownPath(path) + ": a folder; " + what +
                         " is one file (a diffusers FluxPipeline folder is given as the model itself)");
    try {
        (void)TensorFile::containerOf(path);  // a file that cannot be opened, said as such
        return TensorFile(path, StateDictWrapper::Unwrap);
    } catch (const TensorFileError& e) {
        throw ModelError(e.what());
    }
}

void checkBounds(const FluxConfig& c, const std::string& where) {
    namespace bounds = flux_config_bounds;
    auto check = [&](int value, int high, const char* what, const char* flux) {
        if (value < 1 || value > high)
            throw ModelError(where + ": " + what + " " + std::to_string(value) + " is outside 1.." +
                             std::to_string(high) + " (" + flux + ")");
    };
    check(c.heads, bounds::kMaxHeads, "head count", "FLUX.1 has 24 of 128 channels");
    check(std::max(c.layers, c.singleLayers), bounds::kMaxBlocks, "block count", "FLUX.1 has 19 double and 38 single");
    check(c.jointAttentionDim, bounds::kMaxTextDim, "txt_in's width", "T5-XXL's 4096 in FLUX.1");
    check(c.pooledProjectionDim, bounds::kMaxTextDim, "vector_in's width", "CLIP-L's 768 in FLUX.1");
}

// The transformer file opened and checked: every parameter bound to its entry.
struct OpenedTransformer {
    std::unique_ptr<TensorFile> file;  // ScaledFp8 keeps a reference: a stable address
    std::unique_ptr<ScaledFp8> scales;
    FluxSingleFileInfo info;
    std::vector<std::pair<std::string, const TensorFileEntry*>> bound;  // BFL name -> stored tensor
    std::uint64_t bytes = 0;                                            // stored bytes read
};

OpenedTransformer openTransformer(const std::string& path) {
    OpenedTransformer o;
    o.file = std::make_unique<TensorFile>(openFile(path, "model", "a FLUX.1 transformer file"));
    const TensorFile& file = *o.file;
    const std::string where = shownPath(path);
    const auto prefix = transformerPrefix(file);
    if (!prefix) {
        if (file.has(kDiffusersKey) || file.has(std::string("transformer.") + kDiffusersKey))
            throw ModelError(where +
                             ": a FLUX transformer under diffusers' names; give the FluxPipeline folder that holds "
                             "it (transformer/ beside vae/)");
        throw ModelError(where + ": not a FLUX.1 transformer: no " + inQuotes(kFluxDetectionKey, kNameChars) +
                         " (BFL's names, bare or under " + inQuotes(kFluxComfyPrefix) + ")");
    }
    FluxSingleFileInfo& info = o.info;
    info.path = path;
    info.prefix = *prefix;
    o.scales = std::make_unique<ScaledFp8>(file, info.prefix, where);
    const std::string under =
        info.prefix.empty() ? std::string() : " (names under " + inQuotes(info.prefix, kNameChars) + ")";

    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const TensorFileEntry& e : file.tensors())
        if (e.name.starts_with(info.prefix) && !o.scales->isScaleTensor(e.name))
            shapes.emplace(e.name.substr(info.prefix.size()), e.shape);
    try {
        info.config = fluxConfigFromShapes(shapes);
    } catch (const std::runtime_error& e) {
        throw ModelError(where + ": " + e.what() + under);
    }
    checkBounds(info.config, where);

    std::set<std::string> expected;
    for (const auto& [name, shape] : fluxParameters(info.config)) {
        const std::string stored = info.prefix + name;
        expected.insert(stored);
        const TensorFileEntry* e = file.find(stored);
        const std::string at = where + ": tensor " + inQuotes(stored, kNameChars);
        if (e == nullptr)
            throw ModelError(where + ": missing tensor " + inQuotes(stored, kNameChars) + ", expected shape " +
                             shapeToString(shape) + " (a " + info.config.variant() + " transformer of " +
                             std::to_string(info.config.layers) + " double and " +
                             std::to_string(info.config.singleLayers) + " single blocks has it)");
        if (e->shape != shape)
            throw ModelError(at + ": expected " + shapeToString(shape) + ", found " + shapeToString(e->shape));
        if (!readableDtype(e->dtype))
            throw ModelError(at + " has dtype " + e->dtype +
                             "; FLUX.1 weights must be F32, F16, BF16, F8_E4M3 or F8_E5M2");
        if (file.pickle() && isFp8Dtype(e->dtype))  // the restricted pickle reader upcasts no 8-bit floats
            throw ModelError(at + " has dtype " + e->dtype +
                             " in a PyTorch checkpoint; fp8 weights are read from .safetensors files");
        o.bound.emplace_back(name, e);
        o.bytes += e->bytes;
    }
    for (const TensorFileEntry& e : file.tensors()) {
        if (expected.contains(e.name) || o.scales->isScaleTensor(e.name)) continue;
        const bool inside = e.name.starts_with(info.prefix) &&
                            std::any_of(std::begin(kFluxModules), std::end(kFluxModules), [&](const char* m) {
                                return std::string_view(e.name).substr(info.prefix.size()).starts_with(m);
                            });
        if (inside)
            throw ModelError(where + ": tensor " + inQuotes(e.name, kNameChars) + " " + shapeToString(e.shape) +
                             " belongs to no part of a " + info.config.variant() + " transformer of " +
                             std::to_string(info.config.layers) + " double and " +
                             std::to_string(info.config.singleLayers) + " single blocks; the file holds another model");
        info.ignored.push_back(e.name);
    }
    if (const auto vp = vaePrefix(file)) {
        info.hasVae = true;
        info.vaePrefix = *vp;
    }
    return o;
}

// The latent channels a VAE file's encoder makes (its conv_out gives mean and logvar), checked
// before its other tensors so that an SD VAE is named as such rather than by a shape.
void checkLatentChannels(const TensorFile& file, const std::string& prefix, const VaeConfig& config,
                         const std::string& where, const FluxConfig& transformer) {
    const TensorFileEntry* out = file.find(prefix + "encoder.conv_out.weight");
    if (out == nullptr || out->shape.empty()) return;  // the plan's check names what is missing
    const std::int64_t latent = out->shape[0] / 2;
    if (latent != config.latentChannels || latent * 4 != transformer.inChannels)
        throw ModelError(where + ": the VAE has " + std::to_string(latent) +
                         " latent channels; the transformer reads " + std::to_string(transformer.latentChannels()) +
                         " (a FLUX.1 VAE, ae.safetensors, has 16; an SD VAE has 4)");
}

std::shared_ptr<FluxModel> mutableModel(std::shared_ptr<const FluxModel> model) {
    return std::const_pointer_cast<FluxModel>(std::move(model));
}

// The float32 bytes the model will hold, refused up front when this process cannot hold them.
void checkHostMemory(const FluxConfig& config, const std::string& where) {
    std::uint64_t values = 0;
    for (const auto& [name, shape] : fluxParameters(config)) {
        std::uint64_t n = 1;
        for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
        values += n;
    }
    const auto memory = availableHostMemory();
    if (memory && values * sizeof(float) > memory->availableBytes)
        throw ModelError(where + ": the transformer's " + withThousands(static_cast<std::int64_t>(values)) +
                         " weights take " + formatBytes(values * sizeof(float)) + " as float32; " +
                         formatBytes(memory->availableBytes) + " are available (" + memory->source + ")");
}

}  // namespace

bool isFluxSingleFile(const std::string& path) {
    try {
        std::error_code ec;
        if (path.empty() || path.size() > input_limits::kPathChars || !fs::is_regular_file(path, ec)) return false;
        const SafetensorsFile file(path);  // the header alone
        for (const char* p : kFluxPrefixes)
            if (file.has(std::string(p) + kFluxDetectionKey)) return true;
        return false;
    } catch (const std::exception&) {
        return false;
    }
}

VaeConfig fluxVaeConfig() {
    VaeConfig c;
    c.blockOutChannels = {128, 256, 512, 512};
    c.layersPerBlock = 2;
    c.latentChannels = 16;
    c.normNumGroups = 32;
    c.sampleSize = 1024;
    c.scalingFactor = 0.3611f;
    c.shiftFactor = 0.1159f;
    c.useQuantConv = false;
    c.usePostQuantConv = false;
    return c;
}

FluxSingleFileInfo inspectFluxSingleFile(const std::string& path) { return openTransformer(path).info; }

FluxFilesModel loadFluxFiles(const FluxFiles& files, const FluxFilesOptions& options) {
    OpenedTransformer t = openTransformer(files.transformer);
    const std::string where = shownPath(files.transformer);

    // The VAE: its own file, else the transformer file's "vae." tensors.
    FluxFilesModel loaded;
    loaded.files = files;
    std::unique_ptr<TensorFile> ownVae;
    const TensorFile* vaeFile = t.file.get();
    std::string vaeWhere = where, prefix;
    if (!files.vae.empty()) {
        ownVae = std::make_unique<TensorFile>(openFile(files.vae, "vae", "a FLUX.1 VAE file"));
        vaeFile = ownVae.get();
        vaeWhere = shownPath(files.vae);
        const auto p = vaePrefix(*ownVae);
        if (!p)
            throw ModelError(vaeWhere + ": not a VAE: no " + inQuotes(kVaeKey, kNameChars) +
                             " (ae.safetensors' names, bare or under 'vae.')");
        prefix = *p;
    } else if (t.info.hasVae) {
        prefix = t.info.vaePrefix;
        loaded.files.vae = files.transformer;
    } else {
        throw ModelError(where + ": no VAE; " + kVaeHint);
    }
    checkLatentChannels(*vaeFile, prefix, options.vae, vaeWhere, t.info.config);
    const SingleFilePlan vaePlan = ldmVaePlan(prefix, options.vae);
    try {
        loaded.vaePart = checkPlan(*vaeFile, vaePlan, vaeWhere);
        if (ownVae) (void)unusedTensors(*vaeFile, {vaePlan}, vaeWhere);
    } catch (const ModelError& e) {
        throw ModelError(vaeWhere + ": does not fit the FLUX.1 VAE (" + describeVaeSizes(options.vae) +
                         "): " + withoutPrefix(e.what(), vaeWhere + ": "));
    }
    checkHostMemory(t.info.config, where);

    // Everything is checked: read, hashing on other threads meanwhile.
    const bool hash = options.digest == FileDigest::Compute;
    SingleFileDigest transformerDigest(*t.file, hash);
    SingleFileDigest vaeDigest(*vaeFile, hash && ownVae != nullptr);
    LoadMeter meter(options.progress, t.bytes + planBytes(*vaeFile, vaePlan));
    meter.beginPhase("reading the transformer", t.bytes);
    std::sort(t.bound.begin(), t.bound.end(),
              [](const auto& a, const auto& b) { return a.second->position < b.second->position; });
    std::map<std::string, HostTensor> tensors;
    for (const auto& [name, entry] : t.bound) {
        HostTensor h;
        h.shape = entry->shape;
        h.data = t.scales->read(*entry, name, loaded.transformer);
        const auto bad = std::find_if(h.data.begin(), h.data.end(), [](float x) { return !std::isfinite(x); });
        if (bad != h.data.end())
            throw ModelError(where + ": tensor " + inQuotes(entry->name, kNameChars) + " (" + entry->dtype +
                             ") holds a non-finite value (" + (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " +
                             std::to_string(bad - h.data.begin()));
        meter.advance(entry->bytes);
        tensors.emplace(name, std::move(h));
    }
    t.scales->describeLayout(loaded.transformer);
    std::map<std::string, HostTensor> vaeTensors = readPlan(*vaeFile, vaePlan, vaeWhere, meter);
    meter.finish(hash ? "hashing the files" : "");
    auto vae = std::make_shared<const VaeModel>(
        VaeModel::fromTensors(options.vae, std::move(vaeTensors), WeightsDigest::Skip));

    const std::string name = fs::path(files.transformer).stem().string();
    auto model = mutableModel(makeFluxModel(t.info.config, std::move(tensors), std::move(vae), name));
    model->sha256 = transformerDigest.result();
    loaded.vaeSha256 = vaeDigest.result();
    loaded.model = std::move(model);
    loaded.vaePrefix = prefix;
    loaded.info = std::move(t.info);
    if (!loaded.info.ignored.empty())
        spdlog::info("{}: {} tensor{} outside the transformer: {}", where, loaded.info.ignored.size(),
                     loaded.info.ignored.size() == 1 ? " is" : "s are", describeIgnored(loaded.info.ignored));
    return loaded;
}

}  // namespace tessera
