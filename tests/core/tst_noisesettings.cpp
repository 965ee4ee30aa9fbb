// The noise settings (RunConfig::noiseSource and A1111's seed settings): their JSON and command-line
// spellings, the values refused before any work, and the infotext both ways: "RNG: CPU|NV" as A1111
// writes it (A1111 leaves out its default GPU; Tessera names every torch source, and an infotext of
// Tessera's without RNG means Tessera's own noise), "Variation seed", "Variation seed strength",
// "Seed resize from", "ENSD"; a ComfyUI graph means the comfyui source (its CPU start noise, its
// device generator's ancestral noise).
#include <QtTest/QtTest>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"
#include "core/run/RunConfigFields.h"

using namespace tessera;

namespace {

std::string fieldOfError(const std::function<void()>& f) {
    try {
        f();
    } catch (const ValidationError& e) {
        return e.field();
    }
    return {};
}

std::string messageOfError(const std::function<void()>& f) {
    try {
        f();
    } catch (const ValidationError& e) {
        return e.what();
    }
    return {};
}

// The flag's parser, as tessera-cli's option table calls it.
void parseFlag(RunConfig& c, const char* flag, const std::string& value) {
    const RunConfigField* field = findRunConfigField(flag);
    if (!field) throw std::logic_error(std::string("no flag ") + flag);
    field->parse(c, value);
}

bool refusedField(const RunConfig& c, const std::string& field) {
    for (const ValidationError& e : validateAll(c))
        if (e.field() == field) return true;
    return false;
}

RunConfig a1111Config() {
    RunConfig c;
    c.prompt = "a fox";
    c.scheduler = SchedulerKind::EulerAncestral;
    c.seed = 42;
    c.noiseSource = RngSource::NV;
    c.variationSeed = 7;
    c.variationStrength = 0.3;
    c.seedResizeFromWidth = 640;
    c.seedResizeFromHeight = 512;
    c.etaNoiseSeedDelta = 31337;
    return c;
}

std::string sdInfotext(const RunConfig& c) {
    InfotextExtras x = infotextExtras(c);
    x.stableDiffusion = true;
    return infotext(c, x);
}

}  // namespace

class TestNoiseSettings : public QObject {
    Q_OBJECT

private slots:
    void flagsSetTheFields() {
        RunConfig c;
        parseFlag(c, "noise-source", "NV");
        parseFlag(c, "variation-seed", "18446744073709551615");
        parseFlag(c, "variation-strength", "0.25");
        parseFlag(c, "seed-resize-from", "640x512");
        parseFlag(c, "eta-noise-seed-delta", "-5");
        QCOMPARE(int(c.noiseSource), int(RngSource::NV));
        QCOMPARE(c.variationSeed, std::uint64_t{18446744073709551615ULL});
        QCOMPARE(c.variationStrength, 0.25);
        QCOMPARE(c.seedResizeFromWidth, 640);
        QCOMPARE(c.seedResizeFromHeight, 512);
        QCOMPARE(c.etaNoiseSeedDelta, std::int64_t{-5});
        QVERIFY(validateAll(c).empty());
        const nlohmann::json j = toJson(c);
        QCOMPARE(j.at("noise_source").get<std::string>(), std::string("nv"));
        QCOMPARE(j.at("seed_resize_from").get<std::string>(), std::string("640x512"));
        const RunConfig back = runConfigFromJson(j);
        QVERIFY(toJson(back) == j);
        parseFlag(c, "seed-resize-from", "off");
        QCOMPARE(c.seedResizeFromWidth, 0);
        QCOMPARE(toJson(c).at("seed_resize_from").get<std::string>(), std::string());
        QCOMPARE(int(RunConfig{}.noiseSource), int(RngSource::Tessera));  // the default
    }

