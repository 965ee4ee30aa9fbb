#include "app/qt/ControlNetCatalog.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include <QDir>
#include <QFileInfo>

#include "app/qt/GuiThreadGuard.h"
#include "core/run/ControlNetModelFile.h"

namespace tessera {

namespace {

bool isControlNetFile(const QString& name) {
    const auto& extensions = controlNetKind().extensions;
    return std::any_of(extensions.begin(), extensions.end(), [&name](std::string_view extension) {
        return name.endsWith(QLatin1String(extension.data(), static_cast<qsizetype>(extension.size())),
                             Qt::CaseInsensitive);
    });
}

// The ControlNets under `top` (to ControlNetCatalog::kMaxDepth levels): files with a ControlNet
// extension (named without it, as the extension lists them) and diffusers folders (a config.json
// inside; named by the folder, not entered).
QList<ModelFileEntry> controlNetsUnder(const QString& top, const QString& sub, int room) {
    ModelFolderRules rules;
    rules.fileName = [](const QFileInfo& info) -> std::optional<QString> {
        if (!isControlNetFile(info.fileName())) return std::nullopt;
        return info.completeBaseName();
    };
    rules.folderIsModel = [](const QFileInfo& info) {
        return QFileInfo(QDir(info.absoluteFilePath()).filePath(QStringLiteral("config.json"))).isFile();
    };
    return modelFilesUnder(top, sub, ControlNetCatalog::kMaxDepth, room, rules);
}

}  // namespace

ControlNetCatalog::ControlNetCatalog(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tessera::ModelFileEntry>();
    qRegisterMetaType<tessera::ControlNetCatalogScan>();
}

ControlNetCatalog::~ControlNetCatalog() = default;

ControlNetCatalogScan ControlNetCatalog::list(const QStringList& modelsFolders) {
    assertNotGuiThread("ControlNetCatalog::list");
    ControlNetCatalogScan scan;
    scan.folders = modelsFolders;
    for (const QString& root : modelsFolders)
        for (std::string_view sub : controlNetKind().subfolders) {
            const QString name = QString::fromLatin1(sub.data(), static_cast<qsizetype>(sub.size()));
            scan.controlNets << controlNetsUnder(QDir(root).filePath(name), name,
                                                 static_cast<int>(kMaxEntries - scan.controlNets.size()));
        }
    return scan;
}

quint64 ControlNetCatalog::scan(const QStringList& modelsFolders) {
    scanJob_ = scans_.start([modelsFolders] { return list(modelsFolders); },
                            [this](quint64 id, const ControlNetCatalogScan& result) {
                                if (id == scanJob_) emit scanned(id, result);
                            },
                            [this, modelsFolders](quint64 id, const QString&) {
                                if (id != scanJob_) return;
                                ControlNetCatalogScan failed;  // nothing listed
                                failed.folders = modelsFolders;
                                emit scanned(id, failed);
                            });
    return scanJob_;
}

}  // namespace tessera
