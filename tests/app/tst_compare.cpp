// tessera-cli compare: its option parser, how A and B are assembled (files, flags, --a/--b
// KEY=VALUE), the ratio statistics and the image difference, and real interleaved runs on the
// CPU with the small test model whose summary JSON and CSV are read back.
#include <QtTest/QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/cli/CompareCommand.h"
#include "core/run/RunRecordIO.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using tessera::testing::runCli;

namespace {

// 48 x 48 with 32 px tiles overlapping by 8: 2 x 2 tiles; two DDIM steps on the CPU.
QStringList tinyRun() {
    return {"--model",   TESSERA_TEST_DATA "/models/cifar_like",
            "--backend", "cpu",
            "--width",   "48",
            "--height",  "48",
            "--tile",    "32",
            "--overlap", "8",
            "--steps",   "2",
            "--repeats", "2",
            "--warmup",  "1"};
}

std::string fieldOf(const std::vector<std::string>& args) {
    try {
        compareConfigs(parseCompareOptions(args));
    } catch (const ValidationError& e) {
        return e.field();
    }
    return "(no error)";
}

std::string messageOf(const std::vector<std::string>& args) {
    try {
        compareConfigs(parseCompareOptions(args));
    } catch (const ValidationError& e) {
        return e.what();
    }
    return "(no error)";
}

nlohmann::json readJson(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return nullptr;
    return nlohmann::json::parse(file.readAll().toStdString(), nullptr, false);
}

void writeText(const QString& path, const std::string& text) {
    std::ofstream(path.toStdString(), std::ios::binary) << text;
}

}  // namespace

class TestCompare : public QObject {
    Q_OBJECT

private slots:
    void parsesOptions() {
        const CompareOptions o = parseCompareOptions({"--steps", "4", "--a", "graphs=off", "--b=graphs=tile,batch=8",
                                                      "--b", "label=x,y", "--repeats", "3", "--warmup", "0",
                                                      "--preserve-color", "--csv", "c.csv", "--json=s.json"});
        QVERIFY(o.configFiles.empty());
        QCOMPARE(o.runFlags, (std::vector<std::string>{"--steps", "4", "--preserve-color"}));
        using Pairs = std::vector<std::pair<std::string, std::string>>;
        QCOMPARE(o.overridesA, (Pairs{{"graphs", "off"}}));
        QCOMPARE(o.overridesB, (Pairs{{"graphs", "tile"}, {"batch", "8"}, {"label", "x,y"}}));
        QCOMPARE(o.repeats, 3);
        QCOMPARE(o.warmup, 0);
        QCOMPARE(o.csvPath, std::string("c.csv"));
        QCOMPARE(o.jsonPath, std::string("s.json"));

        const CompareOptions files = parseCompareOptions({"A.json", "--seed", "7", "B.json"});
        QCOMPARE(files.configFiles, (std::vector<std::string>{"A.json", "B.json"}));
        QCOMPARE(files.runFlags, (std::vector<std::string>{"--seed", "7"}));
        QCOMPARE(files.repeats, 5);  // defaults
        QCOMPARE(files.warmup, 1);
    }

    void rejectsBadOptionsNamingThem() {
        QCOMPARE(fieldOf({"--repeats", "0"}), std::string("repeats"));
        QCOMPARE(fieldOf({"--warmup", "-1"}), std::string("warmup"));
        QCOMPARE(fieldOf({"--a", "graphs"}), std::string("a"));  // no '='
        QCOMPARE(fieldOf({"--b", "=tile"}), std::string("b"));   // no key
        QCOMPARE(fieldOf({"--a"}), std::string("a"));            // no value
        QCOMPARE(fieldOf({"--frobnicate", "1"}), std::string("option"));
        QCOMPARE(fieldOf({"--out", "dir"}), std::string("out"));
        QCOMPARE(fieldOf({"only-one.json"}), std::string("option"));
        QCOMPARE(fieldOf({"a.json", "b.json", "c.json"}), std::string("option"));
        QCOMPARE(fieldOf({"--csv", ""}), std::string("csv"));
        // Keys and values of --a / --b, named by the loader, with where they came from.
        QCOMPARE(fieldOf({"--a", "frobnicate=1"}), std::string("frobnicate"));
        const std::string unknown = messageOf({"--a", "frobnicate=1"});
        QVERIFY2(unknown.find("--a: frobnicate: unknown key; known keys are width") != std::string::npos,
                 unknown.c_str());
        QCOMPARE(fieldOf({"--b", "graphs=always"}), std::string("graphs"));
        const std::string badMode = messageOf({"--b", "graphs=always"});
        QVERIFY2(
            badMode.find("--b: graphs: 'always'") != std::string::npos && badMode.find("tile") != std::string::npos,
            badMode.c_str());
        QCOMPARE(fieldOf({"--b", "batch=x"}), std::string("batch"));
        QCOMPARE(fieldOf({"--b", "scheduler_options.foo=1"}), std::string("scheduler_options.foo"));
        QCOMPARE(fieldOf({"--b", "tile.size=1"}), std::string("tile.size"));
        QCOMPARE(fieldOf({"--steps", "many"}), std::string("steps"));  // a render flag's value
    }

