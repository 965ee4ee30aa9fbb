// Prompting in the window: Ctrl+Up / Ctrl+Down change emphasis weights as
// A1111's javascript/edit-attention.js does (adjustEmphasis, and the keys in the panel's
// editors, one undo step each); the highlighter marks A1111's emphasis syntax as
// core/text/PromptParser.h reads it (brackets, weights, escapes, BREAK, weighted text, and unbalanced
// brackets or bad weights in red, also across lines); the seed's dice rolls a new seed and its
// reuse button puts back the last run's.
#include <QAction>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextLayout>
#include <QToolButton>
#include <QtTest>

#include "TinyRun.h"
#include "core/text/PromptParser.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"
#include "ui/PromptEditor.h"

using namespace tessera;

namespace {

// The format the highlighter gave the character at document position `position`.
QTextCharFormat formatAt(const QTextDocument& document, int position) {
    const QTextBlock block = document.findBlock(position);
    const int inBlock = position - block.position();
    for (const QTextLayout::FormatRange& range : block.layout()->formats())
        if (inBlock >= range.start && inBlock < range.start + range.length) return range.format;
    return {};
}

bool markedRed(const QTextDocument& document, int position) {
    return formatAt(document, position).underlineStyle() == QTextCharFormat::WaveUnderline;
}

// A PromptEditor with `text`, the selection [start, end) (UTF-16).
void select(QPlainTextEdit& edit, int start, int end) {
    QTextCursor cursor = edit.textCursor();
    cursor.setPosition(start);
    cursor.setPosition(end, QTextCursor::KeepAnchor);
    edit.setTextCursor(cursor);
}

}  // namespace

