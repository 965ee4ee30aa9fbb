#include "app/cli/bench/JobBench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/bench/BenchTable.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

namespace {

struct SdJobRow {
    std::string engine = "tessera", shape, size, precision, graphs, device, note;
    int tile = 0, overlap = 0, steps = 0, batch = 0, tiles = 0, repeats = 0;
    double cfg = 0;
    double prepareS = 0, textS = 0, sampleS = 0, decodeS = 0, totalS = 0, firstJobS = 0, peakMiB = -1;
    std::vector<double> totals;  // every timed job's total_s
    bool failed = false;
};

std::string sdJobCsvLine(const SdJobRow& r) {
    const auto [lo, hi] = r.totals.empty() ? std::pair{0.0, 0.0}
                                           : std::pair{*std::min_element(r.totals.begin(), r.totals.end()),
                                                       *std::max_element(r.totals.begin(), r.totals.end())};
    auto num = [&](double v, int digits) { return r.failed ? std::string() : fixed(v, digits); };
    return csvField(r.engine) + "," + r.shape + "," + r.size + "," + std::to_string(r.tile) + "," +
           std::to_string(r.overlap) + "," + std::to_string(r.steps) + "," + significant(r.cfg, 4) + "," +
           std::to_string(r.batch) + "," + std::to_string(r.tiles) + "," + r.precision + "," + r.graphs + "," +
           num(r.prepareS, 3) + "," + num(r.textS, 3) + "," + num(r.sampleS, 3) + "," + num(r.decodeS, 3) + "," +
           num(r.totalS, 3) + "," + num(r.sampleS / std::max(1, r.steps), 4) + "," + num(lo, 3) + "," + num(hi, 3) +
           "," + num(r.firstJobS, 2) + "," + (!r.failed && r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "") + "," +
           std::to_string(r.repeats) + "," + csvField(r.device) + "," + csvField(r.note);
}

// Job `take` of a row: the prompt and the negative prompt end in its number, so no job finds
// its text already encoded (the text encoders remember rows across runs): every timed job
// pays for its text as a job with a new prompt does.
RunConfig takeOf(const RunConfig& config, int take) {
    RunConfig c = config;
    c.prompt += ", take " + std::to_string(take);
    c.negativePrompt += ", take " + std::to_string(take);
    return c;
}

// One row: a warm-up job on a fresh engine, then o.repeats timed jobs on it; medians.
void runSdJobRow(SdJobRow& row, const BenchOptions& o, const std::shared_ptr<const SdModel>& model,
                 const RunConfig& config, std::ostream& err) {
    std::string note;
    std::unique_ptr<Engine> engine = createEngine(o.backend, &note);
    if (!note.empty()) row.note = note;
    engine->setSdModel(model);
    BenchNotes observer;
    RunConfig warm = takeOf(config, 0);
    if (o.warmupSteps > 0) warm.steps = std::min(o.steps, o.warmupSteps);
    auto t0 = std::chrono::steady_clock::now();
    const RunResult first = engine->run(warm, observer);
    if (first.record.status != RunStatus::Finished)
        throw std::runtime_error("warm-up job " + std::string(toString(first.record.status)) + ": " +
                                 first.record.error);
    row.firstJobS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    row.device = first.record.environment.device;
    row.engine = "tessera-" + first.record.environment.backend;
    std::vector<double> prepare, text, sample, decode;
    RunRecord last;
    for (int r = 0; r < o.repeats; ++r) {
        const RunConfig take = takeOf(config, r + 1);
        t0 = std::chrono::steady_clock::now();
        RunResult result = engine->run(take, observer);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (result.record.status != RunStatus::Finished)
            throw std::runtime_error("job " + std::string(toString(result.record.status)) + ": " + result.record.error);
        double steps = 0;
        for (const auto& step : result.record.steps) steps += step.wallMs;
        row.totals.push_back(wall);
        prepare.push_back(result.record.prepareMs / 1000.0);
        text.push_back(result.record.textEncode ? result.record.textEncode->ms / 1000.0 : 0.0);
        sample.push_back(steps / 1000.0);
        decode.push_back(result.record.vaeDecode ? result.record.vaeDecode->ms / 1000.0 : 0.0);
        row.peakMiB = std::max(row.peakMiB, result.record.peakDeviceMiB);
        if (config.tileBatch <= 0) row.batch = result.record.config.tileBatch;  // what auto chose
        last = std::move(result.record);
    }
    row.totalS = median(row.totals);
    row.prepareS = median(prepare);
    row.textS = median(text);
    row.sampleS = median(sample);
    row.decodeS = median(decode);
    if (!last.graphs.mode.empty() && last.graphs.mode != row.graphs) row.graphs += ">" + last.graphs.mode;
    // What an auto tile batch chose and how the last job decoded, in the record's words.
    if (last.tileBatch && last.tileBatch->automatic()) appendNote(row.note, describeAutoTileBatch(*last.tileBatch));
    if (last.vaeDecode) appendNote(row.note, describeVaeDecode(*last.vaeDecode));
    err << " " << fixed(row.totalS, 3) << " s per job (text " << fixed(row.textS, 3) << " s, sampling "
        << fixed(row.sampleS, 3) << " s, decode " << fixed(row.decodeS, 3) << " s)\n";
}

// The DDPM rows' run as a text-to-image job: DPM++ 2M Karras, noise-prediction blending, a
// prompt and a negative prompt, guidance.
RunConfig jobConfig(const BenchOptions& o, Precision precision, GraphMode graphs, int batch) {
    RunConfig c = benchRowConfig(o, precision, graphs, 0, batch);
    c.scheduler = SchedulerKind::DPMPP2M;
    c.schedulerOptions.karrasSigmas = true;
    c.fusion = FusionRule::Noise;
    c.prompt = "a lighthouse on a cliff above a stormy sea, dramatic light";
    c.negativePrompt = "blurry, low quality";
    c.cfgScale = o.cfg;
    return c;
}

}  // namespace

