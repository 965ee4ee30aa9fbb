#include "ui/PromptGroup.h"

#include <algorithm>

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTextCursor>

#include "ui/PromptEditor.h"

namespace tessera {

namespace {

PromptEditor* makePromptEdit(const QString& placeholder, int lines) {
    auto* edit = new PromptEditor;
    edit->setPlaceholderText(placeholder);
    edit->setTabChangesFocus(true);
    edit->setFixedHeight(edit->fontMetrics().lineSpacing() * lines + 14);
    return edit;
}

QLabel* makeTokenLabel(const char* name) {
    auto* label = new QLabel;
    label->setObjectName(QString::fromLatin1(name));
    label->setProperty("role", QStringLiteral("hint"));
    label->setAlignment(Qt::AlignRight);
    label->setToolTip(PromptGroup::tr("Tokens, as A1111 counts them: prompts run in chunks of 75"));
    return label;
}

}  // namespace

PromptGroup::PromptGroup(QWidget* parent) : ConfigGroup(tr("Prompt"), parent) {
    setObjectName(QStringLiteral("promptGroup"));
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    reason_ = makeRoleLabel("promptReason", "hint");
    form->addRow(reason_);

    prompt_ = makePromptEdit(tr("What to draw; A1111 syntax: (word:1.2), [word], BREAK"), 3);
    prompt_->setObjectName(QStringLiteral("promptEdit"));
    const QString emphasisHelp =
        tr("A1111 emphasis: (word) ×1.1, [word] ÷1.1, (word:1.3), \\( for a literal bracket, "
           "BREAK starts a new 75-token chunk. Ctrl+Up / Ctrl+Down change the weight of the "
           "selection or the word at the cursor by 0.1. Red: a bracket nothing closes or opens.");
    prompt_->setToolTip(emphasisHelp);
    promptTokens_ = makeTokenLabel("promptTokens");
    negativePromptTokens_ = makeTokenLabel("negativePromptTokens");
    form->addRow(tr("Prompt"), prompt_);
    form->addRow(QString(), promptTokens_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("prompt"), prompt_));
    negativePrompt_ = makePromptEdit(tr("What to avoid"), 2);
    negativePrompt_->setObjectName(QStringLiteral("negativePromptEdit"));
    negativePrompt_->setToolTip(emphasisHelp);
    form->addRow(tr("Negative"), negativePrompt_);
    form->addRow(QString(), negativePromptTokens_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("negative_prompt"), negativePrompt_));

    cfgScale_ = makeRealSpin(0, 1000, 0.5, 1);
    cfgScale_->setObjectName(QStringLiteral("cfgSpin"));
    cfgScale_->setToolTip(
        tr("Classifier-free guidance scale, 0 to %1 (1: the prompt alone, no negative half)").arg(kMaxCfgScale));
    clipSkip_ = makeSpin(0, 99);
    clipSkip_->setObjectName(QStringLiteral("clipSkipSpin"));
    clipSkip_->setToolTip(
        tr("A1111's Clip skip, 1 to %1: 1 uses the text encoder's usual layer, 2 one earlier…").arg(kMaxClipSkip));
    auto* guidanceRow = new QHBoxLayout;
    guidanceRow->setContentsMargins(0, 0, 0, 0);
    guidanceRow->addWidget(cfgScale_, 1);
    guidanceRow->addWidget(new QLabel(tr("Clip skip")));
    guidanceRow->addWidget(clipSkip_, 1);
    form->addRow(tr("CFG scale"), guidanceRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("cfg"), cfgScale_));
    form->addRow(QString(), addErrorLabel(QStringLiteral("clip_skip"), clipSkip_));
    guidance_ = makeRealSpin(0, 100, 0.5, 1);
    guidance_->setObjectName(QStringLiteral("guidanceSpin"));
    guidance_->setToolTip(
        tr("FLUX.1-dev's guidance scale, 0 to 100: an input of the model, not classifier-free "
           "guidance (one evaluation per step; 3.5 is usual)"));
    guidanceLabel_ = new QLabel(tr("Guidance"));
    form->addRow(guidanceLabel_, guidance_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("guidance"), guidance_));
    guidance_->setVisible(false);
    guidanceLabel_->setVisible(false);
    batchCount_ = makeSpin(1, kMaxBatchCount);
    batchCount_->setObjectName(QStringLiteral("batchCountSpin"));
    batchCount_->setToolTip(
        tr("A1111's Batch count: Run makes this many images one after the other, with seeds seed, seed + 1, "
           "…; each is a run of its own in the history"));
    form->addRow(tr("Batch count"), batchCount_);

    for (QPlainTextEdit* edit : {prompt_, negativePrompt_}) {
        connect(edit, &QPlainTextEdit::textChanged, this, &PromptGroup::edited);
        connect(edit, &QPlainTextEdit::textChanged, this, &PromptGroup::promptTextChanged);
    }
    connect(cfgScale_, &QDoubleSpinBox::valueChanged, this, &PromptGroup::edited);
    connect(guidance_, &QDoubleSpinBox::valueChanged, this, &PromptGroup::edited);
    connect(clipSkip_, &QSpinBox::valueChanged, this, &PromptGroup::edited);
}

