// core/SafeName: the run id grammar (what newRunId makes, nothing else), safe file names, and
// fileInFolder, which never yields a path outside its folder.
#include <QtTest>

#include <string>

#include "core/base/SafeName.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;

class TestSafeName : public QObject {
    Q_OBJECT

private slots:
    void generatedRunIdsAreSafe() {
        // Every id Tessera makes passes, and is a safe file name too.
        for (int i = 0; i < 100; ++i) {
            const std::string id = newRunId();
            QVERIFY2(isSafeRunId(id), id.c_str());
            QVERIFY2(isSafeFileName(id), id.c_str());
            QCOMPARE(id.size(), kRunIdChars);
        }
        QVERIFY(isSafeRunId("20261122-061500-3f2a9c1d"));
        QVERIFY(isSafeRunId("00000000-000000-00000000"));
    }

    void badRunIdsAreRefused_data() {
        QTest::addColumn<QByteArray>("id");
        QTest::newRow("empty") << QByteArray();
        QTest::newRow("traversal") << QByteArray("../../../../../../victim");
        QTest::newRow("traversal of the right length") << QByteArray("../../../../../../../..ab");
        QTest::newRow("absolute") << QByteArray("/tmp/20261122-061500-3f2a9c1d");
        QTest::newRow("separator inside") << QByteArray("20261122/061500-3f2a9c1d");
        QTest::newRow("backslash") << QByteArray("20261122\\061500-3f2a9c1d");
        QTest::newRow("dot-dot in the hex") << QByteArray("20261122-061500-3f2a9..d");
        QTest::newRow("uppercase hex") << QByteArray("20261122-061500-3F2A9C1D");
        QTest::newRow("letters in the date") << QByteArray("2026112x-061500-3f2a9c1d");
        QTest::newRow("short hex") << QByteArray("20261122-061500-3f2a");
        QTest::newRow("long hex") << QByteArray("20261122-061500-3f2a9c1d0");
        QTest::newRow("dash moved") << QByteArray("2026112-2061500-3f2a9c1d");
        QTest::newRow("trailing NUL") << QByteArray("20261122-061500-3f2a9c1d").append('\0');
        QTest::newRow("NUL in place of a digit") << QByteArray("20261122-061500-3f2a9c1\0", 24);
        QTest::newRow("newline") << QByteArray("20261122-061500-3f2a9c1\n");
        QTest::newRow("non-ASCII") << QByteArray("20261122-061500-3f2a9c\xC3\xA9");
        QTest::newRow("trailing space") << QByteArray("20261122-061500-3f2a9c1 ");
    }

    void badRunIdsAreRefused() {
        QFETCH(QByteArray, id);
        QVERIFY(!isSafeRunId(std::string_view(id.constData(), static_cast<std::size_t>(id.size()))));
    }

    void fileNames_data() {
        QTest::addColumn<QByteArray>("name");
        QTest::addColumn<bool>("safe");
        QTest::newRow("run manifest") << QByteArray("20261122-061500-3f2a9c1d.json") << true;
        QTest::newRow("seam file") << QByteArray("20261122-061500-3f2a9c1d.seam.json") << true;
        QTest::newRow("plain") << QByteArray("preset_A-1") << true;
        QTest::newRow("longest") << QByteArray(static_cast<int>(kFileNameChars), 'a') << true;
        QTest::newRow("too long") << QByteArray(static_cast<int>(kFileNameChars) + 1, 'a') << false;
        QTest::newRow("empty") << QByteArray() << false;
        QTest::newRow("dot") << QByteArray(".") << false;
        QTest::newRow("dot-dot") << QByteArray("..") << false;
        QTest::newRow("hidden") << QByteArray(".json") << false;
        QTest::newRow("option-like") << QByteArray("-rf") << false;
        QTest::newRow("separator") << QByteArray("a/b") << false;
        QTest::newRow("traversal") << QByteArray("../victim.json") << false;
        QTest::newRow("absolute") << QByteArray("/etc/passwd") << false;
        QTest::newRow("backslash") << QByteArray("a\\b") << false;
        QTest::newRow("space") << QByteArray("a b") << false;
        QTest::newRow("NUL") << QByteArray("a\0b", 3) << false;
        QTest::newRow("control") << QByteArray("a\x01") << false;
        QTest::newRow("non-ASCII") << QByteArray("caf\xC3\xA9") << false;
    }

    void fileNames() {
        QFETCH(QByteArray, name);
        QFETCH(bool, safe);
        const std::string_view view(name.constData(), static_cast<std::size_t>(name.size()));
        QCOMPARE(isSafeFileName(view), safe);
        if (safe) {
            const std::filesystem::path path = fileInFolder("/srv/history", view, "history");
            QCOMPARE(path.parent_path(), std::filesystem::path("/srv/history"));
            QCOMPARE(path.filename().string(), std::string(view));
            QCOMPARE(path.lexically_normal(), path);
        } else {
            try {
                fileInFolder("/srv/history", view, "history");
                QFAIL("fileInFolder accepted an unsafe name");
            } catch (const ValidationError& e) {
                QCOMPARE(QString::fromStdString(e.field()), QStringLiteral("history"));
                const std::string what = e.what();
                QVERIFY2(what.find("A-Z a-z 0-9 . _ -") != std::string::npos, what.c_str());
                // The message quotes at most a short excerpt, escaped: no raw control bytes.
                QVERIFY2(what.size() < 300, what.c_str());
                for (const char c : what) QVERIFY2(static_cast<unsigned char>(c) >= 0x20, what.c_str());
            }
        }
    }

    void fileInFolderNeedsAFolder() {
        QVERIFY_THROWS_EXCEPTION(ValidationError, fileInFolder("", "20261122-061500-3f2a9c1d.json", "history"));
        // A folder with a trailing separator or dots is kept as given; the name goes directly in it.
        QCOMPARE(fileInFolder("/srv/history/", "a.json", "history").lexically_normal(),
                 std::filesystem::path("/srv/history/a.json"));
        QCOMPARE(fileInFolder("rel/../h", "a.json", "history").lexically_normal(), std::filesystem::path("h/a.json"));
    }
};

QTEST_GUILESS_MAIN(TestSafeName)
#include "tst_safename.moc"
