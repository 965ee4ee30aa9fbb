// Exporters: the files a finished run can be saved as (image PNG, timings CSV, manifest JSON,
// Chrome trace JSON), and the reverse: a run configuration recovered from such a file (a run
// PNG's manifest chunk, a manifest JSON or a preset JSON). Every write goes through an
// all-or-nothing core/OutputSet; text is stored as valid UTF-8. Qt Core/Gui only, any thread.
#pragma once

#include <string>
#include <vector>

#include <QString>

#include "core/run/Engine.h"
#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

enum class ExportFormat { ImagePng, TimingsCsv, ManifestJson, ChromeTrace };

// "png", "csv", "json", "json": the suffix a file of that format gets.
QString exportSuffix(ExportFormat format);
// A short name for dialogs ("Image (PNG)", "Timings (CSV)"...).
QString exportTitle(ExportFormat format);
// The suggested file name of `record` in `format`, e.g. "tessera-<runid>-seed7.png",
// "tessera-<runid>-timings.csv", "tessera-<runid>-manifest.json", "tessera-<runid>-trace.json".
QString suggestedExportName(const RunRecord& record, ExportFormat format);

// The contents of `result` (record and image) as `format`: PNG bytes (the A1111 parameters
// line and the manifest inside), or text that is valid UTF-8 (core/run/RunRecordIO.h jsonText;
// the timings CSV is core/run/RunRecordIO.h timingsCsv, the file `tessera-cli render` writes).
// `path` only names the file in messages; throws std::runtime_error for ImagePng when the
// result has no image. `earlier` (ChromeTrace only): more runs shown as further processes.
std::string exportBytes(const RunResult& result, ExportFormat format, const std::string& path,
                        const std::vector<const RunRecord*>& earlier = {});

// exportBytes written to `path` through a core/OutputSet (a temporary file, then a rename);
// throws std::runtime_error naming the path on failure. Overwrites: asking is the caller's job.
void exportRun(const RunResult& result, ExportFormat format, const std::string& path,
               const std::vector<const RunRecord*>& earlier = {});

// Where a configuration came from when read back by configurationFromFile.
// ImageParameters: an image another tool wrote (A1111, ComfyUI), read as app/qt/ImportedParameters.h reads it.
enum class ConfigSource { RunPng, Manifest, Preset, ImageParameters };

struct RestoredConfig {
    RunConfig config;
    ConfigSource source = ConfigSource::Preset;
    std::string runId;  // of the run, for RunPng and Manifest; empty otherwise
    // ImageParameters: the settings that were not applied (the rest of the configuration is `base`'s).
    std::vector<UnmappedSetting> unmapped;
};

// The configuration stored in `path`: a run PNG (its "tessera-manifest" chunk; app/cli/PngIO.h
// encodeRunPng), a run manifest JSON (has "schema_version"), a preset JSON (runConfigFromJson),
// or a PNG or JPEG without a manifest whose generation settings (A1111's "parameters", ComfyUI's
// "prompt", a JPEG's EXIF UserComment: parametersFromImage) are applied onto `base`. A run's
// configuration is the one it asked for (configurationAsAsked). Another tool's image has its LoRA,
// VAE and embedding files checked in the models folders of its model and `windowModelsFolder` (the
// window's), as parametersFromImage does. Throws std::runtime_error (or ValidationError) naming the
// path and what is wrong.
RestoredConfig configurationFromFile(const std::string& path, const RunConfig& base = RunConfig{},
                                     const std::string& windowModelsFolder = {});

// The configuration `record` ran with, as it was asked for: the record keeps what ran (the tile
// batch auto chose, the backend that computed), a restore gives back the choice ("auto").
RunConfig configurationAsAsked(const RunRecord& record);

// The highest memory the record saw, in MiB: peakDeviceMiB when measured, else the largest
// memory sample (host RSS on CPU); -1 when there is neither.
double peakMemoryMiB(const RunRecord& record);

// Mean and maximum of a seam map (0, 0 for an empty one).
struct SeamStats {
    double mean = 0, max = 0;
};
SeamStats seamStats(const ImageTensor& seamMap);

}  // namespace tessera