class TestPrompting : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int settingsCount_ = 0;

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void cleanupTestCase() {
        QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history"))
            .removeRecursively();
    }

    void adjustEmphasisFollowsA1111_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<int>("start");
        QTest::addColumn<int>("end");
        QTest::addColumn<bool>("up");
        QTest::addColumn<QString>("expected");
        QTest::addColumn<int>("expectedStart");
        QTest::addColumn<int>("expectedEnd");
        // The word at the cursor is wrapped at 1.0 and raised (edit-attention.js).
        QTest::newRow("word up") << "a red fox" << 4 << 4 << true << "a (red:1.1) fox" << 3 << 6;
        QTest::newRow("word down") << "a red fox" << 3 << 3 << false << "a (red:0.9) fox" << 3 << 6;
        // Inside a weighted block, its weight changes; the selection is the block's text.
        QTest::newRow("block up") << "a (red:1.1) fox" << 5 << 5 << true << "a (red:1.2) fox" << 3 << 6;
        QTest::newRow("float rounding") << "(red:1.2)" << 2 << 2 << true << "(red:1.3)" << 1 << 4;
        QTest::newRow("two digits") << "(red:1.9)" << 2 << 2 << true << "(red:2.0)" << 1 << 4;
        QTest::newRow("to zero") << "(red:0.1)" << 2 << 2 << false << "(red:0.0)" << 1 << 4;
        // Reaching 1.0 removes the parentheses.
        QTest::newRow("back to 1") << "a (red:1.1) fox" << 5 << 5 << false << "a red fox" << 2 << 5;
        // A block of several words, with the cursor on its second word.
        QTest::newRow("phrase block") << "(red fox:1.5), snow" << 6 << 6 << false << "(red fox:1.4), snow" << 1 << 8;
        // The innermost block around the cursor.
        QTest::newRow("nested") << "((red:1.2) fox:1.5)" << 12 << 12 << true << "((red:1.2) fox:1.6)" << 1 << 14;
        // A selection: wrapped without its trailing spaces.
        QTest::newRow("selection") << "red fox  , snow" << 0 << 9 << true << "(red fox:1.1)  , snow" << 1 << 8;
        // A selection that is a block's text keeps its block.
        QTest::newRow("selected block text") << "(red:1.5)" << 1 << 4 << false << "(red:1.4)" << 1 << 4;
        // Text after an emoji (two UTF-16 units): positions as the editor counts them.
        QTest::newRow("after emoji") << QString::fromUtf8("\xF0\x9F\xA6\x8A fox") << 5 << 5 << true
                                     << QString::fromUtf8("\xF0\x9F\xA6\x8A (fox:1.1)") << 4 << 7;
    }

    void adjustEmphasisFollowsA1111() {
        QFETCH(QString, text);
        QFETCH(int, start);
        QFETCH(int, end);
        QFETCH(bool, up);
        QFETCH(QString, expected);
        QFETCH(int, expectedStart);
        QFETCH(int, expectedEnd);
        const EmphasisEdit edit = adjustEmphasis(text, start, end, up);
        QCOMPARE(edit.text, expected);
        QVERIFY(edit.changed);
        QCOMPARE(edit.selectionStart, expectedStart);
        QCOMPARE(edit.selectionEnd, expectedEnd);
        // What was wrapped parses to the weight shown (the run reads the same text).
        const auto segments = parsePromptAttention(edit.text.toStdString());
        QVERIFY(!segments.empty());
    }

    void adjustEmphasisLeavesNothingToChangeAlone() {
        // The cursor between delimiters: no word, nothing changes.
        EmphasisEdit edit = adjustEmphasis(QStringLiteral("a,  b"), 3, 3, true);
        QVERIFY(!edit.changed);
        QCOMPARE(edit.text, QStringLiteral("a,  b"));
        // An empty prompt, and a selection of spaces.
        QVERIFY(!adjustEmphasis(QString(), 0, 0, true).changed);
        QVERIFY(!adjustEmphasis(QStringLiteral("a   b"), 1, 4, true).changed);
        // "(word)" without a weight: A1111 finds no number after it and leaves it.
        QVERIFY(!adjustEmphasis(QStringLiteral("(red), fox"), 2, 2, true).changed);
    }

    void ctrlArrowsEditThePromptInThePanel() {
        ConfigPanel panel;
        RunConfig sd;
        sd.model = "random:sd15";  // the prompt editors are enabled for SD models only
        QVERIFY(testing::setConfigAndWait(panel, sd));
        auto* prompt = panel.findChild<QPlainTextEdit*>(QStringLiteral("promptEdit"));
        QVERIFY(prompt);
        QVERIFY(qobject_cast<PromptEditor*>(prompt));
        QVERIFY(prompt->isEnabled());
        prompt->setPlainText(QStringLiteral("a lighthouse, stormy sea"));
        select(*prompt, 16, 16);  // in "stormy"
        QTest::keyClick(prompt, Qt::Key_Up, Qt::ControlModifier);
        QTest::keyClick(prompt, Qt::Key_Up, Qt::ControlModifier);
        QCOMPARE(prompt->toPlainText(), QStringLiteral("a lighthouse, (stormy:1.2) sea"));
        QCOMPARE(prompt->textCursor().selectedText(), QStringLiteral("stormy"));
        QCOMPARE(panel.config().prompt, std::string("a lighthouse, (stormy:1.2) sea"));
        // The negative prompt too; and Ctrl+Down back to 1 removes the brackets.
        auto* negative = panel.findChild<QPlainTextEdit*>(QStringLiteral("negativePromptEdit"));
        QVERIFY(qobject_cast<PromptEditor*>(negative));
        negative->setPlainText(QStringLiteral("(blurry:1.1)"));
        select(*negative, 3, 3);
        QTest::keyClick(negative, Qt::Key_Down, Qt::ControlModifier);
        QCOMPARE(negative->toPlainText(), QStringLiteral("blurry"));
        // Each change is one undo step.
        QTest::keyClick(prompt, Qt::Key_Z, Qt::ControlModifier);
        QCOMPARE(prompt->toPlainText(), QStringLiteral("a lighthouse, (stormy:1.1) sea"));
        // Up without Ctrl still moves the cursor and changes nothing.
        select(*prompt, 5, 5);
        QTest::keyClick(prompt, Qt::Key_Up);
        QCOMPARE(prompt->toPlainText(), QStringLiteral("a lighthouse, (stormy:1.1) sea"));
    }

    void highlighterMarksEmphasisSyntax() {
        PromptEditor editor;
        // 0         1         2         3
        // 0123456789012345678901234567890123456
        // a (red:1.2) [b] c) BREAK \(d\) (e
        editor.setPlainText(QStringLiteral("a (red:1.2) [b] c) BREAK \\(d\\) (e"));
        const QTextDocument& doc = *editor.document();
        const QTextCharFormat open = PromptHighlighter::formatFor(PromptSyntaxKind::Open);
        QCOMPARE(formatAt(doc, 2).foreground(), open.foreground());   // "("
        QCOMPARE(formatAt(doc, 10).foreground(), open.foreground());  // its ")"
        QCOMPARE(formatAt(doc, 6).foreground(), PromptHighlighter::formatFor(PromptSyntaxKind::Weight).foreground());
        QCOMPARE(formatAt(doc, 9).foreground(), PromptHighlighter::formatFor(PromptSyntaxKind::Weight).foreground());
        // Weighted text: "red" (1.2) tinted, "b" (1/1.1) faded, "a" plain.
        QVERIFY(formatAt(doc, 3).background().style() != Qt::NoBrush);
        QVERIFY(formatAt(doc, 13).fontItalic());
        QCOMPARE(formatAt(doc, 0).background().style(), Qt::NoBrush);
        QVERIFY(!formatAt(doc, 0).fontItalic());
        // ")" that nothing opened and "(" that nothing closes: red; the matched ones are not.
        QVERIFY(markedRed(doc, 17));
        QVERIFY(markedRed(doc, 31));
        for (const int matched : {2, 10, 12, 14})
            QVERIFY2(!markedRed(doc, matched), qPrintable(QString::number(matched)));
        // BREAK, and escapes (not brackets).
        QCOMPARE(formatAt(doc, 21).foreground(), PromptHighlighter::formatFor(PromptSyntaxKind::Break).foreground());
        QCOMPARE(formatAt(doc, 25).foreground(), PromptHighlighter::formatFor(PromptSyntaxKind::Escape).foreground());
        QVERIFY(!markedRed(doc, 29));  // "\)" is text, not an unopened bracket

        // Closing the last bracket takes the red away at once.
        QTextCursor end(editor.document());
        end.movePosition(QTextCursor::End);
        end.insertText(QStringLiteral(")"));
        QVERIFY(!markedRed(doc, 31));
        // A weight that is not a number (the run would refuse it) is red too.
        editor.setPlainText(QStringLiteral("(red:1.2.3) fox"));
        QVERIFY(markedRed(doc, 4));
        QVERIFY(!markedRed(doc, 0));
    }

    void highlighterPairsBracketsAcrossLines() {
        PromptEditor editor;
        editor.setPlainText(QStringLiteral("(red\nfox)"));
        const QTextDocument& doc = *editor.document();
        QVERIFY(!markedRed(doc, 0));
        QVERIFY(formatAt(doc, 1).background().style() != Qt::NoBrush);  // "red" at 1.1
        // Deleting the closer on line 2 makes the opener on line 1 unbalanced.
        QTextCursor cursor(editor.document());
        cursor.movePosition(QTextCursor::End);
        cursor.deletePreviousChar();
        QVERIFY(markedRed(doc, 0));
        cursor.insertText(QStringLiteral(")"));
        QVERIFY(!markedRed(doc, 0));
    }

    void highlightedWeightsAreTheParsersWeights_data() {
        QTest::addColumn<QString>("prompt");
        QTest::newRow("plain") << "a red fox";
        QTest::newRow("nested") << "((a) [b] (c:1.5) [[d]])";
        QTest::newRow("unclosed") << "a (b [c";
        QTest::newRow("escapes") << "\\(a\\) \\\\ b";
        QTest::newRow("break") << "a BREAK b (c BREAK d)";
        QTest::newRow("emoji") << QString::fromUtf8("(\xF0\x9F\xA6\x8A:1.3) x");
    }

    void highlightedWeightsAreTheParsersWeights() {
        // The text spans, read back from the prompt by their positions and merged as the parser
        // merges, are parsePromptAttention's segments: the highlighter shows what the run uses.
        QFETCH(QString, prompt);
        std::vector<PromptSegment> fromSpans;
        for (const PromptSyntaxSpan& span : promptSyntaxSpans(prompt)) {
            PromptSegment segment;
            if (span.kind == PromptSyntaxKind::Break)
                segment = {"BREAK", -1.0};
            else if (span.kind == PromptSyntaxKind::Text)
                segment = {
                    prompt.mid(static_cast<int>(span.begin), static_cast<int>(span.end - span.begin)).toStdString(),
                    span.weight};
            else
                continue;
            // An escape's text is its second character (the span starts after the backslash).
            if (!fromSpans.empty() && fromSpans.back().weight == segment.weight)
                fromSpans.back().text += segment.text;
            else
                fromSpans.push_back(segment);
        }
        const std::vector<PromptSegment> parsed = parsePromptAttention(prompt.toStdString());
        QCOMPARE(fromSpans.size(), parsed.size());
        for (std::size_t i = 0; i < parsed.size(); ++i) {
            QCOMPARE(QString::fromStdString(fromSpans[i].text), QString::fromStdString(parsed[i].text));
            QCOMPARE(fromSpans[i].weight, parsed[i].weight);
        }
    }

    void seedDiceAndReuse() {
        ConfigPanel panel;
        auto* seed = panel.findChild<QLineEdit*>(QStringLiteral("seedEdit"));
        auto* dice = panel.findChild<QToolButton*>(QStringLiteral("diceButton"));
        auto* reuse = panel.findChild<QToolButton*>(QStringLiteral("reuseSeedButton"));
        QVERIFY(seed && dice && reuse);
        QVERIFY(!reuse->isEnabled());  // no run yet
        seed->setText(QStringLiteral("7"));
        QTest::mouseClick(dice, Qt::LeftButton);
        QVERIFY(seed->text() != QStringLiteral("7"));
        QCOMPARE(panel.config().seed, seed->text().toULongLong());
        panel.setLastRunSeed(123456789);
        QVERIFY(reuse->isEnabled());
        QVERIFY(reuse->toolTip().contains("123456789"));
        QTest::mouseClick(reuse, Qt::LeftButton);
        QCOMPARE(panel.config().seed, std::uint64_t{123456789});
    }

    void reuseTakesTheLastRunsSeed() {
        if (!testing::haveTestModel()) QSKIP("test model not present");
        MainWindow window(
            std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("p-%1.ini").arg(++settingsCount_))),
            scratch_.filePath(QStringLiteral("history")));
        QVERIFY(testing::runOnce(window, testing::tinyRunConfig(4242)));
        auto* reuse = window.configPanel()->findChild<QToolButton*>(QStringLiteral("reuseSeedButton"));
        QVERIFY(reuse->isEnabled());
        window.configPanel()->findChild<QLineEdit*>(QStringLiteral("seedEdit"))->setText(QStringLiteral("1"));
        QTest::mouseClick(reuse, Qt::LeftButton);
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t{4242});
    }
};

QTEST_MAIN(TestPrompting)
#include "tst_prompting.moc"
