// A run's LoRAs as settings and records (core/run): --lora's FILE[:TE[:UNET]] and the settings' JSON
// (RunConfig::loras), their checks, the lookup of a NAME in a models folder's Lora/, LyCORIS/ and loras/
// as A1111 and ComfyUI keep them (core/run/LoraModelFile.h), the tag an extra LoRA adds to the prompt
// an infotext writes, A1111's "Lora hashes" both ways (core/run/Infotext.h), and the record's LoRAs in
// the manifest (core/run/RunRecordIO.h).
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/ValidationError.h"
#include "core/run/Infotext.h"
#include "core/run/LoraModelFile.h"
#include "core/run/RunConfig.h"
#include "core/run/RunConfigFields.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

RunConfig parsedLora(const std::string& text) {
    RunConfig c;
    findRunConfigField("lora")->parse(c, text);
    return c;
}

std::string refusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const ValidationError& e) {
        return e.field() + "|" + e.what();
    }
    return "<none>";
}

void touch(const fs::path& path) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "x";
}

LoraRecord record(const std::string& name, const std::string& hash) {
    LoraRecord r;
    r.name = name;
    r.file = name + ".safetensors";
    r.sha256 = std::string(64, 'a');
    r.shortHash = hash;
    return r;
}

}  // namespace

class TestLoraSettings : public QObject {
    Q_OBJECT

private slots:
    // FILE, FILE:W (both multipliers), FILE:TE:UNET; a trailing part that is no number is the name's.
    void loraOptionText() {
        QCOMPARE(parsedLora("detail").loras, (std::vector<LoraSetting>{{"detail", 1.0, 1.0}}));
        QCOMPARE(parsedLora("detail:0.5").loras, (std::vector<LoraSetting>{{"detail", 0.5, 0.5}}));
        QCOMPARE(parsedLora("detail:1:0.25").loras, (std::vector<LoraSetting>{{"detail", 1.0, 0.25}}));
        QCOMPARE(parsedLora("dir/a:b.safetensors:-0.5").loras,
                 (std::vector<LoraSetting>{{"dir/a:b.safetensors", -0.5, -0.5}}));
        QCOMPARE(parsedLora("style:v2").loras, (std::vector<LoraSetting>{{"style:v2", 1.0, 1.0}}));
        QCOMPARE(parsedLora("a:1:2:3").loras, (std::vector<LoraSetting>{{"a:1", 2.0, 3.0}}));
        RunConfig twice = parsedLora("a");
        findRunConfigField("lora")->parse(twice, "b:0.5");  // repeatable: in order
        QCOMPARE(twice.loras, (std::vector<LoraSetting>{{"a", 1.0, 1.0}, {"b", 0.5, 0.5}}));
        QVERIFY2(refusal([] { parsedLora(""); }).rfind("lora|lora: '' names no LoRA", 0) == 0,
                 refusal([] { parsedLora(""); }).c_str());
        QVERIFY(refusal([] { parsedLora(std::string("a\0b", 3)); }).rfind("lora|", 0) == 0);
    }

    // The settings' JSON: [{"file", "te", "unet"}], unet defaulting to te; anything else named.
    void loraSettingsJson() {
        RunConfig c;
        c.loras = {{"/m/Lora/a.safetensors", 0.5, 1.0}, {"b", 1.0, 1.0}};
        const nlohmann::json j = toJson(c);
        QCOMPARE(j["loras"].dump(), std::string(R"([{"file":"/m/Lora/a.safetensors","te":0.5,"unet":1.0},)"
                                                R"({"file":"b","te":1.0,"unet":1.0}])"));
        QCOMPARE(runConfigFromJson(j).loras, c.loras);
        QCOMPARE(toJson(RunConfig{})["loras"], nlohmann::json::array());
        QCOMPARE(runConfigFromJson(nlohmann::json::parse(R"({"loras": [{"file": "x", "te": 0.25}]})")).loras,
                 (std::vector<LoraSetting>{{"x", 0.25, 0.25}}));
        const auto bad = [](const char* text) {
            return refusal([text] { (void)runConfigFromJson(nlohmann::json::parse(text)); });
        };
        QVERIFY2(bad(R"({"loras": "x"})").find("loras: expected an array") != std::string::npos,
                 bad(R"({"loras": "x"})").c_str());
        QVERIFY(bad(R"({"loras": [{"file": "x", "weight": 1}]})").find("loras.weight: unknown key") !=
                std::string::npos);
        QVERIFY(bad(R"({"loras": [{"file": 3}]})").find("loras.file: expected a string") != std::string::npos);
        QVERIFY(bad(R"({"loras": [{"file": "x", "te": "1"}]})").find("loras.te: expected a number") !=
                std::string::npos);
    }

