// ModelFolderWalk: the walk every models-folder catalog makes (LoRAs, VAEs, ControlNets): a
// subfolder of a models folder and the folders below it, breadth first to a depth, links to folders
// not followed, at most a number of entries, sorted by name. Reads folders: never on the GUI thread.
#pragma once

#include <functional>
#include <optional>

#include <QFileInfo>
#include <QList>
#include <QMetaType>
#include <QString>

namespace tessera {

struct ModelFileEntry {
    QString path;    // absolute
    QString name;    // as A1111 names it: a LoRA's file name without extension, a VAE's with it
    QString folder;  // the subfolder of the models folder it was found in ("Lora", "VAE", ...)
};

// What a walk lists: fileName gives a file's entry name (nullopt: not listed); folderIsModel, when
// set, says which folders are one model each (listed by their name, not entered).
struct ModelFolderRules {
    std::function<std::optional<QString>(const QFileInfo&)> fileName;
    std::function<bool(const QFileInfo&)> folderIsModel;
};

// The entries under `top` (found in models subfolder `sub`) to `maxDepth` levels (1: `top` alone),
// at most `room` of them, sorted by name (case-insensitive).
QList<ModelFileEntry> modelFilesUnder(const QString& top, const QString& sub, int maxDepth, int room,
                                      const ModelFolderRules& rules);

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::ModelFileEntry)
