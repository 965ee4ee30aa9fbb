// HistoryStore: the run history as the window's thread sees it. Every file of the history is
// read and written by a RunHistory (app/qt/RunHistory.h) on a thread of its own (a JobQueue of
// one thread, so loading, adding, deleting, restoring and image reads happen one at a time, in
// the order they were asked for); this object keeps a copy of the entries (thumbnails
// included) that the window reads without touching a file, and updates it when the answers
// arrive, by queued signal in the style of KDAB/hotspot (`loaded`, `entryAdded`,
// `entryRemoved`, `entryRestored`, `imagesAvailable`, `runOpened`, `failed(jobId, message)`).
//
// Deleting is undoable: remove() moves the runs to the history's trash and undoRemove() brings
// the last removed ones back; the trash is emptied when this object is destroyed (the window
// closing) and keeps at most `trashDepth` runs before that.
//
// Threads: create, use and destroy on one thread (the GUI thread). The destructor empties the
// trash and waits for the history IO in flight (a write is never cut short), dropping answers.
#pragma once

#include <memory>
#include <vector>

#include <QImage>
#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include "app/qt/JobQueue.h"
#include "app/qt/RunHistory.h"
#include "app/qt/RunWorker.h"
#include "core/run/Engine.h"

namespace tessera {

class HistoryStore : public QObject {
    Q_OBJECT
public:
    // Starts loading `folder` (empty: RunHistory's default folder) at once; loaded() says when
    // entries() holds it. Runs beyond `capacity` are removed, oldest first, when one is added;
    // the trash keeps the last `trashDepth` deleted runs for undoRemove().
    explicit HistoryStore(QString folder = {}, int capacity = RunHistory::kDefaultCapacity,
                          int trashDepth = RunHistory::kDefaultTrashDepth, QObject* parent = nullptr);
    ~HistoryStore() override;

    const QString& folder() const { return folder_; }
    // True once the first load has been answered.
    bool isLoaded() const { return loaded_; }
    // The entries as last reported, oldest first. Empty until loaded().
    const std::vector<HistoryEntry>& entries() const { return entries_; }
    const HistoryEntry* find(const QString& runId) const;
    // What the last load skipped or left out (RunHistory::problems).
    const QStringList& problems() const { return problems_; }
    // Requests not answered yet (0: entries() is what is on disk, as far as this object knows).
    int pendingJobs() const { return jobs_.pending(); }
    // The runs undoRemove() would bring back (the last remove() whose runs are still in the
    // trash, as far as this object knows); empty when there is nothing to undo.
    QStringList undoableRemoval() const { return removals_.empty() ? QStringList() : removals_.back(); }

    // Each returns the job's id; the answer is the signal named.
    // Re-reads the folder: loaded(). Answers of earlier reloads still in flight are dropped.
    quint64 reload();
    // Stores a run, finished, cancelled or failed (its PNG is encoded and written off this
    // thread), with the start image file it decoded if any: entryAdded, or failed when it
    // cannot be written.
    quint64 add(std::shared_ptr<const RunResult> result, std::shared_ptr<const ImageFile> startFile = nullptr);
    // Moves runs to the trash: entryRemoved once per run (also for a run not in the history:
    // nothing to do), or failed. The group can be brought back with undoRemove().
    quint64 remove(const QStringList& runIds);
    quint64 remove(const QString& runId) { return remove(QStringList{runId}); }
    // Brings the runs of the last remove() back: entryRestored once per run, failed for a run
    // the trash no longer holds. 0 (no job) when there is nothing to undo.
    quint64 undoRemove();
    // Reads the full-size images of `runIds`: imagesAvailable, one image per id, in order (a
    // null image for a run not in the history or whose PNG cannot be read).
    quint64 loadImages(const QStringList& runIds);
    // Reads run `runId` whole (RunHistory::open): runOpened, or failed when it is not in the
    // history.
    quint64 open(const QString& runId);

signals:
    // entries() and problems() now hold what a load found.
    void loaded();
    // Run `runId` was written and is the newest of entries(); `trimmed`: older runs removed to
    // stay within the capacity (gone from entries() too).
    void entryAdded(quint64 jobId, const QString& runId, const QStringList& trimmed);
    void entryRemoved(quint64 jobId, const QString& runId);
    // Run `runId` is back from the trash (in entries() again, in start order).
    void entryRestored(quint64 jobId, const QString& runId);
    void imagesAvailable(quint64 jobId, const QStringList& runIds, const QList<QImage>& images);
    void runOpened(quint64 jobId, const QString& runId, const tessera::FinishedRun& run);
    void failed(quint64 jobId, const QString& error);

private:
    // The history on disk: touched only inside the jobs, which run one at a time.
    struct Disk {
        QString folder;
        int capacity = RunHistory::kDefaultCapacity;
        int trashDepth = RunHistory::kDefaultTrashDepth;
        std::unique_ptr<RunHistory> history;  // made (and so loaded) by the first job
        RunHistory& get();
    };
    void eraseEntry(const QString& runId);

    QString folder_;
    std::shared_ptr<Disk> disk_;
    std::vector<HistoryEntry> entries_;
    QStringList problems_;
    std::vector<QStringList> removals_;  // the groups remove() trashed, oldest first
    int trashDepth_;
    bool loaded_ = false;
    quint64 reloadJob_ = 0;  // the newest reload: the only one whose answer is used
    JobQueue jobs_{1};       // last member: destroyed (waited for) first
};

}  // namespace tessera
