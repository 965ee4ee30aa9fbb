#include "app/qt/ControlNetCatalog.h"

#include <algorithm>
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

// The ControlNets under `top` (breadth first, to ControlNetCatalog::kMaxDepth levels; links to
// folders are not followed): files with a ControlNet extension (named without it, as the
// extension lists them) and diffusers folders (a config.json inside; named by the folder, not
// entered), sorted by name.
QList<ModelFileEntry> controlNetsUnder(const QString& top, const QString& sub, int room) {
    QList<ModelFileEntry> found;
    QStringList level{top};
    for (int depth = 0; depth < ControlNetCatalog::kMaxDepth && !level.isEmpty(); ++depth) {
        QStringList next;
        for (const QString& dirPath : level)
            for (const QFileInfo& info :
                 QDir(dirPath).entryInfoList(QDir::Dirs | QDir::Files | QDir::NoDotAndDotDot, QDir::Name)) {
                if (found.size() >= room) break;
                if (info.isDir()) {
                    if (info.isSymLink()) continue;
                    if (QFileInfo(QDir(info.absoluteFilePath()).filePath(QStringLiteral("config.json"))).isFile())
                        found << ModelFileEntry{info.absoluteFilePath(), info.fileName(), sub};
                    else
                        next << info.absoluteFilePath();
                } else if (info.isFile() && isControlNetFile(info.fileName())) {
                    found << ModelFileEntry{info.absoluteFilePath(), info.completeBaseName(), sub};
                }
            }
        level = next;
    }
    std::stable_sort(found.begin(), found.end(), [](const ModelFileEntry& a, const ModelFileEntry& b) {
        return a.name.compare(b.name, Qt::CaseInsensitive) < 0;
    });
    return found;
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
