// PromptEditor: the prompt and negative-prompt editors. A1111's emphasis syntax is highlighted
// as core/text/PromptParser.h reads it (scanPromptSyntax: the same parser that makes the run's
// weights): matched brackets, weights, escapes and BREAK each in their colour, text tinted by
// its weight (warm above 1, faded below), and brackets that nothing closes or opens, and
// weights that are not numbers, in red with a wavy underline.
//
// Ctrl+Up / Ctrl+Down (Cmd on macOS) change the weight of the selection, or of the bracket
// block or word at the cursor, by 0.1 as A1111's javascript/edit-attention.js does
// (adjustEmphasis). The edit is one undo step.
#pragma once

#include <cstdint>
#include <vector>

#include <QPlainTextEdit>
#include <QString>
#include <QSyntaxHighlighter>

#include "core/text/PromptParser.h"

namespace tessera {

// The prompt after a Ctrl+Up/Down, with the selection to show.
struct EmphasisEdit {
    QString text;
    int selectionStart = 0;  // UTF-16 positions, as QTextCursor counts them
    int selectionEnd = 0;
    bool changed = false;  // false: nothing to change (text and selection as given)
};

// A1111's edit-attention.js on `text` with the selection [selectionStart, selectionEnd):
// with no selection, the innermost "(...:w)" block around the cursor is taken, else the word
// at the cursor (delimiters .,\/!?%^*;:{}=`~() and whitespace). A selection not inside "(" is
// wrapped as "(sel:1.0)" (trailing spaces left out) before the change, so one Ctrl+Up gives
// "(sel:1.1)"; a weight that reaches 1.0 loses its parentheses; weights print as A1111 prints
// them (12 significant digits, "2.0" not "2"). One deviation: a block "(...)" without a
// colon is not taken (A1111 then selects nothing useful); the word at the cursor is.
EmphasisEdit adjustEmphasis(const QString& text, int selectionStart, int selectionEnd, bool up, double delta = 0.1);

// scanPromptSyntax over a QString, the spans' positions in UTF-16 units.
std::vector<PromptSyntaxSpan> promptSyntaxSpans(const QString& text);

class PromptHighlighter : public QSyntaxHighlighter {
    Q_OBJECT
public:
    explicit PromptHighlighter(QTextDocument* document);

    // The format highlightBlock gives a span of `kind` (a Text span: of weight `weight`).
    static QTextCharFormat formatFor(PromptSyntaxKind kind, double weight = 1.0);

protected:
    void highlightBlock(const QString& text) override;

private:
    // The whole document's spans (brackets may pair across lines), recomputed when its text changed.
    const std::vector<PromptSyntaxSpan>& spans();
    void onContentsChanged();

    std::vector<PromptSyntaxSpan> spans_;
    QString spansText_;
    bool spansValid_ = false;
    bool rehighlighting_ = false;
};

class PromptEditor : public QPlainTextEdit {
    Q_OBJECT
public:
    explicit PromptEditor(QWidget* parent = nullptr);

    PromptHighlighter* highlighter() const { return highlighter_; }
    // What Ctrl+Up (up) or Ctrl+Down does; false when there was nothing to change.
    bool adjustWeight(bool up);

protected:
    void keyPressEvent(QKeyEvent* event) override;

private:
    PromptHighlighter* highlighter_ = nullptr;
};

}  // namespace tessera