    // validate(): a name for each, at most kMaxLoras, finite multipliers.
    void loraSettingsAreValidated() {
        RunConfig c;
        c.loras = {{"", 1.0, 1.0}};
        QCOMPARE(validateAll(c).front().field(), std::string("lora"));
        c.loras.assign(kMaxLoras + 1, LoraSetting{"x", 1.0, 1.0});
        QVERIFY(std::string(validateAll(c).front().what()).find("65 LoRAs are not allowed; at most 64") !=
                std::string::npos);
        c.loras = {{"x", std::numeric_limits<double>::infinity(), 1.0}};
        QVERIFY(std::string(validateAll(c).front().what()).find("must be finite numbers") != std::string::npos);
        c.loras = {{"x", -2.5, 7.0}};
        QVERIFY(validateAll(c).empty());
    }

    // A NAME: Lora/ before LyCORIS/ before loras/, .safetensors before .pt and .ckpt, then the
    // folders' subfolders (by path order); a path as given; nothing found: every folder named.
    void namesAreLookedUpAsA1111KeepsThem() {
        QTemporaryDir dir;
        const fs::path models = dir.path().toStdString();
        touch(models / "Lora" / "a.pt");
        touch(models / "Lora" / "a.safetensors");
        touch(models / "LyCORIS" / "b.ckpt");
        touch(models / "loras" / "b.safetensors");
        touch(models / "loras" / "c.safetensors");
        touch(models / "Lora" / "z" / "deep.safetensors");
        touch(models / "Lora" / "a" / "x" / "deep.safetensors");
        const std::vector<std::string> folders{models.string()};
        QCOMPARE(findLoraFile("a", folders).path, (models / "Lora" / "a.safetensors").string());
        QVERIFY(findLoraFile("a", folders).byName);
        QCOMPARE(findLoraFile("a.pt", folders).path, (models / "Lora" / "a.pt").string());
        QCOMPARE(findLoraFile("b", folders).path, (models / "LyCORIS" / "b.ckpt").string());
        QCOMPARE(findLoraFile("c", folders).path, (models / "loras" / "c.safetensors").string());
        QCOMPARE(findLoraFile("deep", folders).path, (models / "Lora" / "a" / "x" / "deep.safetensors").string());
        const std::string path = (models / "loras" / "c.safetensors").string();
        QCOMPARE(findLoraFile(path, {}).path, path);
        QVERIFY(!findLoraFile(path, {}).byName);

        const std::string missing = refusal([&folders] { (void)findLoraFile("none", folders); });
        QVERIFY2(missing.find("lora|lora: no LoRA named 'none' ('none.safetensors', 'none.pt' or 'none.ckpt') in '" +
                              (models / "Lora").string() + "', '" + (models / "LyCORIS").string() + "' or '" +
                              (models / "loras").string() + "'") == 0,
                 missing.c_str());
        QVERIFY2(refusal([] { (void)findLoraFile("none", {}); }).find("no models folder is known") != std::string::npos,
                 refusal([] { (void)findLoraFile("none", {}); }).c_str());
        QVERIFY(refusal([&models] { (void)findLoraFile((models / "nope.pt").string(), {}); }).find("does not exist") !=
                std::string::npos);
        QVERIFY(refusal([&models] { (void)findLoraFile((models / "Lora").string(), {}); }).find("is a folder") !=
                std::string::npos);
    }

    // A1111's name of a LoRA, and the tag an extra LoRA writes after the prompt.
    void namesAndTags() {
        QCOMPARE(loraName("/m/Lora/style/detail-tweaker.safetensors"), std::string("detail-tweaker"));
        QCOMPARE(loraName("old.CKPT"), std::string("old"));
        QCOMPARE(loraName("name"), std::string("name"));
        QCOMPARE(loraName("v1.5-detail"), std::string("v1.5-detail"));
        QCOMPARE(loraTagText({"/m/a.safetensors", 0.5, 0.5}), std::string("<lora:a:0.5>"));
        QCOMPARE(loraTagText({"a", 1.0, 0.25}), std::string("<lora:a:1:0.25>"));
        RunConfig c;
        c.prompt = "a cat <lora:x:1>";
        c.loras = {{"/m/Lora/y.pt", 0.75, 0.75}, {"z", 1.0, 0.0}};
        QCOMPARE(promptWithLoraTags(c), std::string("a cat <lora:x:1><lora:y:0.75><lora:z:1:0>"));
    }

