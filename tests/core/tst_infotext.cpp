// Infotext: A1111's "parameters" text written exactly as A1111 writes it, read back as its
// parse_generation_parameters reads it, mapped onto a RunConfig; ComfyUI's "prompt" graph read
// back; hostile text parsed in linear time.
#include <QtTest/QtTest>

#include <QElapsedTimer>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/run/Infotext.h"
#include "core/run/RunConfigFields.h"
#include "core/run/SamplerNames.h"
#include "tests/core/ErrorText.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const std::string kVersion = std::string("Version: tessera-") + TESSERA_VERSION;

// Enums are compared by value: QTest's own toString would find tessera::toString by ADL.
template <typename E>
int n(E value) {
    return static_cast<int>(value);
}

std::string valueOf(const ParsedInfotext& parsed, const std::string& key) {
    const InfotextParam* p = parsed.find(key);
    return p ? p->value : std::string("<absent>");
}

std::vector<std::string> messages(const ImportedSettings& imported) {
    std::vector<std::string> out;
    for (const UnmappedSetting& u : imported.unmapped) out.push_back(u.message());
    return out;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& line : lines) out += line + "\n";
    return out;
}

// Every field applyInfotext maps, compared.
void compareMapped(const RunConfig& a, const RunConfig& b) {
    const std::vector<std::string> differ = mappedFieldDifferences(a, b);
    QVERIFY2(differ.empty(), ("differ: " + joined(differ)).c_str());
}

RunConfig sdConfig() {
    RunConfig c;
    c.prompt = "a cat, (detailed:1.2)";
    c.negativePrompt = "blurry";
    c.steps = 25;
    c.scheduler = SchedulerKind::DPMPP2M;
    c.schedulerOptions.karrasSigmas = true;
    c.cfgScale = 7.5;
    c.seed = 1234;
    c.width = 512;
    c.height = 768;
    c.clipSkip = 2;
    c.tile = 512;
    c.overlapPx = 64;
    c.tileBatch = 2;
    c.graphs = GraphMode::Step;
    c.backend = BackendKind::CUDA;
    return c;
}

InfotextExtras sdExtras() {
    InfotextExtras x;
    x.modelName = "v1-5-pruned-emaonly";
    x.modelHash = "6ce0161689";
    x.stableDiffusion = true;
    return x;
}

// The docstring example of A1111's parse_generation_parameters.
const char* const kA1111Example =
    "girl with an artist's beret, determined, blue eyes, desert scene, computer monitors, heavy makeup, by Alphonse "
    "Mucha and Charlie Bowater, ((eyeshadow)), (coquettish), detailed, intricate\n"
    "Negative prompt: ugly, fat, obese, chubby, (((deformed))), [blurry], bad anatomy, disfigured, poorly drawn face, "
    "mutation, mutated, (extra_limb), (ugly), (poorly drawn hands), messy drawing\n"
    "Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 965400086, Size: 512x512, Model hash: 45dee52b";

// ComfyUI's default text-to-image graph as its Save Image node stores it.
const char* const kComfyDefault = R"({"3": {"inputs": {"seed": 156680208700286, "steps": 20, "cfg": 8,
  "sampler_name": "euler", "scheduler": "normal", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
  "negative": ["7", 0], "latent_image": ["5", 0]}, "class_type": "KSampler"},
 "4": {"inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"}, "class_type": "CheckpointLoaderSimple"},
 "5": {"inputs": {"width": 512, "height": 768, "batch_size": 1}, "class_type": "EmptyLatentImage"},
 "6": {"inputs": {"text": "beautiful scenery nature glass bottle landscape, , purple galaxy bottle,", "clip": ["4", 1]},
       "class_type": "CLIPTextEncode"},
 "7": {"inputs": {"text": "text, watermark", "clip": ["4", 1]}, "class_type": "CLIPTextEncode"},
 "8": {"inputs": {"samples": ["3", 0], "vae": ["4", 2]}, "class_type": "VAEDecode"},
 "9": {"inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}, "class_type": "SaveImage"}})";

}  // namespace

class TestInfotext : public QObject {
    Q_OBJECT

private slots:
    // ---- writer ----

    // Every setting of the field table is either carried by an infotext key or marked as left
    // out with a reason; a new field without a decision fails here. The marks are checked too:
    // a setting's example value changes the text (under its key) exactly when it is written.
    void everyFieldHasAnInfotextDecision() {
        const auto& coverage = infotextCoverage();
        for (const InfotextCoverage& entry : coverage) {
            QVERIFY2(findRunConfigField(entry.field) && findRunConfigField(entry.field)->name == entry.field,
                     qPrintable(QString("infotextCoverage names '%1', which is no RunConfig field")
                                    .arg(QString::fromUtf8(entry.field.data(), int(entry.field.size())))));
            QVERIFY2(entry.key.empty() != entry.notWritten.empty(),
                     qPrintable(QString::fromUtf8(entry.field.data(), int(entry.field.size()))));
        }
        RunConfig base;
        base.initImage = "in.png";  // Denoising strength is written for runs from an image
        base.scheduler = SchedulerKind::DDIM;
        base.tile = 128;  // so that overlap's example (25%) is not its default 16 pixels
        const auto text = [](const RunConfig& c) {
            InfotextExtras extras = infotextExtras(c);
            extras.stableDiffusion = true;
            extras.fluxDev = true;  // so that FLUX.1-dev's guidance is written too
            return infotext(c, extras);
        };
        const std::string before = text(base);
        for (const RunConfigField& field : runConfigFields()) {
            const QString name = QString::fromUtf8(field.name.data(), int(field.name.size()));
            const auto entry = std::find_if(coverage.begin(), coverage.end(),
                                            [&](const InfotextCoverage& e) { return e.field == field.name; });
            QVERIFY2(entry != coverage.end(), qPrintable("RunConfig field '" + name +
                                                         "' has neither an infotext key "
                                                         "nor a 'not written' mark in infotextCoverage()"));
            QVERIFY2(std::count_if(coverage.begin(), coverage.end(),
                                   [&](const InfotextCoverage& e) { return e.field == field.name; }) == 1,
                     qPrintable(name + " is listed twice"));
            if (!field.parse || field.example.empty()) continue;  // no CLI spelling to set it with
            RunConfig changed = base;
            field.parse(changed, std::string(field.example));
            const std::string after = text(changed);
            if (entry->key.empty()) {
                QVERIFY2(after == before, qPrintable(name +
                                                     " is marked as not written, but its example changes the "
                                                     "infotext:\n" +
                                                     QString::fromStdString(after)));
            } else {
                QVERIFY2(after != before,
                         qPrintable(name + " is marked as written, but its example '" +
                                    QString::fromUtf8(field.example.data(), int(field.example.size())) +
                                    "' leaves the infotext as it was"));
                const std::string key = std::string(entry->key) + ":";
                QVERIFY2(entry->key == "Prompt" || after.find(key) != std::string::npos,
                         qPrintable(name + ": no '" + QString::fromStdString(key) + "' in " +
                                    QString::fromStdString(after)));
            }
        }
    }

