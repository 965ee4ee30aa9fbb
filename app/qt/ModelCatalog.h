// ModelCatalog: the models a person can pick. Lists a models folder (Stable Diffusion
// .safetensors checkpoints and diffusers folders, found up to three levels down) and any paths
// asked about (the recently used ones), each with its family (SD1 / SD2 / SDXL / pixel), size
// on disk and an info-style description, plus random:sd15 / random:sd21 / random:sdxl. A
// checkpoint's short hash (A1111's: the first 10 hex digits of its SHA-256) is computed only
// when asked for (requestHash), one file at a time, and cached by path, size and modification
// time: a file is hashed once per process unless it changes. Only files whose safetensors header
// reads are hashed; a hash stops (hashStopped) when another is asked for, when cancelHash() is
// called (the picker does when its row changes or it closes) or when the catalog is destroyed,
// and files over kMaxHashBytes are not hashed at all.
//
// Every file is read on the catalog's own pools, never on the calling thread; answers come
// back by queued signal. Threads: create, use and destroy on one thread (the GUI thread); the
// destructor stops a hash in progress at its next block and waits for the jobs.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include "app/qt/JobQueue.h"

namespace tessera {

struct CatalogEntry {
    QString path;             // absolute path, or random:sd15 / random:sd21 / random:sdxl
    QString name;             // as listed: the file or folder name relative to the models folder
    QString family;           // "SD1", "SD2", "SDXL", "pixel"; "?" when it cannot be used
    qint64 bytes = -1;        // the file, or every file in the folder; -1 for random weights
    qint64 modified = 0;      // ms since the epoch (with bytes, keys the hash cache)
    bool checkpoint = false;  // a .safetensors file whose header reads: it has an A1111 short hash
    QString details;          // several lines, as `tessera-cli info` would describe it
    QString error;            // why it cannot be used (family "?"), empty otherwise
};

// What a scan found: the models folder's entries and the other paths asked about.
struct CatalogScan {
    QString folder;
    QString folderError;           // the folder cannot be listed (empty folder: no error)
    QList<CatalogEntry> inFolder;  // sorted by name
    QList<CatalogEntry> others;    // in the order asked (recent models), each described
};

class ModelCatalog : public QObject {
    Q_OBJECT
public:
    explicit ModelCatalog(QObject* parent = nullptr);
    ~ModelCatalog() override;

    // Lists `folder` (may be empty: nothing listed) and describes `others`, off this thread:
    // answered by scanned() unless a newer scan() came first. Returns the job id.
    quint64 scan(const QString& folder, const QStringList& others = {});
    // The short hash of checkpoint `entry`: from the cache at once (hashed() is still emitted,
    // queued), else computed off this thread. A hash of another file in progress or waiting
    // stops (hashStopped): only the newest request is worked on. Entries that are not
    // checkpoints are ignored.
    void requestHash(const CatalogEntry& entry);
    // Stops the hash in progress or waiting, if any (hashStopped follows, queued).
    void cancelHash();
    // The cached short hash of `entry` (nullopt when not hashed yet or changed since).
    std::optional<QString> cachedHash(const CatalogEntry& entry) const;
    // Files hashed (cache misses) since construction.
    int hashesComputed() const { return hashesComputed_.load(); }
    // Hashes that began reading a file since construction (finished, stopped or failed).
    int hashesStarted() const { return hashesStarted_.load(); }
    int pendingJobs() const { return scans_.pending() + hashes_.pending(); }

    // The random-weight models, always offered.
    static QList<CatalogEntry> randomEntries();
    // One model (a file, a folder or random:*) as the catalog lists it. Reads files: never on
    // the GUI thread.
    static CatalogEntry describe(const QString& path, const QString& shownName = {});
    // Where the hashing stops: a 7 GB file hashes in tens of seconds.
    static constexpr std::size_t kHashBlockBytes = std::size_t{4} << 20;
    // Larger files are not hashed: the largest single-file checkpoints of the families Tessera
    // runs or plans (SDXL with EMA weights in fp32, FLUX.1 in fp32) stay under 48 GB, and a
    // hash reads the whole file (about a CPU-minute per 20 GB).
    static constexpr std::uint64_t kMaxHashBytes = std::uint64_t{64} << 30;

signals:
    void scanned(quint64 jobId, const tessera::CatalogScan& scan);
    // `shortHash` is 10 lowercase hex digits, or empty with `error` saying why.
    void hashed(const QString& path, const QString& shortHash, const QString& error);
    // The hash of `path` was stopped before it ended (another was asked for, cancelHash, or the
    // catalog is going); asking again starts it over.
    void hashStopped(const QString& path);

private:
    struct HashKey {
        qint64 bytes = -1, modified = 0;
        QString hash;
    };
    mutable std::mutex cacheMutex_;
    std::map<QString, HashKey> cache_;  // by path
    std::shared_ptr<std::atomic<bool>> stopping_ = std::make_shared<std::atomic<bool>>(false);
    std::atomic<int> hashesComputed_{0};
    std::atomic<int> hashesStarted_{0};
    // The stop flag of the newest hash request (set: that hash stops at its next block) and the
    // file it is for.
    std::shared_ptr<std::atomic<bool>> hashStop_;
    QString hashPath_;
    quint64 scanJob_ = 0;
    JobQueue hashes_{1};  // one file at a time: hashing is bound by the disk
    JobQueue scans_{1};   // last member: waited for first
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::CatalogEntry)
Q_DECLARE_METATYPE(tessera::CatalogScan)
