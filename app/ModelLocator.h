// ModelLocator: where the bundled default model lives, and what a model folder allows
// (its ModelLimits, read from config.json alone, so the window can validate settings without
// loading weights). Qt Core only; safe on any thread.
#pragma once

#include <optional>

#include <QString>
#include <QStringList>

#include "core/RunConfig.h"

namespace tessera {

class ModelLocator {
public:
    // executableDir: the folder of the running binary (QCoreApplication::applicationDirPath()).
    explicit ModelLocator(QString executableDir);

    // Folders searched for the default model, in order: TESSERA_RESOURCE_DIR/models/default
    // (development builds) and <executableDir>/../share/tessera/models/default (installs).
    QStringList candidates() const;
    // The first candidate that holds a config.json, as an absolute path; empty when none does.
    QString defaultModelFolder() const;

    // True when `dir` holds config.json (the weights are checked only when a run loads them).
    static bool looksLikeModelFolder(const QString& dir);
    // The limits a model folder's config.json implies (downsample factor, input channels,
    // training timesteps from scheduler_config.json when present), read by the core's
    // readModelFolderConfig. nullopt with *error set (naming the file) when it cannot be read
    // or parsed.
    static std::optional<ModelLimits> readLimits(const QString& dir, QString* error = nullptr);

private:
    QString executableDir_;
};

}  // namespace tessera
