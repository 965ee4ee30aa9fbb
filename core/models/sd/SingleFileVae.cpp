// Separate VAE files: the container (TensorFile), which names the file holds (LDM under a prefix,
// or diffusers'), the bindings of the model's VAE configuration to them (SingleFilePlan), checked,
// then read.
#include "core/models/sd/SingleFileVae.h"

#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/models/sd/SingleFileDigest.h"
#include "core/models/sd/SingleFilePlan.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;
using namespace single_file;

namespace {

using input_limits::kNameChars;

// The LDM VAE's first resnet conv under each prefix a file may use (diffusers' LDM_VAE_KEYS strips
// "first_stage_model." and "vae."; VAE releases have none).
constexpr const char* kLdmPrefixes[] = {"", "first_stage_model.", "vae."};
constexpr const char* kLdmKey = "encoder.down.0.block.0.conv1.weight";
// diffusers' names: the encoder's first resnet conv, and the decoder key ComfyUI tests (comfy/sd.py VAE).
constexpr const char* kDiffusersKey = "encoder.down_blocks.0.resnets.0.conv1.weight";
constexpr const char* kDiffusersDecoderKey = "decoder.up_blocks.0.resnets.0.norm1.weight";
// A diffusers AutoencoderKL folder's weights, in the order looked for (a VAE is never sharded).
constexpr const char* kFolderWeights[] = {"diffusion_pytorch_model.safetensors",
                                          "diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.bin"};

std::string listText(const std::vector<int>& values) {
    std::string text = "[";
    for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
    return text + "]";
}

// "<where> does not fit the VAE of 'sd1' (block_out_channels [...], ...)".
std::string misfit(const std::string& where, const std::string& model, const VaeConfig& modelVae) {
    return where + " does not fit the VAE of " + inQuotes(model) + " (" + describeVaeSizes(modelVae) + ")";
}

bool sameSizes(const VaeConfig& a, const VaeConfig& b) {
    return a.inChannels == b.inChannels && a.outChannels == b.outChannels && a.blockOutChannels == b.blockOutChannels &&
           a.layersPerBlock == b.layersPerBlock && a.latentChannels == b.latentChannels &&
           a.normNumGroups == b.normNumGroups && a.useQuantConv == b.useQuantConv &&
           a.usePostQuantConv == b.usePostQuantConv && a.midBlockAddAttention == b.midBlockAddAttention;
}

// A diffusers folder (or a pipeline folder's vae/): its config.json must have the model's sizes;
// the weights file in it is what is read.
std::string folderWeights(const std::string& path, const VaeConfig& modelVae, const std::string& model) {
    std::string vaeDir;
    const VaeConfig own = readVaeConfig(path, &vaeDir);
    if (!sameSizes(own, modelVae))
        throw ModelError(misfit(shownPath(path), model, modelVae) + ": its config.json has " + describeVaeSizes(own));
    std::error_code ec;
    for (const char* name : kFolderWeights)
        if (fs::is_regular_file(fs::path(vaeDir) / name, ec)) return (fs::path(vaeDir) / name).string();
    throw ModelError(shownPath(vaeDir) + ": no VAE weights: looked for " + inQuotes(kFolderWeights[0]) + ", " +
                     inQuotes(kFolderWeights[1]) + " and " + inQuotes(kFolderWeights[2]));
}

TensorFile openWeights(const std::string& path) {
    try {
        (void)TensorFile::containerOf(path);  // a file that cannot be opened, said as such
    } catch (const TensorFileError& e) {
        throw ModelError(e.what());
    }
    try {
        return TensorFile(path, StateDictWrapper::Unwrap);
    } catch (const TensorFileError& e) {
        if (e.container() == TensorContainer::TorchCheckpoint)
            throw ModelError(
                std::string(e.what()) +
                " (read as a PyTorch checkpoint by the restricted reader, which runs nothing in the file)");
        throw ModelError(std::string(e.what()) + " (not a readable safetensors file)");
    }
}

// Which names the file holds: diffusers' first, then LDM's under each prefix.
std::optional<std::pair<VaeNames, std::string>> detectNames(const TensorFile& file) {
    if (file.has(kDiffusersKey) || file.has(kDiffusersDecoderKey)) return std::pair{VaeNames::Diffusers, std::string()};
    for (const char* prefix : kLdmPrefixes)
        if (file.has(std::string(prefix) + kLdmKey)) return std::pair{VaeNames::Ldm, std::string(prefix)};
    return std::nullopt;
}

// The bindings of diffusers' names: each tensor under its own name (LDM's 1x1-conv attention shape
// accepted as well, as for LDM files).
SingleFilePlan diffusersVaePlan(const VaeConfig& config) {
    SingleFilePlan plan{"VAE", {}, {"encoder.", "decoder."}, {}};
    for (auto& [name, shape] : VaeModel::expectedTensors(config)) {
        Binding b{name, shape, name};
        b.squeeze = name.find(".attentions.") != std::string::npos && shape.size() == 2;
        plan.bindings.push_back(std::move(b));
    }
    return plan;
}

struct Opened {
    TensorFile file;
    SingleFilePlan plan;
    SingleFileVaeInfo info;
};

Opened openVae(const std::string& path, const VaeConfig& modelVae, const std::string& model) {
    checkPathText("vae", path, "a VAE path");
    std::error_code ec;
    const bool folder = fs::is_directory(path, ec);
    const std::string weights = folder ? folderWeights(path, modelVae, model) : path;
    const std::string where = shownPath(weights);
    Opened o{openWeights(weights), {}, {}};
    const auto names = detectNames(o.file);
    if (!names) {
        std::string held;
        for (std::size_t i = 0; i < o.file.tensors().size() && i < 3; ++i)
            held += (i ? ", " : "") + inQuotes(o.file.tensors()[i].name, kNameChars);
        throw ModelError(where + ": not a VAE: no " + inQuotes(kLdmKey, kNameChars) +
                         " (LDM names, bare or under 'first_stage_model.' or 'vae.') nor " +
                         inQuotes(kDiffusersKey, kNameChars) + " (diffusers names); it holds " +
                         (held.empty() ? std::string("no tensors") : held));
    }
    SingleFileVaeInfo& info = o.info;
    info.path = path;
    info.weightsFile = weights;
    info.names = names->first;
    info.prefix = names->second;
    info.container = o.file.container();
    info.reader = o.file.description();
    o.plan = info.names == VaeNames::Ldm ? ldmVaePlan(info.prefix, modelVae) : diffusersVaePlan(modelVae);
    try {
        info.part = checkPlan(o.file, o.plan, where);
        info.ignored = unusedTensors(o.file, {o.plan}, where);
    } catch (const ModelError& e) {
        throw ModelError(misfit(where, model, modelVae) + ": " + withoutPrefix(e.what(), where + ": "));
    }
    return o;
}

}  // namespace