    // Overrides and files that must be refused with a ValidationError, not a crash or another exception.
    void hostileOverridesAndFiles() {
        // 100,000 levels of nesting: kept as text (the parser's recursion would overflow the stack).
        const std::string deep = "width=" + std::string(100000, '[') + std::string(100000, ']');
        QCOMPARE(fieldOf({"--a", deep}), std::string("width"));
        QVERIFY2(messageOf({"--a", deep}).size() < 300, messageOf({"--a", deep}).c_str());
        // Bytes that are not UTF-8: shown escaped (nlohmann's dump threw type_error 316, exit 1).
        QCOMPARE(fieldOf({"--b", "width=\xff\xfe"}), std::string("width"));
        QVERIFY2(messageOf({"--b", "width=\xff\xfe"}).find("\"\\xFF\\xFE\"") != std::string::npos,
                 messageOf({"--b", "width=\xff\xfe"}).c_str());
        // A/B files are read bounded: a folder is named as one (it was "unexpected end of input").
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QCOMPARE(fieldOf({dir.path().toStdString(), dir.path().toStdString()}), std::string("a"));
        QVERIFY2(
            messageOf({dir.path().toStdString(), dir.path().toStdString()}).find("is a folder") != std::string::npos,
            messageOf({dir.path().toStdString(), dir.path().toStdString()}).c_str());
        const QString list = dir.filePath(QStringLiteral("list.json"));
        writeText(list, "[1, 2]");
        QCOMPARE(fieldOf({list.toStdString(), list.toStdString()}), std::string("a"));
    }

    void overridesAreTypedByKey() {
        const ComparedConfigs c = compareConfigs(
            parseCompareOptions({"--seed", "9", "--batch", "2", "--a", "batch=1,overlap=25%,graph-warmup=3", "--b",
                                 "batch=8,graphs=tile,precision=bf16,eta=0.5,label=1,2,preserve_color=true,scheduler_"
                                 "options.timestep_spacing=trailing"}));
        QCOMPARE(c.a.seed, std::uint64_t{9});
        QCOMPARE(c.b.seed, std::uint64_t{9});
        QCOMPARE(c.a.tileBatch, 1);
        QCOMPARE(c.b.tileBatch, 8);
        QVERIFY(c.a.overlapFraction.has_value());
        QCOMPARE(*c.a.overlapFraction, 0.25);
        QCOMPARE(c.a.graphWarmup, 3);
        QVERIFY(c.a.graphs == GraphMode::Off);
        QVERIFY(c.b.graphs == GraphMode::Tile);
        QVERIFY(c.b.precision == Precision::BF16);
        QCOMPARE(c.b.schedulerOptions.eta, 0.5f);
        QCOMPARE(c.a.schedulerOptions.eta, 0.0f);
        QVERIFY(c.b.schedulerOptions.timestepSpacing == TimestepSpacing::Trailing);
        QCOMPARE(c.b.label, std::string("1,2"));  // a string key keeps its text, commas included
        QVERIFY(c.b.preserveColor);
        QVERIFY(!c.a.preserveColor);
    }

