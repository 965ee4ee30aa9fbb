// core/UnicodeText: UTF-8 decoding with replacement, general categories, Python's lowercasing
// (Final_Sigma) and NFC. Expected values are Python 3.11's (bytes.decode(errors="replace"),
// str.lower, unicodedata.normalize("NFC")), written out by hand here; the generator's own
// exhaustive comparison with Python is described in tools/make_unicode_tables.py.
#include <QtTest/QtTest>

#include <string>

#include "core/base/UnicodeText.h"

using namespace tessera;
namespace u = tessera::unicode;

Q_DECLARE_METATYPE(std::string)
Q_DECLARE_METATYPE(std::u32string)

class TestUnicodeText : public QObject {
    Q_OBJECT

private slots:
    void decodeReplacesEachMaximalSubpart_data() {
        QTest::addColumn<std::string>("bytes");
        QTest::addColumn<std::u32string>("expected");
        QTest::newRow("stray 0xFF") << std::string(
                                           "a\xff"
                                           "b")
                                    << std::u32string(U"a\uFFFDb");
        QTest::newRow("overlong E0 80 80") << std::string("\xe0\x80\x80") << std::u32string(U"\uFFFD\uFFFD\uFFFD");
        QTest::newRow("truncated 4-byte") << std::string("\xf0\x9f\x98") << std::u32string(U"\uFFFD");
        QTest::newRow("emoji") << std::string("\xf0\x9f\x98\x80") << std::u32string(U"\U0001F600");
        QTest::newRow("surrogate ED A0 80") << std::string("\xed\xa0\x80") << std::u32string(U"\uFFFD\uFFFD\uFFFD");
        QTest::newRow("overlong C0 AF") << std::string("\xc0\xaf") << std::u32string(U"\uFFFD\uFFFD");
        QTest::newRow("above U+10FFFF") << std::string("\xf4\x90\x80\x80")
                                        << std::u32string(U"\uFFFD\uFFFD\uFFFD\uFFFD");
        QTest::newRow("truncated euro") << std::string("\xe2\x82") << std::u32string(U"\uFFFD");
        QTest::newRow("continuations") << std::string("\x80\x80") << std::u32string(U"\uFFFD\uFFFD");
        QTest::newRow("e-acute then lead byte") << std::string("\xc3\xa9\xc3") << std::u32string(U"\u00E9\uFFFD");
        QTest::newRow("NUL kept") << std::string("a\0b", 3) << std::u32string(U"a\0b", 3);
    }
    void decodeReplacesEachMaximalSubpart() {
        QFETCH(std::string, bytes);
        QFETCH(std::u32string, expected);
        QVERIFY(u::decodeUtf8(bytes) == expected);
        // Round trip of what was decoded is the valid UTF-8 of the same code points.
        QVERIFY(u::decodeUtf8(u::encodeUtf8(expected)) == expected);
    }

    void categoriesAndClasses() {
        QCOMPARE(u::category(U'A'), u::Category::Lu);
        QCOMPARE(u::category(0x732B), u::Category::Lo);  // 猫
        QCOMPARE(u::category(0x0301), u::Category::Mn);
        QCOMPARE(u::category(0x1F600), u::Category::So);
        QCOMPARE(u::category(0x0378), u::Category::Cn);    // unassigned
        QCOMPARE(u::category(0x110000), u::Category::Cn);  // out of range
        QVERIFY(u::isLetter(0x02B0));                      // Lm
        QVERIFY(u::isNumber(0x2460) && u::isNumber(0x216B) && u::isNumber(0x0663));
        QVERIFY(!u::isLetter(U'_') && u::isPythonWordChar(U'_'));
        QVERIFY(u::isWhiteSpace(0x3000) && u::isWhiteSpace(0x85) && !u::isWhiteSpace(0x200B) && !u::isWhiteSpace(0x1C));
        QVERIFY(u::isPythonSpace(0x1C) && u::isPythonSpace(0x1F));
        QVERIFY(u::isControlLike(0x200D) && u::isControlLike(0x07) && u::isControlLike(0xE000));
        QCOMPARE(u::decimalValue(U'7'), 7);
        QCOMPARE(u::decimalValue(0x0663), 3);   // ARABIC-INDIC DIGIT THREE
        QCOMPARE(u::decimalValue(0x1D7D9), 1);  // MATHEMATICAL DOUBLE-STRUCK DIGIT ONE
        QCOMPARE(u::decimalValue(0x2460), -1);  // circled one is No, not a decimal digit
        QCOMPARE(u::dataVersion(), std::string_view("14.0.0"));
    }

    void lowercase() {
        std::u32string one;
        u::appendLowercase(one, 0x130);
        QVERIFY(one == U"i\u0307");
        QVERIFY(u::lowercasePython(U"\u039F\u0394\u039F\u03A3") == U"\u03BF\u03B4\u03BF\u03C2");  // final sigma
        QVERIFY(u::lowercasePython(U"\u03A3") == U"\u03C3");                                      // alone: not final
        QVERIFY(u::lowercasePython(U"\u03A3A") == U"\u03C3a");
        QVERIFY(u::lowercasePython(U"A\u03A3.") == U"a\u03C2.");    // '.' is case-ignorable
        QVERIFY(u::lowercasePython(U"A\u03A3'B") == U"a\u03C3'b");  // ignorable, then cased
        QVERIFY(u::lowercasePython(U"A\u03A3 B") == U"a\u03C2 b");
        std::u32string charWise;
        for (char32_t c : std::u32string_view(U"\u039F\u0394\u039F\u03A3")) u::appendLowercase(charWise, c);
        QVERIFY(charWise == U"\u03BF\u03B4\u03BF\u03C3");
    }

    void nfc_data() {
        QTest::addColumn<std::u32string>("input");
        QTest::addColumn<std::u32string>("expected");
        QTest::newRow("compose e acute") << std::u32string(U"e\u0301") << std::u32string(U"\u00E9");
        QTest::newRow("angstrom sign") << std::u32string(U"\u212B") << std::u32string(U"\u00C5");
        QTest::newRow("ohm sign") << std::u32string(U"\u2126") << std::u32string(U"\u03A9");
        QTest::newRow("reorder dot below") << std::u32string(U"a\u0302\u0323") << std::u32string(U"\u1EAD");
        QTest::newRow("q dots stay") << std::u32string(U"q\u0307\u0323") << std::u32string(U"q\u0323\u0307");
        QTest::newRow("d dot above dot below") << std::u32string(U"\u1E0B\u0323") << std::u32string(U"\u1E0D\u0307");
        QTest::newRow("hangul LV T") << std::u32string(U"\u1100\u1161\u11A8") << std::u32string(U"\uAC01");
        QTest::newRow("hangul syllable stays") << std::u32string(U"\uAC01") << std::u32string(U"\uAC01");
        QTest::newRow("excluded U+0958") << std::u32string(U"\u0958") << std::u32string(U"\u0915\u093C");
        QTest::newRow("compat ideograph") << std::u32string(U"\uF900") << std::u32string(U"\u8C48");
        QTest::newRow("ligature untouched") << std::u32string(U"\uFB01") << std::u32string(U"\uFB01");
        QTest::newRow("leading mark") << std::u32string(U"\u0301e") << std::u32string(U"\u0301e");
        QTest::newRow("ascii") << std::u32string(U"plain text") << std::u32string(U"plain text");
    }
    void nfc() {
        QFETCH(std::u32string, input);
        QFETCH(std::u32string, expected);
        QVERIFY(u::nfc(input) == expected);
    }
};

QTEST_APPLESS_MAIN(TestUnicodeText)
#include "tst_unicodetext.moc"
