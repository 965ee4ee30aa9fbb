#include "app/qt/HistoryStore.h"

#include <algorithm>
#include <utility>

#include <QStandardPaths>

namespace tessera {

namespace {

struct Loaded {
    std::vector<HistoryEntry> entries;
    QStringList problems;
};

struct Added {
    HistoryEntry entry;
    QStringList trimmed;  // ids that add() removed to stay within the capacity
};

struct Images {
    QStringList ids;
    QList<QImage> images;
};

}  // namespace

HistoryStore::HistoryStore(QString folder, int capacity, int trashDepth, QObject* parent)
    : QObject(parent), folder_(std::move(folder)), trashDepth_(std::max(1, trashDepth)) {
    registerRunMetaTypes();  // runOpened carries a FinishedRun
    // RunHistory's default, known here without touching the disk.
    if (folder_.isEmpty())
        folder_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
    disk_ = std::make_shared<Disk>();
    disk_->folder = folder_;
    disk_->capacity = capacity;
    disk_->trashDepth = trashDepth_;
    reload();
}

HistoryStore::~HistoryStore() {
    // Deleted runs can no longer be brought back once the window is gone. The job runs after
    // every job before it; jobs_' destructor waits for it and drops the (empty) answer.
    if (removals_.empty()) return;
    jobs_.start(
        [disk = disk_] {
            if (disk->history) disk->history->purgeTrash();
            return true;
        },
        [](quint64, bool) {}, [](quint64, const QString&) {});
}

RunHistory& HistoryStore::Disk::get() {
    if (!history) history = std::make_unique<RunHistory>(folder, capacity, trashDepth);  // loads the folder
    return *history;
}

const HistoryEntry* HistoryStore::find(const QString& runId) const {
    for (const HistoryEntry& entry : entries_)
        if (entry.id() == runId) return &entry;
    return nullptr;
}

void HistoryStore::eraseEntry(const QString& runId) {
    std::erase_if(entries_, [&runId](const HistoryEntry& e) { return e.id() == runId; });
}

quint64 HistoryStore::reload() {
    reloadJob_ = jobs_.start(
        [disk = disk_] {
            const bool created = !disk->history;
            RunHistory& history = disk->get();
            if (!created) history.reload();
            return Loaded{history.entries(), history.problems()};
        },
        [this](quint64 id, Loaded result) {
            if (id != reloadJob_) return;  // a newer reload is on its way
            entries_ = std::move(result.entries);
            problems_ = std::move(result.problems);
            loaded_ = true;
            emit loaded();
        },
        [this](quint64 id, const QString& error) { emit failed(id, error); });
    return reloadJob_;
}

quint64 HistoryStore::add(std::shared_ptr<const RunResult> result, std::shared_ptr<const ImageFile> startFile) {
    return jobs_.start(
        [disk = disk_, result = std::move(result), startFile = std::move(startFile)] {
            RunHistory& history = disk->get();
            QStringList before;
            for (const HistoryEntry& entry : history.entries()) before << entry.id();
            Added added{history.add(*result, startFile.get()), {}};
            for (const QString& id : before)
                if (!history.find(id)) added.trimmed << id;
            return added;
        },
        [this](quint64 id, Added added) {
            for (const QString& gone : added.trimmed) eraseEntry(gone);
            const QString runId = added.entry.id();
            eraseEntry(runId);
            entries_.push_back(std::move(added.entry));
            emit entryAdded(id, runId, added.trimmed);
        },
        [this](quint64 id, const QString& error) { emit failed(id, error); });
}

quint64 HistoryStore::remove(const QStringList& runIds) {
    removals_.push_back(runIds);
    // The trash forgets the oldest runs beyond its depth; so does the undo list.
    qsizetype held = 0;
    for (const QStringList& group : removals_) held += group.size();
    while (!removals_.empty() && removals_.front().size() <= held - trashDepth_) {  // purged whole
        held -= removals_.front().size();
        removals_.erase(removals_.begin());
    }
    return jobs_.start(
        [disk = disk_, runIds] {
            for (const QString& runId : runIds) disk->get().moveToTrash(runId);
            return runIds;
        },
        [this](quint64 id, const QStringList& removed) {
            for (const QString& runId : removed) {
                eraseEntry(runId);
                emit entryRemoved(id, runId);
            }
        },
        [this](quint64 id, const QString& error) {
            // Not everything went to the trash: list what is on disk (Undo still brings back
            // the runs of the group that did go).
            reload();
            emit failed(id, error);
        });
}

quint64 HistoryStore::undoRemove() {
    if (removals_.empty()) return 0;
    const QStringList runIds = removals_.back();
    removals_.pop_back();
    struct Restored {
        std::vector<HistoryEntry> entries;
        QStringList missing;  // no longer in the trash
    };
    return jobs_.start(
        [disk = disk_, runIds] {
            Restored restored;
            for (const QString& runId : runIds) {
                if (disk->get().find(runId)) continue;  // never left (its removal failed)
                if (const HistoryEntry* entry = disk->get().restoreFromTrash(runId))
                    restored.entries.push_back(*entry);
                else
                    restored.missing << runId;
            }
            return restored;
        },
        [this](quint64 id, Restored restored) {
            for (HistoryEntry& entry : restored.entries) {
                const QString runId = entry.id();
                insertByStart(entries_, std::move(entry));
                emit entryRestored(id, runId);
            }
            if (!restored.missing.isEmpty())
                emit failed(id, tr("%n deleted run(s) could not be brought back: no longer in the trash (%1)", nullptr,
                                   static_cast<int>(restored.missing.size()))
                                    .arg(restored.missing.join(QStringLiteral(", "))));
        },
        [this](quint64 id, const QString& error) {
            reload();  // some runs may be back: list what is on disk
            emit failed(id, error);
        });
}

quint64 HistoryStore::loadImages(const QStringList& runIds) {
    return jobs_.start(
        [disk = disk_, runIds] {
            Images read{runIds, {}};
            for (const QString& id : runIds) read.images << disk->get().image(id);
            return read;
        },
        [this](quint64 id, const Images& read) { emit imagesAvailable(id, read.ids, read.images); },
        [this](quint64 id, const QString& error) { emit failed(id, error); });
}

quint64 HistoryStore::open(const QString& runId) {
    return jobs_.start([disk = disk_, runId] { return disk->get().open(runId); },
                       [this, runId](quint64 id, const FinishedRun& run) { emit runOpened(id, runId, run); },
                       [this](quint64 id, const QString& error) { emit failed(id, error); });
}

}  // namespace tessera