    // Files: RunConfig JSON or a manifest; run options on the line apply to both; --a/--b last.
    void filesWithFlagsAndOverrides() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString a = dir.filePath(QStringLiteral("a.json")), b = dir.filePath(QStringLiteral("b.json"));
        writeText(a, R"({"width": 96, "height": 64, "tile": 32, "batch": 4, "seed": 1})");
        RunRecord record;
        record.config.width = 128;
        record.config.tile = 64;
        record.config.seed = 2;
        record.config.graphs = GraphMode::Step;
        writeText(b, manifestJson(record).dump(2));
        const ComparedConfigs c =
            compareConfigs(parseCompareOptions({a.toStdString(), b.toStdString(), "--steps", "3", "--b", "batch=16"}));
        QCOMPARE(c.a.width, 96);
        QCOMPARE(c.a.height, 64);
        QCOMPARE(c.a.tileBatch, 4);
        QCOMPARE(c.a.seed, std::uint64_t{1});
        QCOMPARE(c.a.steps, 3);
        QCOMPARE(c.b.width, 128);
        QCOMPARE(c.b.tile, 64);
        QCOMPARE(c.b.seed, std::uint64_t{2});
        QVERIFY(c.b.graphs == GraphMode::Step);
        QCOMPARE(c.b.steps, 3);
        QCOMPARE(c.b.tileBatch, 16);
        QCOMPARE(c.a.tuningCache, std::string());
        QCOMPARE(c.tuningDigestA, std::string());  // a settings file has no choices
        QCOMPARE(c.tuningDigestB, std::string());  // a manifest that recorded none

        // A manifest's recorded tuning choices come along with its config.
        record.tuning.digest = "00112233aabbccdd";
        writeText(b, manifestJson(record).dump(2));
        const ComparedConfigs tuned = compareConfigs(parseCompareOptions({a.toStdString(), b.toStdString()}));
        QCOMPARE(tuned.tuningDigestB, std::string("00112233aabbccdd"));
        QCOMPARE(tuned.tuningDigestA, std::string());

