#include "app/qt/UpscaleModelCatalog.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <utility>
#include <vector>

#include <QDateTime>
#include <QDir>
#include <QFileInfo>

#include "app/cli/UpscaleModelRun.h"
#include "app/qt/GuiThreadGuard.h"
#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"
#include "core/models/upscale/CompactGraph.h"
#include "core/models/upscale/EsrganGraph.h"
#include "core/models/upscale/SpanGraph.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/UpscaleModelFile.h"

namespace tessera {

namespace {

constexpr char kField[] = "upscale_model";

// Up to this many weights (float32: 1 GiB) a description builds the model as a run would, with
// zeros for the weights, so every key and shape is checked; a larger file has its architecture
// inferred from the shapes only.
constexpr std::int64_t kMaxCheckedWeights = std::int64_t{1} << 28;

QString qs(const std::string& text) { return QString::fromStdString(toValidUtf8(text)); }

bool hasUpscaleExtension(const QString& name) {
    for (const char* extension : kUpscaleModelExtensions)
        if (name.endsWith(QLatin1String(extension), Qt::CaseInsensitive)) return true;
    return false;
}

// Where a file sorts among the files of one folder: by name, then as a run looks a name up
// (.safetensors before .pth before .pt).
int extensionRank(const QString& path) {
    for (std::size_t i = 0; i < kUpscaleModelExtensions.size(); ++i)
        if (path.endsWith(QLatin1String(kUpscaleModelExtensions[i]), Qt::CaseInsensitive)) return static_cast<int>(i);
    return static_cast<int>(kUpscaleModelExtensions.size());
}

// The model of a file's tensor list, its weights never read: UpscaleModel::load with zeros of
// each tensor's size (every key and shape checked as a run checks them), or for a very large file
// the architecture inferred from the shapes alone.
template <class File>
UpscaleConfig configFromHeader(const File& file) {
    std::map<std::string, std::size_t> sizes;
    std::vector<StateDict::Entry> entries;
    std::int64_t total = 0;
    for (const auto& t : file.tensors()) {
        std::int64_t n = 1;
        for (const auto d : t.shape)
            n = std::min<std::int64_t>(n * static_cast<std::int64_t>(d), kMaxCheckedWeights + 1);
        total = std::min(total + n, kMaxCheckedWeights + 1);
        sizes[t.name] = static_cast<std::size_t>(n);
        entries.push_back(StateDict::Entry{t.name, {t.shape.begin(), t.shape.end()}});
    }
    const StateDict dict(
        std::move(entries),
        [&sizes](const std::string& key) {
            const auto it = sizes.find(key);
            return std::vector<float>(it == sizes.end() ? 0 : it->second, 0.0f);
        },
        file.path());
    const std::string family = detectUpscaleFamily(dict);
    if (total <= kMaxCheckedWeights || (family != "ESRGAN" && family != "Compact" && family != "SPAN"))
        return UpscaleModel::load(dict).config();  // an unknown family is refused before any weight is read
    if (family == "ESRGAN") return inferEsrganConfig(dict);
    if (family == "Compact") return inferCompactConfig(dict);
    return inferSpanConfig(dict);
}

// The first bytes tell a PyTorch checkpoint ("PK\3\4" zip, 0x80 pickle) from a safetensors file
// (u64 header length, then its JSON), as the run's reader tells them apart
// (app/cli/UpscaleModelRun.h loadUpscaleModelRun); neither: by the extension.
bool isCheckpoint(const std::string& first, const QString& path) {
    const bool safetensors = first.size() >= 9 && first[8] == '{';
    const bool pickle = first.substr(0, 4) == std::string_view("PK\3\4", 4) ||
                        (!first.empty() && static_cast<unsigned char>(first[0]) == 0x80);
    return pickle || (!safetensors && !path.endsWith(QStringLiteral(".safetensors"), Qt::CaseInsensitive));
}

void describeInto(UpscaleModelEntry& e) {
    const std::string path = e.path.toStdString();
    try {
        const BoundedFile bounded = BoundedFile::open(path, kField, kMaxUpscaleModelBytes);
        e.pickle = isCheckpoint(bounded.readAt(0, 9), e.path);
        UpscaleConfig config;
        if (e.pickle) {
            const TorchCheckpointFile file(path);
            config = configFromHeader(file);
        } else {
            const SafetensorsFile file(path);
            config = configFromHeader(file);
        }
        if (config.inChannels != 3 || config.outChannels != 3)
            throw ValidationError(
                kField, shownPath(path) + " is a model of " + std::to_string(config.inChannels) + " channels in and " +
                            std::to_string(config.outChannels) +
                            " out; Tessera upscales RGB images, with models of 3 channels in and out");
        e.family = QString::fromLatin1(toString(config.architecture));
        e.scale = config.scale;
        e.architecture = qs(config.describe());
    } catch (const std::exception& ex) {
        e.family.clear();
        e.scale = 0;
        e.error = qs(ex.what());
        // The field's name, as the run's message starts with it, is noise beside the field.
        const QString prefix = QStringLiteral("%1: ").arg(QLatin1String(kField));
        if (e.error.startsWith(prefix)) e.error = e.error.mid(prefix.size());
    }
}

}  // namespace

UpscaleModelCatalog::UpscaleModelCatalog(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tessera::UpscaleModelEntry>();
    qRegisterMetaType<tessera::UpscaleModelScan>();
}

UpscaleModelCatalog::~UpscaleModelCatalog() = default;

QStringList UpscaleModelCatalog::modelsFolders(const QString& windowModelsFolder, const std::string& runModel) {
    const char* variable = std::getenv(kModelsFolderVariable);
    QStringList folders;
    const auto add = [&folders](const QString& folder) {
        if (folder.isEmpty()) return;
        const QString clean =
            QDir::cleanPath(QDir::isAbsolutePath(folder) ? folder : QDir::current().absoluteFilePath(folder));
        if (!folders.contains(clean)) folders << clean;
    };
    for (const std::string& folder :
         upscaleModelsFolders(variable ? std::string_view(variable) : std::string_view(), runModel))
        add(QString::fromStdString(folder));
    add(windowModelsFolder);
    return folders;
}

UpscaleModelEntry UpscaleModelCatalog::describe(const QString& path, const QString& folder) {
    assertNotGuiThread("UpscaleModelCatalog::describe");
    UpscaleModelEntry e;
    const QFileInfo info(path);
    e.path = info.absoluteFilePath();
    e.name = QString::fromStdString(upscalerName(path.toStdString()));
    e.folder = folder;
    e.bytes = info.size();
    e.modified = info.lastModified().toMSecsSinceEpoch();
    describeInto(e);
    return e;
}

UpscaleModelEntry UpscaleModelCatalog::cachedDescription(const QString& path, const QString& folder) {
    const QFileInfo info(path);
    const QString key = info.absoluteFilePath();
    {
        std::lock_guard lock(cacheMutex_);
        const auto it = cache_.find(key);
        if (it != cache_.end() && it->second.bytes == info.size() &&
            it->second.modified == info.lastModified().toMSecsSinceEpoch()) {
            UpscaleModelEntry e = it->second;
            e.folder = folder;
            return e;
        }
    }
    UpscaleModelEntry e = describe(path, folder);
    std::lock_guard lock(cacheMutex_);
    cache_[key] = e;
    return e;
}

quint64 UpscaleModelCatalog::scan(const QStringList& modelsFolders, const QStringList& others) {
    scanJob_ = scans_.start(
        [this, modelsFolders, others] {
            assertNotGuiThread("UpscaleModelCatalog::scan");
            UpscaleModelScan result;
            result.folders = modelsFolders;
            QStringList seen;
            for (const QString& root : modelsFolders)
                for (const char* sub : kUpscaleModelFolders) {
                    const QString top = QDir(root).filePath(QLatin1String(sub));
                    // Breadth-first to kMaxDepth levels; links to folders are not followed.
                    QList<UpscaleModelEntry> here;
                    QStringList level{top};
                    for (int depth = 0; depth < kMaxDepth && !level.isEmpty(); ++depth) {
                        QStringList next;
                        for (const QString& dirPath : level)
                            for (const QFileInfo& info : QDir(dirPath).entryInfoList(
                                     QDir::Dirs | QDir::Files | QDir::NoDotAndDotDot, QDir::Name)) {
                                if (result.found.size() + here.size() >= kMaxEntries) break;
                                if (info.isDir()) {
                                    if (!info.isSymLink()) next << info.absoluteFilePath();
                                } else if (info.isFile() && hasUpscaleExtension(info.fileName())) {
                                    here << cachedDescription(info.absoluteFilePath(), QLatin1String(sub));
                                }
                            }
                        level = next;
                    }
                    std::stable_sort(
                        here.begin(), here.end(), [](const UpscaleModelEntry& a, const UpscaleModelEntry& b) {
                            const int byName = a.name.compare(b.name, Qt::CaseInsensitive);
                            return byName != 0 ? byName < 0 : extensionRank(a.path) < extensionRank(b.path);
                        });
                    for (const UpscaleModelEntry& e : here) seen << e.path;
                    result.found << here;
                }
            for (const QString& path : others) {
                const QString absolute = QFileInfo(path).absoluteFilePath();
                if (seen.contains(absolute)) continue;
                seen << absolute;
                result.others << cachedDescription(path, {});
            }
            return result;
        },
        [this](quint64 id, const UpscaleModelScan& result) {
            if (id == scanJob_) emit scanned(id, result);
        },
        [this, modelsFolders](quint64 id, const QString&) {
            if (id != scanJob_) return;
            UpscaleModelScan failed;  // nothing listed (the reason is per file, never for the scan)
            failed.folders = modelsFolders;
            emit scanned(id, failed);
        });
    return scanJob_;
}

}  // namespace tessera
