// ControlNetCatalog: the ControlNets a person can choose in the window, as A1111 and ComfyUI keep
// them: the files (.safetensors, .pth, .ckpt, .bin) and diffusers folders (a folder holding a
// config.json) in each models folder's ControlNet/ (A1111's models/ControlNet) and controlnet/
// (ComfyUI's models/controlnet), with their subfolders (core/run/ControlNetModelFile.h looks a name
// up there). Listed by name only; nothing in them is read (a run checks a ControlNet against its
// model before any work).
//
// The folders are listed on the catalog's pool, never on the calling thread; answers come back by
// a queued signal and only the newest scan is answered. Threads: create, use and destroy on one
// thread (the GUI thread); the destructor waits for the scan in flight.
#pragma once

#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include "app/qt/JobQueue.h"
#include "app/qt/ModelFolderWalk.h"

namespace tessera {

struct ControlNetCatalogScan {
    QStringList folders;                // the models folders looked in, in order
    QList<ModelFileEntry> controlNets;  // folder by folder (ControlNet/, controlnet/), by name
};

class ControlNetCatalog : public QObject {
    Q_OBJECT
public:
    explicit ControlNetCatalog(QObject* parent = nullptr);
    ~ControlNetCatalog() override;

    // Lists the ControlNets of `modelsFolders` off this thread: answered by scanned() unless a
    // newer scan() came first. Returns the job id.
    quint64 scan(const QStringList& modelsFolders);
    int pendingJobs() const { return scans_.pending(); }

    // Lists `modelsFolders` (see above). Reads folders: never on the GUI thread.
    static ControlNetCatalogScan list(const QStringList& modelsFolders);
    // Listing stops here: a models folder pointed at / by mistake must not walk the whole disk.
    static constexpr int kMaxDepth = 3;  // the subfolder itself and two levels below it
    static constexpr int kMaxEntries = 1000;

signals:
    void scanned(quint64 jobId, const tessera::ControlNetCatalogScan& scan);

private:
    quint64 scanJob_ = 0;
    JobQueue scans_{1};  // last member: waited for first
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::ControlNetCatalogScan)
