#include "app/qt/RunHistory.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QStandardPaths>

#include <nlohmann/json.hpp>

#include "app/cli/PngIO.h"
#include "app/qt/Exporters.h"
#include "app/qt/GuiThreadGuard.h"
#include "app/qt/RunWorker.h"
#include "core/base/BoundedInput.h"
#include "core/base/SafeName.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"
#include "core/run/SamplerNames.h"
#include "core/sampling/ImageOps.h"

namespace tessera {

Q_LOGGING_CATEGORY(lcHistory, "tessera.history")

namespace {

// "<id>.seam.json" holds two numbers; anything much larger was not written by Tessera.
constexpr std::size_t kSeamBytes = 4096;

// Every file a run may have, manifest first; the start image copy has one of two suffixes.
constexpr std::array<const char*, 5> kRunFileSuffixes{".json", ".png", ".seam.json", ".init.png", ".init.jpg"};
constexpr std::array<const char*, 2> kStartImageSuffixes{".init.png", ".init.jpg"};

// `image` (RGB888) made `factor` times smaller on each side, each pixel the mean of the box of
// pixels it covers (the last row and column of boxes may be cut short), read in place.
QImage boxReduced(const QImage& image, int factor) {
    const int width = (image.width() + factor - 1) / factor, height = (image.height() + factor - 1) / factor;
    QImage out(width, height, QImage::Format_RGB888);
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(width) * 3);
    for (int y = 0; y < height; ++y) {
        std::fill(sums.begin(), sums.end(), 0);
        const int top = y * factor, bottom = std::min(image.height(), top + factor);
        for (int row = top; row < bottom; ++row) {
            const uchar* pixel = image.constScanLine(row);
            for (int x = 0; x < image.width(); ++x, pixel += 3) {
                std::uint64_t* sum = &sums[static_cast<std::size_t>(x / factor) * 3];
                sum[0] += pixel[0];
                sum[1] += pixel[1];
                sum[2] += pixel[2];
            }
        }
        uchar* target = out.scanLine(y);
        for (int x = 0; x < width; ++x) {
            const int columns = std::min(image.width(), (x + 1) * factor) - x * factor;
            const auto count = static_cast<std::uint64_t>(columns) * static_cast<std::uint64_t>(bottom - top);
            for (int c = 0; c < 3; ++c)
                target[x * 3 + c] = static_cast<uchar>((sums[static_cast<std::size_t>(x) * 3 + c] + count / 2) / count);
        }
    }
    return out;
}

// The history's thumbnail of `image`. A large image is first box-reduced in place to about twice
// the thumbnail's size: QImage::scaled would convert the whole image to 32 bits a pixel first.
QImage thumbnailOf(QImage image) {
    if (image.isNull()) return {};
    if (image.format() != QImage::Format_RGB888) image = image.convertToFormat(QImage::Format_RGB888);
    const int factor = std::max(image.width(), image.height()) / (2 * RunHistory::kThumbnailSize);
    if (factor >= 2) image = boxReduced(image, factor);
    return image.scaled(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize, Qt::KeepAspectRatio,
                        Qt::SmoothTransformation);
}

std::string nativePath(const QString& path) { return QFile::encodeName(path).toStdString(); }

// The image file at `path` decoded once, straight into the QImage shown (RGB888, 3 bytes a
// pixel, no other copy): read through the start images' bounded reader (a regular file opened
// without blocking, size and pixel count checked from the header before a pixel is decoded).
// Throws InitImageError naming the file.
QImage decodedImage(const QString& path) { return toQImage(decodeImageFile(nativePath(path))); }

// A file name from the folder as it may be quoted in a message: short and escaped.
QString shownName(const QString& name) { return QString::fromStdString(excerpt(nativePath(name))); }

// Something (a file, folder or link, dangling or not) is at `path`.
bool present(const QString& path) {
    const QFileInfo info(path);
    return info.exists() || info.isSymLink();
}

// Why `path` (a file the history would read) is refused, or empty when it is a plain file.
// Links are never followed: whoever can write the folder must not make us read elsewhere.
QString notPlainFile(const QString& path) {
    const QFileInfo info(path);
    if (info.isSymLink()) return QStringLiteral("is a symbolic link; history files must be regular files");
    if (!info.isFile()) return QStringLiteral("is not a regular file");
    return {};
}

}  // namespace

QImage HistoryEntry::loadImage() const {
    assertNotGuiThread("HistoryEntry::loadImage");
    if (imagePath.isEmpty() || !notPlainFile(imagePath).isEmpty()) return {};
    try {
        return decodedImage(imagePath);
    } catch (const std::exception& e) {
        qCWarning(lcHistory).noquote() << QString::fromStdString(toValidUtf8(e.what()));
        return {};
    }
}

