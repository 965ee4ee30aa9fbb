#include "app/HistoryStore.h"

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

HistoryStore::HistoryStore(QString folder, int capacity, QObject* parent) : QObject(parent), folder_(std::move(folder)) {
    // RunHistory's default, known here without touching the disk.
    if (folder_.isEmpty())
        folder_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
    disk_ = std::make_shared<Disk>();
    disk_->folder = folder_;
    disk_->capacity = capacity;
    reload();
}

HistoryStore::~HistoryStore() = default;

RunHistory& HistoryStore::Disk::get() {
    if (!history) history = std::make_unique<RunHistory>(folder, capacity);  // loads the folder
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

quint64 HistoryStore::add(std::shared_ptr<const RunResult> result) {
    return jobs_.start(
        [disk = disk_, result = std::move(result)] {
            RunHistory& history = disk->get();
            QStringList before;
            for (const HistoryEntry& entry : history.entries()) before << entry.id();
            Added added{history.add(*result), {}};
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

quint64 HistoryStore::remove(const QString& runId) {
    return jobs_.start(
        [disk = disk_, runId] {
            disk->get().remove(runId);
            return runId;
        },
        [this](quint64 id, const QString& removed) {
            eraseEntry(removed);
            emit entryRemoved(id, removed);
        },
        [this](quint64 id, const QString& error) { emit failed(id, error); });
}

quint64 HistoryStore::loadImages(const QStringList& runIds) {
    return jobs_.start(
        [disk = disk_, runIds] {
            Images read{runIds, {}};
            for (const QString& id : runIds) read.images << disk->get().image(id);
            return read;
        },
        [this](quint64 id, Images read) { emit imagesAvailable(id, read.ids, read.images); },
        [this](quint64 id, const QString& error) { emit failed(id, error); });
}

}  // namespace tessera
