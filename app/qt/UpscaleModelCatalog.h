// UpscaleModelCatalog: the upscale models a person can choose in the window (ESRGAN, Real-ESRGAN
// Compact, SPAN: core/models/upscale/UpscaleModel.h), as A1111 and ComfyUI keep them: the files
// (.safetensors, .pth, .pt) in each models folder's ESRGAN/ then upscale_models/ (and their
// subfolders, two levels down), plus any other files asked about (one chosen with Browse…). Each is
// described from its header alone (the safetensors header, or the tensor list of a PyTorch
// checkpoint read by the restricted reader, nothing executed): its family, scale and
// architecture as the run will read them (the same detection, inference and key checks, with no
// weight read), or why it cannot be used, in the words a run refusing it would use. Descriptions
// are cached by path, size and modification time, so a scan again (the list opened anew) reads
// only files that changed.
//
// Every file is read on the catalog's pool, never on the calling thread; answers come back by a
// queued signal and only the newest scan is answered. Threads: create, use and destroy on one
// thread (the GUI thread); the destructor waits for the scan in flight.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include "app/qt/JobQueue.h"

namespace tessera {

struct UpscaleModelEntry {
    QString path;          // absolute
    QString name;          // as A1111 names it (core/run/UpscaleModelFile.h upscalerName): "4x-UltraSharp"
    QString folder;        // the subfolder it was found in ("ESRGAN", "upscale_models"); empty for others
    qint64 bytes = -1;     // the file's size
    qint64 modified = 0;   // ms since the epoch (with bytes and path, keys the description cache)
    QString family;        // "ESRGAN", "Compact", "SPAN"; empty when it cannot be used
    int scale = 0;         // the model's factor; 0 when it cannot be used
    QString architecture;  // "ESRGAN 4x, 64 features, 23 blocks"
    bool pickle = false;   // a PyTorch checkpoint (read by the restricted reader)
    QString error;         // why it cannot be used (as the run would refuse it); empty when it can
    bool usable() const { return error.isEmpty(); }
};

// What a scan found.
struct UpscaleModelScan {
    QStringList folders;              // the models folders looked in, in order
    QList<UpscaleModelEntry> found;   // folder by folder, ESRGAN/ then upscale_models/, by name
    QList<UpscaleModelEntry> others;  // the other paths asked about, in order (not those found)
};

class UpscaleModelCatalog : public QObject {
    Q_OBJECT
public:
    explicit UpscaleModelCatalog(QObject* parent = nullptr);
    ~UpscaleModelCatalog() override;

    // Lists the upscale models of `modelsFolders` and describes `others`, off this thread:
    // answered by scanned() unless a newer scan() came first. Returns the job id.
    quint64 scan(const QStringList& modelsFolders, const QStringList& others = {});
    int pendingJobs() const { return scans_.pending(); }

    // The models folders the window lists, in order, without duplicates: $TESSERA_MODELS and
    // the folder holding the folder of `runModel` (the run's diffusion model), as a run looks a
    // name up (core/run/UpscaleModelFile.h upscaleModelsFolders), then `windowModelsFolder` (the
    // model picker's; may be empty). Reads no file.
    static QStringList modelsFolders(const QString& windowModelsFolder, const std::string& runModel);
    // One file described (see above). Reads it: never on the GUI thread.
    static UpscaleModelEntry describe(const QString& path, const QString& folder = {});
    // Listing stops here: a models folder pointed at / by mistake must not walk the whole disk.
    static constexpr int kMaxDepth = 3;  // ESRGAN/ itself and two levels of subfolders
    static constexpr int kMaxEntries = 500;

signals:
    void scanned(quint64 jobId, const tessera::UpscaleModelScan& scan);

private:
    // describe() through the cache.
    UpscaleModelEntry cachedDescription(const QString& path, const QString& folder);

    std::mutex cacheMutex_;
    std::map<QString, UpscaleModelEntry> cache_;  // by path
    quint64 scanJob_ = 0;
    JobQueue scans_{1};  // last member: waited for first
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::UpscaleModelEntry)
Q_DECLARE_METATYPE(tessera::UpscaleModelScan)
