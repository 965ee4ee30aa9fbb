// RunHistory: the runs kept across sessions, finished, cancelled and failed alike: one
// manifest JSON per run, plus, when there is one, its run PNG, a small "<id>.seam.json" with
// the seam map's mean and maximum, and a copy of its start image ("<id>.init.png" or
// "<id>.init.jpg", the bytes the run decoded), in a folder, by default
// QStandardPaths::AppDataLocation/history. Loaded at construction; add() writes at once
// (atomically, all files or none), so a crash loses nothing already shown. Not thread-safe:
// one thread at a time, never the GUI thread (every reader and writer calls
// assertNotGuiThread, app/qt/GuiThreadGuard.h); the window reaches it through
// app/qt/HistoryStore.h, which runs it on a thread of its own.
//
// Deleting is undoable: moveToTrash() moves a run's files into the folder's "trash" subfolder
// (same names) and restoreFromTrash() moves them back. The trash keeps the last `trashDepth`
// runs moved there and deletes older ones; purgeTrash() empties it (the window does at exit,
// and construction does, for what a session that ended without it left).
//
// The folder's contents are untrusted input. Every file is named "<run id>" + suffix with a
// run id of core/SafeName's grammar, so nothing outside the folder is ever read, written or
// deleted; manifests are read through core/BoundedInput (size and nesting bounded); links
// are not followed (a trash folder that is a link is refused, not used). A manifest that
// breaks any of this is skipped (reported in problems() and logged as a warning in the
// "tessera.history" category), never deleted.
#pragma once

#include <optional>
#include <vector>

#include <QImage>
#include <QString>
#include <QStringList>

#include "app/cli/InitImage.h"
#include "core/run/Engine.h"
#include "core/run/RunRecord.h"

namespace tessera {

struct FinishedRun;

struct HistoryEntry {
    RunRecord record;
    QString imagePath;       // the run PNG (may be missing if deleted behind our back); empty without image
    QString startImagePath;  // the copy of its start image; empty for a run from noise
    QImage thumbnail;        // at most kThumbnailSize px on its longer side; null without image
    double seamMean = -1;    // of the run's seam map; -1 when unknown
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
    // Deleted runs kept in the trash for Undo; older ones are deleted for good.
    static constexpr int kDefaultTrashDepth = 20;

    // folder empty: QStandardPaths::writableLocation(AppDataLocation) + "/history". Empties
    // the trash a session left behind.
    explicit RunHistory(QString folder = {}, int capacity = kDefaultCapacity, int trashDepth = kDefaultTrashDepth);

    const QString& folder() const { return folder_; }
    // folder()/trash: where deleted runs wait for Undo.
    QString trashFolder() const;
    // Oldest first.
    const std::vector<HistoryEntry>& entries() const { return entries_; }
    const HistoryEntry* find(const QString& runId) const;
    // The full-size image of run `runId` (null when there is no such run or its PNG cannot be read).
    QImage image(const QString& runId) const;
    // Run `runId` as the window shows a run that just ended: its record, its image (as a
    // model-space tensor too, so it exports as a fresh run does) and its start image resampled
    // to the canvas as the engine took it. Either image is null when the run has none or its
    // file cannot be read (a warning is logged). Throws std::runtime_error for a run that is
    // not in the history.
    FinishedRun open(const QString& runId) const;

    // Stores a run (its record, image if any, seam statistics if any, and `startFile`, the
    // start image it decoded, if any); the thumbnail is made from result.image, not read back.
    // Throws std::runtime_error naming the file when it cannot be written; the entry is not
    // added then, and none of its files remain.
    const HistoryEntry& add(const RunResult& result, const ImageFile* startFile = nullptr);
    // Removes a run's files and its entry for good; false when there is no such run.
    bool remove(const QString& runId);
    // Moves a run's files into the trash and drops its entry; false when there is no such
    // run. Runs beyond the trash depth are then deleted, oldest first. Throws
    // std::runtime_error when the trash cannot be used (not a folder, a link, not writable).
    bool moveToTrash(const QString& runId);
    // Moves run `runId` back from the trash and lists it again: its entry, or nullptr when it
    // is no longer there (purged, or trashed by another session). Throws std::runtime_error
    // when its files cannot be moved back.
    const HistoryEntry* restoreFromTrash(const QString& runId);
    // Run ids in the trash, oldest first (those moved there by this object and still there).
    const QStringList& trashed() const { return trashed_; }
    // Deletes every run file in the trash (other files there are left alone).
    void purgeTrash();
    // Re-reads the folder. Skipped, each with a problem: files named other than
    // "<run id>.json", links, manifests too large, too deep or invalid, and manifests whose
    // run_id is not their file name. A run PNG, start image copy or seam file that is a link
    // or unreadable is left out of its entry (also a problem); the entry stays.
    void reload();
    // What the last reload skipped or left out, with the file and the reason.
    const QStringList& problems() const { return problems_; }

private:
    // folder_/<id><suffix>; throws ValidationError unless `id` is a run id (core/SafeName).
    QString fileOf(const QString& id, const char* suffix) const;
    QString manifestPath(const QString& id) const;
    QString imagePath(const QString& id) const;
    QString seamPath(const QString& id) const;
    // trashFolder() after checking it is a plain folder (created when missing).
    QString usableTrash() const;
    // Moves every file of run `id` from `from` to `to` (folders), the manifest first or last.
    void moveRunFiles(const QString& id, const QString& from, const QString& to, bool manifestFirst) const;
    void trim();
    // purgeTrash without the thread check (construction has made it already).
    void deleteTrashedFiles();
    // The entry of manifest file `name` (in folder_), or nothing (and a problem) if it is refused.
    std::optional<HistoryEntry> readEntry(const QString& name);
    // Fills entry's seamMean/seamMax from its seam file; a problem when that cannot be read.
    void readSeamStats(HistoryEntry& entry);
    // Sets entry's startImagePath to its start image copy when there is a usable one.
    void findStartImage(HistoryEntry& entry);
    // Logs `problem` and adds it to problems_.
    void note(const QString& problem);

    QString folder_;
    int capacity_;
    int trashDepth_;
    std::vector<HistoryEntry> entries_;
    QStringList trashed_;
    QStringList problems_;
};

// Puts `entry` into `entries` (oldest first) where its start time belongs, replacing an entry
// of the same run.
void insertByStart(std::vector<HistoryEntry>& entries, HistoryEntry entry);

// One line describing a run's configuration for tables: "256×256 · 20 ddim · tile 64/16 hann · cpu".
QString configSummary(const RunConfig& config);
// A run's summary as configSummary says it, but for a FLUX.1 run (RunRecord::flowMatching: it sampled by flow
// matching): the sampler as "flow Euler" and the embedded guidance in place of cfg and clip skip,
// which FLUX does not use.
QString configSummary(const RunRecord& record);
// Whether the record's run sampled a FLUX.1 model (RunRecord::flowMatching).
bool ranFlowMatching(const RunRecord& record);

}  // namespace tessera
