#include "core/run/RunRecordIO.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <system_error>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace {

// Locale-independent numbers for the CSV (std::to_chars ignores the C locale, which Qt
// applications set from the environment, e.g. a decimal comma). A CSV field holds numbers only:
// a non-finite value is an empty field, as one not measured.
std::string fixed(double v, int decimals) {
    if (!std::isfinite(v)) return {};
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
    return r.ec == std::errc() ? std::string(buf, r.ptr) : std::string();
}

std::string shortest(float v) {
    if (!std::isfinite(v)) return {};
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return r.ec == std::errc() ? std::string(buf, r.ptr) : std::string();
}

std::string csvField(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string q = "\"";
    for (const char c : s) {
        if (c == '"') q += '"';
        q += c;
    }
    return q + '"';
}

// A MiB figure with two decimals, or an empty field where it was not measured (< 0).
std::string mibField(double mib) { return mib >= 0 ? fixed(mib, 2) : std::string(); }

std::string joinIds(const std::vector<int>& ids, char sep) {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) s += sep;
        s += std::to_string(ids[i]);
    }
    return s;
}

// nlohmann writes NaN/inf as null; read null back as NaN rather than failing.
class ManifestReader {
public:
    explicit ManifestReader(std::string path) : path_(std::move(path)) {}

    template <typename T>
    void read(const nlohmann::json& obj, const char* key, T& out) const {
        const auto it = obj.find(key);
        if (it == obj.end()) return;
        const std::string where = path_.empty() ? key : path_ + "." + key;
        if constexpr (std::is_same_v<T, std::string>) {
            if (!it->is_string()) fail(where, "a string");
            out = it->template get<std::string>();
        } else if constexpr (std::is_same_v<T, RunStatus>) {
            const std::optional<RunStatus> status =
                it->is_string() ? parseRunStatus(it->template get<std::string>()) : std::nullopt;
            if (!status) fail(where, "\"finished\", \"cancelled\" or \"failed\"");
            out = *status;
        } else if constexpr (std::is_same_v<T, bool>) {
            if (!it->is_boolean()) fail(where, "true or false");
            out = it->template get<bool>();
        } else if constexpr (std::is_integral_v<T>) {
            if (!it->is_number_integer()) fail(where, "an integer");
            if (!fits<T>(*it))
                outOfRange(where, *it,
                           std::to_string(std::numeric_limits<T>::min()) + " to " +
                               std::to_string(std::numeric_limits<T>::max()));
            out = it->template get<T>();
        } else {
            if (it->is_null()) {
                out = std::numeric_limits<T>::quiet_NaN();
                return;
            }
            if (!it->is_number()) fail(where, "a number");
            if (std::abs(it->template get<double>()) > static_cast<double>(std::numeric_limits<T>::max()))
                outOfRange(where, *it, "magnitudes up to " + nlohmann::json(std::numeric_limits<T>::max()).dump());
            out = it->template get<T>();
        }
    }

    // An array of objects: calls fn(element, elementPath) for each.
    template <typename Fn>
    void readArray(const nlohmann::json& obj, const char* key, Fn&& fn) const {
        const auto it = obj.find(key);
        if (it == obj.end()) return;
        const std::string where = path_.empty() ? key : path_ + "." + key;
        if (!it->is_array()) fail(where, "an array");
        for (std::size_t i = 0; i < it->size(); ++i)
            fn((*it)[i], ManifestReader(where + "[" + std::to_string(i) + "]"));
    }

    // An array of plain values at `key`, each one `accept` takes (else the error names `what`).
    template <typename T, typename Accept>
    void readList(const nlohmann::json& obj, const char* key, const char* what, Accept accept,
                  std::vector<T>& out) const {
        const auto it = obj.find(key);
        if (it == obj.end()) return;
        const std::string where = path_.empty() ? key : path_ + "." + key;
        if (!it->is_array()) fail(where, what);
        for (const auto& v : *it) {
            if (!accept(v)) fail(where, what);
            out.push_back(v.template get<T>());
        }
    }

    const nlohmann::json& object(const nlohmann::json& obj, const char* key, const nlohmann::json& empty) const {
        const auto it = obj.find(key);
        if (it == obj.end()) return empty;
        if (!it->is_object()) fail(path_.empty() ? key : path_ + "." + key, "an object");
        return *it;
    }

    void requireObject(const nlohmann::json& j) const {
        if (!j.is_object()) fail(path_.empty() ? "manifest" : path_, "an object");
    }

    [[noreturn]] static void fail(const std::string& where, const char* what) {
        throw std::runtime_error("manifest: '" + where + "' must be " + what);
    }

    // The value quoted as written (an integer no T holds would otherwise wrap: 2^64 - 1 as -1).
    [[noreturn]] static void outOfRange(const std::string& where, const nlohmann::json& value,
                                        const std::string& allowed) {
        throw std::runtime_error("manifest: '" + where + "' " + excerptJson(value) + " is out of range; allowed " +
                                 allowed);
    }

