#include "app/qt/ModelCatalog.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <stdexcept>
#include <tuple>

#include <QDateTime>
#include <QDir>
#include <QDirIterator>
#include <QFileInfo>

#include "app/qt/GuiThreadGuard.h"
#include "app/qt/ModelLocator.h"
#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"

namespace tessera {

namespace {

// Listing stops here: a models folder pointed at / by mistake must not walk the whole disk.
constexpr int kMaxDepth = 3;
constexpr int kMaxEntries = 1000;
constexpr qint64 kMaxFolderFiles = 10000;

QString qs(const std::string& text) { return QString::fromStdString(toValidUtf8(text)); }

QString sizeText(qint64 bytes) {
    if (bytes < 0) return QStringLiteral("—");
    if (bytes >= (qint64{1} << 30)) return QStringLiteral("%1 GB").arg(bytes / 1e9, 0, 'f', 2);
    return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
}

QString parametersText(std::int64_t n) { return QStringLiteral("%1 M").arg(n / 1e6, 0, 'f', 1); }

// A folder's bytes: its files, recursively (bounded, symbolic links not followed).
qint64 folderBytes(const QString& folder) {
    qint64 bytes = 0, files = 0;
    QDirIterator it(folder, QDir::Files | QDir::NoSymLinks | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext() && files++ < kMaxFolderFiles) bytes += it.nextFileInfo().size();
    return bytes;
}

// SD1 / SD2 / SDXL of a diffusers pipeline folder from its configuration files alone, by
// core/models/sd/SdModel.h's rule: a second text encoder is SDXL; CLIP's quick_gelu encoder with a context
// under 1024 wide is SD 1.x, OpenCLIP's (gelu) SD 2.x.
QString pipelineFamily(const QString& folder) {
    const QDir dir(folder);
    if (QFileInfo(dir.filePath(QStringLiteral("text_encoder_2"))).isDir()) return QStringLiteral("SDXL");
    const nlohmann::json unet =
        readBoundedJson(dir.filePath(QStringLiteral("unet/config.json")).toStdString(), "model");
    const nlohmann::json text =
        readBoundedJson(dir.filePath(QStringLiteral("text_encoder/config.json")).toStdString(), "model");
    const nlohmann::json context = unet.value("cross_attention_dim", nlohmann::json(768));
    const nlohmann::json act = text.value("hidden_act", nlohmann::json("quick_gelu"));
    const bool clip = act.is_string() && act.get<std::string>() == "quick_gelu";
    return clip && context.is_number_integer() && context.get<int>() < 1024 ? QStringLiteral("SD1")
                                                                            : QStringLiteral("SD2");
}

void describeCheckpoint(CatalogEntry& e) {
    SingleFileOptions options;
    options.digest = FileDigest::Skip;  // hashed only when asked (requestHash)
    const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(e.path.toStdString(), options);
    const std::string_view family = toString(info.family);
    e.family = QString::fromLatin1(family.data(), static_cast<qsizetype>(family.size())).toUpper();
    e.details = QStringLiteral(
                    "%1: Stable Diffusion checkpoint, %2\nfamily %3 (%4)\n%5 parameters (UNet %6, VAE %7, text %8)\n"
                    "stored %9\nprediction %10 (%11)")
                    .arg(QFileInfo(e.path).fileName(), sizeText(e.bytes), e.family, qs(info.familyReason),
                         parametersText(info.parameterCount()), parametersText(info.unetPart.parameters),
                         parametersText(info.vaePart.parameters),
                         parametersText(info.textEncoderPart.parameters + info.textEncoder2Part.parameters),
                         qs(describeDtypes(info.unetPart.storedDtypes)))
                    .arg(qs(std::string(toString(info.prediction))), qs(info.predictionReason));
    if (!info.ignored.empty()) e.details += QStringLiteral("\nunused: %1").arg(qs(describeIgnored(info.ignored)));
}

void describeFolder(CatalogEntry& e) {
    e.bytes = folderBytes(e.path);
    QString error;
    int multiple = 1;
    if (ModelLocator::isStableDiffusion(e.path)) {
        const auto limits = ModelLocator::readSdLimits(e.path, &multiple, &error);
        if (!limits) throw std::runtime_error(error.toStdString());
        e.family = pipelineFamily(e.path);
        e.details = QStringLiteral(
                        "%1: diffusers pipeline folder, %2\nfamily %3\ntiles in multiples of %4, sizes and "
                        "overlaps of %5")
                        .arg(QFileInfo(e.path).fileName(), sizeText(e.bytes), e.family)
                        .arg(limits->downsampleFactor)
                        .arg(multiple);
        return;
    }
    const auto limits = ModelLocator::readLimits(e.path, &error);
    if (!limits) throw std::runtime_error(error.toStdString());
    e.family = QStringLiteral("pixel");
    e.details = QStringLiteral(
                    "%1: pixel-space UNet2DModel folder, %2\n%3 input channels, tiles in multiples of %4, %5 "
                    "training timesteps")
                    .arg(QFileInfo(e.path).fileName(), sizeText(e.bytes))
                    .arg(limits->inChannels)
                    .arg(limits->downsampleFactor)
                    .arg(limits->numTrainTimesteps);
}

bool isModelFolder(const QDir& dir) {
    return dir.exists(QStringLiteral("model_index.json")) || dir.exists(QStringLiteral("config.json"));
}

// The first 10 hex digits of the file's SHA-256, read in blocks; empty when `stop` says so
// (checked before every block).
QString shortSha256(const QString& path, const std::function<bool()>& stop) {
    assertNotGuiThread("ModelCatalog shortSha256");
    const BoundedFile file = BoundedFile::open(path.toStdString(), "model", ModelCatalog::kMaxHashBytes);
    Sha256 sha;
    for (std::uint64_t offset = 0; offset < file.size(); offset += ModelCatalog::kHashBlockBytes) {
        if (stop()) return {};
        const std::string block = file.readAt(offset, ModelCatalog::kHashBlockBytes);
        if (block.empty()) file.fail("the file shrank while it was hashed");
        sha.update(block.data(), block.size());
    }
    return QString::fromStdString(sha.hexDigest().substr(0, 10));
}

}  // namespace

ModelCatalog::ModelCatalog(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tessera::CatalogEntry>();
    qRegisterMetaType<tessera::CatalogScan>();
}

ModelCatalog::~ModelCatalog() { stopping_->store(true); }

QList<CatalogEntry> ModelCatalog::randomEntries() {
    QList<CatalogEntry> entries;
    for (const auto& [name, family, what] :
         {std::tuple{"random:sd15", "SD1", "Stable Diffusion 1.5"},
          std::tuple{"random:sd21", "SD2", "Stable Diffusion 2.1"}, std::tuple{"random:sdxl", "SDXL", "SDXL base"}}) {
        CatalogEntry e;
        e.path = e.name = QString::fromLatin1(name);
        e.family = QString::fromLatin1(family);
        e.details = QStringLiteral(
                        "%1: random weights at %2's real shapes (for timing; the image is noise). No file "
                        "is read.")
                        .arg(e.name, QString::fromLatin1(what));
        entries << e;
    }
    return entries;
}

CatalogEntry ModelCatalog::describe(const QString& path, const QString& shownName) {
    CatalogEntry e;
    e.path = path;
    e.name = shownName.isEmpty() ? QFileInfo(path).fileName() : shownName;
    if (path.startsWith(QString::fromLatin1(kRandomModelPrefix))) {
        for (const CatalogEntry& random : randomEntries())
            if (random.path == path) return random;
    }
    assertNotGuiThread("ModelCatalog::describe");
    const QFileInfo info(path);
    e.modified = info.lastModified().toMSecsSinceEpoch();
    e.family = QStringLiteral("?");
    try {
        if (info.isDir()) {
            describeFolder(e);
        } else if (info.isFile() && info.suffix().compare(QStringLiteral("safetensors"), Qt::CaseInsensitive) == 0) {
            e.bytes = info.size();
            // A file whose safetensors header does not read is no checkpoint: it is never hashed
            // (a 1 TB sparse file with a broken header would take CPU-minutes for nothing).
            { const SafetensorsFile header(e.path.toStdString()); }
            e.checkpoint = true;
            describeCheckpoint(e);
        } else if (const QString why = ModelLocator::whyNotThere(path); !why.isEmpty()) {
            e.error = why;  // a link loop or a dangling link says so, not "does not exist"
        } else {
            e.error = QStringLiteral("'%1' is neither a model folder nor a .safetensors checkpoint").arg(path);
        }
    } catch (const std::exception& ex) {
        e.family = QStringLiteral("?");
        e.error = QString::fromUtf8(toValidUtf8(ex.what()).c_str());
    }
    if (!e.error.isEmpty()) e.details = e.error;
    return e;
}

quint64 ModelCatalog::scan(const QString& folder, const QStringList& others) {
    scanJob_ = scans_.start(
        [folder, others] {
            CatalogScan result;
            result.folder = folder;
            if (!folder.isEmpty()) {
                const QDir root(folder);
                if (!root.exists()) {
                    const QString link = ModelLocator::brokenLink(folder);
                    result.folderError = link.isEmpty() ? QStringLiteral("'%1' is not a folder").arg(folder) : link;
                }
                // Breadth-first to kMaxDepth; a model folder is one entry, not descended into.
                QStringList level{root.absolutePath()};
                for (int depth = 0; depth < kMaxDepth && !level.isEmpty() && result.inFolder.size() < kMaxEntries;
                     ++depth) {
                    QStringList next;
                    for (const QString& dirPath : level) {
                        const QDir dir(dirPath);
                        for (const QFileInfo& info :
                             dir.entryInfoList(QDir::Dirs | QDir::Files | QDir::NoDotAndDotDot, QDir::Name)) {
                            if (result.inFolder.size() >= kMaxEntries) break;
                            const QString shown = root.relativeFilePath(info.absoluteFilePath());
                            const bool modelFolder = info.isDir() && isModelFolder(QDir(info.absoluteFilePath()));
                            if (info.isDir() && !modelFolder && !info.isSymLink())
                                next << info.absoluteFilePath();
                            else if (modelFolder ||
                                     info.suffix().compare(QStringLiteral("safetensors"), Qt::CaseInsensitive) == 0)
                                result.inFolder << describe(info.absoluteFilePath(), shown);
                        }
                    }
                    level = next;
                }
                std::sort(result.inFolder.begin(), result.inFolder.end(),
                          [](const CatalogEntry& a, const CatalogEntry& b) {
                              return a.name.compare(b.name, Qt::CaseInsensitive) < 0;
                          });
            }
            for (const QString& path : others) result.others << describe(path);
            return result;
        },
        [this](quint64 id, const CatalogScan& result) {
            if (id == scanJob_) emit scanned(id, result);
        },
        [this, folder](quint64 id, const QString& error) {
            if (id != scanJob_) return;
            CatalogScan failed;
            failed.folder = folder;
            failed.folderError = error;
            emit scanned(id, failed);
        });
    return scanJob_;
}

std::optional<QString> ModelCatalog::cachedHash(const CatalogEntry& entry) const {
    std::lock_guard lock(cacheMutex_);
    const auto it = cache_.find(entry.path);
    if (it == cache_.end() || it->second.bytes != entry.bytes || it->second.modified != entry.modified)
        return std::nullopt;
    return it->second.hash;
}

void ModelCatalog::cancelHash() {
    if (hashStop_) hashStop_->store(true);
    hashStop_.reset();
    hashPath_.clear();
}

void ModelCatalog::requestHash(const CatalogEntry& entry) {
    if (!entry.checkpoint) return;
    if (hashStop_ && hashPath_ == entry.path && !hashStop_->load()) return;  // on its way already
    // Only the newest request is worked on: the hash of the row selected before stops.
    cancelHash();
    if (const auto hash = cachedHash(entry)) {
        QMetaObject::invokeMethod(
            this, [this, path = entry.path, hash = *hash] { emit hashed(path, hash, {}); }, Qt::QueuedConnection);
        return;
    }
    hashStop_ = std::make_shared<std::atomic<bool>>(false);
    hashPath_ = entry.path;
    hashes_.start(
        [this, entry, stopping = stopping_, stop = hashStop_] {
            const auto stopped = [&stopping, &stop] { return stopping->load() || stop->load(); };
            if (stopped()) return QString();
            // Asked twice before the first answer: the second finds it cached here.
            if (auto hash = cachedHash(entry)) return *hash;
            hashesStarted_.fetch_add(1);
            QString hash = shortSha256(entry.path, stopped);
            if (hash.isEmpty()) return hash;
            hashesComputed_.fetch_add(1);
            std::lock_guard lock(cacheMutex_);
            cache_[entry.path] = HashKey{entry.bytes, entry.modified, hash};
            return hash;
        },
        [this, path = entry.path, stop = hashStop_](quint64, const QString& hash) {
            if (stop == hashStop_) cancelHash();  // done: nothing left to stop
            if (hash.isEmpty())
                emit hashStopped(path);
            else
                emit hashed(path, hash, {});
        },
        [this, path = entry.path, stop = hashStop_](quint64, const QString& error) {
            if (stop == hashStop_) cancelHash();
            emit hashed(path, {}, error);
        });
}

}  // namespace tessera
