// Single-file (LDM / SGM layout) Stable Diffusion checkpoints, following diffusers'
// loaders/single_file_utils.py: the file opened as safetensors or as a pickled PyTorch checkpoint
// through the restricted reader (core/formats/TensorFile.h), its family and prefixes told
// (SingleFileLayout), its configurations built (SingleFileConfigs), every model tensor bound to the
// file's tensor that holds it (SingleFilePlan, LdmNames), checked, then read.
#include "core/models/sd/SingleFileCheckpoint.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "core/base/BoundedInput.h"
#include "core/formats/TensorFile.h"
#include "core/models/sd/SingleFileConfigs.h"
#include "core/models/sd/SingleFileDigest.h"
#include "core/models/sd/SingleFileLayout.h"
#include "core/models/sd/SingleFilePlan.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/ModelName.h"

namespace tessera {

namespace fs = std::filesystem;
using namespace single_file;

namespace {

// Either container (core/formats/TensorFile.h): a pickled checkpoint goes through the restricted
// reader, which parses the pickle as data and refuses, naming it, anything that would run code.
TensorFile openCheckpoint(const std::string& path) {
    checkPathText("model", path, "a model folder or checkpoint file");
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
        throw ModelError(std::string(e.what()) + " (not a readable safetensors checkpoint)");
    }
}

// The header pass shared by inspect and load.
struct Inspected {
    Layout layout;
    Configs configs;
    std::vector<SingleFilePlan> plans;
    SingleFileCheckpointInfo info;
};

Inspected inspectOpen(const TensorFile& file, const std::string& path, const SingleFileOptions& options) {
    const std::string where = shownPath(path);
    Inspected r;
    r.layout = detectLayout(file, where);
    r.configs = options.configFolder.empty() ? derivedConfigs(file, r.layout, where)
                                             : folderConfigs(options.configFolder, r.layout);
    if (r.configs.text2)
        checkSdxlComponents(r.configs.unet, r.configs.text, *r.configs.text2, where);
    else if (r.configs.unet.crossAttentionDim != r.configs.text.hiddenSize)
        throw ModelError(where + ": the UNet attends to " + std::to_string(r.configs.unet.crossAttentionDim) +
                         "-wide text but the text encoder is " + std::to_string(r.configs.text.hiddenSize) +
                         " wide; the file's models do not belong together");
    if (r.configs.unet.inChannels != r.configs.vae.latentChannels)
        throw ModelError(where + ": the UNet takes " + std::to_string(r.configs.unet.inChannels) +
                         " channels but the VAE's latents have " + std::to_string(r.configs.vae.latentChannels));
    try {
        r.plans = makePlans(r.layout, r.configs);
    } catch (const ModelError& e) {  // a configuration the graphs cannot be built from
        throw ModelError(where + ": " + withoutPrefix(e.what(), "config.json: "));
    }
    SingleFileCheckpointInfo& info = r.info;
    info.path = path;
    info.fileBytes = file.fileSize();
    info.container = file.container();
    info.reader = file.description();
    info.family = r.layout.family;
    info.familyReason = r.layout.reason;
    info.unet = r.configs.unet;
    info.vae = r.configs.vae;
    info.textEncoder = r.configs.text;
    info.textEncoder2 = r.configs.text2;
    info.configSource = r.configs.source;
    info.prediction = r.configs.prediction;
    info.predictionReason = r.configs.predictionReason;
    info.schedulerClass = defaultsOf(r.layout.family).schedulerClass;
    info.unetPart = checkPlan(file, r.plans[0], where);
    info.vaePart = checkPlan(file, r.plans[1], where);
    info.textEncoderPart = checkPlan(file, r.plans[2], where);
    if (r.plans.size() > 3) info.textEncoder2Part = checkPlan(file, r.plans[3], where);
    info.ignored = unusedTensors(file, r.plans, where);
    return r;
}

double peakResidentMiB() {
    rusage usage{};
    return getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<double>(usage.ru_maxrss) / 1024.0 : 0.0;
}

}  // namespace

