// RunHistory: the finished runs kept across sessions, one manifest JSON plus one run PNG per
// run (and a small "<id>.seam.json" with the seam map's mean and maximum) in a folder,
// by default QStandardPaths::AppDataLocation/history. Loaded at construction; add() writes
// at once (atomically), so a crash loses nothing already shown. Not thread-safe: the GUI
// thread owns it.
#pragma once

#include <optional>
#include <vector>

#include <QImage>
#include <QString>

#include "core/Engine.h"
#include "core/RunRecord.h"

namespace tessera {

struct HistoryEntry {
    RunRecord record;
    QString imagePath;         // the run PNG (may be missing if deleted behind our back)
    QImage thumbnail;          // at most kThumbnailSize px on its longer side; null without image
    double seamMean = -1;      // of the run's seam map; -1 when unknown
    double seamMax = -1;
    QString id() const { return QString::fromStdString(record.runId); }
    // The full-size image, read from imagePath (null when it cannot be read).
    QImage loadImage() const;
};

class RunHistory {
public:
    static constexpr int kThumbnailSize = 64;
    // Oldest runs beyond this many are removed from disk on add().
    static constexpr int kDefaultCapacity = 200;

    // folder empty: QStandardPaths::writableLocation(AppDataLocation) + "/history".
    explicit RunHistory(QString folder = {}, int capacity = kDefaultCapacity);

    const QString& folder() const { return folder_; }
    // Oldest first.
    const std::vector<HistoryEntry>& entries() const { return entries_; }
    const HistoryEntry* find(const QString& runId) const;

    // Stores a finished run (its record, image and seam statistics). Throws std::runtime_error
    // naming the file when it cannot be written; the entry is not added then.
    const HistoryEntry& add(const RunResult& result);
    // Removes a run's files and its entry; false when there is no such run.
    bool remove(const QString& runId);
    // Re-reads the folder (entries whose manifest cannot be read are skipped; see problems()).
    void reload();
    // Files skipped by the last reload, with the reason.
    const QStringList& problems() const { return problems_; }

private:
    QString manifestPath(const QString& id) const;
    QString imagePath(const QString& id) const;
    QString seamPath(const QString& id) const;
    void trim();

    QString folder_;
    int capacity_;
    std::vector<HistoryEntry> entries_;
    QStringList problems_;
};

// One line describing a run's configuration for tables: "256×256 · 20 ddim · tile 64/16 hann · cpu".
QString configSummary(const RunConfig& config);

}  // namespace tessera
