#include "app/qt/Exporters.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "app/cli/PngIO.h"
#include "app/qt/GuiThreadGuard.h"
#include "app/qt/ImportedParameters.h"
#include "core/base/BoundedInput.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ImageOps.h"

namespace tessera {

QString exportSuffix(ExportFormat format) {
    switch (format) {
        case ExportFormat::ImagePng:
            return QStringLiteral("png");
        case ExportFormat::TimingsCsv:
            return QStringLiteral("csv");
        case ExportFormat::ManifestJson:
        case ExportFormat::ChromeTrace:
            return QStringLiteral("json");
    }
    return {};
}

QString exportTitle(ExportFormat format) {
    switch (format) {
        case ExportFormat::ImagePng:
            return QStringLiteral("Image (PNG)");
        case ExportFormat::TimingsCsv:
            return QStringLiteral("Timings (CSV)");
        case ExportFormat::ManifestJson:
            return QStringLiteral("Manifest (JSON)");
        case ExportFormat::ChromeTrace:
            return QStringLiteral("Chrome trace (JSON)");
    }
    return {};
}

QString suggestedExportName(const RunRecord& record, ExportFormat format) {
    const QString id = QString::fromStdString(record.runId.empty() ? std::string("run") : record.runId);
    switch (format) {
        case ExportFormat::ImagePng:
            return QStringLiteral("tessera-%1-seed%2.png").arg(id).arg(record.config.seed);
        case ExportFormat::TimingsCsv:
            return QStringLiteral("tessera-%1-timings.csv").arg(id);
        case ExportFormat::ManifestJson:
            return QStringLiteral("tessera-%1-manifest.json").arg(id);
        case ExportFormat::ChromeTrace:
            return QStringLiteral("tessera-%1-trace.json").arg(id);
    }
    return {};
}

std::string exportBytes(const RunResult& result, ExportFormat format, const std::string& path,
                        const std::vector<const RunRecord*>& earlier) {
    const RunRecord& record = result.record;
    switch (format) {
        case ExportFormat::ImagePng:
            if (result.image.data.empty()) throw std::runtime_error(path + ": the run has no image to export");
            // The A1111 infotext (with the model's name and hash) and the whole manifest travel inside the PNG.
            return encodeRunPng(path, toRgb8(result.image), record, jsonText(manifestJson(record)));
        case ExportFormat::TimingsCsv:
            return timingsCsv(record);
        case ExportFormat::ManifestJson:
            return jsonText(manifestJson(record), 2) + "\n";
        case ExportFormat::ChromeTrace: {
            std::vector<const RunRecord*> runs{&record};
            runs.insert(runs.end(), earlier.begin(), earlier.end());
            return jsonText(chromeTrace(runs)) + "\n";
        }
    }
    throw std::logic_error("exportBytes: unknown format");
}

void exportRun(const RunResult& result, ExportFormat format, const std::string& path,
               const std::vector<const RunRecord*>& earlier) {
    assertNotGuiThread("exportRun");
    const std::string bytes = exportBytes(result, format, path, earlier);
    if (format == ExportFormat::ImagePng)
        writeFileAtomically(path, bytes);
    else
        writeTextFileAtomically(path, bytes);
}

namespace {

bool hasSuffix(const std::string& path, std::initializer_list<std::string_view> suffixes) {
    const std::string suffix = std::filesystem::path(path).extension().string();
    return std::any_of(suffixes.begin(), suffixes.end(), [&suffix](std::string_view s) {
        return suffix.size() == s.size() && std::equal(suffix.begin(), suffix.end(), s.begin(), [](char a, char b) {
                   return std::tolower(static_cast<unsigned char>(a)) == b;
               });
    });
}

RestoredConfig fromImageParameters(const std::string& path, const RunConfig& base,
                                   const std::string& windowModelsFolder) {
    ImportedParameters imported = parametersFromImage(path, base, windowModelsFolder);
    RestoredConfig restored;
    restored.config = std::move(imported.config);
    restored.source = ConfigSource::ImageParameters;
    restored.unmapped = std::move(imported.unmapped);
    return restored;
}

}  // namespace

RunConfig configurationAsAsked(const RunRecord& record) {
    RunConfig config = record.config;
    if (record.tileBatch) config.tileBatch = record.tileBatch->asked;
    return config;
}

RestoredConfig configurationFromFile(const std::string& path, const RunConfig& base,
                                     const std::string& windowModelsFolder) {
    assertNotGuiThread("configurationFromFile");
    // Untrusted input, read through core/BoundedInput: JSON is bounded in size and nesting
    // depth. Run PNGs (larger than any JSON) go to PngIO whole; only their manifest is parsed.
    static const std::string kPngSignature("\x89PNG\r\n\x1a\n", 8);
    const bool pngName = hasSuffix(path, {".png"});
    // A JPEG holds no manifest: its parameters, as A1111 wrote them.
    if (hasSuffix(path, {".jpg", ".jpeg"})) return fromImageParameters(path, base, windowModelsFolder);
    // A FIFO must be refused, not opened (which would wait for a writer).
    std::error_code ignored;
    if (pngName && !std::filesystem::is_regular_file(path, ignored))
        throw InputFileError("preset", "preset: " + shownPath(path) + ": is not a regular file; a run PNG is needed");
    const std::string bytes = pngName ? std::string() : readBoundedFile(path, "preset");
    RestoredConfig restored;
    try {
        if (pngName || bytes.compare(0, kPngSignature.size(), kPngSignature) == 0) {
            const PngFile png = readPng(path);
            const std::string manifest = png.text("tessera-manifest");
            if (!manifest.empty()) {
                const RunRecord record =
                    runRecordFromManifest(parseBoundedJson(manifest, "preset", "its tessera-manifest chunk"));
                restored.config = configurationAsAsked(record);
                restored.source = ConfigSource::RunPng;
                restored.runId = record.runId;
                return restored;
            }
        } else {
            const nlohmann::json json = parseBoundedJson(bytes, "preset", shownPath(path));
            if (json.is_object() && json.contains("schema_version")) {
                const RunRecord record = runRecordFromManifest(json);
                restored.config = configurationAsAsked(record);
                restored.source = ConfigSource::Manifest;
                restored.runId = record.runId;
                return restored;
            }
            restored.config = runConfigFromJson(json);
            restored.source = ConfigSource::Preset;
            return restored;
        }
    } catch (const ValidationError& e) {
        throw ValidationError(e.field(), path + ": " + e.what());
    } catch (const std::exception& e) {
        const std::string what = e.what();
        // PngIO's messages already name the path.
        if (what.find(path) != std::string::npos) throw;
        throw std::runtime_error(path + ": " + what);
    }
    // A PNG without a manifest is another tool's (A1111, ComfyUI): its generation settings, as
    // tessera-cli --params-from reads them (its errors name the file).
    return fromImageParameters(path, base, windowModelsFolder);
}

double peakMemoryMiB(const RunRecord& record) {
    if (record.peakDeviceMiB >= 0) return record.peakDeviceMiB;
    double peak = -1;
    for (const MemorySample& sample : record.memory) peak = std::max(peak, sample.usedMiB);
    return peak;
}

SeamStats seamStats(const ImageTensor& seamMap) {
    SeamStats stats;
    if (seamMap.data.empty()) return stats;
    double sum = 0;
    for (float v : seamMap.data) {
        sum += v;
        stats.max = std::max(stats.max, static_cast<double>(v));
    }
    stats.mean = sum / static_cast<double>(seamMap.data.size());
    return stats;
}

}  // namespace tessera