std::string describeDtypes(const std::map<std::string, std::size_t>& counts) {
    std::vector<std::pair<std::string, std::size_t>> sorted(counts.begin(), counts.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (sorted.size() == 1) return sorted.front().first;
    std::string text;
    for (const auto& [dtype, count] : sorted)
        text += (text.empty() ? "" : ", ") + dtype + " (" + std::to_string(count) + (text.empty() ? " tensors)" : ")");
    return text.empty() ? "none" : text;
}

std::string describeIgnored(const std::vector<std::string>& names, std::size_t maxGroups) {
    std::map<std::string, std::size_t> groups;
    for (const std::string& name : names) ++groups[name.substr(0, name.find('.'))];
    std::vector<std::pair<std::string, std::size_t>> sorted(groups.begin(), groups.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string text;
    for (std::size_t i = 0; i < sorted.size() && i < maxGroups; ++i)
        text += (i ? ", " : "") + excerpt(sorted[i].first, 40) + " (" + std::to_string(sorted[i].second) + ")";
    if (sorted.size() > maxGroups) text += ", ... (" + std::to_string(sorted.size() - maxGroups) + " more groups)";
    return text;
}

SingleFileCheckpointInfo inspectSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options) {
    const TensorFile file = openCheckpoint(path);
    Inspected r = inspectOpen(file, path, options);
    r.info.sha256 = SingleFileDigest(file, options.digest == FileDigest::Compute).result();
    return std::move(r.info);
}

SdModel loadSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    const std::string where = shownPath(path);
    const TensorFile file = openCheckpoint(path);
    Inspected r = inspectOpen(file, path, options);
    SingleFileDigest hasher(file, options.digest == FileDigest::Compute);  // runs while the tensors are converted
    std::uint64_t total = 0;
    for (const SingleFilePlan& plan : r.plans) total += planBytes(file, plan);
    LoadMeter meter(options.progress, total);

    SdModel model;
    model.family = r.layout.family;
    model.unet = std::make_shared<const UNetCondModel>(
        UNetCondModel::fromTensors(r.configs.unet, readPlan(file, r.plans[0], where, meter), WeightsDigest::Skip));
    model.vae = std::make_shared<const VaeModel>(
        VaeModel::fromTensors(r.configs.vae, readPlan(file, r.plans[1], where, meter), WeightsDigest::Skip));
    model.textEncoder = std::make_shared<const ClipTextModel>(
        ClipTextModel::fromTensors(r.configs.text, readPlan(file, r.plans[2], where, meter), WeightsDigest::Skip));
    if (r.configs.text2)
        model.textEncoder2 = std::make_shared<const ClipTextModel>(ClipTextModel::fromTensors(
            *r.configs.text2, readPlan(file, r.plans[3], where, meter), WeightsDigest::Skip));
    meter.finish(options.digest == FileDigest::Compute ? "hashing the file" : "");
    model.scheduler = sdSchedulerDefaults(r.configs.prediction);
    model.schedulerClass = r.info.schedulerClass;
    model.source = path;
    model.name = fs::path(path).stem().string();
    model.sha256 = hasher.result();
    if (!r.info.ignored.empty())
        spdlog::info("{}: {} tensor{} not used by the models: {}", where, r.info.ignored.size(),
                     r.info.ignored.size() == 1 ? " is" : "s are", describeIgnored(r.info.ignored));
    if (file.pickle()) spdlog::info("{}: {}", where, r.info.reader);
    spdlog::info("{}: {}, {} prediction ({})", where, familyLabel(model.family), toString(r.configs.prediction),
                 r.configs.predictionReason);
    model.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model.hostPeakMiB = peakResidentMiB();
    return model;
}

TensorList singleFileTensors(SdFamily family, const UNetCondConfig& unet, const VaeConfig& vae,
                             const ClipTextConfig& textEncoder, const std::optional<ClipTextConfig>& textEncoder2) {
    if (family == SdFamily::SDXL && !textEncoder2)
        throw std::invalid_argument("singleFileTensors: an SDXL checkpoint has a second text encoder");
    Configs configs;
    configs.unet = unet;
    configs.vae = vae;
    configs.text = textEncoder;
    if (family == SdFamily::SDXL) configs.text2 = textEncoder2;
    TensorList list;
    std::set<std::string> seen;
    for (const SingleFilePlan& plan : makePlans(standardLayout(family), configs))
        for (const Binding& b : plan.bindings) {
            std::vector<std::int64_t> shape = storedShape(b);
            if (b.squeeze) shape.insert(shape.end(), {1, 1});
            if (seen.insert(b.stored).second) list.emplace_back(b.stored, std::move(shape));
        }
    return list;
}

}  // namespace tessera