    // "Lora hashes" as A1111 writes it (after Clip skip, among its extra parameters; names without
    // ':' and ','; a repeated name in its first place with its last hash) and reads it back; the
    // extra LoRAs' tags end the written prompt, so the text reads back as the same run.
    void loraHashesBothWays() {
        RunRecord r;
        r.config.prompt = "a cat <lora:a:b:1>";
        r.config.loras = {{"/m/Lora/extra.safetensors", 0.5, 0.5}};
        r.config.clipSkip = 2;
        r.modelHash = "0123456789abcdef";
        r.loras = {record("a:b", "0123456789ab"), record("extra,1", "ba9876543210"), record("a:b", "111111111111"),
                   record("nohash", "")};
        QCOMPARE(loraHashesValue(r.loras), std::string("ab: 111111111111, extra1: ba9876543210"));
        const std::string text = infotext(r.config, infotextExtras(r));
        QVERIFY2(text.rfind("a cat <lora:a:b:1><lora:extra:0.5>\n", 0) == 0, text.c_str());
        QVERIFY2(text.find(", Clip skip: 2, Lora hashes: \"ab: 111111111111, extra1: ba9876543210\", Tile: ") !=
                     std::string::npos,
                 text.c_str());
        const ParsedInfotext parsed = parseInfotext(text);
        QCOMPARE(
            parseLoraHashes(parsed.find("Lora hashes")->value),
            (std::vector<std::pair<std::string, std::string>>{{"ab", "111111111111"}, {"extra1", "ba9876543210"}}));
        QCOMPARE(parseLoraHashes(" a : 1 ,b:2:3,junk,, c:"),
                 (std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "2:3"}, {"c", ""}}));

        RunConfig back;
        back.loras = {{"from-a-preset", 1.0, 1.0}};  // the PNG's prompt carries its LoRAs: these go
        (void)applyInfotext(parsed, back);
        QCOMPARE(back.prompt, std::string("a cat <lora:a:b:1><lora:extra:0.5>"));
        QVERIFY(back.loras.empty());
        QVERIFY(mappedFieldDifferences(r.config, back).empty());
        RunConfig without = r.config;
        without.loras.clear();
        QCOMPARE(mappedFieldDifferences(r.config, without), std::vector<std::string>{"prompt"});
        QVERIFY(infotext(r.config, infotextExtras(r.config)).find("Lora hashes") == std::string::npos);
    }

    // The manifest keeps each LoRA of the run and reads it back.
    void manifestKeepsTheLoras() {
        RunRecord r;
        r.runId = "20260101-000000-0000";
        LoraRecord l = record("detail", "0123456789ab");
        l.teMultiplier = 0.5;
        l.unetMultiplier = 1.25;
        l.modulesMerged = 264;
        l.modulesSkipped = 2;
        l.keysUnmatched = 3;
        l.modulesNotMerged = 1;
        r.loras = {l, record("other", "ba9876543210")};
        const RunRecord back = runRecordFromManifest(nlohmann::json::parse(manifestJson(r).dump()));
        QCOMPARE(back.loras.size(), std::size_t(2));
        QCOMPARE(manifestJson(back)["loras"], manifestJson(r)["loras"]);
        QCOMPARE(back.loras[0].modulesMerged, 264);
        QCOMPARE(back.loras[0].unetMultiplier, 1.25);
        QCOMPARE(back.loras[1].shortHash, std::string("ba9876543210"));
        QVERIFY(!manifestJson(RunRecord{}).contains("loras"));
        QCOMPARE(describe(l), std::string("lora: detail (detail.safetensors, hash 0123456789ab), te 0.5, unet 1.25: "
                                          "264 modules merged, 2 left out at multiplier 0; 1 modules not merged; 3 "
                                          "keys name nothing in the model"));
        nlohmann::json broken = manifestJson(r);
        broken["loras"][0]["modules_merged"] = "many";
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, (void)runRecordFromManifest(broken));
    }
};

QTEST_GUILESS_MAIN(TestLoraSettings)
#include "tst_lorasettings.moc"