    // Whether the JSON integer `value` is one T holds.
    template <typename T>
    static bool fits(const nlohmann::json& value) {
        if (value.is_number_unsigned())
            return value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
        const std::int64_t v = value.get<std::int64_t>();
        if constexpr (std::is_unsigned_v<T>) {
            return v >= 0 && static_cast<std::uint64_t>(v) <= std::numeric_limits<T>::max();
        } else {
            return v >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                   v <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
        }
    }

private:
    std::string path_;
};

std::string randomHex32() {
    std::random_device device;
    const std::uint32_t bits = device();
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", bits);
    return buf;
}

}  // namespace

std::string timingsCsv(const RunRecord& record) {
    // The record holds device memory per batch (CUDA) and memory samples over time: device
    // memory in use on CUDA, host RSS on the CPU engine.
    const bool onDevice = record.environment.backend != "cpu";
    double samplePeak = -1;
    for (const MemorySample& sample : record.memory) samplePeak = std::max(samplePeak, sample.usedMiB);
    const double runPeakDevice = record.peakDeviceMiB >= 0 ? record.peakDeviceMiB : (onDevice ? samplePeak : -1.0);
    const double runPeakHost = onDevice ? -1.0 : samplePeak;
    std::map<int, double> stepPeak;
    for (const TileBatchTiming& batch : record.batches) {
        if (batch.deviceMiB < 0) continue;
        const auto found = stepPeak.find(batch.step);
        if (found == stepPeak.end())
            stepPeak.emplace(batch.step, batch.deviceMiB);
        else
            found->second = std::max(found->second, batch.deviceMiB);
    }
    std::string out =
        "run_id,step,timestep,batch,tile_ids,gpu_ms,host_ms,device_mib,step_peak_device_mib,run_peak_device_mib,"
        "run_peak_host_rss_mib\n";
    const std::string runId = csvField(record.runId);
    const std::string runColumns = ',' + mibField(runPeakDevice) + ',' + mibField(runPeakHost) + '\n';
    for (const TileBatchTiming& batch : record.batches) {
        out += runId;
        out += ',' + std::to_string(batch.step + 1);
        out += ',' + shortest(batch.timestep);
        out += ',' + std::to_string(batch.batchIndex + 1);
        out += ',' + joinIds(batch.tileIds, ';');
        out += ',' + (batch.gpuMs >= 0 ? fixed(batch.gpuMs, 4) : std::string());
        out += ',' + fixed(batch.hostMs, 4);
        out += ',' + mibField(batch.deviceMiB);
        const auto peak = stepPeak.find(batch.step);
        out += ',' + (peak != stepPeak.end() ? mibField(peak->second) : std::string());
        out += runColumns;
    }
    return out;
}

nlohmann::json graphCountersJson(const GraphStats& g) {
    return {{"mode", g.mode},         {"fallback_reason", g.fallbackReason},
            {"captures", g.captures}, {"hits", g.hits},
            {"misses", g.misses},     {"evictions", g.evictions},
            {"updates", g.updates},   {"instantiations", g.instantiations},
            {"nodes", g.nodes}};
}

