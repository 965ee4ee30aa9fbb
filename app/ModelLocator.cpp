#include "app/ModelLocator.h"

#include <exception>
#include <fstream>

#include <QDir>
#include <QFileInfo>

#include <nlohmann/json.hpp>

#include "app/CliOptions.h"
#include "core/ModelConfig.h"

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
    for (const QString& candidate : candidates())
        if (looksLikeModelFolder(candidate)) return QFileInfo(candidate).absoluteFilePath();
    return {};
}

bool ModelLocator::looksLikeModelFolder(const QString& dir) {
    return !dir.isEmpty() && QFileInfo(QDir(dir).filePath(QStringLiteral("config.json"))).isFile();
}

std::optional<ModelLimits> ModelLocator::readLimits(const QString& dir, QString* error) {
    auto fail = [error](const QString& why) -> std::optional<ModelLimits> {
        if (error) *error = why;
        return std::nullopt;
    };
    const QString configPath = QDir(dir).filePath(QStringLiteral("config.json"));
    std::ifstream configFile(configPath.toStdString());
    if (!configFile) return fail(configPath + QStringLiteral(": cannot be opened"));
    try {
        const ModelConfig config = modelConfigFromJson(nlohmann::json::parse(configFile));
        int trainTimesteps = 1000;
        const QString schedulerPath = QDir(dir).filePath(QStringLiteral("scheduler_config.json"));
        if (std::ifstream schedulerFile(schedulerPath.toStdString()); schedulerFile)
            trainTimesteps = schedulerOptionsFromJson(nlohmann::json::parse(schedulerFile)).numTrainTimesteps;
        return config.limits(trainTimesteps);
    } catch (const std::exception& e) {
        return fail(configPath + QStringLiteral(": ") + QString::fromUtf8(e.what()));
    }
}

}  // namespace tessera