std::string_view toString(VaeNames names) { return names == VaeNames::Ldm ? "LDM" : "diffusers"; }

std::string describeVaeSizes(const VaeConfig& c) {
    std::string text = "block_out_channels " + listText(c.blockOutChannels) + ", " + std::to_string(c.layersPerBlock) +
                       (c.layersPerBlock == 1 ? " resnet" : " resnets") + " per block, GroupNorm " +
                       std::to_string(c.normNumGroups) + ", " + std::to_string(c.latentChannels) + " latent channels";
    if (c.inChannels != 3 || c.outChannels != 3)
        text += ", " + std::to_string(c.inChannels) + " image channels in, " + std::to_string(c.outChannels) + " out";
    if (!c.useQuantConv) text += ", no quant_conv";
    if (!c.usePostQuantConv) text += ", no post_quant_conv";
    if (!c.midBlockAddAttention) text += ", no mid-block attention";
    return text;
}

SingleFileVaeInfo inspectSingleFileVae(const std::string& path, const VaeConfig& modelVae, const std::string& model,
                                       const SingleFileVaeOptions& options) {
    Opened o = openVae(path, modelVae, model);
    o.info.sha256 = SingleFileDigest(o.file, options.digest == FileDigest::Compute).result();
    return std::move(o.info);
}

SingleFileVae loadSingleFileVae(const std::string& path, const VaeConfig& modelVae, const std::string& model,
                                const SingleFileVaeOptions& options) {
    const Opened o = openVae(path, modelVae, model);
    const std::string where = shownPath(o.info.weightsFile);
    const bool hash = options.digest == FileDigest::Compute;
    SingleFileDigest digest(o.file, hash);  // runs while the tensors are converted
    LoadMeter meter(options.progress, planBytes(o.file, o.plan));
    std::map<std::string, HostTensor> tensors = readPlan(o.file, o.plan, where, meter);
    meter.finish(hash ? "hashing the file" : "");
    SingleFileVae loaded;
    loaded.vae =
        std::make_shared<const VaeModel>(VaeModel::fromTensors(modelVae, std::move(tensors), WeightsDigest::Skip));
    loaded.info = o.info;
    loaded.info.sha256 = digest.result();
    if (!loaded.info.ignored.empty())
        spdlog::info("{}: {} tensor{} not used by the VAE: {}", where, loaded.info.ignored.size(),
                     loaded.info.ignored.size() == 1 ? " is" : "s are", describeIgnored(loaded.info.ignored));
    return loaded;
}

}  // namespace tessera