namespace {

// ---- The manifest's parts, written --------------------------------------------------------

nlohmann::json stepsJson(const std::vector<StepTiming>& steps) {
    nlohmann::json out = nlohmann::json::array();
    for (const StepTiming& s : steps)
        out.push_back({{"step", s.step},
                       {"timestep", s.timestep},
                       {"gpu_ms", s.gpuMs},
                       {"host_enqueue_ms", s.hostEnqueueMs},
                       {"wall_ms", s.wallMs},
                       {"graph", s.graph},
                       {"captured", s.captured}});
    return out;
}

nlohmann::json batchesJson(const std::vector<TileBatchTiming>& batches) {
    nlohmann::json out = nlohmann::json::array();
    for (const TileBatchTiming& b : batches)
        out.push_back({{"step", b.step},
                       {"timestep", b.timestep},
                       {"batch", b.batchIndex},
                       {"tile_ids", b.tileIds},
                       {"gpu_ms", b.gpuMs},
                       {"host_ms", b.hostMs},
                       {"device_mib", b.deviceMiB}});
    return out;
}

nlohmann::json memoryJson(const std::vector<MemorySample>& memory) {
    nlohmann::json out = nlohmann::json::array();
    for (const MemorySample& m : memory)
        out.push_back({{"t_ms", m.tMs}, {"used_mib", m.usedMiB}, {"arena_mib", m.arenaMiB}});
    return out;
}

nlohmann::json graphsJson(const GraphStats& g) {
    nlohmann::json used = nlohmann::json::array();
    for (const GraphEntryStats& e : g.used)
        used.push_back({{"name", e.name},
                        {"nodes", e.nodes},
                        {"capture_ms", e.captureMs},
                        {"instantiate_ms", e.instantiateMs},
                        {"update_ms", e.updateMs},
                        {"device_mib", e.deviceMiB},
                        {"launches", e.launches},
                        {"captured", e.captured},
                        {"updated", e.updated}});
    nlohmann::json j = graphCountersJson(g);
    j.update({{"capture_ms", g.captureMs},
              {"instantiate_ms", g.instantiateMs},
              {"graph_mem_mib", g.graphMemMiB},
              {"cache_capacity", g.cacheCapacity},
              {"lanes", g.lanes},
              {"cache_entries", g.cacheEntries},
              {"invalidations", g.invalidations},
              {"failures", g.failures},
              {"update_ms", g.updateMs},
              {"used", std::move(used)}});
    return j;
}

nlohmann::json textEncodeJson(const TextEncodeRecord& t) {
    nlohmann::json j{{"ms", t.ms}, {"rows_run", t.rowsRun}, {"rows_remembered", t.rowsRemembered}};
    if (!t.textualInversionHashes.empty()) j["ti_hashes"] = t.textualInversionHashes;
    return j;
}

nlohmann::json vaePassJson(const VaePassRecord& p) {
    nlohmann::json j = {
        {"ms", p.ms}, {"width", p.width}, {"height", p.height}, {"tiled", p.tiled}, {"reason", p.reason}};
    if (!p.tiled) return j;
    const VaeTilingRecord& t = p.tiling;
    j["tiling"] = {{"cols", t.cols},
                   {"rows", t.rows},
                   {"tile", t.tile},
                   {"halo", t.halo},
                   {"required_halo", t.requiredHalo},
                   {"evaluated_w", t.evaluatedW},
                   {"evaluated_h", t.evaluatedH},
                   {"whole_image_norm", t.wholeImageNorm},
                   {"whole_image_attention", t.wholeImageAttention},
                   {"canvases", t.canvases},
                   {"host_peak_bytes", t.hostPeakBytes},
                   {"device_peak_bytes", t.devicePeakBytes}};
    return j;
}

nlohmann::json tileBatchJson(const TileBatchRecord& b) {
    nlohmann::json lowered = nlohmann::json::array();
    for (const TileBatchLowering& l : b.lowered)
        lowered.push_back({{"from", l.from}, {"to", l.to}, {"reason", l.reason}});
    return {{"asked", b.asked},
            {"ran", b.ran},
            {"tiles", b.tiles},
            {"auto_batch", b.autoBatch},
            {"lowered", std::move(lowered)}};
}

nlohmann::json upscaleModelJson(const UpscaleModelRecord& u) {
    return {{"file", u.file},
            {"name", u.name},
            {"sha256", u.sha256},
            {"architecture", u.architecture},
            {"scale", u.scale},
            {"pickle", u.pickle},
            {"backend", u.backend},
            {"precision", u.precision},
            {"tile", u.tile},
            {"overlap", u.overlap},
            {"tiles", u.tiles},
            {"plan_bytes", u.planBytes},
            {"budget_bytes", u.budgetBytes},
            {"tile_note", u.tileNote},
            {"input_w", u.inputW},
            {"input_h", u.inputH},
            {"output_w", u.outputW},
            {"output_h", u.outputH},
            {"resized_w", u.resizedW},
            {"resized_h", u.resizedH},
            {"resize_filter", u.resizeFilter},
            {"ms", u.ms},
            {"alone", u.alone}};
}

nlohmann::json vaeFileJson(const VaeFileRecord& v) {
    return {{"name", v.name}, {"sha256", v.sha256}, {"layout", v.layout}, {"pickle", v.pickle}};
}

nlohmann::json lorasJson(const std::vector<LoraRecord>& loras) {
    nlohmann::json list = nlohmann::json::array();
    for (const LoraRecord& l : loras)
        list.push_back({{"name", l.name},
                        {"file", l.file},
                        {"sha256", l.sha256},
                        {"short_hash", l.shortHash},
                        {"te", l.teMultiplier},
                        {"unet", l.unetMultiplier},
                        {"modules_merged", l.modulesMerged},
                        {"modules_skipped", l.modulesSkipped},
                        {"keys_unmatched", l.keysUnmatched},
                        {"modules_not_merged", l.modulesNotMerged}});
    return list;
}

}  // namespace