RunHistory::RunHistory(QString folder, int capacity, int trashDepth)
    : folder_(std::move(folder)), capacity_(std::max(1, capacity)), trashDepth_(std::max(1, trashDepth)) {
    if (folder_.isEmpty())
        folder_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
    reload();
    deleteTrashedFiles();  // nobody can undo what another session deleted
}

QString RunHistory::trashFolder() const { return folder_ + QStringLiteral("/trash"); }

QString RunHistory::fileOf(const QString& id, const char* suffix) const {
    const std::string runId = id.toStdString();
    if (!isSafeRunId(runId))
        throw ValidationError(
            "history", "history: the run id \"" + excerpt(runId) + "\" is not allowed; " + std::string(kRunIdRule));
    return QFile::decodeName(fileInFolder(nativePath(folder_), runId + suffix, "history").c_str());
}

QString RunHistory::manifestPath(const QString& id) const { return fileOf(id, ".json"); }
QString RunHistory::imagePath(const QString& id) const { return fileOf(id, ".png"); }
QString RunHistory::seamPath(const QString& id) const { return fileOf(id, ".seam.json"); }

const HistoryEntry* RunHistory::find(const QString& runId) const {
    for (const HistoryEntry& entry : entries_)
        if (entry.id() == runId) return &entry;
    return nullptr;
}

QImage RunHistory::image(const QString& runId) const {
    const HistoryEntry* entry = find(runId);
    return entry ? entry->loadImage() : QImage();
}

void RunHistory::note(const QString& problem) {
    qCWarning(lcHistory).noquote() << problem;
    problems_ << problem;
}

std::optional<HistoryEntry> RunHistory::readEntry(const QString& name) {
    const QString shown = QDir::toNativeSeparators(folder_) + QDir::separator() + shownName(name);
    const auto skip = [&](const QString& why) {
        note(QStringLiteral("%1: %2; skipped").arg(shown, why));
        return std::nullopt;
    };
    // The name is checked before anything is read: only "<run id>.json" is a manifest.
    const QString stem = name.chopped(5);
    if (!isSafeRunId(stem.toStdString()))
        return skip(QStringLiteral("not a history manifest name (<run id>.json; %1)")
                        .arg(QString::fromUtf8(kRunIdRule.data(), static_cast<qsizetype>(kRunIdRule.size()))));
    const QString manifest = manifestPath(stem), image = imagePath(stem);
    if (const QString why = notPlainFile(manifest); !why.isEmpty()) return skip(why);
    HistoryEntry entry;
    try {
        entry.record = runRecordFromManifest(readBoundedJson(nativePath(manifest), "history"));
    } catch (const InputFileError& e) {  // its message names the file already
        note(QString::fromStdString(toValidUtf8(e.what())) + QStringLiteral("; skipped"));
        return std::nullopt;
    } catch (const std::exception& e) {
        return skip(QString::fromStdString(toValidUtf8(e.what())));
    }
    if (entry.record.runId.empty()) entry.record.runId = stem.toStdString();
    if (entry.id() != stem)
        return skip(QStringLiteral("its run_id \"%1\" does not match the file name")
                        .arg(QString::fromStdString(excerpt(entry.record.runId))));
    if (present(image)) {
        if (const QString why = notPlainFile(image); !why.isEmpty()) {
            note(QStringLiteral("%1: %2; the run is listed without it").arg(QDir::toNativeSeparators(image), why));
        } else {
            entry.imagePath = image;
            try {
                entry.thumbnail = thumbnailOf(decodedImage(image));
            } catch (const std::exception& e) {
                note(QStringLiteral("%1; the run is listed without a thumbnail")
                         .arg(QString::fromStdString(toValidUtf8(e.what()))));
            }
        }
    }
    if (present(seamPath(stem))) readSeamStats(entry);
    findStartImage(entry);
    return entry;
}

void RunHistory::findStartImage(HistoryEntry& entry) {
    for (const char* suffix : kStartImageSuffixes) {
        const QString path = fileOf(entry.id(), suffix);
        if (!present(path)) continue;
        if (const QString why = notPlainFile(path); !why.isEmpty()) {
            note(QStringLiteral("%1: %2; the run is listed without its start image")
                     .arg(QDir::toNativeSeparators(path), why));
            continue;
        }
        entry.startImagePath = path;
        return;
    }
}