    void unconditionalRunWritesNoPromptLines() {
        RunConfig c;
        QCOMPARE(infotext(c, infotextExtras(c)),
                 "Steps: 20, Sampler: DDIM, Schedule type: Automatic, Seed: 0, Size: 256x256, Model: default, Tile: "
                 "64, Overlap: 16, Window: hann, "
                 "Fusion: sample, Batch: auto, Graphs: off, Precision: fp16, Backend: auto, " +
                     kVersion);
        // An unconditional model writes neither prompt lines nor CFG scale nor Clip skip.
        InfotextExtras x;
        x.modelName = "ddpm-church-256";
        c.clipSkip = 3;
        c.scheduler = SchedulerKind::Euler;
        c.schedulerOptions.karrasSigmas = false;
        c.schedulerOptions.eta = 0.5f;  // DDIM's only: not written for Euler
        c.initImage = "in.png";
        c.strength = 0.4;
        c.overlapFraction = 0.25;
        QCOMPARE(
            infotext(c, x),
            "Steps: 20, Sampler: Euler, Schedule type: Automatic, Seed: 0, Size: 256x256, Model: ddpm-church-256, "
            "Denoising strength: 0.4, Tile: 64, Overlap: 16, Window: hann, Fusion: sample, Batch: auto, Graphs: off, "
            "Precision: fp16, Backend: auto, " +
                kVersion);
    }

    void stableDiffusionRunInA1111Order() {
        RunConfig c = sdConfig();
        c.initImage = "photo.png";
        c.strength = 0.75;
        c.upscale = 2;
        c.preserveColor = true;
        QCOMPARE(
            infotext(c, sdExtras()),
            "a cat, (detailed:1.2)\nNegative prompt: blurry\n"
            "Steps: 25, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7.5, Seed: 1234, Size: 512x768, "
            "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Denoising strength: 0.75, Clip skip: 2, Tile: 512, "
            "Overlap: 64, Window: hann, Fusion: sample, Batch: 2, Graphs: step, Precision: fp16, Backend: cuda, "
            "Upscale: 2, Preserve color: True, " +
                kVersion);
        // Clip skip 1 and an empty negative prompt are not written; DDIM's eta as A1111's "Eta DDIM".
        c = sdConfig();
        c.clipSkip = 1;
        c.negativePrompt.clear();
        c.scheduler = SchedulerKind::DDIM;
        c.schedulerOptions.eta = 0.25f;
        c.cfgScale = 7;
        QCOMPARE(infotext(c, sdExtras()),
                 "a cat, (detailed:1.2)\nSteps: 25, Sampler: DDIM, Schedule type: Automatic, CFG scale: 7, Seed: 1234, "
                 "Size: 512x768, "
                 "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Tile: 512, Overlap: 64, Window: hann, "
                 "Fusion: sample, Batch: 2, Graphs: step, Precision: fp16, Backend: cuda, Eta DDIM: 0.25, " +
                     kVersion);
        // No prompt but a negative one: the text starts with it (A1111 strips the leading newline).
        c.prompt.clear();
        c.negativePrompt = "low quality";
        QVERIFY(infotext(c, sdExtras()).rfind("Negative prompt: low quality\nSteps: 25, Sampler: DDIM,", 0) == 0);
        // Euler a and DPM++ 2M without Karras sigmas.
        c.scheduler = SchedulerKind::EulerAncestral;
        QVERIFY(infotext(c, sdExtras()).find("Sampler: Euler a, Schedule type: Automatic, CFG") != std::string::npos);
        c.scheduler = SchedulerKind::DPMPP2M;
        c.schedulerOptions.karrasSigmas = false;
        QVERIFY(infotext(c, sdExtras()).find("Sampler: DPM++ 2M, Schedule type: Uniform, CFG") != std::string::npos);
    }

    void valuesWithCommaNewlineOrColonAreJsonQuoted() {
        QCOMPARE(quoteInfotextValue("plain value"), std::string("plain value"));
        QCOMPARE(quoteInfotextValue("say \"hi\""), std::string("say \"hi\""));  // quotes alone: verbatim
        QCOMPARE(quoteInfotextValue("a, b"), std::string("\"a, b\""));
        QCOMPARE(quoteInfotextValue("x: \"y\" \\ z"), std::string("\"x: \\\"y\\\" \\\\ z\""));
        QCOMPARE(quoteInfotextValue("one\ntwo\t\x01"), std::string("\"one\\ntwo\\t\\u0001\""));
        QCOMPARE(quoteInfotextValue("caf\xC3\xA9: \xE2\x98\x95"),
                 std::string("\"caf\xC3\xA9: \xE2\x98\x95\""));  // UTF-8 kept
        RunConfig c = sdConfig();
        InfotextExtras x = sdExtras();
        x.modelName = "my, model: v2";
        const std::string text = infotext(c, x);
        QVERIFY2(text.find(", Model: \"my, model: v2\", Clip skip: 2, Tile: 512") != std::string::npos, text.c_str());
        const ParsedInfotext back = parseInfotext(text);
        QCOMPARE(valueOf(back, "Model"), std::string("my, model: v2"));
        QCOMPARE(valueOf(back, "Tile"), std::string("512"));
    }

    void nonLatin1PromptAndInvalidBytes() {
        RunConfig c = sdConfig();
        c.prompt = "\xE7\x8C\xAB\xE3\x81\xAE\xE5\x86\x99\xE7\x9C\x9F \xF0\x9F\x98\x80, caf\xC3\xA9";
        c.negativePrompt = "bad \xFF byte";
        const std::string text = infotext(c, sdExtras());
        QVERIFY(isValidUtf8(text));
        QVERIFY(text.rfind(c.prompt + "\nNegative prompt: bad \\xFF byte\nSteps: 25,", 0) == 0);
        const ParsedInfotext back = parseInfotext(text);
        QCOMPARE(back.prompt, c.prompt);
        QCOMPARE(back.negativePrompt, std::string("bad \\xFF byte"));
    }

    void extrasFromRecord() {
        RunRecord r;
        r.modelName = "church";
        r.modelHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        InfotextExtras x = infotextExtras(r);
        QCOMPARE(x.modelName, std::string("church"));
        QCOMPARE(x.modelHash, std::string("0123456789"));
        QVERIFY(!x.stableDiffusion);
        r.modelHash = "not-a-hash-at-all";
        r.config.prompt = "a cat";
        x = infotextExtras(r);
        QCOMPARE(x.modelHash, std::string());
        QVERIFY(x.stableDiffusion);
        RunConfig c;
        c.model = "/models/sd/v1-5-pruned-emaonly.safetensors";
        QCOMPARE(infotextExtras(c).modelName, std::string("v1-5-pruned-emaonly"));
        c.model = "/home/me/models/ddpm-church-256/";
        QCOMPARE(infotextExtras(c).modelName, std::string("ddpm-church-256"));
    }