nlohmann::json manifestJson(const RunRecord& r) {
    nlohmann::json j;
    j["schema_version"] = RunRecord::kSchemaVersion;
    j["run_id"] = r.runId;
    j["started_at"] = r.startedAt;
    j["status"] = std::string(toString(r.status));
    j["error"] = r.error;
    j["config"] = toJson(r.config);
    j["model_name"] = r.modelName;
    j["model_hash"] = r.modelHash;
    if (r.modelPickle) j["model_pickle"] = true;
    if (r.flowMatching) j["flow_matching"] = true;
    j["environment"] = {{"tessera_version", r.environment.tesseraVersion},
                        {"backend", r.environment.backend},
                        {"device", r.environment.device},
                        {"driver", r.environment.driver},
                        {"host", r.environment.host},
                        {"threads", r.environment.threads}};
    j["tile_count"] = r.tileCount;
    j["tile_w"] = r.tileW;
    j["tile_h"] = r.tileH;
    j["steps_run"] = r.stepsRun;
    j["timesteps"] = r.timesteps;
    j["steps"] = stepsJson(r.steps);
    j["batches"] = batchesJson(r.batches);
    j["memory"] = memoryJson(r.memory);
    j["graphs"] = graphsJson(r.graphs);
    j["tuning"] = {{"cache", r.tuning.cachePath},   {"hits", r.tuning.hits},     {"misses", r.tuning.misses},
                   {"rejected", r.tuning.rejected}, {"digest", r.tuning.digest}, {"settings", r.tuning.settings}};
    j["memory_plan"] = {{"weights_mib", r.memoryPlan.weightsMiB},
                        {"activations_mib", r.memoryPlan.activationsMiB},
                        {"workspace_mib", r.memoryPlan.workspaceMiB},
                        {"canvas_mib", r.memoryPlan.canvasMiB},
                        {"total_mib", r.memoryPlan.totalMiB}};
    j["prepare_ms"] = r.prepareMs;
    j["total_ms"] = r.totalMs;
    j["peak_device_mib"] = r.peakDeviceMiB;
    j["image_sha256"] = r.imageSha256;
    j["seam_score"] = r.seamScore;
    j["seam_worst"] = r.seamWorst;
    // The phases only where the run had them: a key that is absent reads back as unknown.
    if (r.textEncode) j["text_encode"] = textEncodeJson(*r.textEncode);
    if (r.vaeEncode) j["vae_encode"] = vaePassJson(*r.vaeEncode);
    if (r.vaeDecode) j["vae_decode"] = vaePassJson(*r.vaeDecode);
    if (r.tileBatch) j["tile_batch"] = tileBatchJson(*r.tileBatch);
    if (r.upscaleModel) j["upscale_model"] = upscaleModelJson(*r.upscaleModel);
    if (!r.loras.empty()) j["loras"] = lorasJson(r.loras);
    if (!r.controlNetHashes.empty()) j["controlnet_hashes"] = r.controlNetHashes;
    if (r.vaeFile) j["vae_file"] = vaeFileJson(*r.vaeFile);
    j["messages"] = r.messages;
    return j;
}

