// core/BoundedInput's JSON parsing: only InputFileError escapes it, with a short message,
// for the cases the fuzz targets found (tests/fuzz) and for every committed JSON fuzz seed,
// so the ordinary and sanitizer builds replay the seeds too.
#include <QtTest>

#include <QDir>
#include <QFile>

#include <string>

#include "core/base/BoundedInput.h"

using namespace tessera;

namespace {

// What tests/fuzz/FuzzSupport.h checkRejection demands of every message.
void verifyReadable(const std::string& message) {
    QVERIFY2(!message.empty(), "empty message");
    QVERIFY2(message.size() <= 1024, message.substr(0, 300).c_str());
    QVERIFY2(isValidUtf8(message), excerpt(message, 300).c_str());
    for (const char c : message)
        QVERIFY2(static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t', excerpt(message, 300).c_str());
}

}  // namespace

class TestBoundedInput : public QObject {
    Q_OBJECT

private slots:
    // nlohmann throws out_of_range (not parse_error) for a number beyond a double; it escaped
    // parseBoundedJson, so a preset holding 1e400 ended the CLI with exit 1, not 2 (found by
    // fuzz_run_settings).
    void numberOutOfRange_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("shown");
        QTest::newRow("1e400") << R"({"width": 1e400})"
                               << "1e400";
        QTest::newRow("negative") << "[1, -2.5e999]"
                                  << "-2.5e999";
        QTest::newRow("long digits") << QString("1") + QString(5000, '0') + ".5"
                                     << "10000000";
    }
    void numberOutOfRange() {
        QFETCH(QString, text);
        QFETCH(QString, shown);
        try {
            (void)parseBoundedJson(text.toStdString(), "preset", "'p.json'");
            QFAIL("an out-of-range number was accepted");
        } catch (const InputFileError& e) {
            QCOMPARE(QString::fromStdString(e.field()), QString("preset"));
            const std::string message = e.what();
            QVERIFY2(message.rfind("preset: 'p.json': not valid JSON: ", 0) == 0, message.c_str());
            QVERIFY2(message.find("number overflow parsing '" + shown.toStdString()) != std::string::npos,
                     message.c_str());
            verifyReadable(message);
        }
    }

    // nlohmann stops at a NUL byte as at the end of input, so a damaged file "{...}\0junk"
    // was accepted as the JSON before the NUL (found by fuzz_bounded_input).
    void nulByteRefused_data() {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<int>("byte");
        const QByteArray nul(1, '\0');
        QTest::newRow("after the value") << QByteArray(R"({"width": 512})") + nul + "junk]]]" << 15;
        QTest::newRow("inside a value") << QByteArray("[1,") + nul + " 2]" << 4;
        QTest::newRow("first byte") << nul << 1;
    }
    void nulByteRefused() {
        QFETCH(QByteArray, text);
        QFETCH(int, byte);
        try {
            (void)parseBoundedJson(std::string_view(text.constData(), text.size()), "preset", "'p.json'");
            QFAIL("text holding a NUL byte was accepted");
        } catch (const InputFileError& e) {
            const std::string message = e.what();
            QVERIFY2(message.find("at byte " + std::to_string(byte) + ": a NUL byte") != std::string::npos,
                     message.c_str());
            verifyReadable(message);
        }
    }

    // Large integers that fit a double are still numbers (nlohmann reads them as floats).
    void integerBeyondUint64IsAFloat() {
        const nlohmann::json j = parseBoundedJson("184467440737095516160", "preset", "'p.json'");
        QVERIFY(j.is_number_float());
        QCOMPARE(j.get<double>(), 184467440737095516160.0);
    }

    // Every committed JSON fuzz seed parses or is refused with InputFileError and a readable
    // message (the seeds include deep nesting, huge numbers, invalid UTF-8, raw controls).
    void fuzzSeeds_data() {
        QTest::addColumn<QString>("path");
        for (const char* target : {"fuzz_run_settings", "fuzz_manifest", "fuzz_model_config", "fuzz_bounded_input"}) {
            const QDir dir(QString(TESSERA_SOURCE_DIR) + "/tests/fuzz/corpus/" + target);
            const QStringList files = dir.entryList(QDir::Files, QDir::Name);
            QVERIFY2(!files.isEmpty(), qPrintable(dir.path() + " has no seeds"));
            for (const QString& name : files)
                QTest::newRow(qPrintable(QString(target) + "/" + name)) << dir.filePath(name);
        }
    }
    void fuzzSeeds() {
        QFETCH(QString, path);
        QFile file(path);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QByteArray bytes = file.readAll();
        try {
            const nlohmann::json j =
                parseBoundedJson(std::string_view(bytes.constData(), bytes.size()), "seed", "'seed'");
            QVERIFY(jsonNestingDepth(j.dump()) <= input_limits::kJsonDepth);
        } catch (const InputFileError& e) {
            verifyReadable(e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestBoundedInput)
#include "tst_boundedinput.moc"