std::string sdJobCsvHeader() {
    return "engine,shape,size,tile,overlap,steps,cfg,batch,tiles,precision,graphs,prepare_s,text_s,sample_s,decode_s,"
           "total_s,"
           "s_per_step,total_min_s,total_max_s,first_job_s,peak_mib,repeats,device,note";
}

int runSdJobBench(const BenchOptions& o, std::ostream& out, std::ostream& err) {
    if (!o.csvPath.empty()) checkBenchCsv(o.csvPath, o.precisions.size() * o.graphs.size() * o.batches.size());
    const std::string size = benchSizeText(o);
    const TilePlan plan = TilePlan::make(o.width / 8, o.height / 8, o.tile / 8, o.overlap / 8);
    err << "bench: " << o.shape << " whole jobs (random weights: text encoders, UNet, VAE), " << size << ", tile "
        << o.tile << ", overlap " << o.overlap << ", cfg " << significant(o.cfg, 4) << ", " << o.steps
        << " steps of DPM++ 2M Karras; " << o.repeats << " timed jobs per row after a "
        << (o.warmupSteps ? std::min(o.warmupSteps, o.steps) : o.steps) << "-step warm-up job; " << benchDate() << "\n";
    const auto model = std::make_shared<const SdModel>(randomSdModel("random:" + o.shape, o.seed));
    std::vector<SdJobRow> rows;
    bool anyFailed = false;
    for (Precision p : o.precisions)
        for (GraphMode mode : o.graphs)
            for (int batch : o.batches) {
                // Filled field by field like other parameter blocks: alike in shape only.
                SdJobRow row;
                row.shape = o.shape;
                row.size = size;
                row.tile = o.tile;
                row.overlap = o.overlap;
                row.steps = o.steps;
                row.cfg = o.cfg;
                row.batch = batch;
                row.tiles = plan.count();
                row.precision = std::string(toString(p));
                row.graphs = std::string(toString(mode));
                row.repeats = o.repeats;
                err << "bench: job " << row.precision << ", graphs " << row.graphs << ", batch "
                    << (batch > 0 ? std::to_string(batch) : std::string("auto")) << " ..." << std::flush;
                try {
                    runSdJobRow(row, o, model, jobConfig(o, p, mode, batch), err);
                } catch (const std::exception& e) {
                    anyFailed = row.failed = true;
                    row.note = e.what();
                    err << " failed: " << e.what() << "\n";
                }
                rows.push_back(std::move(row));
            }
    out << sdJobCsvHeader() << "\n";
    for (const SdJobRow& r : rows) out << sdJobCsvLine(r) << "\n";
    if (!o.csvPath.empty() && !writeBenchCsv(o.csvPath, sdJobCsvHeader(), rows, sdJobCsvLine, err)) return kExitFailure;
    return anyFailed ? kExitFailure : kExitOk;
}

}  // namespace tessera
