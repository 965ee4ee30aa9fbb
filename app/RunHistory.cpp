#include "app/RunHistory.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

#include <nlohmann/json.hpp>

#include "app/Exporters.h"
#include "app/PngIO.h"
#include "core/ImageOps.h"
#include "core/RunRecordIO.h"

namespace tessera {

namespace {

QImage thumbnailOf(const QImage& image) {
    if (image.isNull()) return {};
    return image.scaled(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize, Qt::KeepAspectRatio,
                        Qt::SmoothTransformation);
}

std::string readAll(const QString& path) {
    std::ifstream file(path.toStdString(), std::ios::binary);
    if (!file) throw std::runtime_error(path.toStdString() + ": cannot be opened");
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

}  // namespace

QImage HistoryEntry::loadImage() const { return imagePath.isEmpty() ? QImage() : QImage(imagePath); }

RunHistory::RunHistory(QString folder, int capacity) : folder_(std::move(folder)), capacity_(std::max(1, capacity)) {
    if (folder_.isEmpty())
        folder_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
    reload();
}

QString RunHistory::manifestPath(const QString& id) const { return folder_ + QLatin1Char('/') + id + QStringLiteral(".json"); }
QString RunHistory::imagePath(const QString& id) const { return folder_ + QLatin1Char('/') + id + QStringLiteral(".png"); }
QString RunHistory::seamPath(const QString& id) const { return folder_ + QLatin1Char('/') + id + QStringLiteral(".seam.json"); }

const HistoryEntry* RunHistory::find(const QString& runId) const {
    for (const HistoryEntry& entry : entries_)
        if (entry.id() == runId) return &entry;
    return nullptr;
}

void RunHistory::reload() {
    entries_.clear();
    problems_.clear();
    const QDir dir(folder_);
    if (!dir.exists()) return;
    // Manifests only: "<id>.json", not "<id>.seam.json".
    const QStringList names = dir.entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name);
    for (const QString& name : names) {
        if (name.endsWith(QStringLiteral(".seam.json"))) continue;
        const QString path = dir.filePath(name);
        try {
            HistoryEntry entry;
            entry.record = runRecordFromManifest(nlohmann::json::parse(readAll(path)));
            if (entry.record.runId.empty()) entry.record.runId = QFileInfo(name).completeBaseName().toStdString();
            const QString id = entry.id();
            if (QFileInfo(imagePath(id)).isFile()) {
                entry.imagePath = imagePath(id);
                entry.thumbnail = thumbnailOf(QImage(entry.imagePath));
            }
            if (QFileInfo(seamPath(id)).isFile()) {
                const nlohmann::json seam = nlohmann::json::parse(readAll(seamPath(id)));
                entry.seamMean = seam.value("mean", -1.0);
                entry.seamMax = seam.value("max", -1.0);
            }
            entries_.push_back(std::move(entry));
        } catch (const std::exception& e) {
            problems_ << QStringLiteral("%1: %2").arg(QDir::toNativeSeparators(path), QString::fromUtf8(e.what()));
        }
    }
    // Run ids start with the UTC time, but order by the recorded start to be safe.
    std::stable_sort(entries_.begin(), entries_.end(), [](const HistoryEntry& a, const HistoryEntry& b) {
        return a.record.startedAt < b.record.startedAt;
    });
}

const HistoryEntry& RunHistory::add(const RunResult& result) {
    if (!QDir().mkpath(folder_))
        throw std::runtime_error(folder_.toStdString() + ": the history folder cannot be created");
    HistoryEntry entry;
    entry.record = result.record;
    if (entry.record.runId.empty()) entry.record.runId = newRunId();
    const QString id = entry.id();
    // One all-or-nothing set, the manifest last: reload() lists runs by manifest, so a run is
    // only seen once complete, and a failed write leaves none of its files (core/OutputSet.h).
    OutputSet files;
    if (!result.image.data.empty())
        files.add(imagePath(id).toStdString(), exportBytes(result, ExportFormat::ImagePng, imagePath(id).toStdString()));
    if (!result.seamMap.data.empty()) {
        const SeamStats stats = seamStats(result.seamMap);
        entry.seamMean = stats.mean;
        entry.seamMax = stats.max;
        files.addText(seamPath(id).toStdString(), jsonText(nlohmann::json{{"mean", stats.mean}, {"max", stats.max}}) + "\n");
    }
    files.addText(manifestPath(id).toStdString(), jsonText(manifestJson(entry.record), 2) + "\n");
    files.commit();
    if (!result.image.data.empty()) {
        entry.imagePath = imagePath(id);
        entry.thumbnail = thumbnailOf(QImage(entry.imagePath));
    }
    std::erase_if(entries_, [&id](const HistoryEntry& e) { return e.id() == id; });
    entries_.push_back(std::move(entry));
    trim();
    return entries_.back();
}

bool RunHistory::remove(const QString& runId) {
    const auto it = std::find_if(entries_.begin(), entries_.end(), [&runId](const HistoryEntry& e) { return e.id() == runId; });
    if (it == entries_.end()) return false;
    QFile::remove(manifestPath(runId));  // first, so a half-removed run is not listed again
    QFile::remove(imagePath(runId));
    QFile::remove(seamPath(runId));
    entries_.erase(it);
    return true;
}

void RunHistory::trim() {
    while (static_cast<int>(entries_.size()) > capacity_) remove(entries_.front().id());
}

QString configSummary(const RunConfig& c) {
    return QStringLiteral("%1×%2 · %3 %4 · tile %5/%6 %7 · %8")
        .arg(c.width)
        .arg(c.height)
        .arg(c.steps)
        .arg(QString::fromUtf8(toString(c.scheduler).data(), static_cast<qsizetype>(toString(c.scheduler).size())))
        .arg(c.tile)
        .arg(c.overlapPixels())
        .arg(QString::fromUtf8(toString(c.window).data(), static_cast<qsizetype>(toString(c.window).size())))
        .arg(QString::fromUtf8(toString(c.backend).data(), static_cast<qsizetype>(toString(c.backend).size())));
}

}  // namespace tessera
