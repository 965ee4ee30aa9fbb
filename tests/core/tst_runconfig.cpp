// RunConfig: enum names, validation (every rule names its field), JSON and the parameters line.
#include <QtTest/QtTest>

#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"
#include "core/run/RunConfigFields.h"
#include "core/sampling/TilePlan.h"

using namespace tessera;

namespace {

// The first problem validate() finds, or an empty field when the config is accepted.
struct Rejection {
    std::string field;
    std::string message;
};

Rejection rejectionOf(const RunConfig& config, const ModelLimits& limits = {}) {
    try {
        validate(config, limits);
    } catch (const ValidationError& e) {
        return {e.field(), e.what()};
    }
    return {};
}

// Enums are compared by value: QTest's own toString would find tessera::toString by ADL.
template <typename E>
int n(E value) {
    return static_cast<int>(value);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Rejection jsonRejection(const std::string& text) {
    try {
        (void)runConfigFromJson(nlohmann::json::parse(text));
    } catch (const ValidationError& e) {
        return {e.field(), e.what()};
    }
    return {};
}

}  // namespace

class TestRunConfig : public QObject {
    Q_OBJECT

private slots:
    void enumNamesRoundTrip() {
        for (auto k : {SchedulerKind::DDPM, SchedulerKind::DDIM, SchedulerKind::Euler})
            QCOMPARE(n(parseScheduler(toString(k))), n(k));
        for (auto k : {BetaSchedule::Linear, BetaSchedule::ScaledLinear, BetaSchedule::SquaredCosCapV2})
            QCOMPARE(n(parseBetaSchedule(toString(k))), n(k));
        for (auto k : {TimestepSpacing::Leading, TimestepSpacing::Trailing, TimestepSpacing::Linspace})
            QCOMPARE(n(parseTimestepSpacing(toString(k))), n(k));
        for (auto k : {VarianceType::FixedSmall, VarianceType::FixedLarge})
            QCOMPARE(n(parseVarianceType(toString(k))), n(k));
        for (auto k : {PredictionType::Epsilon, PredictionType::Sample, PredictionType::VPrediction})
            QCOMPARE(n(parsePredictionType(toString(k))), n(k));
        for (auto k :
             {BlendWindowKind::None, BlendWindowKind::Linear, BlendWindowKind::Hann, BlendWindowKind::Gaussian})
            QCOMPARE(n(parseBlendWindow(toString(k))), n(k));
        for (auto k : {FusionRule::Sample, FusionRule::Noise}) QCOMPARE(n(parseFusionRule(toString(k))), n(k));
        for (auto k : {GraphMode::Off, GraphMode::Tile, GraphMode::Step})
            QCOMPARE(n(parseGraphMode(toString(k))), n(k));
        for (auto k : {Precision::FP32, Precision::FP16, Precision::BF16})
            QCOMPARE(n(parsePrecision(toString(k))), n(k));
        for (auto k : {BackendKind::Auto, BackendKind::CPU, BackendKind::CUDA})
            QCOMPARE(n(parseBackend(toString(k))), n(k));
    }

    void enumNamesAreTheDocumentedOnes() {
        QCOMPARE(toString(SchedulerKind::DDIM), std::string_view("ddim"));
        QCOMPARE(toString(BetaSchedule::SquaredCosCapV2), std::string_view("squaredcos_cap_v2"));
        QCOMPARE(toString(PredictionType::VPrediction), std::string_view("v_prediction"));
        QCOMPARE(toString(VarianceType::FixedLarge), std::string_view("fixed_large"));
        QCOMPARE(toString(BlendWindowKind::Hann), std::string_view("hann"));
        QCOMPARE(toString(GraphMode::Step), std::string_view("step"));
        QCOMPARE(toString(Precision::FP16), std::string_view("fp16"));
        QCOMPARE(toString(BackendKind::CUDA), std::string_view("cuda"));
        QCOMPARE(n(parseScheduler("DDIM")), n(SchedulerKind::DDIM));  // case does not matter
    }

