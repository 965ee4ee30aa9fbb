#include "app/cli/VaeReplacement.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "app/cli/RunMemoryCheck.h"
#include "app/cli/UpscaleModelRun.h"
#include "core/base/BoundedInput.h"
#include "core/formats/TensorFile.h"
#include "core/run/ModelName.h"
#include "core/run/VaeFile.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

constexpr char kField[] = "vae";

// The model as loadSdModel names it: a folder's name, a file's stem.
std::string modelNameOf(const std::string& model) {
    std::error_code ec;
    fs::path path(model);
    if (!path.has_filename()) path = path.parent_path();
    return fs::is_directory(path, ec) ? path.filename().string() : path.stem().string();
}

[[noreturn]] void refuse(const std::string& message) {
    throw ValidationError(kField, std::string(kField) + ": " + message);
}

}  // namespace

VaeReplacement::VaeReplacement(const RunConfig& config)
    : path_(findVaeFile(config.vae, cliModelsFolders(config.model)).path), modelName_(modelNameOf(config.model)) {
    if (const std::optional<SdModelConfigs> model = readSdModelConfigs(config.model)) {
        modelVae_ = model->vae;
        SingleFileVaeOptions options;
        options.digest = FileDigest::Skip;  // hashed while load() reads it
        try {
            info_ = inspectSingleFileVae(path_, *modelVae_, modelName_, options);
        } catch (const InputFileError& e) {  // ModelError, a config.json's own errors
            refuse(e.what());
        }
    }
    record_.name = vaeName(path_);
}

std::shared_ptr<const SdModel> VaeReplacement::load(const RunConfig& config, const LoadProgressCallback& progress) {
    SdModel model = loadSdModel(config.model, progress);
    SingleFileVaeOptions options;
    options.progress = progress;
    SingleFileVae vae;
    try {
        vae = loadSingleFileVae(path_, model.vae->config(), modelName_, options);
    } catch (const InputFileError& e) {
        refuse(e.what());
    }
    info_ = vae.info;
    record_.name = vaeName(path_);
    record_.sha256 = info_.sha256;
    record_.layout = std::string(toString(info_.names));
    record_.pickle = info_.pickle();
    model.vae = std::move(vae.vae);
    return std::make_shared<const SdModel>(std::move(model));
}

void VaeReplacement::addTo(RunRecord& record) const {
    record.vaeFile = record_;
    record.messages.push_back(describe(record_));
    if (info_.pickle()) record.messages.push_back("vae: " + shownPath(info_.weightsFile) + " is a " + info_.reader);
}

std::string recordModelReader(const std::string& modelPath, RunRecord& record) {
    std::error_code ec;
    if (modelPath.rfind(kRandomModelPrefix, 0) == 0 || !fs::is_regular_file(modelPath, ec)) return {};
    try {
        if (TensorFile::containerOf(modelPath) != TensorContainer::TorchCheckpoint) return {};
        const TensorFile file(modelPath);
        record.modelPickle = true;
        std::string note = "model: " + shownPath(modelPath) + " is a " + file.description();
        record.messages.push_back(note);
        return note;
    } catch (const TensorFileError&) {
        return {};  // the run read it; a file changed since is not this note's to report
    }
}

}  // namespace tessera
