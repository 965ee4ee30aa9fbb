// RunHistory: the finished runs kept across sessions, one manifest JSON plus one run PNG per
// run (and a small "<id>.seam.json" with the seam map's mean and maximum) in a folder,
// by default QStandardPaths::AppDataLocation/history. Loaded at construction; add() writes
// at once (atomically), so a crash loses nothing already shown. Not thread-safe: one thread
// at a time, never the GUI thread (every reader and writer calls assertNotGuiThread,
// app/GuiThreadGuard.h); the window reaches it through app/HistoryStore.h, which runs it on a
// thread of its own.
//
// The folder's contents are untrusted input. Every file is named "<run id>" + suffix with a
// run id of core/SafeName's grammar, so nothing outside the folder is ever read, written or
// deleted; manifests are read through core/BoundedInput (size and nesting bounded); links
// are not followed. A manifest that breaks any of this is skipped (reported in problems()
// and logged as a warning in the "tessera.history" category), never deleted.
#pragma once

#include <optional>
#include <vector>

#include <QImage>
#include <QString>
#include <QStringList>

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
    // The full-size image, read from imagePath (null when it cannot be read). File IO: never
    // on the GUI thread.
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
    // The full-size image of run `runId` (null when there is no such run or its PNG cannot be read).
    QImage image(const QString& runId) const;

    // Stores a finished run (its record, image and seam statistics); the thumbnail is made from
    // result.image, not read back. Throws std::runtime_error naming the file when it cannot be
    // written; the entry is not added then.
    const HistoryEntry& add(const RunResult& result);
    // Removes a run's files and its entry; false when there is no such run.
    bool remove(const QString& runId);
    // Re-reads the folder. Skipped, each with a problem: files named other than
    // "<run id>.json", links, manifests too large, too deep or invalid, and manifests whose
    // run_id is not their file name. A run PNG or seam file that is a link or unreadable is
    // left out of its entry (also a problem); the entry stays.
    void reload();
    // What the last reload skipped or left out, with the file and the reason.
    const QStringList& problems() const { return problems_; }

private:
    // folder_/<id><suffix>; throws ValidationError unless `id` is a run id (core/SafeName).
    QString fileOf(const QString& id, const char* suffix) const;
    QString manifestPath(const QString& id) const;
    QString imagePath(const QString& id) const;
    QString seamPath(const QString& id) const;
    void trim();
    // The entry of manifest file `name` (in folder_), or nothing (and a problem) if it is refused.
    std::optional<HistoryEntry> readEntry(const QString& name);
    // Fills entry's seamMean/seamMax from its seam file; a problem when that cannot be read.
    void readSeamStats(HistoryEntry& entry);
    // Logs `problem` and adds it to problems_.
    void note(const QString& problem);

    QString folder_;
    int capacity_;
    std::vector<HistoryEntry> entries_;
    QStringList problems_;
};

// One line describing a run's configuration for tables: "256×256 · 20 ddim · tile 64/16 hann · cpu".
QString configSummary(const RunConfig& config);

}  // namespace tessera