    void unknownEnumNameNamesFieldAndChoices() {
        try {
            (void)parseBlendWindow("cosine");
            QFAIL("parseBlendWindow accepted 'cosine'");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("window"));
            const std::string m = e.what();
            QVERIFY2(contains(m, "window: 'cosine' is not one of none, linear, hann or gaussian"), m.c_str());
        }
        try {
            (void)parseTimestepSpacing("even", "spacing");
            QFAIL("parseTimestepSpacing accepted 'even'");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("spacing"));
            QVERIFY(contains(e.what(), "'even'"));
        }
    }

    // The auto tile batch: the tiles over the fewest calls of at most 32, spread evenly.
    void autoTileBatchSpreadsTheTilesEvenly_data() {
        QTest::addColumn<int>("tiles");
        QTest::addColumn<int>("most");
        QTest::addColumn<int>("batch");
        QTest::newRow("one tile") << 1 << 32 << 1;
        QTest::newRow("25 tiles: one call") << 25 << 32 << 25;
        QTest::newRow("32 tiles: one call") << 32 << 32 << 32;
        QTest::newRow("33 tiles: 17 + 16") << 33 << 32 << 17;
        QTest::newRow("64 tiles: two of 32") << 64 << 32 << 32;
        QTest::newRow("65 tiles: 22 + 22 + 21") << 65 << 32 << 22;
        QTest::newRow("441 tiles: 14 calls") << 441 << 32 << 32;
        QTest::newRow("25 tiles, 12 fit: 9 + 8 + 8") << 25 << 12 << 9;
        QTest::newRow("25 tiles, 1 fits") << 25 << 1 << 1;
        QTest::newRow("no tiles") << 0 << 32 << 1;
        QTest::newRow("most below 1 counts as 1") << 5 << 0 << 1;
    }
    void autoTileBatchSpreadsTheTilesEvenly() {
        QFETCH(int, tiles);
        QFETCH(int, most);
        QFETCH(int, batch);
        const int got = autoTileBatch(tiles, most);
        QCOMPARE(got, batch);
        if (tiles > 0) {
            // No more calls than the cap needs, and the last call within one tile of the others.
            const int calls = (tiles + got - 1) / got;
            QCOMPARE(calls, (tiles + std::max(1, most) - 1) / std::max(1, most));
            QVERIFY(tiles - (calls - 1) * got >= got - calls);
        }
    }
    void resolveTileBatchKeepsAnAskedForOne() {
        QCOMPARE(resolveTileBatch(0, 25), 25);
        QCOMPARE(resolveTileBatch(0, 441), 32);
        QCOMPARE(resolveTileBatch(8, 25), 8);
        QCOMPARE(resolveTileBatch(64, 25), 25);  // at most every tile
        QCOMPARE(resolveTileBatch(1, 25), 1);
        QCOMPARE(RunConfig{}.tileBatch, 0);  // auto unless asked
    }
    // "auto" is read as 0 where a 0 means auto (batch, lanes), on the command line and in JSON;
    // other words are refused naming the field.
    void autoIsAWordForBatchAndLanes() {
        RunConfig c;
        c.tileBatch = 7;
        c.lanes = 3;
        const auto applyField = [](RunConfig& config, std::string_view name, const std::string& text) {
            findRunConfigField(name)->parse(config, text);
        };
        applyField(c, "batch", "auto");
        applyField(c, "lanes", "auto");
        QCOMPARE(c.tileBatch, 0);
        QCOMPARE(c.lanes, 0);
        applyField(c, "batch", "12");
        QCOMPARE(c.tileBatch, 12);
        RunConfig j = runConfigFromJson(nlohmann::json{{"batch", "auto"}, {"lanes", "auto"}});
        QCOMPARE(j.tileBatch, 0);
        QCOMPARE(j.lanes, 0);
        for (const char* bad : {"Auto", "automatic", "", "-"}) {
            try {
                RunConfig d;
                findRunConfigField("batch")->parse(d, bad);
                QFAIL(bad);
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), std::string("batch"));
            }
        }
        try {
            (void)runConfigFromJson(nlohmann::json{{"batch", "many"}});
            QFAIL("a word other than auto");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("batch"));
            QVERIFY2(contains(e.what(), "\"many\""), e.what());
        }
    }

    void defaultsAreValid() {
        QVERIFY(validateAll(RunConfig{}).empty());
        validate(RunConfig{});
    }

    void rejections_data() {
        QTest::addColumn<QString>("expectedField");
        QTest::addColumn<QString>("messagePart");
        QTest::addColumn<int>("caseIndex");
        int i = 0;
        const char* cases[][2] = {
            {"width", "width: 0 is not allowed; the width must be 1 to 16384 pixels"},
            {"width", "width: 16385 is not allowed; the width must be 1 to 16384"},
            {"height", "height: -5 is not allowed"},
            {"height", "height: 60 is smaller than the tile (64) and not a multiple of 8"},
            {"width", "use 8 (or any size from 64 up)"},
            {"tile", "tile: 0 is not allowed; the tile size must be a positive multiple of 8 (e.g. 64)"},
            {"tile", "tile: 60 is not a multiple of 8"},
            {"tile", "tile: 5000 is too large; the tile size must be at most 4096"},
            {"overlap", "overlap: -1 is not allowed"},
            {"overlap", "overlap: 64 is not allowed; the overlap must be 0 to 63 pixels"},
            {"overlap", "overlap: 1 (a fraction of the tile) is not allowed"},
            {"overlap", "overlap: -0.25 (a fraction of the tile) is not allowed"},
            {"steps", "steps: 0 is not allowed"},
            {"steps", "steps: 1001 is not allowed"},
            {"batch", "batch: -1 is not allowed; the tile batch (0 = auto) must be 0 to 1024"},
            {"batch", "batch: 1025 is not allowed"},
            {"graph_warmup", "graph_warmup: -1 is not allowed; the graph warm-up count must be 0 to 100"},
            {"graph_warmup", "graph_warmup: 101 is not allowed"},
            {"graph_cache", "graph_cache: 0 is not allowed; the graph cache size must be 1 to 1024"},
            {"graph_cache", "graph_cache: 1025 is not allowed"},
            {"lanes", "lanes: -1 is not allowed; the lane count (0 = auto) must be 0 to 8"},
            {"lanes", "lanes: 9 is not allowed"},
            {"preview_every", "preview_every: -1 is not allowed"},
            {"strength", "strength: 0 is not allowed; with an init image the strength must be above 0 and at most 1"},
            {"strength", "strength: 1.5 is not allowed"},
            {"eta", "eta: -0.5 is not allowed; eta must be 0 or more"},
            {"beta_start", "beta_start: 0 is not allowed; beta_start must be above 0"},
            {"beta_end", "beta_end: 0.0001 is not allowed; beta_end must be above beta_start (0.0001)"},
            {"prediction_type", "prediction_type: 'sample' is not allowed with the euler scheduler"},
            {"num_train_timesteps", "num_train_timesteps: 0 is not allowed"},
            {"steps_offset", "steps_offset: -1 is not allowed"},
            {"clip_sample_range", "clip_sample_range: 0 is not allowed"},
            {"overlap",
             "overlap: tile 64 with overlap 56 px gives 4165681 tiles on 16384x16384; at most 65536 are allowed"},
        };
        for (const auto& c : cases) {
            QTest::newRow(c[1]) << QString::fromUtf8(c[0]) << QString::fromUtf8(c[1]) << i;
            ++i;
        }
    }

    void rejections() {
        QFETCH(QString, expectedField);
        QFETCH(QString, messagePart);
        QFETCH(int, caseIndex);
        const std::vector<std::function<void(RunConfig&)>> edits = {
            [](RunConfig& c) { c.width = 0; },
            [](RunConfig& c) { c.width = 16385; },
            [](RunConfig& c) { c.height = -5; },
            [](RunConfig& c) { c.height = 60; },
            [](RunConfig& c) { c.width = 5; },
            [](RunConfig& c) { c.tile = 0; },
            [](RunConfig& c) {
                c.tile = 60;
                c.width = c.height = 240;
            },
            [](RunConfig& c) {
                c.tile = 5000;
                c.width = c.height = 8192;
            },
            [](RunConfig& c) { c.overlapPx = -1; },
            [](RunConfig& c) { c.overlapPx = 64; },
            [](RunConfig& c) { c.overlapFraction = 1.0; },
            [](RunConfig& c) { c.overlapFraction = -0.25; },
            [](RunConfig& c) { c.steps = 0; },
            [](RunConfig& c) { c.steps = 1001; },
            [](RunConfig& c) { c.tileBatch = -1; },
            [](RunConfig& c) { c.tileBatch = 1025; },
            [](RunConfig& c) { c.graphWarmup = -1; },
            [](RunConfig& c) { c.graphWarmup = 101; },
            [](RunConfig& c) { c.graphCacheSize = 0; },
            [](RunConfig& c) { c.graphCacheSize = 1025; },
            [](RunConfig& c) { c.lanes = -1; },
            [](RunConfig& c) { c.lanes = 9; },
            [](RunConfig& c) { c.previewEvery = -1; },
            [](RunConfig& c) {
                c.initImage = "in.png";
                c.strength = 0.0;
            },
            [](RunConfig& c) {
                c.initImage = "in.png";
                c.strength = 1.5;
            },
            [](RunConfig& c) { c.schedulerOptions.eta = -0.5f; },
            [](RunConfig& c) { c.schedulerOptions.betaStart = 0.0f; },
            [](RunConfig& c) { c.schedulerOptions.betaEnd = 1e-4f; },
            [](RunConfig& c) {
                c.scheduler = SchedulerKind::Euler;
                c.schedulerOptions.predictionType = PredictionType::Sample;
            },
            [](RunConfig& c) {
                c.schedulerOptions.numTrainTimesteps = 0;
                c.steps = 1;
            },
            [](RunConfig& c) { c.schedulerOptions.stepsOffset = -1; },
            [](RunConfig& c) { c.schedulerOptions.clipSampleRange = 0.0f; },
            [](RunConfig& c) {
                c.width = c.height = 16384;
                c.tile = 64;
                c.overlapPx = 56;
            },
        };
        QCOMPARE(edits.size(), static_cast<std::size_t>(33));
        RunConfig config;
        edits.at(static_cast<std::size_t>(caseIndex))(config);
        const Rejection r = rejectionOf(config);
        QCOMPARE(QString::fromStdString(r.field), expectedField);
        QVERIFY2(contains(r.message, messagePart.toStdString()), r.message.c_str());
        // validateAll reports the same problem (and only it: each edit breaks one rule).
        const auto all = validateAll(config);
        QCOMPARE(all.size(), static_cast<std::size_t>(1));
        QCOMPARE(QString::fromStdString(all.front().field()), expectedField);
    }

    // The cap counts tiles as TilePlan lays them out: at the limit accepted, one column more refused.
    void tileCountCapMatchesThePlan() {
        RunConfig c;
        c.width = c.height = 4096;
        c.tile = 16;
        c.overlapPx = 0;
        QVERIFY(validateAll(c).empty());
        QCOMPARE(TilePlan::fromConfig(c).count(), 65536);
        c.width = 4104;
        const auto problems = validateAll(c);
        QCOMPARE(problems.size(), static_cast<std::size_t>(1));
        QCOMPARE(QString::fromStdString(problems.front().field()), QStringLiteral("overlap"));
        const std::string expected = "gives " + std::to_string(TilePlan::fromConfig(c).count()) + " tiles";
        QVERIFY2(contains(problems.front().what(), expected), problems.front().what());
    }

    void nearestValidSizesAreNamed() {
        RunConfig c;
        c.height = 60;
        QVERIFY2(contains(rejectionOf(c).message, "use 56 or 64"), rejectionOf(c).message.c_str());
        c = RunConfig{};
        c.tile = 60;
        QVERIFY2(contains(rejectionOf(c).message, "use 56 or 64"), rejectionOf(c).message.c_str());
        c = RunConfig{};
        c.tile = 100;
        c.width = c.height = 512;
        QVERIFY2(contains(rejectionOf(c).message, "use 96 or 104"), rejectionOf(c).message.c_str());
    }

    void smallImageRule() {
        RunConfig c;   // tile 64, model downsamples 8x
        c.width = 40;  // smaller than the tile, multiple of 8: one 40-wide tile
        c.height = 8;
        QVERIFY(validateAll(c).empty());
        c.width = 100;  // at least the tile: any size, tiles snap inside
        c.height = 71;
        QVERIFY(validateAll(c).empty());
        c.width = 64;
        c.height = 63;
        QCOMPARE(rejectionOf(c).field, std::string("height"));
        QVERIFY(contains(rejectionOf(c).message, "use 56 or 64"));
        // With a model that downsamples 4x, 60 is fine as a small side and as a tile.
        ModelLimits shallow;
        shallow.downsampleFactor = 4;
        c.height = 60;
        QVERIFY(validateAll(c, shallow).empty());
        c.tile = 60;
        c.height = 256;
        QVERIFY(validateAll(c, shallow).empty());
    }

    void stepsLimitFollowsModel() {
        RunConfig c;
        c.steps = 500;
        ModelLimits limits;
        limits.numTrainTimesteps = 400;
        const Rejection r = rejectionOf(c, limits);
        QCOMPARE(r.field, std::string("steps"));
        QVERIFY2(contains(r.message, "must be 1 to 400"), r.message.c_str());
        c.steps = 1000;
        QVERIFY(validateAll(c).empty());
    }

    void optionalRulesOnlyApplyWhenRelevant() {
        RunConfig c;
        c.strength = 0.0;  // no init image: strength is unused
        QVERIFY(validateAll(c).empty());
        c.scheduler = SchedulerKind::Euler;
        c.schedulerOptions.predictionType = PredictionType::VPrediction;
        QVERIFY(validateAll(c).empty());
        c.schedulerOptions.predictionType = PredictionType::Epsilon;
        QVERIFY(validateAll(c).empty());
        c.overlapFraction = 0.0;
        QVERIFY(validateAll(c).empty());
        c.overlapFraction = 0.99;  // 63.36 -> 63 px, still below the tile
        QCOMPARE(c.overlapPixels(), 63);
        QVERIFY(validateAll(c).empty());
        c.overlapFraction = 0.995;  // rounds to 64 px = the tile
        QCOMPARE(rejectionOf(c).field, std::string("overlap"));
        c = RunConfig{};
        c.seed = std::numeric_limits<std::uint64_t>::max();
        QVERIFY(validateAll(c).empty());
    }

    void validateAllCollectsEveryProblem() {
        RunConfig c;
        c.width = 0;
        c.tile = 0;
        c.steps = 0;
        c.tileBatch = -1;
        c.schedulerOptions.eta = -1.0f;
        const auto all = validateAll(c);
        QStringList fields;
        for (const auto& e : all) fields << QString::fromStdString(e.field());
        QCOMPARE(fields, (QStringList{"width", "tile", "steps", "batch", "eta"}));
        // validate() throws the first one.
        QCOMPARE(rejectionOf(c).field, std::string("width"));
    }

    void overlapPixelsResolvesFraction() {
        RunConfig c;
        QCOMPARE(c.overlapPixels(), 16);
        c.overlapFraction = 0.25;
        QCOMPARE(c.overlapPixels(), 16);
        c.tile = 96;
        c.overlapFraction = 1.0 / 3.0;
        QCOMPARE(c.overlapPixels(), 32);
        c.overlapFraction = 0.2;  // 19.2 -> 19
        QCOMPARE(c.overlapPixels(), 19);
    }

    void jsonRoundTrip() {
        RunConfig c;
        c.width = 1000;
        c.height = 744;
        c.seed = 18446744073709551615ULL;
        c.steps = 37;
        c.scheduler = SchedulerKind::Euler;
        c.schedulerOptions.numTrainTimesteps = 900;
        c.schedulerOptions.betaStart = 0.00085f;
        c.schedulerOptions.betaEnd = 0.012f;
        c.schedulerOptions.betaSchedule = BetaSchedule::ScaledLinear;
        c.schedulerOptions.timestepSpacing = TimestepSpacing::Trailing;
        c.schedulerOptions.stepsOffset = 1;
        c.schedulerOptions.clipSample = false;
        c.schedulerOptions.clipSampleRange = 2.5f;
        c.schedulerOptions.setAlphaToOne = false;
        c.schedulerOptions.eta = 0.3f;
        c.schedulerOptions.varianceType = VarianceType::FixedLarge;
        c.schedulerOptions.predictionType = PredictionType::VPrediction;
        c.schedulerOptions.karrasSigmas = false;
        c.tile = 128;
        c.overlapFraction = 0.3;
        c.window = BlendWindowKind::Gaussian;
        c.fusion = FusionRule::Noise;
        c.tileBatch = 12;
        c.graphs = GraphMode::Tile;
        c.graphWarmup = 5;
        c.graphCacheSize = 3;
        c.lanes = 6;
        c.precision = Precision::BF16;
        c.backend = BackendKind::CPU;
        c.model = "/models/ddpm-church-256";
        c.previewEvery = 4;
        c.initImage = "start.png";
        c.strength = 0.65;
        c.preserveColor = true;
        c.label = "church \"wide\"";
        c.tuningCache = "/tmp/tuning.json";

        const nlohmann::json j = toJson(c);
        // Through text, as a file would carry it.
        const RunConfig back = runConfigFromJson(nlohmann::json::parse(j.dump(2)));
        QCOMPARE(back.width, c.width);
        QCOMPARE(back.height, c.height);
        QCOMPARE(back.seed, c.seed);
        QCOMPARE(back.steps, c.steps);
        QCOMPARE(n(back.scheduler), n(c.scheduler));
        QCOMPARE(back.schedulerOptions.numTrainTimesteps, 900);
        QCOMPARE(back.schedulerOptions.betaStart, 0.00085f);
        QCOMPARE(back.schedulerOptions.betaEnd, 0.012f);
        QCOMPARE(n(back.schedulerOptions.betaSchedule), n(BetaSchedule::ScaledLinear));
        QCOMPARE(n(back.schedulerOptions.timestepSpacing), n(TimestepSpacing::Trailing));
        QCOMPARE(back.schedulerOptions.stepsOffset, 1);
        QCOMPARE(back.schedulerOptions.clipSample, false);
        QCOMPARE(back.schedulerOptions.clipSampleRange, 2.5f);
        QCOMPARE(back.schedulerOptions.setAlphaToOne, false);
        QCOMPARE(back.schedulerOptions.eta, 0.3f);
        QCOMPARE(n(back.schedulerOptions.varianceType), n(VarianceType::FixedLarge));
        QCOMPARE(n(back.schedulerOptions.predictionType), n(PredictionType::VPrediction));
        QCOMPARE(back.schedulerOptions.karrasSigmas, false);
        QCOMPARE(back.tile, 128);
        QVERIFY(back.overlapFraction.has_value());
        QCOMPARE(*back.overlapFraction, 0.3);
        QCOMPARE(n(back.window), n(BlendWindowKind::Gaussian));
        QCOMPARE(n(back.fusion), n(FusionRule::Noise));
        QCOMPARE(back.tileBatch, 12);
        QCOMPARE(n(back.graphs), n(GraphMode::Tile));
        QCOMPARE(back.graphWarmup, 5);
        QCOMPARE(back.graphCacheSize, 3);
        QCOMPARE(back.lanes, 6);
        QCOMPARE(n(back.precision), n(Precision::BF16));
        QCOMPARE(n(back.backend), n(BackendKind::CPU));
        QCOMPARE(back.model, c.model);
        QCOMPARE(back.previewEvery, 4);
        QCOMPARE(back.initImage, c.initImage);
        QCOMPARE(back.strength, 0.65);
        QCOMPARE(back.preserveColor, true);
        QCOMPARE(back.label, c.label);
        QCOMPARE(back.tuningCache, c.tuningCache);
        QCOMPARE(toJson(back), j);

        // Field names are the CLI's; floats are written in their short form.
        QCOMPARE(j.at("batch").get<int>(), 12);
        QCOMPARE(j.at("graph_cache").get<int>(), 3);
        QCOMPARE(j.at("init").get<std::string>(), std::string("start.png"));
        QCOMPARE(j.at("scheduler_options").at("use_karras_sigmas").get<bool>(), false);
        QVERIFY2(contains(toJson(RunConfig{}).dump(), "\"beta_start\":0.0001"), toJson(RunConfig{}).dump().c_str());
        QCOMPARE(toJson(RunConfig{}).at("overlap"), nlohmann::json(16));
    }

    void jsonMissingKeysKeepDefaults() {
        const RunConfig c =
            runConfigFromJson(nlohmann::json::parse(R"({"width": 512, "scheduler_options": {"eta": 0.5}})"));
        QCOMPARE(c.width, 512);
        QCOMPARE(c.height, RunConfig{}.height);
        QCOMPARE(c.schedulerOptions.eta, 0.5f);
        QCOMPARE(c.schedulerOptions.betaEnd, SchedulerOptions{}.betaEnd);
        QCOMPARE(c.tile, 64);
        const RunConfig empty = runConfigFromJson(nlohmann::json::object());
        QCOMPARE(toJson(empty), toJson(RunConfig{}));
    }

    void jsonUnknownKeyIsNamed() {
        Rejection r = jsonRejection(R"({"width": 512, "tiles": 64})");
        QCOMPARE(r.field, std::string("tiles"));
        QVERIFY2(contains(r.message, "tiles: unknown key"), r.message.c_str());
        QVERIFY2(contains(r.message, "tile"), r.message.c_str());
        r = jsonRejection(R"({"scheduler_options": {"etaa": 0}})");
        QCOMPARE(r.field, std::string("scheduler_options.etaa"));
        QVERIFY2(contains(r.message, "scheduler_options.etaa: unknown key"), r.message.c_str());
        // The empty key is unknown too, not the CLI-only rows' (found by fuzz_run_settings: it called
        // their empty reader and threw std::bad_function_call).
        r = jsonRejection(R"({"tile": 128, "": "x"})");
        QCOMPARE(r.field, std::string(""));
        QVERIFY2(contains(r.message, "unknown key"), r.message.c_str());
    }

    // A preset may name the sampler as A1111 does ("sampler": "DPM++ 2M Karras"): read into
    // scheduler and use_karras_sigmas, never written back; refused beside either of those, for a
    // name Tessera lacks and for a value that is not text.
    void jsonSamplerAlias() {
        RunConfig c = runConfigFromJson(nlohmann::json::parse(R"({"sampler": "DPM++ 2M Karras", "steps": 25})"));
        QVERIFY(c.scheduler == SchedulerKind::DPMPP2M);
        QVERIFY(c.schedulerOptions.karrasSigmas);
        QCOMPARE(c.steps, 25);
        const nlohmann::json written = toJson(c);
        QVERIFY(!written.contains("sampler"));
        QCOMPARE(written.at("scheduler").get<std::string>(), std::string("dpmpp_2m"));
        QVERIFY(written.at("scheduler_options").at("use_karras_sigmas").get<bool>());
        c = runConfigFromJson(nlohmann::json::parse(R"({"sampler": "Euler a", "scheduler_options": {"eta": 0.5}})"));
        QVERIFY(c.scheduler == SchedulerKind::EulerAncestral);
        QVERIFY(!c.schedulerOptions.karrasSigmas);
        QCOMPARE(c.schedulerOptions.eta, 0.5f);
        Rejection r = jsonRejection(R"({"sampler": "Euler a", "scheduler": "ddim"})");
        QCOMPARE(r.field, std::string("sampler"));
        QVERIFY2(contains(r.message, "\"sampler\" and \"scheduler\" both given"), r.message.c_str());
        r = jsonRejection(R"({"sampler": "DPM++ 2M", "scheduler_options": {"use_karras_sigmas": true}})");
        QCOMPARE(r.field, std::string("sampler"));
        QVERIFY2(contains(r.message, "scheduler_options.use_karras_sigmas\" both given"), r.message.c_str());
        r = jsonRejection(R"({"sampler": "DPM2 a"})");
        QCOMPARE(r.field, std::string("sampler"));
        QVERIFY2(contains(r.message, "'DPM2 a' is not a sampler Tessera has; use Euler, Euler a"), r.message.c_str());
        r = jsonRejection(R"({"sampler": 2})");
        QCOMPARE(r.field, std::string("sampler"));
        QVERIFY2(contains(r.message, "sampler: expected"), r.message.c_str());
    }

    void knownKeysListEveryField() {
        // Every key toJson writes is one runConfigFromJson reads, and the unknown-key message
        // lists them all (lanes was missing from that list; tuning_cache is new).
        const Rejection r = jsonRejection(R"({"nope": 1})");
        const nlohmann::json keys = toJson(RunConfig{});
        for (const auto& item : keys.items())
            QVERIFY2(contains(r.message, item.key()), (item.key() + " missing from: " + r.message).c_str());
        const RunConfig off = runConfigFromJson(nlohmann::json::parse(R"({"tuning_cache": "off"})"));
        QCOMPARE(off.tuningCache, std::string("off"));
        QCOMPARE(RunConfig{}.tuningCache, std::string());
        const Rejection wrong = jsonRejection(R"({"tuning_cache": false})");
        QCOMPARE(wrong.field, std::string("tuning_cache"));
        QVERIFY2(contains(wrong.message, "tuning_cache: expected a string"), wrong.message.c_str());
        RunConfig longPath;
        longPath.tuningCache = std::string(5000, 'p');
        bool named = false;
        for (const ValidationError& e : validateAll(longPath)) named = named || e.field() == "tuning_cache";
        QVERIFY(named);
    }

    void jsonWrongTypesAreNamed() {
        Rejection r = jsonRejection(R"({"steps": "twenty"})");
        QCOMPARE(r.field, std::string("steps"));
        QVERIFY2(contains(r.message, "steps: expected a whole number, got \"twenty\""), r.message.c_str());
        r = jsonRejection(R"({"steps": 2.5})");
        QCOMPARE(r.field, std::string("steps"));
        r = jsonRejection(R"({"seed": -1})");
        QCOMPARE(r.field, std::string("seed"));
        r = jsonRejection(R"({"preserve_color": 1})");
        QCOMPARE(r.field, std::string("preserve_color"));
        r = jsonRejection(R"({"window": "cosine"})");
        QCOMPARE(r.field, std::string("window"));
        QVERIFY(contains(r.message, "not one of"));
        r = jsonRejection(R"({"scheduler_options": {"beta_schedule": "cubic"}})");
        QCOMPARE(r.field, std::string("beta_schedule"));
        r = jsonRejection(R"({"scheduler_options": 3})");
        QCOMPARE(r.field, std::string("scheduler_options"));
        r = jsonRejection(R"([1, 2])");
        QCOMPARE(r.field, std::string("config"));
        // A seed as a decimal string is read exactly.
        QCOMPARE(runConfigFromJson(nlohmann::json::parse(R"({"seed": "18446744073709551615"})")).seed,
                 std::numeric_limits<std::uint64_t>::max());
    }

    // A whole number no int holds (it would wrap before validate() saw it) is quoted as written
    // with the range its setting allows, from JSON and from the command line alike; a float too
    // small or too large for a 32-bit float is refused the same way rather than read as 0 or inf.
    void numbersBeyondTheirTypeNameTheRange() {
        const std::vector<std::pair<std::string, std::string>> json{
            {R"({"steps": 2147483648})", "steps: 2147483648 is out of range; allowed 1 to 1000"},
            {R"({"steps": 18446744073709551615})", "steps: 18446744073709551615 is out of range; allowed 1 to 1000"},
            {R"({"steps": -9223372036854775808})", "steps: -9223372036854775808 is out of range; allowed 1 to 1000"},
            {R"({"width": 1e10})", "width: 10000000000.0 is out of range; allowed 1 to 16384"},
            {R"({"clip_skip": 4294967297})", "clip_skip: 4294967297 is out of range; allowed 1 to 12"},
            {R"({"scheduler_options": {"num_train_timesteps": 50}, "steps": 3000000000})",
             "steps: 3000000000 is out of range; allowed 1 to 50"},
            {R"({"scheduler_options": {"beta_start": 1e-300}})",
             "beta_start: 1e-300 is out of range; allowed above 0 and below 1 (at least 1.1754944e-38"},
            {R"({"scheduler_options": {"beta_end": 1e300}})",
             "beta_end: 1e+300 is out of range; allowed above beta_start and below 1"},
            {R"({"scheduler_options": {"eta": -1e-45}})", "eta: -1e-45 is out of range; allowed 0 to 1"},
        };
        for (const auto& [text, message] : json) {
            const Rejection r = jsonRejection(text);
            QVERIFY2(contains(r.message, message), (text + " -> " + r.message).c_str());
        }
        QCOMPARE(runConfigFromJson(nlohmann::json::parse(R"({"scheduler_options": {"beta_start": 0.0}})"))
                     .schedulerOptions.betaStart,
                 0.0f);  // 0 itself is a float: validate() names it
        for (const auto& [flag, text, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
                 {"steps", "2147483648", "steps: '2147483648' is out of range; allowed 1 to 1000"},
                 {"width", "-99999999999", "width: '-99999999999' is out of range; allowed 1 to 16384"},
                 {"batch", "2000000000", "batch: '2000000000' is out of range; allowed 0 to 1024"},
                 {"tile", "99999999999999999999", "tile: '99999999999999999999' is out of range; allowed 1 to 4096"}}) {
            RunConfig c;
            try {
                findRunConfigField(flag)->parse(c, text);
                QFAIL(("--" + flag + " " + text + " was accepted").c_str());
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), flag);
                QVERIFY2(contains(e.what(), message), e.what());
            }
        }
    }

    // Values in messages are short escaped excerpts: a 1 MB string is not echoed whole, and
    // bytes that are not UTF-8 are shown escaped (nlohmann's dump() threw type_error 316).
    void badValuesAreQuotedShort() {
        const std::string huge(1000000, 'x');
        for (const char* key : {"window", "steps", "scheduler"}) {
            try {
                (void)runConfigFromJson(nlohmann::json{{key, huge}});
                QFAIL("a 1 MB value was accepted");
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), std::string(key));
                QVERIFY2(std::string(e.what()).size() < 300, e.what());
                QVERIFY2(contains(e.what(), "(1000000 bytes)"), e.what());
            }
        }
        try {
            (void)runConfigFromJson(nlohmann::json{{"width", "\xff\xfe\n"}});
            QFAIL("a string width was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("width"));
            QVERIFY2(contains(e.what(), "got \"\\xFF\\xFE\\n\""), e.what());
        }
        try {
            (void)runConfigFromJson(nlohmann::json{{"width", nlohmann::json::array({"\xff", std::string(500, '1')})}});
            QFAIL("an array width was accepted");
        } catch (const ValidationError& e) {
            QVERIFY2(std::string(e.what()).size() < 300, e.what());
        }
        try {
            (void)runConfigFromJson(nlohmann::json{{huge, 1}});
            QFAIL("a 1 MB key was accepted");
        } catch (const ValidationError& e) {
            // The excerpt of the key, then the list of the keys: bounded by the table, not the input.
            QVERIFY2(std::string(e.what()).size() < 700 && contains(e.what(), ": unknown key; known keys are width"),
                     e.what());
        }
        QVERIFY2(contains(rejectionOf([] {
                              RunConfig c;
                              c.label = std::string(2000, 'l');
                              return c;
                          }())
                              .message,
                          "... (2000 bytes)"),
                 "the label was echoed whole");
    }

    // Paths are bounded by PATH_MAX and free of NUL; the label by kMaxLabelBytes.
    void textFieldsAreBounded() {
        RunConfig c;
        c.model = std::string(4096, 'm');
        c.initImage = "start.png";
        c.label = std::string(kMaxLabelBytes, 'l');
        QVERIFY(validateAll(c).empty());
        c.model += "m";
        QCOMPARE(rejectionOf(c).field, std::string("model"));
        QVERIFY2(contains(rejectionOf(c).message, "a model folder path may be at most 4096 bytes long"),
                 rejectionOf(c).message.c_str());
        c.model = "m";
        c.initImage = std::string("a\0b", 3);
        QCOMPARE(rejectionOf(c).field, std::string("init"));
        QVERIFY(contains(rejectionOf(c).message, "may not contain a NUL character"));
        c.initImage = "start.png";
        c.label += "l";
        QCOMPARE(rejectionOf(c).field, std::string("label"));
        QVERIFY(contains(rejectionOf(c).message, "the label may be at most 1000 bytes long"));

        checkPathText("out", std::string(4096, 'o'), "the output folder");
        try {
            checkPathText("out", std::string(4097, 'o'), "the output folder");
            QFAIL("a 4097-character path was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("out"));
            QVERIFY2(
                contains(e.what(), "out: 'oooo") && contains(e.what(), "the output folder may be at most 4096 bytes"),
                e.what());
        }
    }

    void jsonOverlapForms_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<bool>("isFraction");
        QTest::addColumn<double>("value");
        QTest::addColumn<int>("pixelsAtTile64");
        QTest::newRow("int px") << R"({"overlap": 24})" << false << 24.0 << 24;
        QTest::newRow("percent") << R"({"overlap": "25%"})" << true << 0.25 << 16;
        QTest::newRow("fraction") << R"({"overlap": 0.5})" << true << 0.5 << 32;
        QTest::newRow("zero fraction") << R"({"overlap": 0.0})" << true << 0.0 << 0;
        QTest::newRow("whole float px") << R"({"overlap": 12.0})" << false << 12.0 << 12;
        QTest::newRow("px string") << R"({"overlap": "8"})" << false << 8.0 << 8;
        QTest::newRow("fraction string") << R"({"overlap": "0.125"})" << true << 0.125 << 8;
        QTest::newRow("int zero") << R"({"overlap": 0})" << false << 0.0 << 0;
    }

    void jsonOverlapForms() {
        QFETCH(QString, json);
        QFETCH(bool, isFraction);
        QFETCH(double, value);
        QFETCH(int, pixelsAtTile64);
        const RunConfig c = runConfigFromJson(nlohmann::json::parse(json.toStdString()));
        QCOMPARE(c.overlapFraction.has_value(), isFraction);
        if (isFraction)
            QCOMPARE(*c.overlapFraction, value);
        else
            QCOMPARE(c.overlapPx, static_cast<int>(value));
        QCOMPARE(c.overlapPixels(), pixelsAtTile64);
        // Round trip keeps the form.
        const RunConfig back = runConfigFromJson(nlohmann::json::parse(toJson(c).dump()));
        QCOMPARE(back.overlapFraction.has_value(), isFraction);
        QCOMPARE(back.overlapPixels(), pixelsAtTile64);
    }

    void jsonOverlapBadForms() {
        for (const char* text : {R"({"overlap": 1.5})", R"({"overlap": "abc"})", R"({"overlap": "x%"})",
                                 R"({"overlap": true})", R"({"overlap": [16]})"}) {
            const Rejection r = jsonRejection(text);
            QCOMPARE(r.field, std::string("overlap"));
            QVERIFY2(contains(r.message, "a percentage (\"25%\")"), r.message.c_str());
        }
        // A percentage of 100 or more reads, then validate() rejects it by field.
        const RunConfig c = runConfigFromJson(nlohmann::json::parse(R"({"overlap": "100%"})"));
        QCOMPARE(rejectionOf(c).field, std::string("overlap"));
    }

    // The field table (core/run/RunConfigFields.h) is the one description: every row's example
    // changes the configuration, goes through JSON and back unchanged, and JSON keys, flags and
    // the keys toJson writes agree with it.
    void fieldTableRoundTripsJson() {
        const nlohmann::json defaults = toJson(RunConfig{});
        std::set<std::string> keys, flags;
        for (const RunConfigField& field : runConfigFields()) {
            const std::string name(field.name);
            if (!field.jsonKey.empty()) {
                QVERIFY2(keys.insert(std::string(field.jsonKey)).second, name.c_str());
                QVERIFY2(defaults.contains(std::string(field.jsonKey)), name.c_str());
                QVERIFY2(field.write && field.read, name.c_str());
            }
            if (field.flag.empty()) continue;
            QVERIFY2(flags.insert(std::string(field.flag)).second, name.c_str());
            QVERIFY2(field.parse, name.c_str());
            QVERIFY2(field.valueName.empty() == field.example.empty(), name.c_str());
            RunConfig changed;
            field.parse(changed, std::string(field.example));
            const nlohmann::json json = toJson(changed);
            QVERIFY2(json != defaults,
                     (name + ": the example " + std::string(field.example) + " changes nothing").c_str());
            const Rejection invalid = rejectionOf(changed);
            QVERIFY2(invalid.field.empty(), (name + ": the example is refused: " + invalid.message).c_str());
            const RunConfig back = runConfigFromJson(nlohmann::json::parse(json.dump()));
            QVERIFY2(toJson(back) == json, (name + ": " + toJson(back).dump() + " vs " + json.dump()).c_str());
            if (field.write) QVERIFY2(field.write(back) == field.write(changed), name.c_str());
        }
        QCOMPARE(keys.size(), defaults.size());
        const std::vector<std::string_view> known = runConfigJsonKeys();
        QCOMPARE(known.size(), keys.size());
        QCOMPARE(std::string(known.front()), std::string("width"));
        QCOMPARE(findRunConfigField("graph-warmup"), findRunConfigField("graph_warmup"));
        QCOMPARE(std::string(findRunConfigField("tile")->uiLabel), std::string("Tile"));
        QVERIFY(findRunConfigField("nope") == nullptr);
    }

    // validateAll's range and text checks come from the rows' limits: both ends accepted, one
    // past either refused naming the field.
    void fieldTableLimitsAreValidated() {
        int ranges = 0, texts = 0;
        const auto names = [](const RunConfig& c, const std::string& field) {
            for (const ValidationError& e : validateAll(c))
                if (e.field() == field) return true;
            return false;
        };
        for (const RunConfigField& field : runConfigFields()) {
            const std::string name(field.name);
            if (field.range) {
                ++ranges;
                for (int value : {field.range->lo, field.range->hi}) {
                    RunConfig c;
                    field.parse(c, std::to_string(value));
                    QVERIFY2(!names(c, name), (name + " " + std::to_string(value)).c_str());
                }
                for (int value : {field.range->lo - 1, field.range->hi + 1}) {
                    RunConfig c;
                    field.parse(c, std::to_string(value));
                    QVERIFY2(names(c, name), (name + " " + std::to_string(value)).c_str());
                    const std::string message = rejectionOf(c).message;
                    QVERIFY2(contains(message, std::string(field.range->what) + " must be " +
                                                   std::to_string(field.range->lo) + " to " +
                                                   std::to_string(field.range->hi)),
                             message.c_str());
                }
            }
            if (field.text) {
                ++texts;
                nlohmann::json config = nlohmann::json::object();
                config[std::string(field.jsonKey)] = std::string(field.text->maxBytes + 1, 'x');
                QVERIFY2(names(runConfigFromJson(config), name), name.c_str());
                config[std::string(field.jsonKey)] = std::string(field.text->maxBytes, 'x');
                QVERIFY2(!names(runConfigFromJson(config), name), name.c_str());
            }
        }
        QCOMPARE(ranges, 6);  // batch, graph_warmup, graph_cache, lanes, threads, clip_skip
        // model, init, upscale_model, vae, prompt, negative_prompt, label, tuning_cache, embeddings_dir
        QCOMPARE(texts, 9);
    }

    // The usage names every flag once, with its value name, and the defaults as RunConfig has them.
    void fieldTableUsage() {
        const std::string usage = runConfigOptionsUsage();
        QVERIFY2(!contains(usage, "{default}"), usage.c_str());
        for (const RunConfigField& field : runConfigFields()) {
            if (field.flag.empty()) continue;
            const std::string head =
                "  --" + std::string(field.flag) + (field.valueName.empty() ? "" : " " + std::string(field.valueName));
            QVERIFY2(contains(usage, head + " "), head.c_str());
        }
        QVERIFY2(contains(usage, "  --width PX             image width in pixels (default 256)\n"), usage.c_str());
        QVERIFY2(contains(usage, "(default 0.5)"), usage.c_str());         // strength
        QVERIFY2(contains(usage, "(default 7; 1 = off)"), usage.c_str());  // cfg
        QVERIFY2(contains(usage, "(default fp16; the CPU"), usage.c_str());
        QVERIFY2(contains(usage, "  --sdxl-size-conditioning image|tile  SDXL: the size ids"), usage.c_str());
        QVERIFY2(contains(usage, "own activations (0 = auto, 1..8; default 0)\n"), usage.c_str());
        QCOMPARE(usageEntry("--x N", "one\ntwo"),
                 std::string("  --x N                  one\n                         two\n"));
        QCOMPARE(defaultText(*findRunConfigField("scheduler")), std::string("ddim"));
        QCOMPARE(defaultText(*findRunConfigField("eta")), std::string("0"));
        QCOMPARE(defaultText(*findRunConfigField("sampler")), std::string());
    }

    void parametersLineFormat() {
        RunConfig c;
        c.width = c.height = 1024;
        c.seed = 42;
        c.tileBatch = 8;
        c.graphs = GraphMode::Step;
        c.backend = BackendKind::CUDA;
        QCOMPARE(parametersLine(c),
                 std::string("Steps: 20, Sampler: DDIM, Schedule type: Automatic, Seed: 42, Size: 1024x1024, "
                             "Model: default, Tile: 64, Overlap: 16, Window: hann, Fusion: sample, Batch: 8, "
                             "Graphs: step, Precision: fp16, Backend: cuda, Version: tessera-" TESSERA_VERSION));
        c.width = 768;
        c.scheduler = SchedulerKind::Euler;
        c.overlapFraction = 0.25;
        c.model = "/home/me/models/ddpm-church-256/";
        c.initImage = "in.png";
        c.strength = 0.4;
        QCOMPARE(parametersLine(c),
                 std::string("Steps: 20, Sampler: Euler, Schedule type: Karras, Seed: 42, Size: 768x1024, "
                             "Model: ddpm-church-256, Denoising strength: 0.4, Tile: 64, Overlap: 16, Window: hann, "
                             "Fusion: sample, Batch: 8, Graphs: step, Precision: fp16, Backend: cuda, "
                             "Version: tessera-" TESSERA_VERSION));
    }
};

QTEST_GUILESS_MAIN(TestRunConfig)
#include "tst_runconfig.moc"
