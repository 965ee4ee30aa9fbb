// A separate VAE in A1111's infotext (core/run/Infotext.h; A1111 processing.py create_infotext,
// shared_options.py "sd_vae" with infotext "VAE") and in the manifest (core/run/RunRecordIO.h):
// "VAE hash" (10 hex of the file's SHA-256) and "VAE" (the file's name with its extension) after
// "Model", read back onto RunConfig::vae.
#include <QtTest>

#include <string>

#include "core/run/Infotext.h"
#include "core/run/RunRecord.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;

namespace {

RunRecord recordWithVae() {
    RunRecord record;
    record.config.model = "/m/Stable-diffusion/sd15.safetensors";
    record.config.prompt = "a fox";
    record.config.vae = "mse";
    record.modelName = "sd15";
    record.modelHash = "0123456789abcdef";
    record.vaeFile = VaeFileRecord{"vae-ft-mse-840000-ema-pruned.safetensors",
                                   "735e4c3a447a3255760d7f86845f09f937809baa529c17370d83e4c3758f3c75", "LDM", false};
    return record;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

class TestVaeInfotext : public QObject {
    Q_OBJECT

private slots:
    void writtenAfterTheModel() {
        const RunRecord record = recordWithVae();
        const std::string text = infotext(record.config, infotextExtras(record));
        QVERIFY2(contains(text,
                          ", Model hash: 0123456789, Model: sd15, VAE hash: 735e4c3a44, "
                          "VAE: vae-ft-mse-840000-ema-pruned.safetensors, Tile: "),
                 text.c_str());
        // Known from the configuration alone (a preset, a plan): the name as given, no hash.
        const std::string line = parametersLine(record.config);
        QVERIFY2(contains(line, "VAE: mse, ") && !contains(line, "VAE hash"), line.c_str());
        // No separate VAE: neither key.
        RunRecord plain = record;
        plain.config.vae.clear();
        plain.vaeFile.reset();
        QVERIFY(!contains(infotext(plain.config, infotextExtras(plain)), "VAE"));
    }

    void readBack() {
        const RunRecord record = recordWithVae();
        RunConfig config;
        const ImportedSettings imported =
            applyInfotext(parseInfotext(infotext(record.config, infotextExtras(record))), config);
        QCOMPARE(config.vae, std::string("vae-ft-mse-840000-ema-pruned.safetensors"));
        QVERIFY(std::find(imported.fields.begin(), imported.fields.end(), "vae") != imported.fields.end());
        for (const UnmappedSetting& u : imported.unmapped) QVERIFY2(!contains(u.shown, "VAE"), u.message().c_str());
        QVERIFY(mappedFieldDifferences(config, config).empty());
        RunConfig other = config;
        other.vae = "/elsewhere/vae-ft-mse-840000-ema-pruned.safetensors";  // the same name
        QVERIFY(mappedFieldDifferences(config, other).empty());
        other.vae = "sdxl_vae.safetensors";
        QCOMPARE(mappedFieldDifferences(config, other), std::vector<std::string>{"vae"});

        // "None" is the checkpoint's own; a path is no name; a hash alone is listed.
        RunConfig c;
        c.vae = "x.pt";
        (void)applyInfotext(parseInfotext("p\nSteps: 20, Seed: 1, VAE: None"), c);
        QVERIFY(c.vae.empty());
        const ImportedSettings path = applyInfotext(parseInfotext("p\nSteps: 20, Seed: 1, VAE: ../../etc/x.pt"), c);
        QVERIFY(c.vae.empty());
        QCOMPARE(path.unmapped.size(), std::size_t{1});
        QVERIFY2(contains(path.unmapped[0].message(), "is not a VAE's name; ignored"),
                 path.unmapped[0].message().c_str());
        const ImportedSettings hash = applyInfotext(parseInfotext("p\nSteps: 20, Seed: 1, VAE hash: 735e4c3a44"), c);
        QCOMPARE(hash.unmapped.size(), std::size_t{1});
        QVERIFY2(contains(hash.unmapped[0].message(), "Tessera picks the VAE by its name"),
                 hash.unmapped[0].message().c_str());
    }

    void manifestKeepsIt() {
        RunRecord record = recordWithVae();
        record.vaeFile->pickle = true;
        record.modelPickle = true;
        const nlohmann::json json = manifestJson(record);
        QCOMPARE(json["vae_file"]["name"].get<std::string>(), std::string("vae-ft-mse-840000-ema-pruned.safetensors"));
        QCOMPARE(json["config"]["vae"].get<std::string>(), std::string("mse"));
        const RunRecord back = runRecordFromManifest(json);
        QVERIFY(back.vaeFile.has_value() && back.modelPickle);
        QCOMPARE(back.vaeFile->sha256, record.vaeFile->sha256);
        QCOMPARE(back.vaeFile->layout, std::string("LDM"));
        QVERIFY(back.vaeFile->pickle);
        QCOMPARE(back.config.vae, std::string("mse"));
        QVERIFY(contains(describe(*back.vaeFile),
                         "vae: vae-ft-mse-840000-ema-pruned.safetensors (LDM names, a PyTorch "
                         "checkpoint read without executing it, VAE hash 735e4c3a44)"));
        // An older manifest has neither.
        nlohmann::json old = json;
        old.erase("vae_file");
        old.erase("model_pickle");
        QVERIFY(!runRecordFromManifest(old).vaeFile && !runRecordFromManifest(old).modelPickle);
    }
};

QTEST_GUILESS_MAIN(TestVaeInfotext)
#include "tst_vaeinfotext.moc"