void PromptGroup::readInto(RunConfig& c) const {
    c.prompt = promptText().toStdString();
    c.negativePrompt = negativePromptText().toStdString();
    c.cfgScale = cfgScale_->value();
    c.clipSkip = clipSkip_->value();
    c.guidance = guidance_->value();
}

void PromptGroup::showConfig(const RunConfig& c) {
    prompt_->setPlainText(QString::fromStdString(c.prompt));
    negativePrompt_->setPlainText(QString::fromStdString(c.negativePrompt));
    cfgScale_->setValue(c.cfgScale);
    clipSkip_->setValue(c.clipSkip);
    guidance_->setValue(c.guidance);
}

QString PromptGroup::promptText() const { return prompt_->toPlainText(); }

QString PromptGroup::negativePromptText() const { return negativePrompt_->toPlainText(); }

void PromptGroup::setUnavailableReason(const QString& reason) {
    const bool available = reason.isEmpty();
    for (QWidget* editor : {static_cast<QWidget*>(prompt_), static_cast<QWidget*>(negativePrompt_),
                            static_cast<QWidget*>(cfgScale_), static_cast<QWidget*>(clipSkip_)}) {
        editor->setEnabled(available);
        // The editor's own tooltip says what it is; a disabled one says why first.
        if (!editor->property("ownToolTip").isValid()) editor->setProperty("ownToolTip", editor->toolTip());
        const QString own = editor->property("ownToolTip").toString();
        editor->setToolTip(available ? own : (own.isEmpty() ? reason : reason + QStringLiteral("\n\n") + own));
    }
    reason_->setText(reason);
    reason_->setVisible(!available);
    if (available) {
        setClipSkipIgnored(clipSkipIgnored_);
        setFluxModel(flux_);
    }
}

void PromptGroup::setFluxModel(const QString& variant) {
    flux_ = variant;
    const bool flux = !variant.isEmpty();
    guidance_->setVisible(flux);
    guidanceLabel_->setVisible(flux);
    if (!prompt_->isEnabled()) return;  // the whole group's reason stands
    const QString distilled = tr("FLUX.1 is guidance-distilled: one evaluation per step, no unconditional half");
    auto mark = [](QWidget* w, const QString& reason) {
        if (!w->property("ownToolTip").isValid()) w->setProperty("ownToolTip", w->toolTip());
        const QString own = w->property("ownToolTip").toString();
        w->setEnabled(reason.isEmpty());
        w->setToolTip(reason.isEmpty() ? own : reason + QStringLiteral("\n\n") + own);
    };
    mark(negativePrompt_, flux ? tr("Not used: %1.").arg(distilled) : QString());
    negativePrompt_->setPlaceholderText(flux ? tr("Not used by FLUX.1") : tr("What to avoid"));
    mark(cfgScale_, flux ? tr("Not used: %1; FLUX.1-dev takes Guidance below.").arg(distilled) : QString());
    if (flux)
        mark(clipSkip_, tr("Not used: FLUX.1 reads CLIP's pooled output and T5's last layer."));
    else
        setClipSkipIgnored(clipSkipIgnored_);
    mark(guidance_,
         variant == QStringLiteral("flux-schnell") ? tr("FLUX.1-schnell has no guidance input.") : QString());
}

