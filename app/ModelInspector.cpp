#include "app/ModelInspector.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <QDir>
#include <QFileInfo>

#include "app/GuiThreadGuard.h"
#include "app/ModelLocator.h"

namespace tessera {

namespace {

// The files a folder's limits are read from (core/UNetModel readModelFolderConfig: a model
// folder or a pipeline folder with unet/ and scheduler/), each as modification time and size;
// -1 for a file that is not there. Equal stamps: the limits read before still hold.
std::vector<qint64> stampOf(const QString& folder) {
    assertNotGuiThread("ModelInspector stampOf");
    std::vector<qint64> stamp;
    const QDir dir(folder);
    for (const char* name : {"config.json", "unet/config.json", "scheduler_config.json", "scheduler/scheduler_config.json"}) {
        const QFileInfo info(dir.filePath(QString::fromLatin1(name)));
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
        if (!QFileInfo(folder).isDir()) {
            result.error = QStringLiteral("'%1' is not a folder").arg(folder);
            return result;
        }
        const std::vector<qint64> stamp = stampOf(folder);
        {
            std::lock_guard lock(mutex);
            const auto it = entries.find(folder);
            if (it != entries.end() && it->second.stamp == stamp) return it->second.inspection;
        }
        reads.fetch_add(1);
        result.limits = ModelLocator::readLimits(folder, &result.error);
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
                                  if (id == inspectJob_) emit inspected(id, ModelInspection{folder, std::nullopt, error});
                              });
    return inspectJob_;
}

quint64 ModelInspector::locateDefault(const QString& executableDir) {
    return jobs_.start([executableDir] { return ModelLocator(executableDir).defaultModelFolder(); },
                       [this](quint64, const QString& folder) { emit defaultModelLocated(folder); },
                       [this](quint64, const QString&) { emit defaultModelLocated({}); });
}

}  // namespace tessera