    // ---- parser ----

    void parsesA1111DocstringExample() {
        const ParsedInfotext p = parseInfotext(kA1111Example);
        QVERIFY(p.prompt.rfind("girl with an artist's beret,", 0) == 0);
        QVERIFY(p.prompt.find('\n') == std::string::npos);
        QVERIFY(p.negativePrompt.rfind("ugly, fat, obese,", 0) == 0);
        QVERIFY(p.negativePrompt.find("messy drawing") != std::string::npos);
        QCOMPARE(valueOf(p, "Steps"), std::string("20"));
        QCOMPARE(valueOf(p, "Sampler"), std::string("Euler a"));
        QCOMPARE(valueOf(p, "CFG scale"), std::string("7"));
        QCOMPARE(valueOf(p, "Seed"), std::string("965400086"));
        QCOMPARE(valueOf(p, "Size-1"), std::string("512"));
        QCOMPARE(valueOf(p, "Size-2"), std::string("512"));
        QCOMPARE(valueOf(p, "Size"), std::string("<absent>"));
        QCOMPARE(valueOf(p, "Model hash"), std::string("45dee52b"));
        // A1111's defaults for absent keys, marked as such.
        QCOMPARE(valueOf(p, "Clip skip"), std::string("1"));
        QVERIFY(p.find("Clip skip")->defaulted);
        QCOMPARE(valueOf(p, "Schedule type"), std::string("Automatic"));
        QCOMPARE(valueOf(p, "RNG"), std::string("GPU"));
        QCOMPARE(valueOf(p, "Hires resize-1"), std::string("0"));
        QVERIFY(!p.find("Steps")->defaulted);
        QCOMPARE(p.params.front().key, std::string("Steps"));  // the text's order first

        RunConfig c;
        const ImportedSettings imported = applyInfotext(p, c);
        QCOMPARE(c.prompt, p.prompt);
        QCOMPARE(c.negativePrompt, p.negativePrompt);
        QCOMPARE(c.steps, 20);
        QCOMPARE(n(c.scheduler), n(SchedulerKind::EulerAncestral));
        QCOMPARE(c.cfgScale, 7.0);
        QCOMPARE(c.seed, std::uint64_t{965400086});
        QCOMPARE(c.width, 512);
        QCOMPARE(c.height, 512);
        QCOMPARE(c.clipSkip, 1);
        QCOMPARE(joined(messages(imported)),
                 std::string("'Model hash: 45dee52b' is not applied: Tessera picks the model by its path\n"));
    }

    void parsesModernA1111Line() {
        const ParsedInfotext p = parseInfotext(
            "Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1234, Size: 512x512, "
            "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Version: v1.10.1");
        QCOMPARE(p.prompt, std::string());
        QCOMPARE(p.negativePrompt, std::string());
        RunConfig c;
        c.prompt = "left over";
        const ImportedSettings imported = applyInfotext(p, c);
        QCOMPARE(c.prompt, std::string());  // pasted as A1111 pastes: empty
        QCOMPARE(n(c.scheduler), n(SchedulerKind::DPMPP2M));
        QVERIFY(c.schedulerOptions.karrasSigmas);
        QCOMPARE(joined(messages(imported)),
                 std::string("'Model hash: 6ce0161689' is not applied: Tessera picks the model by its path\n"
                             "'Model: v1-5-pruned-emaonly' is not applied: Tessera picks the model by its path\n"));
        const std::vector<std::string> expected{
            "prompt", "negative_prompt", "scheduler", "use_karras_sigmas", "steps",       "cfg",
            "seed",   "width",           "height",    "clip_skip",         "noise_source"};
        QCOMPARE(imported.fields, expected);
    }

    void samplerNamesOldAndNew_data() {
        QTest::addColumn<QString>("line");
        QTest::addColumn<int>("kind");  // -1: not supported
        QTest::addColumn<bool>("karras");
        const auto row = [](const char* name, const char* line, int kind, bool karras) {
            QTest::newRow(name) << QString::fromUtf8(line) << kind << karras;
        };
        const int euler = n(SchedulerKind::Euler), eulerA = n(SchedulerKind::EulerAncestral),
                  dpm = n(SchedulerKind::DPMPP2M), ddim = n(SchedulerKind::DDIM), ddpm = n(SchedulerKind::DDPM);
        row("pre-1.9 combined Karras", "Steps: 20, Sampler: DPM++ 2M Karras, Seed: 1", dpm, true);
        row("pre-1.9 DPM++ 2M is not Karras", "Steps: 20, Sampler: DPM++ 2M, Seed: 1", dpm, false);
        row("Automatic DPM++ 2M is Karras", "Steps: 20, Sampler: DPM++ 2M, Schedule type: Automatic, Seed: 1", dpm,
            true);
        row("DPM++ 2M Uniform", "Steps: 20, Sampler: DPM++ 2M, Schedule type: Uniform, Seed: 1", dpm, false);
        row("Euler Automatic is Uniform", "Steps: 20, Sampler: Euler, Seed: 1", euler, false);
        row("Euler Karras", "Steps: 20, Sampler: Euler, Schedule type: Karras, Seed: 1", euler, true);
        row("combined name wins", "Steps: 20, Sampler: Euler Karras, Schedule type: Uniform, Seed: 1", euler, true);
        row("Euler a", "Steps: 20, Sampler: Euler a, Schedule type: Automatic, Seed: 1", eulerA, false);
        row("names ignore case", "Steps: 20, Sampler: dpm++ 2m karras, Seed: 1", dpm, true);
        row("DDIM", "Steps: 20, Sampler: DDIM, Seed: 1", ddim, false);
        row("DDPM", "Steps: 20, Sampler: DDPM, Seed: 1", ddpm, false);
        row("Euler a has no Karras", "Steps: 20, Sampler: Euler a, Schedule type: Karras, Seed: 1", -1, false);
        row("DPM++ SDE Karras", "Steps: 20, Sampler: DPM++ SDE Karras, Seed: 1", n(SchedulerKind::DPMPPSDE), true);
        row("LMS", "Steps: 20, Sampler: LMS, Schedule type: Automatic, Seed: 1", n(SchedulerKind::LMS), false);
        row("Heun Karras", "Steps: 20, Sampler: Heun, Schedule type: Karras, Seed: 1", n(SchedulerKind::Heun), true);
        row("DPM2 a", "Steps: 20, Sampler: DPM2 a, Seed: 1", -1, false);
        row("Exponential", "Steps: 20, Sampler: DPM++ 2M, Schedule type: Exponential, Seed: 1", -1, false);
        row("UniPC", "Steps: 20, Sampler: UniPC, Seed: 1", n(SchedulerKind::UniPC), false);
        row("Restart", "Steps: 20, Sampler: Restart, Seed: 1", -1, false);
    }
    void samplerNamesOldAndNew() {
        QFETCH(QString, line);
        QFETCH(int, kind);
        QFETCH(bool, karras);
        RunConfig c;
        c.scheduler = SchedulerKind::DDPM;
        c.schedulerOptions.karrasSigmas = !karras;
        const ImportedSettings imported = applyInfotext(parseInfotext(line.toStdString()), c);
        if (kind < 0) {
            QCOMPARE(n(c.scheduler), n(SchedulerKind::DDPM));  // untouched
            QCOMPARE(imported.unmapped.size(), std::size_t{1});
            EXPECT_MESSAGE(imported.unmapped.front().message(), "' is not supported; ignored");
            EXPECT_MESSAGE(imported.unmapped.front().message(), "'Sampler: ");
            return;
        }
        QVERIFY2(imported.unmapped.empty(), joined(messages(imported)).c_str());
        QCOMPARE(n(c.scheduler), kind);
        if (samplerHasKarras(SchedulerKind(kind))) QCOMPARE(c.schedulerOptions.karrasSigmas, karras);
    }

