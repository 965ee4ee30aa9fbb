#include "ui/PromptEditor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <QKeyEvent>
#include <QRegularExpression>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>

namespace tessera {

namespace {

// A1111's default keyedit_delimiters, plus the whitespace edit-attention.js adds.
const QString kWordDelimiters = QStringLiteral(".,\\/!?%^*;:{}=`~() \r\n\t");

// JavaScript's lastIndexOf(ch, from): a negative `from` searches index 0 only (QString's
// lastIndexOf would count it from the end).
int jsLastIndexOf(const QString& s, QChar ch, int from) {
    if (from < 0) return !s.isEmpty() && s.at(0) == ch ? 0 : -1;
    return static_cast<int>(s.lastIndexOf(ch, from));
}

// edit-attention.js selectCurrentParenthesisBlock('(', ')'): the text of the "(...)" around
// the cursor up to its last colon. nullopt when there is none (or, unlike A1111, no colon).
std::optional<std::pair<int, int>> parenthesisBlockAt(const QString& text, int cursor) {
    const QString before = text.left(cursor);
    int open = static_cast<int>(before.lastIndexOf(QLatin1Char('(')));
    if (open == -1) return std::nullopt;
    int closeBefore = static_cast<int>(before.lastIndexOf(QLatin1Char(')')));
    while (closeBefore != -1 && closeBefore > open) {
        open = jsLastIndexOf(before, QLatin1Char('('), open - 1);
        closeBefore = jsLastIndexOf(before, QLatin1Char(')'), closeBefore - 1);
    }
    const QString after = text.mid(cursor);
    int close = static_cast<int>(after.indexOf(QLatin1Char(')')));
    if (close == -1) return std::nullopt;
    int openAfter = static_cast<int>(after.indexOf(QLatin1Char('(')));
    while (openAfter != -1 && close > openAfter) {
        close = static_cast<int>(after.indexOf(QLatin1Char(')'), close + 1));
        openAfter = static_cast<int>(after.indexOf(QLatin1Char('('), openAfter + 1));
    }
    if (open == -1 || close == -1) return std::nullopt;
    const QString content = text.mid(open + 1, cursor + close - (open + 1));
    const int colon = static_cast<int>(content.lastIndexOf(QLatin1Char(':')));
    if (colon == -1) return std::nullopt;
    return std::pair{open + 1, open + 1 + colon};
}

// edit-attention.js selectCurrentWord.
std::pair<int, int> wordAt(const QString& text, int start, int end) {
    while (start > 0 && !kWordDelimiters.contains(text.at(start - 1))) --start;
    while (end < text.size() && !kWordDelimiters.contains(text.at(end))) ++end;
    return {start, end};
}

// JavaScript's parseFloat: the longest number at the start (after whitespace); nullopt for NaN.
std::optional<double> jsParseFloat(const QString& s) {
    static const QRegularExpression number(QStringLiteral("^\\s*([+-]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+-]?\\d+)?)"));
    const QRegularExpressionMatch m = number.match(s);
    if (!m.hasMatch()) return std::nullopt;
    return m.captured(1).toDouble();
}

// parseFloat(weight.toPrecision(12)) as String() prints it, with A1111's ".0" for one character.
QString weightText(double weight) {
    const double rounded = QString::number(weight, 'g', 12).toDouble();
    QString text = QString::number(rounded, 'g', 17);
    // The shortest text that reads back as `rounded` (what JavaScript's String() gives).
    for (int digits = 1; digits <= 17; ++digits) {
        const QString candidate = QString::number(rounded, 'g', digits);
        if (candidate.toDouble() == rounded) {
            text = candidate;
            break;
        }
    }
    if (text.size() == 1) text += QStringLiteral(".0");
    return text;
}

}  // namespace

EmphasisEdit adjustEmphasis(const QString& original, int selectionStart, int selectionEnd, bool up, double delta) {
    EmphasisEdit edit{original, selectionStart, selectionEnd, false};
    QString text = original;
    int start = std::clamp(std::min(selectionStart, selectionEnd), 0, static_cast<int>(text.size()));
    int end = std::clamp(std::max(selectionStart, selectionEnd), 0, static_cast<int>(text.size()));
    if (start == end) {
        if (const auto block = parenthesisBlockAt(text, start))
            std::tie(start, end) = *block;
        else
            std::tie(start, end) = wordAt(text, start, end);
    }
    if (start == 0 || text.at(start - 1) != QLatin1Char('(')) {
        while (end > start && text.at(end - 1) == QLatin1Char(' ')) --end;
        if (start == end) return edit;
        text = text.left(start) + QLatin1Char('(') + text.mid(start, end - start) + QStringLiteral(":1.0)") +
               text.mid(end);
        ++start;
        ++end;
    }
    // The weight: after the character that ends the selection (its ':'), up to the next ')'.
    const int closeOffset = static_cast<int>(text.mid(end + 1).indexOf(QLatin1Char(')'))) + 1;
    const std::optional<double> weight = jsParseFloat(text.mid(end + 1, closeOffset));
    if (!weight) return edit;
    const QString newWeight = weightText(*weight + (up ? delta : -delta));
    if (newWeight.toDouble() == 1.0) {
        const int closeParen = static_cast<int>(text.mid(end).indexOf(QLatin1Char(')')));
        text = text.left(start - 1) + text.mid(start, end - start) + text.mid(end + closeParen + 1);
        --start;
        --end;
    } else {
        text = text.left(end + 1) + newWeight + text.mid(end + closeOffset);
    }
    edit.text = text;
    edit.selectionStart = start;
    edit.selectionEnd = end;
    edit.changed = text != original;
    return edit;
}

std::vector<PromptSyntaxSpan> promptSyntaxSpans(const QString& text) {
    // Code points as core counts them (an unpaired surrogate is one, as U+FFFD), and where each
    // begins in UTF-16.
    std::u32string points;
    std::vector<int> at;
    points.reserve(static_cast<std::size_t>(text.size()));
    at.reserve(static_cast<std::size_t>(text.size()) + 1);
    for (int i = 0; i < text.size();) {
        at.push_back(i);
        const QChar c = text.at(i);
        if (c.isHighSurrogate() && i + 1 < text.size() && text.at(i + 1).isLowSurrogate()) {
            points.push_back(QChar::surrogateToUcs4(c, text.at(i + 1)));
            i += 2;
        } else {
            points.push_back(c.isSurrogate() ? U'\uFFFD' : char32_t{c.unicode()});
            ++i;
        }
    }
    at.push_back(static_cast<int>(text.size()));
    std::vector<PromptSyntaxSpan> spans = scanPromptSyntax(points);
    for (PromptSyntaxSpan& span : spans) {
        span.begin = static_cast<std::size_t>(at[span.begin]);
        span.end = static_cast<std::size_t>(at[span.end]);
    }
    return spans;
}

PromptHighlighter::PromptHighlighter(QTextDocument* document) : QSyntaxHighlighter(document) {
    connect(document, &QTextDocument::contentsChanged, this, &PromptHighlighter::onContentsChanged);
}

QTextCharFormat PromptHighlighter::formatFor(PromptSyntaxKind kind, double weight) {
    QTextCharFormat format;
    switch (kind) {
        case PromptSyntaxKind::Open:
        case PromptSyntaxKind::Close:
            format.setForeground(QColor(0x1f, 0x5f, 0xbf));
            format.setFontWeight(QFont::Bold);
            break;
        case PromptSyntaxKind::Weight:
            format.setForeground(QColor(0x8e, 0x44, 0xad));
            format.setFontWeight(QFont::Bold);
            break;
        case PromptSyntaxKind::Escape:
            format.setForeground(QColor(0x7f, 0x8c, 0x8d));
            break;
        case PromptSyntaxKind::Break:
            format.setForeground(QColor(0xb3, 0x4d, 0x00));
            format.setBackground(QColor(0xfd, 0xeb, 0xd0));
            format.setFontWeight(QFont::Bold);
            break;
        case PromptSyntaxKind::Unbalanced:
        case PromptSyntaxKind::BadWeight:
            format.setForeground(QColor(0xc0, 0x39, 0x2b));
            format.setBackground(QColor(0xfd, 0xe2, 0xe1));
            format.setFontWeight(QFont::Bold);
            format.setUnderlineStyle(QTextCharFormat::WaveUnderline);
            format.setUnderlineColor(QColor(0xc0, 0x39, 0x2b));
            break;
        case PromptSyntaxKind::Text:
            if (weight > 1.0) {
                // Warmer the stronger, saturating at twice the weight.
                const double strength = std::clamp(weight - 1.0, 0.1, 1.0);
                format.setBackground(QColor(255, 140, 0, static_cast<int>(35 + 110 * strength)));
            } else if (weight < 1.0) {
                format.setForeground(QColor(0x6c, 0x7a, 0x89));
                format.setFontItalic(true);
            }
            break;
    }
    return format;
}

const std::vector<PromptSyntaxSpan>& PromptHighlighter::spans() {
    QString text = document()->toPlainText();
    if (text != spansText_ || !spansValid_) {
        spans_ = promptSyntaxSpans(text);
        spansText_ = std::move(text);
        spansValid_ = true;
    }
    return spans_;
}

void PromptHighlighter::highlightBlock(const QString& text) {
    const auto blockStart = static_cast<std::size_t>(currentBlock().position());
    const std::size_t blockEnd = blockStart + static_cast<std::size_t>(text.size());
    for (const PromptSyntaxSpan& span : spans()) {
        if (span.end <= blockStart || span.begin >= blockEnd) continue;
        if (span.kind == PromptSyntaxKind::Text && span.weight == 1.0) continue;
        const std::size_t from = std::max(span.begin, blockStart), to = std::min(span.end, blockEnd);
        setFormat(static_cast<int>(from - blockStart), static_cast<int>(to - from), formatFor(span.kind, span.weight));
    }
}

void PromptHighlighter::onContentsChanged() {
    // QSyntaxHighlighter redoes the blocks an edit touched; a bracket closed on another line
    // changes how earlier lines read, so a prompt of several lines is redone whole.
    if (rehighlighting_ || document()->blockCount() < 2) return;
    rehighlighting_ = true;
    rehighlight();
    rehighlighting_ = false;
}

PromptEditor::PromptEditor(QWidget* parent) : QPlainTextEdit(parent), highlighter_(new PromptHighlighter(document())) {}

bool PromptEditor::adjustWeight(bool up) {
    QTextCursor cursor = textCursor();
    const QString text = toPlainText();
    const EmphasisEdit edit = adjustEmphasis(text, cursor.anchor(), cursor.position(), up);
    if (!edit.changed) return false;
    // Only the part that changed is replaced: one undo step, and the rest keeps its layout.
    int prefix = 0;
    const int common = static_cast<int>(std::min(text.size(), edit.text.size()));
    while (prefix < common && text.at(prefix) == edit.text.at(prefix)) ++prefix;
    int suffix = 0;
    while (suffix < common - prefix && text.at(text.size() - 1 - suffix) == edit.text.at(edit.text.size() - 1 - suffix))
        ++suffix;
    cursor.beginEditBlock();
    cursor.setPosition(prefix);
    cursor.setPosition(static_cast<int>(text.size()) - suffix, QTextCursor::KeepAnchor);
    cursor.insertText(edit.text.mid(prefix, edit.text.size() - suffix - prefix));
    cursor.endEditBlock();
    cursor.setPosition(edit.selectionStart);
    cursor.setPosition(edit.selectionEnd, QTextCursor::KeepAnchor);
    setTextCursor(cursor);
    return true;
}

void PromptEditor::keyPressEvent(QKeyEvent* event) {
    const bool modifier = event->modifiers() & (Qt::ControlModifier | Qt::MetaModifier);
    if (modifier && (event->key() == Qt::Key_Up || event->key() == Qt::Key_Down)) {
        adjustWeight(event->key() == Qt::Key_Up);
        event->accept();  // never the editor's own Ctrl+Up/Down (it would move the cursor)
        return;
    }
    QPlainTextEdit::keyPressEvent(event);
}

}  // namespace tessera