namespace {

// ---- The manifest's parts, read -----------------------------------------------------------

const nlohmann::json& emptyObject() {
    static const nlohmann::json empty = nlohmann::json::object();
    return empty;
}

void readEnvironment(const nlohmann::json& j, EnvironmentInfo& env) {
    const nlohmann::json& e = ManifestReader("").object(j, "environment", emptyObject());
    const ManifestReader in("environment");
    in.read(e, "tessera_version", env.tesseraVersion);
    in.read(e, "backend", env.backend);
    in.read(e, "device", env.device);
    in.read(e, "driver", env.driver);
    in.read(e, "host", env.host);
    in.read(e, "threads", env.threads);
}

void readTimings(const nlohmann::json& j, RunRecord& r) {
    const ManifestReader top("");
    top.readList(
        j, "timesteps", "an array of numbers", [](const nlohmann::json& v) { return v.is_number(); }, r.timesteps);
    top.readArray(j, "steps", [&r](const nlohmann::json& e, const ManifestReader& in) {
        in.requireObject(e);
        StepTiming s;
        in.read(e, "step", s.step);
        in.read(e, "timestep", s.timestep);
        in.read(e, "gpu_ms", s.gpuMs);
        in.read(e, "host_enqueue_ms", s.hostEnqueueMs);
        in.read(e, "wall_ms", s.wallMs);
        in.read(e, "graph", s.graph);
        in.read(e, "captured", s.captured);
        r.steps.push_back(s);
    });
    top.readArray(j, "batches", [&r](const nlohmann::json& e, const ManifestReader& in) {
        in.requireObject(e);
        TileBatchTiming b;
        in.read(e, "step", b.step);
        in.read(e, "timestep", b.timestep);
        in.read(e, "batch", b.batchIndex);
        in.readList(
            e, "tile_ids", "an array of integers", [](const nlohmann::json& v) { return v.is_number_integer(); },
            b.tileIds);
        in.read(e, "gpu_ms", b.gpuMs);
        in.read(e, "host_ms", b.hostMs);
        in.read(e, "device_mib", b.deviceMiB);
        r.batches.push_back(std::move(b));
    });
    top.readArray(j, "memory", [&r](const nlohmann::json& e, const ManifestReader& in) {
        in.requireObject(e);
        MemorySample m;
        in.read(e, "t_ms", m.tMs);
        in.read(e, "used_mib", m.usedMiB);
        in.read(e, "arena_mib", m.arenaMiB);
        r.memory.push_back(m);
    });
}

void readGraphs(const nlohmann::json& j, GraphStats& stats) {
    const nlohmann::json& g = ManifestReader("").object(j, "graphs", emptyObject());
    const ManifestReader in("graphs");
    in.read(g, "mode", stats.mode);
    in.read(g, "fallback_reason", stats.fallbackReason);
    in.read(g, "captures", stats.captures);
    in.read(g, "hits", stats.hits);
    in.read(g, "misses", stats.misses);
    in.read(g, "evictions", stats.evictions);
    in.read(g, "updates", stats.updates);
    in.read(g, "instantiations", stats.instantiations);
    in.read(g, "nodes", stats.nodes);
    in.read(g, "capture_ms", stats.captureMs);
    in.read(g, "instantiate_ms", stats.instantiateMs);
    in.read(g, "graph_mem_mib", stats.graphMemMiB);
    in.read(g, "cache_capacity", stats.cacheCapacity);
    in.read(g, "lanes", stats.lanes);
    in.read(g, "cache_entries", stats.cacheEntries);
    in.read(g, "invalidations", stats.invalidations);
    in.read(g, "failures", stats.failures);
    in.read(g, "update_ms", stats.updateMs);
    in.readArray(g, "used", [&stats](const nlohmann::json& e, const ManifestReader& entryIn) {
        entryIn.requireObject(e);
        GraphEntryStats entry;
        entryIn.read(e, "name", entry.name);
        entryIn.read(e, "nodes", entry.nodes);
        entryIn.read(e, "capture_ms", entry.captureMs);
        entryIn.read(e, "instantiate_ms", entry.instantiateMs);
        entryIn.read(e, "update_ms", entry.updateMs);
        entryIn.read(e, "device_mib", entry.deviceMiB);
        entryIn.read(e, "launches", entry.launches);
        entryIn.read(e, "captured", entry.captured);
        entryIn.read(e, "updated", entry.updated);
        stats.used.push_back(std::move(entry));
    });
}

void readTuning(const nlohmann::json& j, TuningInfo& tuning) {
    const nlohmann::json& t = ManifestReader("").object(j, "tuning", emptyObject());
    const ManifestReader in("tuning");
    in.read(t, "cache", tuning.cachePath);
    in.read(t, "hits", tuning.hits);
    in.read(t, "misses", tuning.misses);
    in.read(t, "rejected", tuning.rejected);
    in.read(t, "digest", tuning.digest);
    for (const auto& item : in.object(t, "settings", emptyObject()).items()) {
        if (!item.value().is_string()) ManifestReader::fail("tuning.settings." + excerpt(item.key()), "a string");
        tuning.settings[item.key()] = item.value().get<std::string>();
    }
}

void readMemoryPlan(const nlohmann::json& j, MemoryPlanInfo& plan) {
    const nlohmann::json& m = ManifestReader("").object(j, "memory_plan", emptyObject());
    const ManifestReader in("memory_plan");
    in.read(m, "weights_mib", plan.weightsMiB);
    in.read(m, "activations_mib", plan.activationsMiB);
    in.read(m, "workspace_mib", plan.workspaceMiB);
    in.read(m, "canvas_mib", plan.canvasMiB);
    in.read(m, "total_mib", plan.totalMiB);
}

std::optional<TextEncodeRecord> readTextEncode(const nlohmann::json& j) {
    if (!j.contains("text_encode")) return std::nullopt;
    const nlohmann::json& t = ManifestReader("").object(j, "text_encode", emptyObject());
    const ManifestReader in("text_encode");
    TextEncodeRecord text;
    in.read(t, "ms", text.ms);
    in.read(t, "rows_run", text.rowsRun);
    in.read(t, "rows_remembered", text.rowsRemembered);
    in.read(t, "ti_hashes", text.textualInversionHashes);
    return text;
}

std::optional<VaePassRecord> readVaePass(const nlohmann::json& j, const char* key) {
    if (!j.contains(key)) return std::nullopt;
    const nlohmann::json& p = ManifestReader("").object(j, key, emptyObject());
    const ManifestReader in(key);
    VaePassRecord pass;
    in.read(p, "ms", pass.ms);
    in.read(p, "width", pass.width);
    in.read(p, "height", pass.height);
    in.read(p, "tiled", pass.tiled);
    in.read(p, "reason", pass.reason);
    const nlohmann::json& t = in.object(p, "tiling", emptyObject());
    const ManifestReader tilingIn(std::string(key) + ".tiling");
    VaeTilingRecord& tiling = pass.tiling;
    tilingIn.read(t, "cols", tiling.cols);
    tilingIn.read(t, "rows", tiling.rows);
    tilingIn.read(t, "tile", tiling.tile);
    tilingIn.read(t, "halo", tiling.halo);
    tilingIn.read(t, "required_halo", tiling.requiredHalo);
    tilingIn.read(t, "evaluated_w", tiling.evaluatedW);
    tilingIn.read(t, "evaluated_h", tiling.evaluatedH);
    tilingIn.read(t, "whole_image_norm", tiling.wholeImageNorm);
    tilingIn.read(t, "whole_image_attention", tiling.wholeImageAttention);
    tilingIn.read(t, "canvases", tiling.canvases);
    tilingIn.read(t, "host_peak_bytes", tiling.hostPeakBytes);
    tilingIn.read(t, "device_peak_bytes", tiling.devicePeakBytes);
    return pass;
}

std::optional<TileBatchRecord> readTileBatch(const nlohmann::json& j) {
    if (!j.contains("tile_batch")) return std::nullopt;
    const nlohmann::json& b = ManifestReader("").object(j, "tile_batch", emptyObject());
    const ManifestReader in("tile_batch");
    TileBatchRecord batch;
    in.read(b, "asked", batch.asked);
    in.read(b, "ran", batch.ran);
    in.read(b, "tiles", batch.tiles);
    in.read(b, "auto_batch", batch.autoBatch);
    in.readArray(b, "lowered", [&batch](const nlohmann::json& e, const ManifestReader& loweringIn) {
        loweringIn.requireObject(e);
        TileBatchLowering lowering;
        loweringIn.read(e, "from", lowering.from);
        loweringIn.read(e, "to", lowering.to);
        loweringIn.read(e, "reason", lowering.reason);
        batch.lowered.push_back(std::move(lowering));
    });
    return batch;
}

std::optional<UpscaleModelRecord> readUpscaleModel(const nlohmann::json& j) {
    if (!j.contains("upscale_model")) return std::nullopt;
    const nlohmann::json& u = ManifestReader("").object(j, "upscale_model", emptyObject());
    const ManifestReader in("upscale_model");
    UpscaleModelRecord upscale;
    in.read(u, "file", upscale.file);
    in.read(u, "name", upscale.name);
    in.read(u, "sha256", upscale.sha256);
    in.read(u, "architecture", upscale.architecture);
    in.read(u, "scale", upscale.scale);
    in.read(u, "pickle", upscale.pickle);
    in.read(u, "backend", upscale.backend);
    in.read(u, "precision", upscale.precision);
    in.read(u, "tile", upscale.tile);
    in.read(u, "overlap", upscale.overlap);
    in.read(u, "tiles", upscale.tiles);
    in.read(u, "plan_bytes", upscale.planBytes);
    in.read(u, "budget_bytes", upscale.budgetBytes);
    in.read(u, "tile_note", upscale.tileNote);
    in.read(u, "input_w", upscale.inputW);
    in.read(u, "input_h", upscale.inputH);
    in.read(u, "output_w", upscale.outputW);
    in.read(u, "output_h", upscale.outputH);
    in.read(u, "resized_w", upscale.resizedW);
    in.read(u, "resized_h", upscale.resizedH);
    in.read(u, "resize_filter", upscale.resizeFilter);
    in.read(u, "ms", upscale.ms);
    in.read(u, "alone", upscale.alone);
    return upscale;
}

std::optional<VaeFileRecord> readVaeFile(const nlohmann::json& j) {
    if (!j.contains("vae_file")) return std::nullopt;
    const nlohmann::json& v = ManifestReader("").object(j, "vae_file", emptyObject());
    const ManifestReader in("vae_file");
    VaeFileRecord vae;
    in.read(v, "name", vae.name);
    in.read(v, "sha256", vae.sha256);
    in.read(v, "layout", vae.layout);
    in.read(v, "pickle", vae.pickle);
    return vae;
}

std::vector<LoraRecord> readLoras(const nlohmann::json& j) {
    std::vector<LoraRecord> loras;
    ManifestReader("").readArray(j, "loras", [&loras](const nlohmann::json& e, const ManifestReader& in) {
        in.requireObject(e);
        LoraRecord l;
        in.read(e, "name", l.name);
        in.read(e, "file", l.file);
        in.read(e, "sha256", l.sha256);
        in.read(e, "short_hash", l.shortHash);
        in.read(e, "te", l.teMultiplier);
        in.read(e, "unet", l.unetMultiplier);
        in.read(e, "modules_merged", l.modulesMerged);
        in.read(e, "modules_skipped", l.modulesSkipped);
        in.read(e, "keys_unmatched", l.keysUnmatched);
        in.read(e, "modules_not_merged", l.modulesNotMerged);
        loras.push_back(std::move(l));
    });
    return loras;
}

}  // namespace