    // Batch: a number, or "auto" (a config whose tile batch is auto; a record writes the batch that ran).
    void batchAutoReadsAndWrites() {
        RunConfig c;
        c.tileBatch = 7;
        // (A1111 takes a last line of fewer than 3 parameters for prompt text.)
        (void)applyInfotext(parseInfotext("Steps: 20, Seed: 1, Batch: auto"), c);
        QCOMPARE(c.tileBatch, 0);
        (void)applyInfotext(parseInfotext("Steps: 20, Seed: 1, Batch: 25"), c);
        QCOMPARE(c.tileBatch, 25);
        const ImportedSettings bad = applyInfotext(parseInfotext("Steps: 20, Seed: 1, Batch: automatic"), c);
        QCOMPARE(c.tileBatch, 25);  // unreadable: listed, not applied
        QVERIFY(joined(messages(bad)).find("Batch: automatic") != std::string::npos);
        RunRecord r;
        r.config.tileBatch = 25;  // what auto chose
        QVERIFY(infotext(r.config, infotextExtras(r)).find(", Batch: 25,") != std::string::npos);
    }

    void sizeKeysAndQuotedValues() {
        const ParsedInfotext p = parseInfotext(
            "Steps: 20, Size: \xEF\xBC\x95\xEF\xBC\x91\xEF\xBC\x92x64, Hires resize: 1024x1536, "
            "Lora hashes: \"add_detail: 7c6bad76eb54, more_details: 3b8aa1d351ef\", "
            "Escapes: \"say \\\"hi\\\", back\\\\slash\", Bad json: \"\\q, x\", Empty: , Seed: 3, Steps: 30");
        QCOMPARE(valueOf(p, "Size-1"), std::string("\xEF\xBC\x95\xEF\xBC\x91\xEF\xBC\x92"));  // fullwidth 512: \d
        QCOMPARE(valueOf(p, "Hires resize-1"), std::string("1024"));
        QCOMPARE(valueOf(p, "Hires resize-2"), std::string("1536"));
        QVERIFY(!p.find("Hires resize-1")->defaulted);
        QCOMPARE(valueOf(p, "Lora hashes"), std::string("add_detail: 7c6bad76eb54, more_details: 3b8aa1d351ef"));
        QCOMPARE(valueOf(p, "Escapes"), std::string("say \"hi\", back\\slash"));
        QCOMPARE(valueOf(p, "Bad json"), std::string("\"\\q, x\""));  // not JSON: kept as written
        QCOMPARE(valueOf(p, "Empty"), std::string("<absent>"));       // A1111 skips an empty value
        QCOMPARE(valueOf(p, "Steps"), std::string("30"));             // the last value, in the first place
        QCOMPARE(p.params.front().key, std::string("Steps"));
        RunConfig c;
        const ImportedSettings imported = applyInfotext(p, c);
        QCOMPARE(c.width, 512);
        QCOMPARE(c.height, 64);
        QCOMPARE(c.steps, 30);
        QCOMPARE(joined(messages(imported)),
                 std::string("'Hires resize: 1024x1536' is not supported; ignored\n"
                             "'Lora hashes: add_detail: 7c6bad76eb54, more_details: 3b8aa1d351ef' is not supported; "
                             "ignored\n"
                             "'Escapes: say \\\"hi\\\", back\\\\slash' is not supported; ignored\n"
                             "'Bad json: \\\"\\\\q, x\\\"' is not supported; ignored\n"));
    }

    void promptWithNewlinesAndShortLastLine() {
        ParsedInfotext p = parseInfotext(
            "  line one\n  line two  \n\nline four\nNegative prompt:   neg one\n neg two\n"
            "Steps: 20, Sampler: Euler, Seed: 5\n\n");
        QCOMPARE(p.prompt, std::string("line one\nline two\n\nline four"));
        QCOMPARE(p.negativePrompt, std::string("neg one\nneg two"));
        QCOMPARE(valueOf(p, "Seed"), std::string("5"));
        // A last line with fewer than three parameters is prompt text.
        p = parseInfotext("a cat\nSteps: 20, Seed: 1");
        QCOMPARE(p.prompt, std::string("a cat\nSteps: 20, Seed: 1"));
        QCOMPARE(valueOf(p, "Steps"), std::string("<absent>"));
        p = parseInfotext("");
        QCOMPARE(p.prompt, std::string());
        QCOMPARE(valueOf(p, "Clip skip"), std::string("1"));
    }

    void hiresAndUnreadableValuesAreListed() {
        const ParsedInfotext p = parseInfotext(
            "a house\nSteps: many, Sampler: Euler, Seed: -4, Size: 512x512, Denoising strength: 0.7, Hires upscale: 2, "
            "Window: square, Clip skip: 2.5, Overlap: 24, RNG: CPU, Eta: 0.3, Version: v1.10.1");
        RunConfig c;
        const ImportedSettings imported = applyInfotext(p, c);
        QCOMPARE(c.steps, RunConfig{}.steps);
        QCOMPARE(c.strength, RunConfig{}.strength);
        QCOMPARE(c.overlapPx, 24);
        QCOMPARE(int(c.noiseSource), int(RngSource::CPU));  // A1111's randn_source
        QCOMPARE(joined(messages(imported)),
                 std::string("'Steps: many' is not a whole number; ignored\n"
                             "'Seed: -4' is out of range, allowed 0 to 18446744073709551615; ignored\n"
                             "'Denoising strength: 0.7' belongs to the hires fix, which is not supported; ignored\n"
                             "'Hires upscale: 2' is not supported; ignored\n"
                             "'Window: square' is not one of none, linear, hann or gaussian; ignored\n"
                             "'Clip skip: 2.5' is not a whole number; ignored\n"
                             "'Eta: 0.3' is not supported; ignored\n"));
        // Tessera's earlier parameters line wrote DDIM's eta as "Eta".
        RunConfig d;
        applyInfotext(parseInfotext("Steps: 5, Sampler: DDIM, Seed: 1, Eta: 0.3"), d);
        QCOMPARE(d.schedulerOptions.eta, 0.3f);
        // Euler a's own eta is 1: nothing to say.
        QVERIFY(applyInfotext(parseInfotext("Steps: 5, Sampler: Euler a, Seed: 1, Eta: 1"), d).unmapped.empty());
    }