    void badValuesAreRefusedNamingTheField_data() {
        QTest::addColumn<QString>("flag");
        QTest::addColumn<QString>("value");
        QTest::addColumn<QString>("field");
        QTest::newRow("source") << "noise-source"
                                << "quantum"
                                << "noise_source";
        QTest::newRow("variation seed negative") << "variation-seed"
                                                 << "-1"
                                                 << "variation_seed";
        QTest::newRow("variation seed text") << "variation-seed"
                                             << "many"
                                             << "variation_seed";
        QTest::newRow("strength text") << "variation-strength"
                                       << "strong"
                                       << "variation_strength";
        QTest::newRow("resize one side") << "seed-resize-from"
                                         << "640"
                                         << "seed_resize_from";
        QTest::newRow("resize text") << "seed-resize-from"
                                     << "axb"
                                     << "seed_resize_from";
        QTest::newRow("ensd text") << "eta-noise-seed-delta"
                                   << "31337.5"
                                   << "eta_noise_seed_delta";
        QTest::newRow("ensd too large") << "eta-noise-seed-delta"
                                        << "9223372036854775808"
                                        << "eta_noise_seed_delta";
    }
    void badValuesAreRefusedNamingTheField() {
        QFETCH(QString, flag);
        QFETCH(QString, value);
        QFETCH(QString, field);
        RunConfig c;
        const std::string f = flag.toStdString(), v = value.toStdString();
        QCOMPARE(QString::fromStdString(fieldOfError([&] { parseFlag(c, f.c_str(), v); })), field);
    }

    void validationRefusesOutOfRangeSettings() {
        RunConfig c;
        c.variationStrength = 1.5;
        QVERIFY(refusedField(c, "variation_strength"));
        const std::string message = messageOfError([&] { validate(c); });
        QVERIFY2(message.find("the variation strength must be 0 to 1") != std::string::npos, message.c_str());
        c.variationStrength = 1.0;
        QVERIFY(!refusedField(c, "variation_strength"));
        c.seedResizeFromWidth = 640;  // height 0: half a size
        QVERIFY(refusedField(c, "seed_resize_from"));
        c.seedResizeFromHeight = kMaxImageSidePx + 1;
        QVERIFY(refusedField(c, "seed_resize_from"));
        c.seedResizeFromHeight = 512;
        QVERIFY(validateAll(c).empty());
        // JSON: the same readers.
        QCOMPARE(fieldOfError([] {
                     runConfigFromJson(nlohmann::json{{"noise_source", "cuda"}});
                 }),
                 std::string("noise_source"));
        QCOMPARE(fieldOfError([] {
                     runConfigFromJson(nlohmann::json{{"eta_noise_seed_delta", 1.5}});
                 }),
                 std::string("eta_noise_seed_delta"));
        QCOMPARE(runConfigFromJson(nlohmann::json{{"variation_seed", "123"}}).variationSeed, std::uint64_t{123});
    }

    void infotextWritesA1111Keys() {
        const std::string text = sdInfotext(a1111Config());
        QVERIFY2(text.find("Variation seed: 7, Variation seed strength: 0.3, Seed resize from: 640x512, ") !=
                     std::string::npos,
                 text.c_str());
        QVERIFY2(text.find("ENSD: 31337, RNG: NV, ") != std::string::npos, text.c_str());
        RunConfig cpu = a1111Config();
        cpu.noiseSource = RngSource::CPU;
        QVERIFY(sdInfotext(cpu).find("RNG: CPU") != std::string::npos);
        RunConfig gpu = a1111Config();
        gpu.noiseSource = RngSource::GPU;
        QVERIFY(sdInfotext(gpu).find("RNG: GPU") != std::string::npos);
        // Tessera's noise and no A1111 settings: none of the keys (the infotext is as before).
        const std::string plain = sdInfotext(RunConfig{});
        for (const char* key : {"RNG", "Variation seed", "Seed resize from", "ENSD"})
            QVERIFY2(plain.find(key) == std::string::npos, plain.c_str());
    }