RunRecord runRecordFromManifest(const nlohmann::json& j) {
    const ManifestReader top("");
    top.requireObject(j);
    if (!j.contains("schema_version")) throw std::runtime_error("manifest: 'schema_version' is missing");
    const nlohmann::json& version = j["schema_version"];
    if (!version.is_number_integer()) ManifestReader::fail("schema_version", "an integer");
    // Compared as written: a version beyond 64 bits of sign must not wrap into the range.
    const bool supported =
        version.is_number_unsigned()
            ? version.get<std::uint64_t>() >= 1 &&
                  version.get<std::uint64_t>() <= static_cast<std::uint64_t>(RunRecord::kSchemaVersion)
            : version.get<std::int64_t>() >= 1 && version.get<std::int64_t>() <= RunRecord::kSchemaVersion;
    if (!supported)
        throw std::runtime_error("manifest: 'schema_version' " + excerptJson(version) +
                                 " is not supported (this build reads 1 to " +
                                 std::to_string(RunRecord::kSchemaVersion) + ")");

    RunRecord r;
    top.read(j, "run_id", r.runId);
    top.read(j, "started_at", r.startedAt);
    top.read(j, "status", r.status);
    top.read(j, "error", r.error);
    if (j.contains("config")) r.config = runConfigFromJson(top.object(j, "config", emptyObject()));
    top.read(j, "model_name", r.modelName);
    top.read(j, "model_hash", r.modelHash);
    top.read(j, "model_pickle", r.modelPickle);
    top.read(j, "flow_matching", r.flowMatching);
    readEnvironment(j, r.environment);
    top.read(j, "tile_count", r.tileCount);
    top.read(j, "tile_w", r.tileW);
    top.read(j, "tile_h", r.tileH);
    top.read(j, "steps_run", r.stepsRun);
    readTimings(j, r);
    readGraphs(j, r.graphs);
    readTuning(j, r.tuning);
    readMemoryPlan(j, r.memoryPlan);
    top.read(j, "prepare_ms", r.prepareMs);
    top.read(j, "total_ms", r.totalMs);
    top.read(j, "peak_device_mib", r.peakDeviceMiB);
    top.read(j, "image_sha256", r.imageSha256);
    top.read(j, "seam_score", r.seamScore);
    top.read(j, "seam_worst", r.seamWorst);
    r.textEncode = readTextEncode(j);
    r.vaeEncode = readVaePass(j, "vae_encode");
    r.vaeDecode = readVaePass(j, "vae_decode");
    r.tileBatch = readTileBatch(j);
    r.upscaleModel = readUpscaleModel(j);
    r.loras = readLoras(j);
    top.readList(
        j, "controlnet_hashes", "an array of strings", [](const nlohmann::json& v) { return v.is_string(); },
        r.controlNetHashes);
    r.vaeFile = readVaeFile(j);
    top.readList(
        j, "messages", "an array of strings", [](const nlohmann::json& v) { return v.is_string(); }, r.messages);
    return r;
}

