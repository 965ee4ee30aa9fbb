#include "app/qt/ModelLocator.h"

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include <QDir>
#include <QFileInfo>

#include "app/cli/CliOptions.h"
#include "app/qt/GuiThreadGuard.h"
#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/formats/SchedulerConfig.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/flux/FluxConfig.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/unet/UNetConfig.h"
#include "core/models/unet/UNetModel.h"
#include "core/models/vae/VaeModel.h"

namespace tessera {

ModelLocator::ModelLocator(QString executableDir) : executableDir_(std::move(executableDir)) {}

QStringList ModelLocator::candidates() const {
    // The same search order as tessera-cli, so both front ends find the same model.
    QStringList list;
    for (const std::string& candidate : defaultModelCandidates(executableDir_.toStdString()))
        list << QDir::cleanPath(QString::fromStdString(candidate));
    return list;
}

QString ModelLocator::defaultModelFolder() const {
    assertNotGuiThread("ModelLocator::defaultModelFolder");
    for (const QString& candidate : candidates())
        if (looksLikeModelFolder(candidate)) return QFileInfo(candidate).absoluteFilePath();
    return {};
}

bool ModelLocator::looksLikeModelFolder(const QString& dir) {
    assertNotGuiThread("ModelLocator::looksLikeModelFolder");
    return !dir.isEmpty() && QFileInfo(QDir(dir).filePath(QStringLiteral("config.json"))).isFile();
}

std::optional<ModelLimits> ModelLocator::readLimits(const QString& dir, QString* error) {
    assertNotGuiThread("ModelLocator::readLimits");
    try {
        return readModelFolderConfig(dir.toStdString()).limits();
    } catch (const ModelError& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return std::nullopt;
    }
}

QString ModelLocator::brokenLink(const QString& path) {
    namespace fs = std::filesystem;
    const fs::path native = path.toStdString();
    std::error_code ec;
    const fs::file_status status = fs::status(native, ec);  // follows links
    if (fs::exists(status)) return {};
    const QString shown = QString::fromStdString(excerpt(native.string()));
    if (ec && ec.value() == ELOOP)
        return QStringLiteral("'%1' is a symbolic-link loop (too many levels of symbolic links)").arg(shown);
    std::error_code linkError;
    if (!fs::is_symlink(fs::symlink_status(native, linkError))) return {};
    const fs::path target = fs::read_symlink(native, linkError);
    return QStringLiteral("'%1' is a dangling symbolic link (to '%2', which does not exist)")
        .arg(shown, QString::fromStdString(excerpt(target.string())));
}

QString ModelLocator::whyNotThere(const QString& path) {
    namespace fs = std::filesystem;
    const fs::path native = path.toStdString();
    std::error_code ec;
    if (fs::exists(fs::status(native, ec))) return {};
    if (QString link = brokenLink(path); !link.isEmpty()) return link;
    const QString shown = QString::fromStdString(excerpt(native.string()));
    if (ec && ec.value() != ENOENT && ec.value() != ENOTDIR)
        return QStringLiteral("'%1' cannot be reached (%2)").arg(shown, QString::fromStdString(ec.message()));
    return QStringLiteral("'%1' does not exist").arg(shown);
}

bool ModelLocator::isFlux(const QString& path, QString* variant) {
    assertNotGuiThread("ModelLocator::isFlux");
    const std::string p = path.toStdString();
    try {
        if (isFluxSingleFile(p)) {
            if (variant) *variant = QString::fromStdString(inspectFluxSingleFile(p).config.variant());
            return true;
        }
        if (isRandomFluxName(p)) {
            if (variant) *variant = QString::fromStdString(randomFluxShapes(p).transformer.variant());
            return true;
        }
        if (isFluxModelPath(p)) {
            if (variant) {
                namespace fs = std::filesystem;
                const fs::path folder =
                    fs::exists(fs::path(p) / "transformer" / "config.json") ? fs::path(p) / "transformer" : fs::path(p);
                *variant = QString::fromStdString(parseFluxConfig(readModelJson(folder / "config.json")).variant());
            }
            return true;
        }
    } catch (const std::exception&) {
        return false;  // the run that loads it says what is wrong
    }
    return false;
}

bool ModelLocator::isStableDiffusion(const QString& path) {
    assertNotGuiThread("ModelLocator::isStableDiffusion");
    return isSdModelPath(path.toStdString());
}

namespace {

// The SD 1.x / 2.x shapes: a 4-level UNet (8x) over an 8x VAE.
constexpr ModelLimits kSdCheckpointLimits{64, 1000, 3};
constexpr int kSdVaeScale = 8;

// A single file's limits from its header (core inspectSingleFileCheckpoint: the family and the
// configurations diffusers' single-file loader uses, read from the tensors' shapes; no tensor
// data read, no hash): SDXL's 3-level UNet takes 32-px tiles, SD 1.x / 2.x's 4 levels 64. A
// header that cannot be read keeps SD 1.x's limits: the run that loads the file says why (and
// the model picker, which inspects it too).
ModelLimits readCheckpointLimits(const std::string& path, int* pixelMultiple, SdFamily* family) {
    SingleFileOptions options;
    options.digest = FileDigest::Skip;
    try {
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
        *pixelMultiple = info.vae.scaleFactor();
        *family = info.family;
        return ModelLimits{info.unet.downsampleFactor() * info.vae.scaleFactor(), kSdCheckpointLimits.numTrainTimesteps,
                           3};
    } catch (const ModelError&) {
        return kSdCheckpointLimits;
    } catch (const ValidationError&) {  // a path the model field refuses (too long, control characters)
        return kSdCheckpointLimits;
    }
}

ModelLimits readPipelineLimits(const std::filesystem::path& root, int* pixelMultiple, SdFamily* family) {
    const UNetCondConfig unet = unetCondConfigFromJson(readBoundedJson(root / "unet" / "config.json", "model"));
    if (unet.hasTextTime()) {
        *family = SdFamily::SDXL;
    } else {
        // As the loader tells SD 1.x from 2.x (its text encoder); a folder whose encoder config
        // cannot be read is refused by the run, which names it.
        try {
            *family = familyOfTextEncoder(readClipTextConfig(root / "text_encoder"));
        } catch (const std::exception&) {
            *family = SdFamily::SD1;
        }
    }
    const VaeConfig vae = readVaeConfig(root.string());
    int trainSteps = sdSchedulerDefaults().numTrainTimesteps;
    const std::filesystem::path scheduler = root / "scheduler" / "scheduler_config.json";
    std::error_code ec;
    if (std::filesystem::exists(scheduler, ec))
        trainSteps = schedulerOptionsFromJson(readBoundedJson(scheduler, "model")).numTrainTimesteps;
    *pixelMultiple = vae.scaleFactor();
    return ModelLimits{unet.downsampleFactor() * vae.scaleFactor(), trainSteps, 3};
}

}  // namespace

std::optional<ModelLimits> ModelLocator::readSdLimits(const QString& path, int* pixelMultiple, QString* error,
                                                      SdFamily* family) {
    assertNotGuiThread("ModelLocator::readSdLimits");
    const auto fail = [error](const QString& message) -> std::optional<ModelLimits> {
        if (error) *error = message;
        return std::nullopt;
    };
    SdFamily unused = SdFamily::SD1;
    if (!family) family = &unused;
    *family = SdFamily::SD1;
    *pixelMultiple = kSdVaeScale;
    const std::string text = path.toStdString();
    if (text.rfind(kRandomModelPrefix, 0) == 0) {
        // The shapes randomSdModel builds (SD 1.5, SD 2.1: 64; SDXL's 3-level UNet: 32).
        try {
            const SdModelConfigs c = randomSdModelConfigs(text);
            *family = c.family;
            return ModelLimits{c.unet.downsampleFactor() * c.vae.scaleFactor(), sdSchedulerDefaults().numTrainTimesteps,
                               3};
        } catch (const ValidationError&) {
            return fail(QStringLiteral("'%1' is not a random model; random weights are random:sd15, random:sd21 or "
                                       "random:sdxl")
                            .arg(QString::fromStdString(excerpt(text))));
        }
    }
    // Nothing there (a missing file, a link loop, a dangling link) says so before the suffix is
    // judged.
    if (const QString why = whyNotThere(path); !why.isEmpty()) return fail(why);
    const QFileInfo info(path);
    if (info.isDir()) {
        try {
            return readPipelineLimits(std::filesystem::path(text), pixelMultiple, family);
        } catch (const std::exception& e) {
            // Shown beside the model field: its "model: " prefix would say it twice.
            QString message = QString::fromUtf8(e.what());
            if (message.startsWith(QStringLiteral("model: "))) message.remove(0, 7);
            return fail(message);
        }
    }
    if (info.suffix().compare(QStringLiteral("safetensors"), Qt::CaseInsensitive) != 0)
        return fail(
            QStringLiteral("'%1' is a pickled PyTorch checkpoint, which Tessera never loads (unpickling can run "
                           "code); convert it to .safetensors")
                .arg(info.fileName()));
    if (!info.isFile()) return fail(QStringLiteral("'%1' is not a file").arg(QString::fromStdString(excerpt(text))));
    // No safetensors file at all (a text file renamed, a download cut short): said now, when the
    // model is chosen, not after Run. Only the header is read.
    try {
        const SafetensorsFile header(text);
    } catch (const SafetensorsError& e) {
        return fail(QString::fromStdString(toValidUtf8(e.what())));
    }
    return readCheckpointLimits(text, pixelMultiple, family);
}

}  // namespace tessera
