// Writers (and the manifest reader) for core/run/RunRecord.h: the per-batch timings CSV, the
// JSON manifest, a Chrome trace (chrome://tracing, Perfetto), JSON as stored text, and the
// bytes a run's outputs need. Files are written through core/run/OutputSet.h (all-or-nothing).
// Qt-free; numbers are written locale-independently.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecord.h"

namespace tessera {

// The timings CSV, the one the window exports and `tessera-cli render` writes: one row per
// (step, tile batch), in record order, with the header
//   run_id,step,timestep,batch,tile_ids,gpu_ms,host_ms,device_mib,step_peak_device_mib,
//   run_peak_device_mib,run_peak_host_rss_mib
// Steps and batches are numbered from 1, as the charts and the status line count them (the
// record's indices are 0-based); tile_ids are TilePlan ids joined with ';'. device_mib: device
// memory in use after the batch; step_peak_device_mib: the most of it over the step's batches;
// run_peak_device_mib: the run's peak device memory (peakDeviceMiB, else the largest device
// memory sample); run_peak_host_rss_mib: the largest host RSS sample (CPU runs). A figure the
// record does not hold (not measured, < 0, or not finite) is an empty field. Numbers are written
// locale-independently; lines end in "\n"; the run id is the only text.
std::string timingsCsv(const RunRecord& record);

// Everything in the record, with "schema_version": RunRecord::kSchemaVersion and the
// config as tessera::toJson(RunConfig). Keys are snake_case.
nlohmann::json manifestJson(const RunRecord& record);

// A run's CUDA-graph counters under the manifest's "graphs" key names: mode, fallback_reason,
// captures, hits, misses, evictions, updates, instantiations and nodes. manifestJson's "graphs"
// object adds the timings, the cache and the graphs used; `tessera-cli compare --json` reports
// these per side.
nlohmann::json graphCountersJson(const GraphStats& stats);

// Reads manifestJson's output back. Missing keys keep RunRecord's defaults; a wrong type,
// or a schema_version newer than this build's, throws std::runtime_error naming the key.
// The config is read with runConfigFromJson (ValidationError on bad config fields).
RunRecord runRecordFromManifest(const nlohmann::json& manifest);

// Chrome trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ms"}). Run i is
// process pid i + 1 (named after its run id and label). Its timeline, in microseconds from
// 0: "prepare" [0, prepareMs), then the steps back to back (duration wallMs) on thread 1;
// on thread 2 each step's tile batches back to back from the step's start (duration
// gpuMs where measured, else hostMs); memory samples as counter events ("ph": "C") at
// prepareMs + tMs. Null pointers are skipped.
nlohmann::json chromeTrace(const std::vector<const RunRecord*>& runs);

// JSON as stored text: value.dump(indent), with every string (keys and values) made valid
// UTF-8 first (toValidUtf8: each invalid byte as "\xNN"). The one way Tessera turns JSON into
// file contents: a Latin-1 label, init file or model folder name never throws
// (nlohmann's type_error 316) and never loses a finished run.
std::string jsonText(const nlohmann::json& value, int indent = -1);

// An upper bound of what a render's outputs (core/run/OutputSet.h OutputNeeds) take: the PNG
// (uncompressed pixels plus deflate's worst-case overhead, its text chunks), the timings CSV
// and the manifest, for config.steps steps over the tiles of TilePlan::fromConfig(config)
// (counted here without building the plan). Never throws on bad sizes (they count as 0): the
// check before work can run before, or after, validation.
OutputNeeds renderOutputNeeds(const RunConfig& config);

// "YYYYMMDD-HHMMSS-xxxxxxxx": UTC time and 32 random bits (hex), unique per run.
std::string newRunId();
// The current UTC time as ISO 8601 with milliseconds ("2026-11-24T00:19:32.123Z"), for
// RunRecord::startedAt: runs started within one second still order by it.
std::string isoUtcNow();

}  // namespace tessera