nlohmann::json chromeTrace(const std::vector<const RunRecord*>& runs) {
    using nlohmann::json;
    constexpr int kStepThread = 1, kBatchThread = 2;
    json events = json::array();
    int pid = 0;
    for (const RunRecord* run : runs) {
        ++pid;
        if (!run) continue;
        const std::string name = run->config.label.empty() ? run->runId : run->runId + " " + run->config.label;
        events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
        events.push_back(
            {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", kStepThread}, {"args", {{"name", "steps"}}}});
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"tid", kBatchThread},
                          {"args", {{"name", "tile batches"}}}});

        const double prepareUs = std::max(run->prepareMs, 0.0) * 1000.0;
        events.push_back({{"name", "prepare"},
                          {"cat", "run"},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", kStepThread},
                          {"ts", 0.0},
                          {"dur", prepareUs}});
        double stepStartUs = prepareUs;
        for (const StepTiming& s : run->steps) {
            const double durUs = std::max(s.wallMs, 0.0) * 1000.0;
            events.push_back({{"name", "step " + std::to_string(s.step)},
                              {"cat", "step"},
                              {"ph", "X"},
                              {"pid", pid},
                              {"tid", kStepThread},
                              {"ts", stepStartUs},
                              {"dur", durUs},
                              {"args",
                               {{"step", s.step},
                                {"timestep", s.timestep},
                                {"gpu_ms", s.gpuMs},
                                {"host_enqueue_ms", s.hostEnqueueMs},
                                {"wall_ms", s.wallMs}}}});
            double batchStartUs = stepStartUs;
            for (const TileBatchTiming& b : run->batches) {
                if (b.step != s.step) continue;
                const double batchUs = std::max(b.gpuMs >= 0 ? b.gpuMs : b.hostMs, 0.0) * 1000.0;
                events.push_back({{"name", "batch " + std::to_string(b.batchIndex)},
                                  {"cat", "tile_batch"},
                                  {"ph", "X"},
                                  {"pid", pid},
                                  {"tid", kBatchThread},
                                  {"ts", batchStartUs},
                                  {"dur", batchUs},
                                  {"args",
                                   {{"step", b.step},
                                    {"batch", b.batchIndex},
                                    {"tiles", joinIds(b.tileIds, ';')},
                                    {"gpu_ms", b.gpuMs},
                                    {"host_ms", b.hostMs},
                                    {"device_mib", b.deviceMiB}}}});
                batchStartUs += batchUs;
            }
            stepStartUs += durUs;
        }
        for (const MemorySample& m : run->memory)
            events.push_back({{"name", "memory"},
                              {"ph", "C"},
                              {"pid", pid},
                              {"ts", prepareUs + m.tMs * 1000.0},
                              {"args", {{"used_mib", m.usedMiB}, {"arena_mib", m.arenaMiB}}}});
    }
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

