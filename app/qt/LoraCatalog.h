// LoraCatalog: the LoRAs and separate VAEs a person can choose in the window, as A1111 and ComfyUI
// keep them: the LoRA files (.safetensors, .pt, .ckpt) in each models folder's Lora/, LyCORIS/ and
// loras/ (core/run/LoraModelFile.h, with their subfolders, as A1111's Extra Networks tab lists
// them), and the VAE files in VAE/ and vae/ (core/run/VaeFile.h). Files are listed by name only;
// nothing in them is read (a run checks a LoRA against its model before any work).
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

struct LoraCatalogScan {
    QStringList folders;          // the models folders looked in, in order
    QList<ModelFileEntry> loras;  // folder by folder (Lora/, LyCORIS/, loras/), by name
    QList<ModelFileEntry> vaes;   // folder by folder (VAE/, vae/), by name
    // FLUX.1's separate CLIP-L and T5 files, folder by folder (text_encoders/, clip/), by name.
    QList<ModelFileEntry> textEncoders;
};

class LoraCatalog : public QObject {
    Q_OBJECT
public:
    explicit LoraCatalog(QObject* parent = nullptr);
    ~LoraCatalog() override;

    // Lists the LoRAs and VAEs of `modelsFolders` off this thread: answered by scanned() unless a
    // newer scan() came first. Returns the job id.
    quint64 scan(const QStringList& modelsFolders);
    int pendingJobs() const { return scans_.pending(); }

    // Lists `modelsFolders` (see above). Reads folders: never on the GUI thread.
    static LoraCatalogScan list(const QStringList& modelsFolders);
    // Listing stops here: a models folder pointed at / by mistake must not walk the whole disk.
    static constexpr int kMaxDepth = 3;  // the subfolder itself and two levels below it
    static constexpr int kMaxEntries = 2000;

signals:
    void scanned(quint64 jobId, const tessera::LoraCatalogScan& scan);

private:
    quint64 scanJob_ = 0;
    JobQueue scans_{1};  // last member: waited for first
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::LoraCatalogScan)
