#include "app/ModelLocator.h"

#include <QDir>
#include <QFileInfo>

#include "app/CliOptions.h"
#include "app/GuiThreadGuard.h"
#include "core/UNetModel.h"

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

}  // namespace tessera
