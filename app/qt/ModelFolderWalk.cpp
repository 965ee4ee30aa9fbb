#include "app/qt/ModelFolderWalk.h"

#include <algorithm>

#include <QDir>
#include <QStringList>

#include "app/qt/GuiThreadGuard.h"

namespace tessera {

QList<ModelFileEntry> modelFilesUnder(const QString& top, const QString& sub, int maxDepth, int room,
                                      const ModelFolderRules& rules) {
    assertNotGuiThread("modelFilesUnder");
    QList<ModelFileEntry> found;
    QStringList level{top};
    for (int depth = 0; depth < maxDepth && !level.isEmpty(); ++depth) {
        QStringList next;
        for (const QString& dirPath : level)
            for (const QFileInfo& info :
                 QDir(dirPath).entryInfoList(QDir::Dirs | QDir::Files | QDir::NoDotAndDotDot, QDir::Name)) {
                if (found.size() >= room) break;
                if (info.isDir()) {
                    if (info.isSymLink()) continue;
                    if (rules.folderIsModel && rules.folderIsModel(info))
                        found << ModelFileEntry{info.absoluteFilePath(), info.fileName(), sub};
                    else
                        next << info.absoluteFilePath();
                } else if (info.isFile()) {
                    if (const std::optional<QString> name = rules.fileName(info))
                        found << ModelFileEntry{info.absoluteFilePath(), *name, sub};
                }
            }
        level = next;
    }
    std::stable_sort(found.begin(), found.end(), [](const ModelFileEntry& a, const ModelFileEntry& b) {
        return a.name.compare(b.name, Qt::CaseInsensitive) < 0;
    });
    return found;
}

}  // namespace tessera
