#include "app/cli/bench/JobBench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/bench/BenchTable.h"
#include "core/formats/Safetensors.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetModel.h"
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

// --controlnet: a ControlNet of control_v11f1e_sd15_tile's config (diffusers ControlNetModel, 361 M
// parameters) with random weights, written F16 to a folder of its own as a user's file is read;
// the folder is removed with this.
class RandomControlNetFolder {
public:
    RandomControlNetFolder(std::uint64_t seed, std::ostream& err) {
        namespace fs = std::filesystem;
        const nlohmann::json config = nlohmann::json::parse(R"({"_class_name": "ControlNetModel",
          "block_out_channels": [320, 640, 1280, 1280], "down_block_types": ["CrossAttnDownBlock2D",
          "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 2,
          "cross_attention_dim": 768, "attention_head_dim": 8, "norm_num_groups": 32, "norm_eps": 1e-05,
          "conditioning_embedding_out_channels": [16, 32, 96, 256], "use_linear_projection": false})");
        folder_ =
            fs::temp_directory_path() / ("tessera-bench-controlnet-" + std::to_string(seed) + "-" +
                                         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
        fs::create_directories(folder_);
        err << "bench: writing a random ControlNet (control_v11f1e_sd15_tile's shape) to " << folder_.string() << "\n";
        const ControlNetModel net = ControlNetModel::random(controlNetConfigFromJson(config), seed);
        std::map<std::string, SafetensorsTensorData> tensors;
        for (const auto& [name, t] : net.tensors())
            tensors[name] = {SafetensorsDtype::F16, t.shape, encodeFloats(SafetensorsDtype::F16, t.data)};
        writeSafetensors((folder_ / "diffusion_pytorch_model.safetensors").string(), tensors, {{"format", "pt"}});
        std::ofstream(folder_ / "config.json") << config.dump();
    }
    ~RandomControlNetFolder() {
        std::error_code ec;
        std::filesystem::remove_all(folder_, ec);
    }
    RandomControlNetFolder(const RandomControlNetFolder&) = delete;
    RandomControlNetFolder& operator=(const RandomControlNetFolder&) = delete;
    std::string path() const { return folder_.string(); }

private:
    std::filesystem::path folder_;
};

// The start image of an upscale job: a smooth synthetic picture in model space ([-1, 1]), 3 x H x W
// (what an upscale model's or a resize's output looks like to the sampler: no noise).
ImageTensor syntheticStartImage(int width, int height) {
    ImageTensor image{3, height, width, std::vector<float>(static_cast<std::size_t>(3) * width * height)};
    for (int c = 0; c < 3; ++c)
        for (int y = 0; y < height; ++y)
            for (int x = 0; x < width; ++x)
                image.data[(static_cast<std::size_t>(c) * height + y) * width + x] =
                    0.8f * std::sin(0.011f * static_cast<float>(x * (c + 1)) + 0.007f * static_cast<float>(y)) *
                    std::cos(0.005f * static_cast<float>(y * (3 - c)));
    return image;
}

// One row: a warm-up job on a fresh engine, then o.repeats timed jobs on it; medians. `start`: the
// image-to-image start image (and, with ControlNets, their control image).
void runSdJobRow(SdJobRow& row, const BenchOptions& o, const std::shared_ptr<const SdModel>& model,
                 const RunConfig& config, const ImageTensor* start, std::ostream& err) {
    std::string note;
    std::unique_ptr<Engine> engine = createEngine(o.backend, &note);
    if (!note.empty()) row.note = note;
    engine->setSdModel(model);
    if (start) engine->setInitImage(*start);
    engine->setControlImages(std::vector<ImageTensor>(config.controlNets.size()));
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
    std::vector<double> prepare, text, sample, decode, encode;
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
        encode.push_back(result.record.vaeEncode ? result.record.vaeEncode->ms / 1000.0 : 0.0);
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
    if (last.vaeEncode) appendNote(row.note, "VAE encode " + fixed(median(encode), 3) + " s (in prepare_s)");
    if (start)
        appendNote(row.note, std::to_string(config.controlNets.size()) + " ControlNet, strength " +
                                 significant(config.strength, 3) + ": " + std::to_string(last.steps.size()) +
                                 " steps executed");
    // How visible the borders are where the last step's tiles met (the image, not the latents): the
    // measure that tells an overlapping plan from shifted tiles.
    if (config.tileShift != TileShift::Off)
        appendNote(row.note, "tile shift " + std::string(toString(config.tileShift)));
    if (last.seamScore >= 0)
        appendNote(row.note, "seam score " + fixed(last.seamScore, 3) + " (worst " + fixed(last.seamWorst, 2) + ")");
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
    c.tileShift = o.tileShift;
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
        << " steps of DPM++ 2M Karras"
        << (o.strength > 0 ? ", image-to-image at strength " + significant(o.strength, 3) : "")
        << (o.controlNet ? " with a ControlNet" : "") << "; " << o.repeats << " timed jobs per row after a "
        << (o.warmupSteps ? std::min(o.warmupSteps, o.steps) : o.steps) << "-step warm-up job; " << benchDate() << "\n";
    const auto model = std::make_shared<const SdModel>(randomSdModel("random:" + o.shape, o.seed));
    std::unique_ptr<RandomControlNetFolder> controlNet;
    std::optional<ImageTensor> start;
    if (o.controlNet) controlNet = std::make_unique<RandomControlNetFolder>(o.seed + 1, err);
    if (o.strength > 0) start = syntheticStartImage(o.width, o.height);
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
                    RunConfig config = jobConfig(o, p, mode, batch);
                    if (start) {
                        config.initImage = "synthetic start image";
                        config.strength = o.strength;
                    }
                    if (controlNet) {
                        ControlNetUnit unit;
                        unit.model = controlNet->path();
                        config.controlNets.push_back(unit);
                    }
                    runSdJobRow(row, o, model, config, start ? &*start : nullptr, err);
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