namespace {
// A copy of `value` whose strings (keys and values) are valid UTF-8.
nlohmann::json withValidUtf8(const nlohmann::json& value) {
    if (value.is_string()) return toValidUtf8(value.get_ref<const std::string&>());
    if (value.is_array()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& element : value) out.push_back(withValidUtf8(element));
        return out;
    }
    if (value.is_object()) {
        nlohmann::json out = nlohmann::json::object();
        for (const auto& [key, element] : value.items()) out[toValidUtf8(key)] = withValidUtf8(element);
        return out;
    }
    return value;
}
}  // namespace

std::string jsonText(const nlohmann::json& value, int indent) {
    try {
        return value.dump(indent);  // valid UTF-8 throughout: the usual case, no copy
    } catch (const nlohmann::json::type_error& e) {
        if (e.id != 316) throw;
    }
    return withValidUtf8(value).dump(indent);
}

OutputNeeds renderOutputNeeds(const RunConfig& config) {
    const auto positive = [](std::int64_t v) { return static_cast<std::uintmax_t>(std::max<std::int64_t>(v, 0)); };
    // Tiles per axis as TilePlan::axisPositions places them: 0, stride, 2 stride, ... and the
    // last one snapped to the far edge; at most ceil((length - tile) / stride) + 1.
    const std::int64_t tile = config.tile, stride = tile - config.overlapPixels();
    const auto perAxis = [&](std::int64_t length) -> std::uintmax_t {
        if (length < 1) return 0;
        if (tile >= length || stride <= 0) return 1;
        return static_cast<std::uintmax_t>((length - tile + stride - 1) / stride + 1);
    };
    const std::uintmax_t tiles = perAxis(config.width) * perAxis(config.height);
    const std::uintmax_t steps = positive(config.steps),
                         batch = std::max<std::uintmax_t>(positive(config.tileBatch), 1);
    const std::uintmax_t calls = steps * ((tiles + batch - 1) / batch);
    // User strings appear in the manifest (and the PNG's copy of it); one byte can become six
    // ("\u0001"). Measured with dump(2)'s indentation and numbers at full length: fixed parts
    // about 10 KiB (with a full graph cache, notes and the phases around sampling), each step (timing and memory sample)
    // about 300 bytes, each tile batch about 200 plus 14 per tile id; a CSV row about 100 plus
    // 5 per tile id (its three memory columns up to 12 bytes each).
    const std::uintmax_t strings = 6 * (config.label.size() + config.initImage.size() + 2 * config.model.size() +
                                        3 * config.upscaleModel.size() + 3 * config.vae.size());
    // Each LoRA: its setting (the path three times: config, record, its tag in the parameters) and
    // its record (about 400 bytes with hashes and counts); a prompt tag's record too.
    std::uintmax_t loraStrings = 0;
    for (const LoraSetting& lora : config.loras) loraStrings += 512 + 6 * 3 * lora.file.size();
    for (const char* tag : {"<lora:", "<lyco:"})
        for (auto at = config.prompt.find(tag); at != std::string::npos; at = config.prompt.find(tag, at + 1))
            loraStrings += 512 + 6 * (config.prompt.size() - at < 256 ? config.prompt.size() - at : 256);
    const std::uintmax_t manifest = (16u << 10) + strings + loraStrings + steps * 384 + calls * (240 + 16 * batch);
    const std::uintmax_t csv = 256 + calls * (144 + 8 * batch);
    // PNG: one filter byte per row plus 3 bytes per pixel, when incompressible stored as is
    // with IDAT chunk headers (12 bytes per 8 KiB) and deflate's stored blocks (5 per 64 KiB),
    // under 0.2%, counted as 1/256; the parameters line; and the manifest's copy, which is
    // deflated (zTXt): its JSON structure shrinks 10-30 times, so half of it plus the strings.
    const std::uintmax_t raw = positive(config.height) * (1 + 3 * positive(config.width));
    const std::uintmax_t png = raw + raw / 256 + manifest / 2 + strings + (8u << 10);
    OutputNeeds needs;
    needs.totalBytes = png + csv + manifest;
    needs.largestBytes = std::max({png, csv, manifest});
    needs.what = "image up to " + byteCountText(png) + ", timings up to " + byteCountText(csv) + ", manifest up to " +
                 byteCountText(manifest);
    return needs;
}

namespace {
// `when` (UTC) formatted by strftime's `format`.
std::string utcText(std::chrono::system_clock::time_point when, const char* format) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
    std::tm utc{};
#if defined(_WIN32)
    gmtime_s(&utc, &seconds);
#else
    gmtime_r(&seconds, &utc);
#endif
    char text[64];
    std::strftime(text, sizeof text, format, &utc);
    return text;
}
}  // namespace

std::string isoUtcNow() {
    const auto now = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    char fraction[8];
    std::snprintf(fraction, sizeof fraction, ".%03dZ", static_cast<int>(ms));
    return utcText(now, "%Y-%m-%dT%H:%M:%S") + fraction;
}

std::string newRunId() { return utcText(std::chrono::system_clock::now(), "%Y%m%d-%H%M%S") + "-" + randomHex32(); }

}  // namespace tessera