void RunHistory::readSeamStats(HistoryEntry& entry) {
    const QString path = seamPath(entry.id());
    try {
        if (const QString why = notPlainFile(path); !why.isEmpty()) throw std::runtime_error(why.toStdString());
        const nlohmann::json seam = readBoundedJson(nativePath(path), "history", kSeamBytes);
        if (!seam.is_object() || !seam.value("mean", nlohmann::json()).is_number() ||
            !seam.value("max", nlohmann::json()).is_number())
            throw std::runtime_error("needs an object with the numbers \"mean\" and \"max\"");
        entry.seamMean = seam["mean"].get<double>();
        entry.seamMax = seam["max"].get<double>();
    } catch (const std::exception& e) {
        note(QStringLiteral("%1: %2; the run is listed without seam statistics")
                 .arg(QDir::toNativeSeparators(path), QString::fromStdString(toValidUtf8(e.what()))));
    }
}

void RunHistory::reload() {
    assertNotGuiThread("RunHistory::reload");
    entries_.clear();
    problems_.clear();
    const QDir dir(folder_);
    if (!dir.exists()) return;
    // Manifests only: "<id>.json", not "<id>.seam.json". System: dangling links are reported too.
    const QStringList names =
        dir.entryList({QStringLiteral("*.json")}, QDir::Files | QDir::System | QDir::Hidden, QDir::Name);
    for (const QString& name : names) {
        if (name.endsWith(QStringLiteral(".seam.json"))) continue;
        if (std::optional<HistoryEntry> entry = readEntry(name)) entries_.push_back(std::move(*entry));
    }
    // Run ids start with the UTC time, but order by the recorded start to be safe.
    std::stable_sort(entries_.begin(), entries_.end(), [](const HistoryEntry& a, const HistoryEntry& b) {
        return a.record.startedAt < b.record.startedAt;
    });
}

const HistoryEntry& RunHistory::add(const RunResult& result, const ImageFile* startFile) {
    assertNotGuiThread("RunHistory::add");
    HistoryEntry entry;
    entry.record = result.record;
    if (entry.record.runId.empty()) entry.record.runId = newRunId();
    const QString id = entry.id();
    // Every path is checked (fileOf) before anything is created. One all-or-nothing set, the
    // manifest last: reload() lists runs by manifest, so a run is only seen once complete, and
    // a failed write leaves none of its files (core/run/OutputSet.h).
    const QString manifest = manifestPath(id), image = imagePath(id), seam = seamPath(id);
    if (!QDir().mkpath(folder_))
        throw std::runtime_error(folder_.toStdString() + ": the history folder cannot be created");
    OutputSet files;
    if (!result.image.data.empty())
        files.add(nativePath(image), exportBytes(result, ExportFormat::ImagePng, nativePath(image)));
    if (!result.seamMap.data.empty()) {
        const SeamStats stats = seamStats(result.seamMap);
        entry.seamMean = stats.mean;
        entry.seamMax = stats.max;
        files.addText(nativePath(seam), jsonText(nlohmann::json{{"mean", stats.mean}, {"max", stats.max}}) + "\n");
    }
    if (startFile) {
        entry.startImagePath =
            fileOf(id, startFile->header.format == ImageHeader::Format::Png ? ".init.png" : ".init.jpg");
        files.add(nativePath(entry.startImagePath), startFile->bytes);
    }
    files.addText(nativePath(manifest), jsonText(manifestJson(entry.record), 2) + "\n");
    files.commit();
    if (!result.image.data.empty()) {
        entry.imagePath = image;
        entry.thumbnail = thumbnailOf(toQImage(result.image));
    }
    std::erase_if(entries_, [&id](const HistoryEntry& e) { return e.id() == id; });
    entries_.push_back(std::move(entry));
    trim();
    return entries_.back();
}

bool RunHistory::remove(const QString& runId) {
    assertNotGuiThread("RunHistory::remove");
    const auto it =
        std::find_if(entries_.begin(), entries_.end(), [&runId](const HistoryEntry& e) { return e.id() == runId; });
    if (it == entries_.end()) return false;
    // Entries only ever hold safe run ids; fileOf checks each path again before it is deleted.
    // The manifest first, so a half-removed run is not listed again.
    for (const char* suffix : kRunFileSuffixes) QFile::remove(fileOf(runId, suffix));
    entries_.erase(it);
    return true;
}

QString RunHistory::usableTrash() const {
    QString trash = trashFolder();
    const QFileInfo info(trash);
    if (info.isSymLink() || (info.exists() && !info.isDir()))
        throw std::runtime_error(
            QDir::toNativeSeparators(trash).toStdString() +
            ": is not a plain folder; the history's trash must be one (move it away to delete runs)");
    if (!info.exists() && !QDir().mkpath(trash))
        throw std::runtime_error(QDir::toNativeSeparators(trash).toStdString() +
                                 ": the history's trash folder cannot be created");
    return trash;
}