void PromptGroup::setClipSkipIgnored(const QString& reason) {
    clipSkipIgnored_ = reason;
    if (!prompt_->isEnabled()) return;  // the whole group's reason stands
    clipSkip_->setEnabled(reason.isEmpty());
    const QString own = clipSkip_->property("ownToolTip").isValid() ? clipSkip_->property("ownToolTip").toString()
                                                                    : clipSkip_->toolTip();
    clipSkip_->setProperty("ownToolTip", own);
    clipSkip_->setToolTip(reason.isEmpty() ? own : reason + QStringLiteral("\n\n") + own);
}

QLabel* PromptGroup::tokenLabel(const QString& field) const {
    return field == QStringLiteral("prompt") ? promptTokens_ : negativePromptTokens_;
}

void PromptGroup::showTokenCount(const QString& field, int tokens, const QString& error, int embeddings) {
    QLabel* label = tokenLabel(field);
    if (!flux_.isEmpty()) {
        // T5's tokens against what the variant reads: 512 for dev, 256 for schnell, the end token
        // among them (diffusers' max_sequence_length); beyond is cut.
        const int limit = flux_ == QStringLiteral("flux-schnell") ? 256 : 512;
        label->setText(tokens < 0 ? QStringLiteral("?/%1").arg(limit) : QStringLiteral("%1/%2").arg(tokens).arg(limit));
        label->setToolTip(tokens < 0 ? error
                                     : tr("T5 tokens: FLUX.1 reads %1 with the end token; beyond that the prompt is "
                                          "cut%2. CLIP-L reads the first 77 for its pooled vector.")
                                           .arg(limit)
                                           .arg(tokens >= limit ? tr(" (this one is)") : QString()));
        return;
    }
    if (tokens < 0) {
        label->setText(tr("?/75"));
        label->setToolTip(error);
        return;
    }
    // A1111: the count over the chunks it fills, 75 tokens each.
    const int chunks = std::max(1, (tokens + 74) / 75);
    label->setText(QStringLiteral("%1/%2").arg(tokens).arg(chunks * 75));
    QString tip = tr("Tokens, as A1111 counts them: prompts run in chunks of 75");
    if (embeddings > 0)
        tip += QLatin1Char('\n') +
               tr("%n textual-inversion embedding(s) included: each of its vectors is a token", nullptr, embeddings);
    label->setToolTip(tip);
}

void PromptGroup::clearTokenCount(const QString& field) { tokenLabel(field)->clear(); }

QString PromptGroup::tokenCountText(const QString& field) const { return tokenLabel(field)->text(); }

int PromptGroup::batchCount() const { return batchCount_->value(); }

void PromptGroup::setBatchCount(int count) { batchCount_->setValue(count); }

void PromptGroup::toggleExtraNetworkTag(const QString& tag) {
    // "<kind:name:...>": the network is (kind, name); any weight of it matches.
    static const QRegularExpression parts(QStringLiteral("^<([^:>]+):([^:>]+)(:[^>]*)?>$"));
    const QRegularExpressionMatch m = parts.match(tag);
    if (!m.hasMatch()) return;
    QString text = prompt_->toPlainText();
    const QRegularExpression present(
        QStringLiteral("\\s*<%1:%2(:[^>]*)?>")
            .arg(QRegularExpression::escape(m.captured(1)), QRegularExpression::escape(m.captured(2))));
    if (text.contains(present)) {
        text.remove(present);
    } else {
        // A1111's separator (extra_networks_add_text_separator): one space.
        if (!text.isEmpty() && !text.endsWith(QLatin1Char(' ')) && !text.endsWith(QLatin1Char('\n')))
            text += QLatin1Char(' ');
        text += tag;
    }
    prompt_->setPlainText(text);
    QTextCursor end = prompt_->textCursor();
    end.movePosition(QTextCursor::End);
    prompt_->setTextCursor(end);
}

}  // namespace tessera
