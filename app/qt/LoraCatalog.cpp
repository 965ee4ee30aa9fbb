#include "app/qt/LoraCatalog.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include <QDir>
#include <QFileInfo>

#include "app/qt/GuiThreadGuard.h"
#include "core/run/LoraModelFile.h"
#include "core/run/TextEncoderFile.h"
#include "core/run/VaeFile.h"

namespace tessera {

namespace {

template <typename Extensions>
bool hasExtension(const QString& name, const Extensions& extensions) {
    return std::any_of(extensions.begin(), extensions.end(), [&name](const char* extension) {
        return name.endsWith(QLatin1String(extension), Qt::CaseInsensitive);
    });
}

// The files of `top` and its subfolders (to LoraCatalog::kMaxDepth levels) with one of
// `extensions`, named by `name`.
template <typename Extensions, typename Name>
QList<ModelFileEntry> filesUnder(const QString& top, const QString& sub, const Extensions& extensions, Name name,
                                 int room) {
    ModelFolderRules rules;
    rules.fileName = [&extensions, &name](const QFileInfo& info) -> std::optional<QString> {
        if (!hasExtension(info.fileName(), extensions)) return std::nullopt;
        return QString::fromStdString(name(info.fileName().toStdString()));
    };
    return modelFilesUnder(top, sub, LoraCatalog::kMaxDepth, room, rules);
}

// What findTextEncoderFile reads (core/run/TextEncoderFile.h): safetensors only.
constexpr std::array<const char*, 1> kTextEncoderExtensions{".safetensors"};

}  // namespace

LoraCatalog::LoraCatalog(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tessera::ModelFileEntry>();
    qRegisterMetaType<tessera::LoraCatalogScan>();
}

LoraCatalog::~LoraCatalog() = default;

LoraCatalogScan LoraCatalog::list(const QStringList& modelsFolders) {
    assertNotGuiThread("LoraCatalog::list");
    LoraCatalogScan scan;
    scan.folders = modelsFolders;
    for (const QString& root : modelsFolders) {
        for (const char* sub : kLoraFolders)
            scan.loras << filesUnder(
                QDir(root).filePath(QLatin1String(sub)), QLatin1String(sub), kLoraExtensions,
                [](const std::string& file) { return loraName(file); },
                static_cast<int>(kMaxEntries - scan.loras.size()));
        for (const char* sub : kVaeFolders)
            scan.vaes << filesUnder(
                QDir(root).filePath(QLatin1String(sub)), QLatin1String(sub), kVaeExtensions,
                [](const std::string& file) { return vaeName(file); },
                static_cast<int>(kMaxEntries - scan.vaes.size()));
        for (const std::string_view sub : textEncoderKind().subfolders) {
            const QString folder = QString::fromUtf8(sub.data(), static_cast<qsizetype>(sub.size()));
            scan.textEncoders << filesUnder(
                QDir(root).filePath(folder), folder, kTextEncoderExtensions,
                [](const std::string& file) { return file; }, static_cast<int>(kMaxEntries - scan.textEncoders.size()));
        }
    }
    return scan;
}

quint64 LoraCatalog::scan(const QStringList& modelsFolders) {
    scanJob_ = scans_.start([modelsFolders] { return list(modelsFolders); },
                            [this](quint64 id, const LoraCatalogScan& result) {
                                if (id == scanJob_) emit scanned(id, result);
                            },
                            [this, modelsFolders](quint64 id, const QString&) {
                                if (id != scanJob_) return;
                                LoraCatalogScan failed;  // nothing listed
                                failed.folders = modelsFolders;
                                emit scanned(id, failed);
                            });
    return scanJob_;
}

}  // namespace tessera