    void infotextRoundTrips_data() {
        QTest::addColumn<int>("source");
        for (const RngSource s :
             {RngSource::Tessera, RngSource::CPU, RngSource::GPU, RngSource::NV, RngSource::ComfyUI})
            QTest::newRow(std::string(toString(s)).c_str()) << int(s);
    }
    void infotextRoundTrips() {
        QFETCH(int, source);
        RunConfig c = a1111Config();
        c.noiseSource = RngSource(source);
        RunConfig back;
        back.noiseSource = RngSource::CPU;  // a value the text must replace
        const ImportedSettings imported = applyInfotext(parseInfotext(sdInfotext(c)), back);
        QCOMPARE(int(back.noiseSource), source);
        QCOMPARE(back.variationSeed, c.variationSeed);
        QCOMPARE(back.variationStrength, c.variationStrength);
        QCOMPARE(back.seedResizeFromWidth, 640);
        QCOMPARE(back.seedResizeFromHeight, 512);
        QCOMPARE(back.etaNoiseSeedDelta, std::int64_t{31337});
        const std::vector<std::string> differ = mappedFieldDifferences(c, back);
        QVERIFY2(differ.empty(), differ.empty() ? "" : differ.front().c_str());
        for (const char* field :
             {"noise_source", "variation_seed", "variation_strength", "seed_resize_from", "eta_noise_seed_delta"})
            QVERIFY2(std::find(imported.fields.begin(), imported.fields.end(), field) != imported.fields.end(), field);
        for (const UnmappedSetting& u : imported.unmapped)
            QVERIFY2(u.shown.find("RNG") == std::string::npos, u.shown.c_str());
    }

    // Which noise a PNG without "RNG" was drawn with: A1111's default GPU, unless Tessera wrote it.
    void absentRngMeansGpuExceptInTesseraText() {
        RunConfig c;
        applyInfotext(parseInfotext("Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1, Size: 512x512, "
                                    "Version: v1.10.1"),
                      c);
        QCOMPARE(int(c.noiseSource), int(RngSource::GPU));
        applyInfotext(parseInfotext("Steps: 20, Sampler: Euler a, Seed: 1, Size: 512x512, RNG: CPU"), c);
        QCOMPARE(int(c.noiseSource), int(RngSource::CPU));
        applyInfotext(parseInfotext("Steps: 20, Sampler: Euler a, Seed: 1, Size: 512x512, Version: tessera-0.1.0"), c);
        QCOMPARE(int(c.noiseSource), int(RngSource::Tessera));
        const ImportedSettings odd =
            applyInfotext(parseInfotext("Steps: 20, Sampler: Euler a, Seed: 1, Size: 512x512, RNG: Quantum"), c);
        QCOMPARE(int(c.noiseSource), int(RngSource::Tessera));  // left as it was
        QCOMPARE(odd.unmapped.size(), std::size_t{1});
        QVERIFY2(odd.unmapped.front().message().find("'RNG: Quantum' is not one of") == 0,
                 odd.unmapped.front().message().c_str());
        const ImportedSettings wide = applyInfotext(
            parseInfotext("Steps: 20, Sampler: Euler a, Seed: 1, Size: 512x512, Variation seed strength: 2, "
                          "Seed resize from: 0x512"),
            c);
        QCOMPARE(wide.unmapped.size(), std::size_t{2});
    }

    void comfyGraphMeansTheComfySource() {
        RunConfig c;
        const ImportedSettings imported = applyComfyPrompt(
            R"({"3": {"class_type": "KSampler", "inputs": {"seed": 5, "steps": 20, "cfg": 8, "sampler_name": "euler",
                "scheduler": "normal", "denoise": 1, "latent_image": ["5", 0]}},
                "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}}})",
            c, "params-from");
        QCOMPARE(int(c.noiseSource), int(RngSource::ComfyUI));
        QVERIFY(std::find(imported.fields.begin(), imported.fields.end(), "noise_source") != imported.fields.end());
    }
};

QTEST_GUILESS_MAIN(TestNoiseSettings)
#include "tst_noisesettings.moc"