void RunHistory::moveRunFiles(const QString& id, const QString& from, const QString& to, bool manifestFirst) const {
    std::vector<const char*> order(kRunFileSuffixes.begin(), kRunFileSuffixes.end());
    if (!manifestFirst) std::rotate(order.begin(), order.begin() + 1, order.end());  // the manifest last
    const std::string name = id.toStdString();
    for (const char* suffix : order) {
        // fileInFolder refuses anything but a plain name: nothing outside the two folders moves.
        const std::filesystem::path source = fileInFolder(nativePath(from), name + suffix, "history");
        const std::filesystem::path target = fileInFolder(nativePath(to), name + suffix, "history");
        std::error_code ec;
        if (std::filesystem::symlink_status(source, ec).type() == std::filesystem::file_type::not_found) continue;
        std::filesystem::rename(source, target, ec);
        if (ec)
            throw std::runtime_error(source.string() + ": cannot be moved to " + target.parent_path().string() + " (" +
                                     ec.message() + ")");
    }
}

bool RunHistory::moveToTrash(const QString& runId) {
    assertNotGuiThread("RunHistory::moveToTrash");
    const auto it =
        std::find_if(entries_.begin(), entries_.end(), [&runId](const HistoryEntry& e) { return e.id() == runId; });
    if (it == entries_.end()) return false;
    // The manifest first: a run half moved is not listed (and its other files are purged later).
    moveRunFiles(runId, folder_, usableTrash(), true);
    entries_.erase(it);
    trashed_.removeAll(runId);
    trashed_ << runId;
    while (trashed_.size() > trashDepth_) {
        const QString oldest = trashed_.takeFirst();
        for (const char* suffix : kRunFileSuffixes)
            QFile::remove(QFile::decodeName(
                fileInFolder(nativePath(trashFolder()), oldest.toStdString() + suffix, "history").c_str()));
    }
    return true;
}

const HistoryEntry* RunHistory::restoreFromTrash(const QString& runId) {
    assertNotGuiThread("RunHistory::restoreFromTrash");
    if (!trashed_.contains(runId)) return nullptr;
    const QString trash = usableTrash();
    const QString manifest =
        QFile::decodeName(fileInFolder(nativePath(trash), runId.toStdString() + ".json", "history").c_str());
    if (!QFileInfo(manifest).isFile()) {
        trashed_.removeAll(runId);
        return nullptr;
    }
    // The manifest last: the run is listed again only once every file is back.
    moveRunFiles(runId, trash, folder_, false);
    trashed_.removeAll(runId);
    std::optional<HistoryEntry> entry = readEntry(runId + QStringLiteral(".json"));
    if (!entry)
        throw std::runtime_error(problems_.isEmpty() ? std::string("the run cannot be read back")
                                                     : problems_.back().toStdString());
    insertByStart(entries_, std::move(*entry));
    return find(runId);
}

void RunHistory::purgeTrash() {
    assertNotGuiThread("RunHistory::purgeTrash");
    deleteTrashedFiles();
}

void RunHistory::deleteTrashedFiles() {
    trashed_.clear();
    const QFileInfo info(trashFolder());
    if (!info.isDir() || info.isSymLink()) return;  // nothing of ours can be in a link's target
    const QStringList names = QDir(trashFolder()).entryList(QDir::Files | QDir::System | QDir::Hidden);
    for (const QString& name : names) {
        // Only run files ("<run id><suffix>"): whatever else someone put there is theirs.
        for (const char* suffix : kRunFileSuffixes) {
            const QString stem = name.endsWith(QLatin1String(suffix))
                                     ? name.chopped(static_cast<qsizetype>(std::strlen(suffix)))
                                     : QString();
            if (!stem.isEmpty() && isSafeRunId(stem.toStdString())) {
                QFile::remove(trashFolder() + QLatin1Char('/') + name);
                break;
            }
        }
    }
}