    // A number its setting cannot take is never applied, whatever its size, sign or spelling;
    // the note quotes it as written and says the range (one rule: Steps 2147483648 was read as
    // "not a whole number" while Steps 1000000000 reached validate()).
    void numbersOutOfRangeAreListedWithTheRange_data() {
        QTest::addColumn<QString>("setting");
        QTest::addColumn<QString>("note");
        const QString steps = QStringLiteral("is out of range, allowed 1 to 1000; ignored");
        QTest::newRow("steps beyond int") << "Steps: 2147483648" << steps;
        QTest::newRow("steps in int") << "Steps: 1000000000" << steps;
        QTest::newRow("steps beyond 64 bits") << "Steps: 99999999999999999999999" << steps;
        QTest::newRow("steps negative") << "Steps: -5" << steps;
        QTest::newRow("steps zero with sign") << "Steps: +0" << steps;
        QTest::newRow("steps exponent") << "Steps: 1e3"
                                        << "is not a whole number; ignored";
        QTest::newRow("width") << "Size: 99999x64"
                               << "is out of range, allowed 1 to 16384; ignored";
        QTest::newRow("clip skip") << "Clip skip: -1"
                                   << "is out of range, allowed 1 to 12; ignored";
        QTest::newRow("tile") << "Tile: 4294967296"
                              << "is out of range, allowed 1 to 4096; ignored";
        QTest::newRow("batch") << "Batch: 5000"
                               << "is out of range, allowed 0 to 1024; ignored";
        QTest::newRow("cfg huge") << "CFG scale: 1e400"
                                  << "is out of range, allowed 0 to 100; ignored";
        QTest::newRow("cfg negative") << "CFG scale: -7"
                                      << "is out of range, allowed 0 to 100; ignored";
        QTest::newRow("cfg inf") << "CFG scale: inf"
                                 << "is out of range, allowed 0 to 100; ignored";
        QTest::newRow("cfg nan") << "CFG scale: nan"
                                 << "is not a number; ignored";
        QTest::newRow("upscale") << "Upscale: 0.5"
                                 << "is out of range, allowed 1 to 16; ignored";
        QTest::newRow("strength") << "Denoising strength: 0"
                                  << "is out of range, allowed above 0 up to 1; ignored";
        QTest::newRow("seed beyond 64 bits") << "Seed: 18446744073709551616"
                                             << "is out of range, allowed 0 to 18446744073709551615; ignored";
    }

    void numbersOutOfRangeAreListedWithTheRange() {
        QFETCH(QString, setting);
        QFETCH(QString, note);
        RunConfig c;
        const ImportedSettings imported = applyInfotext(
            parseInfotext("a cat\nSampler: Euler, Schedule type: Automatic, " + setting.toStdString()), c);
        QCOMPARE(joined(messages(imported)), "'" + setting.toStdString() + "' " + note.toStdString() + "\n");
        const RunConfig defaults;
        QCOMPARE(c.steps, defaults.steps);
        QCOMPARE(c.width, defaults.width);
        QCOMPARE(c.cfgScale, defaults.cfgScale);
        QCOMPARE(c.seed, defaults.seed);
        QCOMPARE(c.tile, defaults.tile);
        // The range follows the run's training timesteps.
        RunConfig shortSchedule;
        shortSchedule.schedulerOptions.numTrainTimesteps = 50;
        EXPECT_MESSAGE(
            joined(messages(applyInfotext(parseInfotext("a\nSteps: 60, Seed: 1, Size: 64x64"), shortSchedule))),
            "'Steps: 60' is out of range, allowed 1 to 50; ignored");
    }

