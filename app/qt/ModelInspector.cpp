#include "app/qt/ModelInspector.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <QDir>
#include <QFileInfo>
#include <QStringList>

#include "app/qt/GuiThreadGuard.h"
#include "app/qt/ModelLocator.h"
#include "app/qt/RunWorker.h"
#include "core/models/sd/SdModel.h"

namespace tessera {

namespace {

// The files a folder's limits are read from (core/UNetModel readModelFolderConfig: a model
// folder or a pipeline folder with unet/ and scheduler/), each as modification time and size;
// -1 for a file that is not there. Equal stamps: the limits read before still hold.
std::vector<qint64> stampOf(const QString& folder) {
    assertNotGuiThread("ModelInspector stampOf");
    std::vector<qint64> stamp;
    const QDir dir(folder);
    QStringList files{folder};  // a checkpoint file; a folder's own time changes with its entries
    for (const char* name : {"config.json", "unet/config.json", "scheduler_config.json",
                             "scheduler/scheduler_config.json", "model_index.json", "vae/config.json"})
        files << dir.filePath(QString::fromLatin1(name));
    for (const QString& file : files) {
        const QFileInfo info(file);
        const bool there = info.exists();
        stamp.push_back(there ? info.lastModified().toMSecsSinceEpoch() : -1);
        stamp.push_back(there ? info.size() : -1);
    }
    return stamp;
}

}  // namespace

struct ModelInspector::Cache {
    struct Entry {
        std::vector<qint64> stamp;
        ModelInspection inspection;
    };
    std::mutex mutex;
    std::map<QString, Entry> entries;  // by folder as asked
    std::atomic<int> reads{0};

    ModelInspection inspect(const QString& folder) {
        ModelInspection result{folder, std::nullopt, {}};
        const bool random = folder.startsWith(QString::fromLatin1(kRandomModelPrefix));
        result.stableDiffusion = random || ModelLocator::isStableDiffusion(folder);
        if (ModelLocator::isFlux(folder, &result.flux)) {
            // A token is 2 x 2 latent pixels of 8: sizes, tiles and overlaps in 16-px cells.
            result.stableDiffusion = true;
            result.pixelMultiple = 16;
            result.limits = ModelLimits{16, 1000, 3};
            return result;
        }
        if (random) {  // nothing to read or cache
            result.limits = ModelLocator::readSdLimits(folder, &result.pixelMultiple, &result.error, &result.family);
            return result;
        }
        if (!result.stableDiffusion && !QFileInfo(folder).isDir()) {
            const QString choose = QStringLiteral(
                "; choose a Stable Diffusion pipeline folder (with model_index.json), "
                "a .safetensors checkpoint or a UNet2DModel folder (with config.json)");
            const QString link = ModelLocator::brokenLink(folder);
            result.error =
                (!link.isEmpty()             ? link
                 : QFileInfo::exists(folder) ? QStringLiteral("'%1' is neither a model folder nor a .safetensors "
                                                              "checkpoint")
                                                   .arg(folder)
                                             : QStringLiteral("'%1' is not a folder: nothing is there").arg(folder)) +
                choose;
            return result;
        }
        const std::vector<qint64> stamp = stampOf(folder);
        {
            std::lock_guard lock(mutex);
            const auto it = entries.find(folder);
            if (it != entries.end() && it->second.stamp == stamp) return it->second.inspection;
        }
        reads.fetch_add(1);
        result.limits = result.stableDiffusion
                            ? ModelLocator::readSdLimits(folder, &result.pixelMultiple, &result.error, &result.family)
                            : ModelLocator::readLimits(folder, &result.error);
        std::lock_guard lock(mutex);
        entries[folder] = Entry{stamp, result};
        return result;
    }
};

ModelInspector::ModelInspector(QObject* parent) : QObject(parent), cache_(std::make_shared<Cache>()) {
    qRegisterMetaType<tessera::ModelInspection>();
}

ModelInspector::~ModelInspector() = default;

int ModelInspector::configurationReads() const { return cache_->reads.load(); }

quint64 ModelInspector::inspect(const QString& folder) {
    inspectJob_ = jobs_.start([cache = cache_, folder] { return cache->inspect(folder); },
                              [this](quint64 id, const ModelInspection& inspection) {
                                  if (id == inspectJob_) emit inspected(id, inspection);
                              },
                              [this, folder](quint64 id, const QString& error) {
                                  if (id == inspectJob_)
                                      emit inspected(id, ModelInspection{folder, std::nullopt, error});
                              });
    return inspectJob_;
}

quint64 ModelInspector::locateDefault(const QString& executableDir) {
    return jobs_.start([executableDir] { return ModelLocator(executableDir).defaultModelFolder(); },
                       [this](quint64, const QString& folder) { emit defaultModelLocated(folder); },
                       [this](quint64, const QString&) { emit defaultModelLocated({}); });
}

}  // namespace tessera