        // A bad file is named; a bad key inside it too.
        const QString broken = dir.filePath(QStringLiteral("broken.json"));
        writeText(broken, "{\"width\": 48,");
        const std::string notJson = messageOf({broken.toStdString(), b.toStdString()});
        QVERIFY2(notJson.find(broken.toStdString()) != std::string::npos &&
                     notJson.find("not valid JSON") != std::string::npos,
                 notJson.c_str());
        QCOMPARE(fieldOf({broken.toStdString(), b.toStdString()}), std::string("a"));
        const QString typo = dir.filePath(QStringLiteral("typo.json"));
        writeText(typo, R"({"widht": 48})");
        QCOMPARE(fieldOf({a.toStdString(), typo.toStdString()}), std::string("widht"));
        QVERIFY(messageOf({a.toStdString(), typo.toStdString()}).find(typo.toStdString()) != std::string::npos);
        const std::string missing =
            messageOf({a.toStdString(), dir.filePath(QStringLiteral("none.json")).toStdString()});
        QVERIFY2(missing.find("none.json") != std::string::npos, missing.c_str());
    }

    void ratioSpreadIsNumpyLike() {
        const RatioSpread odd = ratioSpread({5, 1, 4, 2, 3});
        QCOMPARE(odd.median, 3.0);
        QCOMPARE(odd.min, 1.0);
        QCOMPARE(odd.max, 5.0);
        QCOMPARE(odd.q1, 2.0);
        QCOMPARE(odd.q3, 4.0);
        const RatioSpread even = ratioSpread({4, 1, 3, 2});
        QCOMPARE(even.median, 2.5);
        QCOMPARE(even.q1, 1.75);
        QCOMPARE(even.q3, 3.25);
        const RatioSpread one = ratioSpread({1.5});
        QCOMPARE(one.median, 1.5);
        QCOMPARE(one.q1, 1.5);
        QCOMPARE(one.q3, 1.5);
    }

    void imageDifferenceMeasuresBothSpaces() {
        ImageTensor a{3, 2, 2, std::vector<float>(12, 0.0f)};
        ImageTensor b = a;
        ImageDifference d = imageDifference(a, b);
        QVERIFY(d.comparable && d.bitIdentical);
        QCOMPARE(d.maxAbsRgb8, 0);
        QCOMPARE(d.maxAbsModel, 0.0);
        b.data[7] = 0.5f;   // 8-bit: round(255 * 0.75) - round(255 * 0.5) = 191 - 128
        b.data[3] = 1e-7f;  // below one 8-bit level, but not the same bits
        d = imageDifference(a, b);
        QVERIFY(d.comparable && !d.bitIdentical);
        QCOMPARE(d.maxAbsModel, 0.5);
        QCOMPARE(d.maxAbsRgb8, 63);
        b = a;
        b.data[0] = -0.0f;  // equal as floats, different bits
        d = imageDifference(a, b);
        QVERIFY(!d.bitIdentical);
        QCOMPARE(d.maxAbsModel, 0.0);
        const ImageTensor wider{3, 2, 3, std::vector<float>(18, 0.0f)};
        QVERIFY(!imageDifference(a, wider).comparable);
    }

    // The same configuration twice: bit-identical, nothing differs; CSV has 2 x repeats rows.
    void identicalConfigsAreBitIdentical() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString csv = dir.filePath(QStringLiteral("runs.csv")),
                      json = dir.filePath(QStringLiteral("summary.json"));
        const CliRun r = runCli(QStringList{"compare"} + tinyRun() + QStringList{"--csv", csv, "--json", json});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(
            r.out.contains(QStringLiteral("RunRecord.totalMs")) && r.out.contains(QStringLiteral("prepare excluded")),
            qPrintable(r.out));
        QVERIFY2(
            r.out.contains(QStringLiteral("max |A - B| 0 of 255 (8-bit RGB), 0 (model space); bit-identical: yes")),
            qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("B differs from A in: nothing")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("speedup B vs A")), qPrintable(r.out));
        QVERIFY2(r.err.contains(QStringLiteral("warm-up pair 1/1 (discarded)")), qPrintable(r.err));

        QFile file(csv);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 1 + 2 * 2);  // header + A and B of 2 measured pairs
        const QStringList header = lines[0].split(',');
        const int side = header.indexOf(QStringLiteral("side")), seconds = header.indexOf(QStringLiteral("seconds"));
        const int sha = header.indexOf(QStringLiteral("image_sha256")), pair = header.indexOf(QStringLiteral("pair"));
        QVERIFY(side >= 0 && seconds >= 0 && sha >= 0 && pair >= 0);
        const char* sides[] = {"A", "B", "A", "B"};
        for (int i = 1; i < lines.size(); ++i) {
            const QStringList f = lines[i].split(',');
            QCOMPARE(f.size(), header.size());
            QCOMPARE(f[side], QLatin1String(sides[i - 1]));
            QCOMPARE(f[pair].toInt(), (i + 1) / 2);
            QVERIFY2(f[seconds].toDouble() > 0, qPrintable(lines[i]));
            QCOMPARE(f[sha], lines[1].split(',')[sha]);  // every image the same
            QCOMPARE(f[sha].size(), 64);
        }

        const nlohmann::json s = readJson(json);
        QVERIFY2(s.is_object(), "summary JSON unreadable");
        QCOMPARE(s["repeats"].get<int>(), 2);
        QCOMPARE(s["warmup"].get<int>(), 1);
        QCOMPARE(s["pixels"]["comparable"].get<bool>(), true);
        QCOMPARE(s["pixels"]["bit_identical"].get<bool>(), true);
        QCOMPARE(s["pixels"]["max_abs_diff_rgb8"].get<int>(), 0);
        QCOMPARE(s["pixels"]["max_abs_diff_model"].get<double>(), 0.0);
        QCOMPARE(s["runs"].size(), std::size_t{4});
        QCOMPARE(s["speedup_b_vs_a"]["ratios"].size(), std::size_t{2});
        // The median of two ratios is their mean, and the ratios are the runs' A / B times.
        const auto& runs = s["runs"];
        const double r0 = runs[0]["seconds"].get<double>() / runs[1]["seconds"].get<double>();
        const double r1 = runs[2]["seconds"].get<double>() / runs[3]["seconds"].get<double>();
        QVERIFY(std::abs(s["speedup_b_vs_a"]["median"].get<double>() - 0.5 * (r0 + r1)) < 1e-9);
        QVERIFY(std::abs(s["speedup_b_vs_a"]["min"].get<double>() - std::min(r0, r1)) < 1e-9);
        QCOMPARE(s["a"]["config"]["preview_every"].get<int>(), 0);  // previews off
        QVERIFY(s["a"]["peak_device_mib"].is_null());               // no device memory on the CPU
        QVERIFY(s["a"]["step_gpu_ms"].is_null());
        QVERIFY(s["peak_device_mib_delta"].is_null());
        QCOMPARE(s["a"]["repeatable"].get<bool>(), true);
        QVERIFY(s["differences"].empty());
    }

    void differentSeedsDiffer() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString json = dir.filePath(QStringLiteral("summary.json"));
        const CliRun r =
            runCli(QStringList{"compare"} + tinyRun() + QStringList{"--a", "seed=1", "--b", "seed=2", "--json", json});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QStringLiteral("seed 1 -> 2")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("bit-identical: no")), qPrintable(r.out));
        const nlohmann::json s = readJson(json);
        QVERIFY(s.is_object());
        QCOMPARE(s["pixels"]["bit_identical"].get<bool>(), false);
        QVERIFY(s["pixels"]["max_abs_diff_model"].get<double>() > 0.01);
        QVERIFY(s["pixels"]["max_abs_diff_rgb8"].get<int>() > 0);
        QVERIFY(s["a"]["image_sha256"] != s["b"]["image_sha256"]);
        QCOMPARE(s["differences"]["seed"][0].get<int>(), 1);
        QCOMPARE(s["differences"]["seed"][1].get<int>(), 2);
    }

    // The CPU has no CUDA graphs: B asks for tile graphs, runs with them off, says so, and the
    // images stay identical.
    void graphsOnCpuAreReportedHonestly() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString json = dir.filePath(QStringLiteral("summary.json"));
        const CliRun r = runCli(QStringList{"compare"} + tinyRun() +
                                QStringList{"--a", "graphs=off", "--b", "graphs=tile", "--json", json});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QStringLiteral("B requested tile, ran off")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("no CUDA graphs")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QStringLiteral("bit-identical: yes")), qPrintable(r.out));
        const nlohmann::json s = readJson(json);
        QVERIFY(s.is_object());
        QCOMPARE(s["b"]["graphs"]["requested"].get<std::string>(), std::string("tile"));
        QCOMPARE(s["b"]["graphs"]["mode"].get<std::string>(), std::string("off"));
        QCOMPARE(s["b"]["graphs"]["captures"].get<int>(), 0);
        QCOMPARE(s["pixels"]["max_abs_diff_rgb8"].get<int>(), 0);
        QCOMPARE(s["pixels"]["bit_identical"].get<bool>(), true);
    }

    void differentSizesAreNotCompared() {
        const CliRun r = runCli(QStringList{"compare"} + tinyRun() + QStringList{"--b", "width=64", "--repeats", "1"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QStringLiteral("n/a (sizes differ")), qPrintable(r.out));
    }

    // A render's manifest is a valid A; compare reproduces the render's image exactly.
    void manifestReproducesRender() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QStringList render{"render",    "--model",  TESSERA_TEST_DATA "/models/cifar_like",
                           "--backend", "cpu",      "--width",
                           "48",        "--height", "48",
                           "--tile",    "32",       "--overlap",
                           "8",         "--steps",  "2",
                           "--seed",    "4",        "--out",
                           dir.path()};
        const CliRun rendered = runCli(render);
        QVERIFY2(rendered.exitCode == 0, qPrintable(describe(rendered)));
        const QStringList manifests = QDir(dir.path()).entryList({QStringLiteral("*.json")});
        QCOMPARE(manifests.size(), 1);
        const QString manifest = dir.filePath(manifests.front());
        const std::string renderedSha = readJson(manifest)["image_sha256"].get<std::string>();
        const QString json = dir.filePath(QStringLiteral("summary.out"));
        const CliRun r = runCli(
            {"compare", manifest, manifest, "--repeats", "1", "--warmup", "0", "--b", "batch=4", "--json", json});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const nlohmann::json s = readJson(json);
        QVERIFY(s.is_object());
        QCOMPARE(s["a"]["image_sha256"].get<std::string>(), renderedSha);
        QCOMPARE(s["pixels"]["bit_identical"].get<bool>(), true);  // batch 1 vs 4 on the CPU
        QCOMPARE(s["b"]["config"]["batch"].get<int>(), 4);
        QVERIFY2(!r.err.contains(QStringLiteral("warm-up pair 1/")), qPrintable(r.err));  // --warmup 0
        QVERIFY2(!r.out.contains(QStringLiteral("tuning:")), qPrintable(r.out));          // same (no) choices: no note

        // A manifest whose recorded choices this run does not make (here: the CPU makes none) is
        // said to be so, on the side it belongs to.
        nlohmann::json edited = readJson(manifest);
        edited["tuning"]["digest"] = "00112233aabbccdd";
        const QString other = dir.filePath(QStringLiteral("other.manifest"));
        writeText(other, edited.dump(2));
        const CliRun noted = runCli({"compare", manifest, other, "--repeats", "1", "--warmup", "0"});
        QVERIFY2(noted.exitCode == 0, qPrintable(describe(noted)));
        QVERIFY2(noted.out.contains(QRegularExpression("note B +tuning: this run's choices \\(digest none\\) differ "
                                                       "from its manifest's \\(00112233aabbccdd\\)")),
                 qPrintable(describe(noted)));
        QVERIFY2(!noted.out.contains(QStringLiteral("note A           tuning:")), qPrintable(describe(noted)));
    }

    void badInputExitsWithTwo() {
        const CliRun badKey = runCli(QStringList{"compare"} + tinyRun() + QStringList{"--a", "frobnicate=1"});
        QCOMPARE(badKey.exitCode, 2);
        QVERIFY2(badKey.err.contains(QStringLiteral("frobnicate: unknown key")), qPrintable(badKey.err));
        QVERIFY(badKey.out.isEmpty());  // refused before any run

        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString broken = dir.filePath(QStringLiteral("broken-config.json"));
        writeText(broken, "{ \"width\": ");
        const CliRun badFile = runCli({"compare", broken, broken});
        QCOMPARE(badFile.exitCode, 2);
        QVERIFY2(badFile.err.contains(broken) && badFile.err.contains(QStringLiteral("not valid JSON")),
                 qPrintable(badFile.err));

        // Checked against the model before the first run: B's tile is not a multiple of 4.
        const CliRun badTile = runCli(QStringList{"compare"} + tinyRun() + QStringList{"--b", "tile=30"});
        QCOMPARE(badTile.exitCode, 2);
        QVERIFY2(badTile.err.contains(QStringLiteral("B: tile: 30")), qPrintable(badTile.err));
        QVERIFY2(!badTile.err.contains(QStringLiteral("pair")), qPrintable(badTile.err));

        const CliRun badCsv = runCli(QStringList{"compare"} + tinyRun() +
                                     QStringList{"--csv", dir.filePath(QStringLiteral("no/such/folder/x.csv"))});
        QCOMPARE(badCsv.exitCode, 2);
        QVERIFY2(badCsv.err.contains(QStringLiteral("csv: cannot write")), qPrintable(badCsv.err));
    }

    void helpListsCompare() {
        const CliRun overview = runCli({"--help"});
        QCOMPARE(overview.exitCode, 0);
        QVERIFY2(overview.out.contains(QStringLiteral("compare")), qPrintable(overview.out));
        const CliRun help = runCli({"compare", "--help"});
        QCOMPARE(help.exitCode, 0);
        QVERIFY2(help.out.contains(QStringLiteral("--repeats")) && help.out.contains(QStringLiteral("--a KEY=VALUE")) &&
                     help.out.contains(QStringLiteral("--tile PX")),
                 qPrintable(help.out));
    }

    // Nothing to compare (no files, run options, --a or --b; compare's own options alone change
    // nothing): the usage on stderr and exit 2 at once, not the default run against itself.
    void nothingToCompareShowsUsage() {
        for (const QStringList& args : {QStringList{"compare"}, QStringList{"compare", "--repeats", "3"}}) {
            QElapsedTimer clock;
            clock.start();
            const CliRun r = runCli(args, 20000);
            QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
            QVERIFY2(clock.elapsed() < 10000, qPrintable(describe(r)));
            QVERIFY2(r.err.contains(QStringLiteral("compare: nothing to compare: give two configuration files")),
                     qPrintable(describe(r)));
            QVERIFY2(r.err.contains(QStringLiteral("Usage: tessera-cli compare A.json B.json [options]")),
                     qPrintable(describe(r)));
            QVERIFY2(!r.err.contains(QStringLiteral("warm-up pair")) && r.out.isEmpty(), qPrintable(describe(r)));
        }
    }
};

QTEST_GUILESS_MAIN(TestCompare)
#include "tst_compare.moc"
