#include "app/cli/SdInfoCommand.h"

#include <filesystem>
#include <map>
#include <vector>

#include "app/cli/CliOptions.h"
#include "app/cli/PathStatus.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/formats/Safetensors.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

struct ModelPart {
    const char* label;
    std::int64_t parameters = 0;
    std::size_t tensors = 0;
    std::map<std::string, std::size_t> dtypes;
};

// What both forms print.
struct Summary {
    std::string format;
    SdFamily family = SdFamily::SD1;
    std::string familyReason;
    std::string configSource;
    std::vector<ModelPart> parts;
    PredictionType prediction = PredictionType::Epsilon;
    std::string predictionReason;
    std::string schedulerClass;
    std::string hashLine;
    std::vector<std::string> ignored;
};

Summary fromCheckpoint(const std::string& path) {
    SingleFileOptions options;
    options.digest = FileDigest::Compute;
    const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
    Summary s;
    s.format =
        "single-file checkpoint (LDM layout), " + withThousands(static_cast<std::int64_t>(info.fileBytes)) + " bytes";
    if (info.container == TensorContainer::TorchCheckpoint) s.format += "; " + info.reader;
    s.family = info.family;
    s.familyReason = info.familyReason;
    s.configSource = info.configSource;
    s.parts = {{"unet", info.unetPart.parameters, info.unetPart.tensors, info.unetPart.storedDtypes},
               {"vae", info.vaePart.parameters, info.vaePart.tensors, info.vaePart.storedDtypes},
               {"text encoder", info.textEncoderPart.parameters, info.textEncoderPart.tensors,
                info.textEncoderPart.storedDtypes}};
    if (info.textEncoder2)
        s.parts.push_back({"text encoder 2", info.textEncoder2Part.parameters, info.textEncoder2Part.tensors,
                           info.textEncoder2Part.storedDtypes});
    s.prediction = info.prediction;
    s.predictionReason = info.predictionReason;
    s.schedulerClass = info.schedulerClass;
    s.hashLine = info.sha256.substr(0, 10) + " (A1111's model hash; sha256 " + info.sha256 + ")";
    s.ignored = info.ignored;
    return s;
}

// The dtypes of the weight files a model folder's loader reads: <stem>.safetensors, else its fp16
// variant, else the shards.
std::map<std::string, std::size_t> storedDtypes(const fs::path& dir, const std::string& stem) {
    std::vector<fs::path> files;
    for (const std::string& name : {stem + ".safetensors", stem + ".fp16.safetensors"})
        if (pathStatus(dir / name).kind == PathStatus::Kind::File) {
            files.push_back(dir / name);
            break;
        }
    std::error_code ec;
    if (files.empty())
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name.rfind(stem + "-", 0) == 0 && entry.path().extension() == ".safetensors")
                files.push_back(entry.path());
        }
    std::map<std::string, std::size_t> counts;
    for (const fs::path& path : files) {
        const SafetensorsFile file(path.string());
        for (const auto& info : file.tensors()) ++counts[std::string(toString(info.dtype))];
    }
    return counts;
}

Summary fromFolder(const std::string& path, const std::string& executableDir) {
    if (bundledClipVocabulary().empty())
        for (const std::string& candidate : resourceCandidates(executableDir, "clip/bpe_simple_vocab_16e6.txt.gz"))
            if (pathStatus(candidate).kind == PathStatus::Kind::File) {
                setBundledClipVocabulary(candidate);
                break;
            }
    const SdModel model = loadSdModel(path);
    const fs::path root(path);
    Summary s;
    s.format = "diffusers pipeline folder";
    s.family = model.family;
    s.familyReason = "from its components' configurations";
    s.configSource = "the folder's config.json files";
    s.parts = {{"unet", model.unet->parameterCount(), model.unet->tensors().size(),
                storedDtypes(root / "unet", "diffusion_pytorch_model")},
               {"vae", model.vae->parameterCount(), model.vae->tensors().size(),
                storedDtypes(root / "vae", "diffusion_pytorch_model")},
               {"text encoder", model.textEncoder->parameterCount(), model.textEncoder->tensors().size(),
                storedDtypes(root / "text_encoder", "model")}};
    if (model.textEncoder2)
        s.parts.push_back({"text encoder 2", model.textEncoder2->parameterCount(), model.textEncoder2->tensors().size(),
                           storedDtypes(root / "text_encoder_2", "model")});
    s.prediction = model.scheduler.predictionType;
    s.predictionReason = "scheduler/scheduler_config.json, or SD's default without one";
    s.schedulerClass = model.schedulerClass;
    s.hashLine = "none (A1111 hashes single files); sha256 of the parts' digests " + model.sha256;
    for (const auto* extra :
         {&model.unet->extraTensors(), &model.vae->extraTensors(), &model.textEncoder->extraTensors()})
        s.ignored.insert(s.ignored.end(), extra->begin(), extra->end());
    if (model.textEncoder2)
        s.ignored.insert(s.ignored.end(), model.textEncoder2->extraTensors().begin(),
                         model.textEncoder2->extraTensors().end());
    return s;
}

}  // namespace

void printSdModelInfo(const std::string& path, const std::string& executableDir, std::ostream& out) {
    std::error_code ec;
    const bool folder = fs::is_directory(path, ec);
    const Summary s = folder ? fromFolder(path, executableDir) : fromCheckpoint(path);
    std::map<std::string, std::size_t> all;
    std::int64_t total = 0;
    const std::string name = folder ? fs::path(path).filename().string() : fs::path(path).stem().string();
    out << "model        " << excerpt(name, 200) << " (" << excerpt(path, 400) << ")\n"
        << "format       " << s.format << "\n"
        << "family       " << familyLabel(s.family) << " (" << toString(s.family) << "): " << s.familyReason << "\n"
        << "configs      " << s.configSource << "\n";
    for (const ModelPart& part : s.parts) {
        const std::string label = part.label;
        out << label + std::string(label.size() < 13 ? 13 - label.size() : 1, ' ') << withThousands(part.parameters)
            << " parameters, " << part.tensors << " tensors, stored " << describeDtypes(part.dtypes) << "\n";
        total += part.parameters;
        for (const auto& [dtype, count] : part.dtypes) all[dtype] += count;
    }
    out << "parameters   " << withThousands(total) << " in all\n"
        << "precision    " << describeDtypes(all) << " as stored (float32 in memory)\n"
        << "prediction   " << toString(s.prediction) << " (" << s.predictionReason << ")\n"
        << "scheduler    " << s.schedulerClass << "\n"
        << "model hash   " << s.hashLine << "\n"
        << "ignored      "
        << (s.ignored.empty() ? std::string("none")
                              : withThousands(static_cast<std::int64_t>(s.ignored.size())) +
                                    " tensors: " + describeIgnored(s.ignored))
        << "\n";
}

}  // namespace tessera