FinishedRun RunHistory::open(const QString& runId) const {
    assertNotGuiThread("RunHistory::open");
    const HistoryEntry* entry = find(runId);
    if (!entry)
        throw std::runtime_error("run " + excerpt(runId.toStdString()) + " is not in the history (deleted meanwhile?)");
    auto result = std::make_shared<RunResult>();
    result->record = entry->record;
    FinishedRun run;
    const auto readable = [](const QString& path) { return !path.isEmpty() && notPlainFile(path).isEmpty(); };
    if (readable(entry->imagePath)) {
        try {
            // Decoded once into the image shown; result->image stays empty (FinishedRun::image:
            // an export makes the model-space tensor when it needs one, and 8-bit pixels survive
            // that trip exactly, so the files are byte-equal to a fresh run's).
            run.image = decodedImage(entry->imagePath);
        } catch (const std::exception& e) {
            qCWarning(lcHistory).noquote() << QString::fromStdString(toValidUtf8(e.what()));
        }
    }
    if (readable(entry->startImagePath)) {
        try {
            // As the engine took it: resampled to the canvas in model space. A start image of the
            // canvas's size is unchanged by that trip, so it is shown as decoded.
            const RunConfig& c = entry->record.config;
            const std::string path = nativePath(entry->startImagePath);
            const ImageFile file = readImageFile(path);
            Rgb8Image pixels = decodeImage(path, file);
            run.startImage = pixels.width == c.width && pixels.height == c.height
                                 ? toQImage(std::move(pixels))
                                 : toQImage(resampleToModelSpace(pixels, c.width, c.height, 3));
        } catch (const std::exception& e) {
            qCWarning(lcHistory).noquote() << QString::fromStdString(toValidUtf8(e.what()));
        }
    }
    run.result = std::move(result);
    return run;
}

void RunHistory::trim() {
    while (static_cast<int>(entries_.size()) > capacity_) remove(entries_.front().id());
}

void insertByStart(std::vector<HistoryEntry>& entries, HistoryEntry entry) {
    const QString id = entry.id();
    std::erase_if(entries, [&id](const HistoryEntry& e) { return e.id() == id; });
    const auto at = std::upper_bound(
        entries.begin(), entries.end(), entry.record.startedAt,
        [](const std::string& started, const HistoryEntry& e) { return started < e.record.startedAt; });
    entries.insert(at, std::move(entry));
}

namespace {

// The blend window, and "shifted" where the tiles moved every step (RunConfig::tileShift).
QString windowText(const RunConfig& c) {
    QString text = QString::fromUtf8(toString(c.window).data(), static_cast<qsizetype>(toString(c.window).size()));
    if (c.tileShift != TileShift::Off) text += QStringLiteral(" shifted");
    return text;
}

}  // namespace

bool ranFlowMatching(const RunRecord& record) { return record.flowMatching; }

QString configSummary(const RunRecord& record) {
    const RunConfig& c = record.config;
    if (!ranFlowMatching(record)) return configSummary(c);
    QString prompt = QString::fromStdString(toValidUtf8(c.prompt)).simplified();
    if (prompt.size() > 60) prompt = prompt.left(59) + QStringLiteral("…");
    return QStringLiteral("%1×%2 · %3 flow Euler · tile %4/%5 %6 · %7 · guidance %8 · “%9”")
        .arg(c.width)
        .arg(c.height)
        .arg(c.steps)
        .arg(c.tile)
        .arg(c.overlapPixels())
        .arg(windowText(c))
        .arg(QString::fromUtf8(toString(c.backend).data(), static_cast<qsizetype>(toString(c.backend).size())))
        .arg(c.guidance)
        .arg(prompt);
}

QString configSummary(const RunConfig& c) {
    // The sampler as A1111 names it ("DPM++ 2M Karras"), as the window's sampler list shows it.
    const SamplerDisplay sampler = samplerDisplayName(c.scheduler, c.schedulerOptions);
    QString summary =
        QStringLiteral("%1×%2 · %3 %4 · tile %5/%6 %7 · %8")
            .arg(c.width)
            .arg(c.height)
            .arg(c.steps)
            .arg(QString::fromStdString(sampler.scheduleType == "Karras" ? sampler.sampler + " Karras"
                                                                         : sampler.sampler))
            .arg(c.tile)
            .arg(c.overlapPixels())
            .arg(windowText(c))
            .arg(QString::fromUtf8(toString(c.backend).data(), static_cast<qsizetype>(toString(c.backend).size())));
    // Stable Diffusion runs (a prompt): guidance, clip skip and the start of the prompt.
    if (!c.prompt.empty() || !c.negativePrompt.empty()) {
        QString prompt = QString::fromStdString(toValidUtf8(c.prompt)).simplified();  // one line
        if (prompt.size() > 60) prompt = prompt.left(59) + QStringLiteral("…");
        summary += QStringLiteral(" · cfg %1 · clip skip %2 · “%3”").arg(c.cfgScale).arg(c.clipSkip).arg(prompt);
    }
    return summary;
}

}  // namespace tessera