    void comfyNumbersOutOfRange() {
        RunConfig c;
        const ImportedSettings imported = applyComfyPrompt(
            R"({"1": {"class_type": "KSampler", "inputs": {"seed": 18446744073709551615, "steps": 2147483648,
                "cfg": 1e300, "sampler_name": "euler", "scheduler": "normal", "denoise": 1,
                "latent_image": ["2", 0]}}, "2": {"class_type": "EmptyLatentImage",
                "inputs": {"width": 1e9, "height": 64}}})",
            c, "params-from");
        const std::string all = joined(messages(imported));
        EXPECT_MESSAGE(all, "'steps: 2147483648' is out of range, allowed 1 to 1000; ignored");
        EXPECT_MESSAGE(all, "'cfg: 1e+300' is out of range, allowed 0 to 100; ignored");
        EXPECT_MESSAGE(all, "is out of range, allowed 1 to 16384; ignored");
        QCOMPARE(c.seed, std::uint64_t{18446744073709551615ULL});  // the largest seed is a seed
        QCOMPARE(c.steps, RunConfig{}.steps);
        QCOMPARE(c.width, RunConfig{}.width);
        QCOMPARE(c.height, 64);
    }

    void roundTripOnEveryMappedField_data() {
        QTest::addColumn<int>("variant");
        for (int v = 0; v < 6; ++v) QTest::newRow(std::to_string(v).c_str()) << v;
    }
    void roundTripOnEveryMappedField() {
        QFETCH(int, variant);
        RunConfig c = sdConfig();
        switch (variant) {
            case 0:
                break;
            case 1:
                c.scheduler = SchedulerKind::DDIM;
                c.schedulerOptions.eta = 0.125f;
                c.initImage = "in.png";
                c.strength = 0.35;
                c.preserveColor = true;
                c.upscale = 1.5;
                c.upscaleModel = "/home/me/models/ESRGAN/4x-UltraSharp.pth";
                c.cfgScale = 1;
                break;
            case 2:
                c.scheduler = SchedulerKind::Euler;
                c.schedulerOptions.karrasSigmas = false;
                c.prompt = "line one, with: colon\n\"quoted\" line two\n(weight:1.3) \xE7\x8C\xAB";
                c.negativePrompt = "neg\nsecond: line";
                c.seed = 18446744073709551615ULL;
                c.window = BlendWindowKind::Gaussian;
                c.fusion = FusionRule::Noise;
                c.precision = Precision::BF16;
                break;
            case 3:
                c.scheduler = SchedulerKind::EulerAncestral;
                c.negativePrompt.clear();
                c.clipSkip = 1;
                c.overlapFraction = 0.3;
                c.graphs = GraphMode::Tile;
                c.backend = BackendKind::CPU;
                c.sdxlSizeConditioning = SdxlSizeConditioning::Tile;
                break;
            case 4:
                c.scheduler = SchedulerKind::DPMPP2M;
                c.schedulerOptions.karrasSigmas = false;
                c.prompt.clear();
                c.cfgScale = 12.25;
                c.clipSkip = 12;
                c.window = BlendWindowKind::None;
                break;
            default:
                c.scheduler = SchedulerKind::DDPM;
                c.prompt = "Negative prompt is a phrase, not a line start";
                c.precision = Precision::FP32;
                c.window = BlendWindowKind::Linear;
        }
        const std::string text = infotext(c, sdExtras());
        RunConfig back;
        const ImportedSettings imported = applyInfotext(parseInfotext(text), back);
        compareMapped(c, back);
        QCOMPARE(joined(messages(imported)),
                 std::string("'Model hash: 6ce0161689' is not applied: Tessera picks the model by its path\n"
                             "'Model: v1-5-pruned-emaonly' is not applied: Tessera picks the model by its path\n"));
    }

    // The comparison above sees every mapped field (else the round trip could not fail).
    void differencesNameEachField() {
        const RunConfig base = sdConfig();
        const std::vector<std::pair<std::string, std::function<void(RunConfig&)>>> changes{
            {"prompt", [](RunConfig& c) { c.prompt += "x"; }},
            {"negative_prompt", [](RunConfig& c) { c.negativePrompt += "x"; }},
            {"steps", [](RunConfig& c) { ++c.steps; }},
            {"scheduler", [](RunConfig& c) { c.scheduler = SchedulerKind::Euler; }},
            {"use_karras_sigmas", [](RunConfig& c) { c.schedulerOptions.karrasSigmas = false; }},
            {"cfg", [](RunConfig& c) { c.cfgScale += 0.5; }},
            {"seed", [](RunConfig& c) { ++c.seed; }},
            {"width", [](RunConfig& c) { c.width += 8; }},
            {"height", [](RunConfig& c) { c.height += 8; }},
            {"clip_skip", [](RunConfig& c) { ++c.clipSkip; }},
            {"tile", [](RunConfig& c) { c.tile += 8; }},
            {"overlap", [](RunConfig& c) { c.overlapPx += 8; }},
            {"window", [](RunConfig& c) { c.window = BlendWindowKind::Linear; }},
            {"fusion", [](RunConfig& c) { c.fusion = FusionRule::Noise; }},
            {"batch", [](RunConfig& c) { ++c.tileBatch; }},
            {"graphs", [](RunConfig& c) { c.graphs = GraphMode::Off; }},
            {"precision", [](RunConfig& c) { c.precision = Precision::BF16; }},
            {"backend", [](RunConfig& c) { c.backend = BackendKind::CPU; }},
            {"upscale", [](RunConfig& c) { c.upscale = 3; }},
            {"upscale_model", [](RunConfig& c) { c.upscaleModel = "4x-UltraSharp"; }},
            {"preserve_color", [](RunConfig& c) { c.preserveColor = true; }},
            {"sdxl_size_conditioning", [](RunConfig& c) { c.sdxlSizeConditioning = SdxlSizeConditioning::Tile; }},
        };
        for (const auto& [field, change] : changes) {
            RunConfig other = base;
            change(other);
            QCOMPARE(joined(mappedFieldDifferences(base, other)), field + "\n");
        }
        RunConfig img2img = base, ddim = base;
        img2img.initImage = "in.png";
        RunConfig strength = img2img;
        strength.strength = 0.9;
        QCOMPARE(joined(mappedFieldDifferences(img2img, strength)), std::string("strength\n"));
        ddim.scheduler = SchedulerKind::DDIM;
        RunConfig eta = ddim;
        eta.schedulerOptions.eta = 0.5f;
        QCOMPARE(joined(mappedFieldDifferences(ddim, eta)), std::string("eta\n"));
    }

    // An image-to-image upscale with an upscale model names it as A1111's img2img "SD upscale"
    // script does (scripts/sd_upscale.py): the file's name without folder and extension, no hash.
    void upscaleModelIsNamedAsA1111NamesUpscalers() {
        RunConfig c;
        c.initImage = "in.png";
        c.upscale = 2;
        c.upscaleModel = "/home/me/models/ESRGAN/4x-UltraSharp.pth";
        const std::string text = infotext(c, infotextExtras(c));
        QVERIFY2(text.find(", Upscale: 2, SD upscale upscaler: 4x-UltraSharp, ") != std::string::npos, text.c_str());
        QVERIFY2(text.find("/home/me") == std::string::npos, text.c_str());
        c.upscaleModel = "realesr-general-x4v3.safetensors";
        QVERIFY(infotext(c, infotextExtras(c)).find("SD upscale upscaler: realesr-general-x4v3, ") !=
                std::string::npos);
        c.upscaleModel = "4x_NMKD-Siax_200k";  // a name: kept whole
        QVERIFY(infotext(c, infotextExtras(c)).find("SD upscale upscaler: 4x_NMKD-Siax_200k, ") != std::string::npos);
        c.upscaleModel.clear();
        QVERIFY(infotext(c, infotextExtras(c)).find("upscaler") == std::string::npos);
    }

    // The upscale model alone (tessera-cli upscale) writes what A1111's extras tab writes
    // (scripts/postprocessing_upscale.py), nothing of sampling; its record says so.
    void upscaleOnlyWritesTheExtrasTabsKeys() {
        RunRecord r;
        r.config.initImage = "photo.png";
        r.config.upscale = 4;
        r.config.upscaleModel = "models/upscale_models/4x-UltraSharp.safetensors";
        QVERIFY(!infotextExtras(r).upscaleOnly);
        r.upscaleModel = UpscaleModelRecord{};
        QVERIFY(!infotextExtras(r).upscaleOnly);
        r.upscaleModel->alone = true;
        QVERIFY(infotextExtras(r).upscaleOnly);
        QCOMPARE(infotext(r.config, infotextExtras(r)),
                 "Postprocess upscale by: 4, Postprocess upscaler: 4x-UltraSharp, " + kVersion);
        r.config.upscale = 2.5;
        const std::string text = infotext(r.config, infotextExtras(r));
        QCOMPARE(text, "Postprocess upscale by: 2.5, Postprocess upscaler: 4x-UltraSharp, " + kVersion);
        // Read back: the upscaler and the factor, nothing left over.
        RunConfig back;
        const ImportedSettings imported = applyInfotext(parseInfotext(text), back);
        QCOMPARE(back.upscaleModel, std::string("4x-UltraSharp"));
        QCOMPARE(back.upscale, 2.5);
        QCOMPARE(joined(messages(imported)), std::string());
        QVERIFY(std::find(imported.fields.begin(), imported.fields.end(), "upscale_model") != imported.fields.end());
        QVERIFY(std::find(imported.fields.begin(), imported.fields.end(), "upscale") != imported.fields.end());
    }

    // Every key A1111 and its Ultimate SD Upscale extension name an upscaler by is read; "None" is
    // no model, a resize filter is no model, a path is not taken from a file that came from
    // elsewhere, and A1111's built-in Real-ESRGAN names are looked up as the files they download.
    void upscalerKeysAreReadBack_data() {
        QTest::addColumn<QString>("line");
        QTest::addColumn<QString>("model");  // upscale_model after reading ("-": unchanged)
        QTest::addColumn<QString>("notes");
        QTest::newRow("sd upscale") << "Steps: 5, Seed: 1, SD upscale overlap: 64, SD upscale upscaler: 4x-UltraSharp"
                                    << "4x-UltraSharp"
                                    << "'SD upscale overlap: 64' is not supported; ignored\n";
        QTest::newRow("ultimate") << "Steps: 5, Seed: 1, Ultimate SD upscale upscaler: 4x_foolhardy_Remacri"
                                  << "4x_foolhardy_Remacri"
                                  << "";
        QTest::newRow("postprocess") << "Postprocess upscale by: 2, Postprocess upscaler: SPAN x4, Version: v1.10.1"
                                     << "SPAN x4"
                                     << "";
        QTest::newRow("none") << "Steps: 5, Seed: 1, SD upscale upscaler: None"
                              << ""
                              << "";
        QTest::newRow("built-in") << "Steps: 5, Seed: 1, SD upscale upscaler: R-ESRGAN 4x+"
                                  << "RealESRGAN_x4plus"
                                  << "";
        QTest::newRow("lanczos") << "Steps: 5, Seed: 1, SD upscale upscaler: Lanczos"
                                 << "-"
                                 << "'SD upscale upscaler: Lanczos' is a resize filter, not an upscale model (Tessera "
                                    "resizes with Catmull-Rom and area averaging); ignored\n";
        QTest::newRow("path") << "Steps: 5, Seed: 1, Postprocess upscaler: \"../../etc/x\""
                              << "-"
                              << "'Postprocess upscaler: ../../etc/x' is not an upscale model's name; ignored\n";
        QTest::newRow("hidden") << "Steps: 5, Seed: 1, Postprocess upscaler: .x"
                                << "-"
                                << "'Postprocess upscaler: .x' is not an upscale model's name; ignored\n";
    }
    void upscalerKeysAreReadBack() {
        QFETCH(QString, line);
        QFETCH(QString, model);
        QFETCH(QString, notes);
        RunConfig c;
        c.upscaleModel = "before";
        const ImportedSettings imported = applyInfotext(parseInfotext(line.toStdString()), c);
        QCOMPARE(QString::fromStdString(c.upscaleModel), model == "-" ? QString("before") : model);
        QCOMPARE(QString::fromStdString(joined(messages(imported))), notes);
    }

    // ---- hostile input ----

    void hostileTextIsLinear() {
        QElapsedTimer timer;
        timer.start();
        // 1 MB of key characters without a colon: every start fails (Python's re is quadratic here).
        std::string noColon;
        while (noColon.size() < 1000000) noColon += "word-run / more ";
        ParsedInfotext p = parseInfotext("prompt\n" + noColon);
        QCOMPARE(p.prompt.size(), std::string("prompt\n").size() + noColon.size() - 1);  // stripped of the last space
        // 1 MB line of 10,000 keys: all read, in order.
        std::string many;
        for (int i = 0; i < 10000; ++i) many += "Key number " + std::to_string(i) + ": " + std::string(80, 'v') + ", ";
        p = parseInfotext(many);
        QCOMPARE(p.params.size(), std::size_t{10000} + 19);  // and A1111's defaults
        QCOMPARE(p.params[9999].key, std::string("Key number 9999"));
        RunConfig c;
        QCOMPARE(applyInfotext(p, c).unmapped.size(), std::size_t{10000});
        // A 1 MB quoted value that never closes, and runs of quotes and backslashes.
        p = parseInfotext("Steps: 3, Seed: 4, Long: \"" + std::string(1000000, 'x'));
        QCOMPARE(valueOf(p, "Long").size(), std::size_t{1000001});
        p = parseInfotext("Aa: 1, Bb: 2, Cc: " + std::string(500000, '"') + std::string(500000, '\\'));
        QCOMPARE(valueOf(p, "Cc").size(), std::size_t{1000000});
        QCOMPARE(valueOf(p, "A"), std::string("<absent>"));  // a key is two characters or more
        qInfo("four 1 MB texts parsed and mapped in %lld ms", static_cast<long long>(timer.elapsed()));
        QVERIFY2(timer.elapsed() < 20000, "parsing is not linear");
    }

    void unbalancedQuotes() {
        const ParsedInfotext p =
            parseInfotext("Steps: \"20, Sampler: \"Euler a, Seed: 1\", CFG scale: \"7\\\", Size: 64x64\", Tile: \"\"");
        QCOMPARE(valueOf(p, "Steps"), std::string("\"20"));
        // A quote closes the string only where a comma or the end follows: Sampler takes "Seed: 1".
        QCOMPARE(valueOf(p, "Sampler"), std::string("Euler a, Seed: 1"));
        QCOMPARE(valueOf(p, "Seed"), std::string("<absent>"));
        QCOMPARE(valueOf(p, "CFG scale"), std::string("7\", Size: 64x64"));  // an escaped quote does not close
        QCOMPARE(valueOf(p, "Tile"), std::string(""));                       // "" decodes to nothing
        RunConfig c;
        const ImportedSettings imported = applyInfotext(p, c);
        QCOMPARE(imported.unmapped.size(), std::size_t{4});
        for (const UnmappedSetting& u : imported.unmapped) QVERIFY(isValidUtf8(u.message()));
    }

    void invalidUtf8AndControlsInMessages() {
        RunConfig c;
        const ImportedSettings imported = applyInfotext(
            parseInfotext("Steps: 1, Seed: 2, Te\xFFrm: \x1b[31mred\x07, Long: " + std::string(5000, 'z')), c);
        QCOMPARE(imported.unmapped.size(), std::size_t{2});
        for (const UnmappedSetting& u : imported.unmapped) {
            const std::string m = u.message();
            QVERIFY(isValidUtf8(m));
            QVERIFY(m.size() < 300);
            QVERIFY2(m.find('\x1b') == std::string::npos, m.c_str());
        }
    }

    // ---- ComfyUI ----

    void comfyDefaultGraph() {
        RunConfig c;
        const ImportedSettings imported = applyComfyPrompt(kComfyDefault, c, "params-from");
        QCOMPARE(c.seed, std::uint64_t{156680208700286});
        QCOMPARE(c.steps, 20);
        QCOMPARE(c.cfgScale, 8.0);
        QCOMPARE(n(c.scheduler), n(SchedulerKind::Euler));
        QVERIFY(!c.schedulerOptions.karrasSigmas);
        QCOMPARE(c.prompt, std::string("beautiful scenery nature glass bottle landscape, , purple galaxy bottle,"));
        QCOMPARE(c.negativePrompt, std::string("text, watermark"));
        QCOMPARE(c.width, 512);
        QCOMPARE(c.height, 768);
        QCOMPARE(joined(messages(imported)),
                 std::string("'ckpt_name: v1-5-pruned-emaonly.safetensors' is not applied: Tessera picks the model by "
                             "its path\n"));
    }

    void comfyAdvancedHiresGraph() {
        // KSamplerAdvanced base pass with dpmpp_2m karras, CLIPSetLastLayer -2, a ControlNet on the
        // positive side, a LoRA on the model, then a hires pass (second sampler), a linked seed on it.
        const char* graph = R"({
          "10": {"class_type": "KSampler", "inputs": {"seed": ["20", 0], "steps": 10, "cfg": 5, "sampler_name": "euler",
                 "scheduler": "normal", "denoise": 0.5, "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0],
                 "latent_image": ["11", 0]}},
          "11": {"class_type": "LatentUpscale", "inputs": {"samples": ["3", 0]}},
          "3": {"class_type": "KSamplerAdvanced", "inputs": {"add_noise": "enable", "noise_seed": 42, "steps": 30,
                "cfg": 6.5, "sampler_name": "dpmpp_2m", "scheduler": "karras", "start_at_step": 0, "end_at_step": 10000,
                "return_with_leftover_noise": "disable", "model": ["12", 0], "positive": ["13", 0],
                "negative": ["7", 0], "latent_image": ["5", 0]}},
          "12": {"class_type": "LoraLoader", "inputs": {"model": ["4", 0], "clip": ["4", 1], "lora_name": "x.safetensors"}},
          "13": {"class_type": "ControlNetApply", "inputs": {"conditioning": ["6", 0], "strength": 1}},
          "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd21.safetensors"}},
          "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 768, "height": 512, "batch_size": 1}},
          "14": {"class_type": "CLIPSetLastLayer", "inputs": {"clip": ["4", 1], "stop_at_clip_layer": -2}},
          "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a castle", "clip": ["14", 0]}},
          "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "fog", "clip": ["14", 0]}},
          "20": {"class_type": "PrimitiveNode", "inputs": {"value": 1}}})";
        RunConfig c;
        const ImportedSettings imported = applyComfyPrompt(graph, c, "params-from");
        QCOMPARE(c.seed, std::uint64_t{42});
        QCOMPARE(c.steps, 30);
        QCOMPARE(c.cfgScale, 6.5);
        QCOMPARE(n(c.scheduler), n(SchedulerKind::DPMPP2M));
        QVERIFY(c.schedulerOptions.karrasSigmas);
        QCOMPARE(c.prompt, std::string("a castle"));
        QCOMPARE(c.negativePrompt, std::string("fog"));
        QCOMPARE(c.clipSkip, 2);
        QCOMPARE(c.width, 768);
        QCOMPARE(c.height, 512);
        QCOMPARE(joined(messages(imported)),
                 std::string("'positive through node 13 (ControlNetApply)' is not supported; ignored\n"
                             "'model through node 12 (LoraLoader)' is not supported; ignored\n"
                             "'ckpt_name: sd21.safetensors' is not applied: Tessera picks the model by its path\n"
                             "'a second sampler, node 10 (KSampler)' is not supported; ignored\n"));
    }

    void comfyOddGraphs() {
        // A conditioning cycle and a sampler without links: bounded, listed, no throw.
        const char* cyclic = R"({"1": {"class_type": "KSampler", "inputs": {"seed": 1, "steps": 2, "cfg": 1,
            "sampler_name": "heun", "scheduler": "simple", "denoise": 1, "positive": ["2", 0], "negative": "x",
            "latent_image": ["9", 0], "model": ["1", 0]}},
            "2": {"class_type": "ConditioningSetArea", "inputs": {"conditioning": ["3", 0]}},
            "3": {"class_type": "ConditioningSetArea", "inputs": {"conditioning": ["2", 0]}}})";
        RunConfig c;
        const ImportedSettings imported = applyComfyPrompt(cyclic, c, "params-from");
        QCOMPARE(c.steps, 2);
        const std::string all = joined(messages(imported));
        EXPECT_MESSAGE(all, "'sampler_name: \"heun\", scheduler: \"simple\"' is not supported; ignored");
        EXPECT_MESSAGE(all, "is not a CLIPTextEncode node");
        EXPECT_MESSAGE(all, "image-to-image from a ComfyUI graph is not supported");
        QVERIFY2(imported.unmapped.size() <= 8, all.c_str());  // each cycle is reported once and cut
        // Values of the wrong type are listed, not thrown.
        RunConfig d;
        const ImportedSettings wrong = applyComfyPrompt(
            R"({"1": {"class_type": "KSampler", "inputs": {"seed": -1, "steps": "many", "cfg": null,
                "sampler_name": 3, "scheduler": [], "denoise": "x"}}, "2": 7, "3": {"class_type": 5}})",
            d, "params-from");
        EXPECT_MESSAGE(joined(messages(wrong)),
                       "'seed: -1' is out of range, allowed 0 to 18446744073709551615; ignored");
        EXPECT_MESSAGE(joined(messages(wrong)), "'steps: \"many\"' is not a whole number; ignored");
        EXPECT_MESSAGE(joined(messages(wrong)), "'cfg: null' is not a number; ignored");
        QCOMPARE(d.seed, RunConfig{}.seed);
        // No sampler at all.
        EXPECT_MESSAGE(joined(messages(applyComfyPrompt(R"({"1": {"class_type": "SaveImage"}})", d, "params-from"))),
                       "has no KSampler or KSamplerAdvanced node");
    }

    void comfyBadJsonIsRefused() {
        RunConfig c;
        EXPECT_MESSAGE(errorOf([&] { applyComfyPrompt("[1, 2]", c, "params-from"); }),
                       "[params-from] params-from: its ComfyUI prompt chunk is [1,2], not a JSON object of nodes");
        EXPECT_MESSAGE(errorOf([&] { applyComfyPrompt("{\"3\": {", c, "params-from"); }), "[params-from]");
        EXPECT_MESSAGE(errorOf([&] { applyComfyPrompt(std::string(100000, '['), c, "params-from"); }), "[params-from]");
    }
};

QTEST_GUILESS_MAIN(TestInfotext)
#include "tst_infotext.moc"
