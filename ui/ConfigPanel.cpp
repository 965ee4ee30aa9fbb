#include "ui/ConfigPanel.h"

#include <cmath>
#include <exception>

#include <QAbstractSpinBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDropEvent>
#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPainter>
#include <QPolygonF>
#include <QPlainTextEdit>
#include <QRandomGenerator>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QStyle>
#include <QThread>
#include <QToolButton>
#include <QVBoxLayout>

#include "core/models/sd/SdModel.h"
#include "core/run/SamplerNames.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/TilePlan.h"
#include "app/qt/ModelCatalog.h"
#include "ui/ModelPicker.h"
#include "ui/PromptEditor.h"
#include "ui/TileCanvas.h"

namespace tessera {

namespace {

// A wheel turned over a combo box or spin box that does not have the focus scrolls the panel,
// as in a browser's forms: the value changes only after a click or Tab gave the editor the focus
// (otherwise scrolling down the panel flips whatever passes under the pointer).
class WheelGuard : public QObject {
public:
    using QObject::QObject;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override {
        auto* widget = qobject_cast<QWidget*>(watched);
        if (event->type() != QEvent::Wheel || !widget || widget->hasFocus()) return false;
        if (QWidget* parent = widget->parentWidget()) QCoreApplication::sendEvent(parent, event);
        return true;  // never the editor's own wheelEvent
    }
};

// Wide enough that every value a person might type stays in the box, so validateAll (not the
// spin box clamping silently) decides and says what is wrong.
constexpr int kMaxSpin = 1 << 16;

QSpinBox* makeSpin(int lo, int hi, const QString& suffix = {}) {
    auto* spin = new QSpinBox;
    spin->setRange(lo, hi);
    spin->setSuffix(suffix);
    spin->setAccelerated(true);
    return spin;
}

template <typename Enum>
QComboBox* makeCombo(std::initializer_list<std::pair<Enum, QString>> items) {
    auto* combo = new QComboBox;
    for (const auto& [value, text] : items) combo->addItem(text, QString::fromUtf8(toString(value).data(), static_cast<qsizetype>(toString(value).size())));
    return combo;
}

template <typename Enum>
void selectIn(QComboBox* combo, Enum value) {
    const QString name = QString::fromUtf8(toString(value).data(), static_cast<qsizetype>(toString(value).size()));
    const int index = combo->findData(name);
    if (index >= 0) combo->setCurrentIndex(index);
}

std::string selectedName(const QComboBox* combo) { return combo->currentData().toString().toStdString(); }

// The sampler list: A1111's names (samplerDisplayName), one entry per kind and, where the kind
// has one, a "Karras" entry. Data: the kind's name; kKarrasRole: whether it is the Karras entry.
constexpr int kKarrasRole = Qt::UserRole + 1;

bool hasKarras(SchedulerKind kind) {
    SchedulerOptions karras;
    karras.karrasSigmas = true;
    return samplerDisplayName(kind, karras).scheduleType == "Karras";
}

QComboBox* makeSamplerCombo() {
    auto* combo = new QComboBox;
    for (const SchedulerKind kind : {SchedulerKind::Euler, SchedulerKind::EulerAncestral, SchedulerKind::DPMPP2M,
                                     SchedulerKind::DDIM, SchedulerKind::DDPM}) {
        const QString name = QString::fromUtf8(toString(kind).data(), static_cast<qsizetype>(toString(kind).size()));
        for (const bool karras : {false, true}) {
            if (karras && !hasKarras(kind)) continue;
            SchedulerOptions options;
            options.karrasSigmas = karras;
            const SamplerDisplay shown = samplerDisplayName(kind, options);
            const QString text = QString::fromStdString(shown.sampler) +
                                 (karras ? QStringLiteral(" ") + QString::fromStdString(shown.scheduleType) : QString());
            combo->addItem(text, name);
            combo->setItemData(combo->count() - 1, karras, kKarrasRole);
        }
    }
    return combo;
}

void selectSampler(QComboBox* combo, SchedulerKind kind, bool karras) {
    const QString name = QString::fromUtf8(toString(kind).data(), static_cast<qsizetype>(toString(kind).size()));
    for (int i = 0; i < combo->count(); ++i)
        if (combo->itemData(i).toString() == name && (!hasKarras(kind) || combo->itemData(i, kKarrasRole).toBool() == karras)) {
            combo->setCurrentIndex(i);
            return;
        }
}

QDoubleSpinBox* makeRealSpin(double lo, double hi, double step, int decimals) {
    auto* spin = new QDoubleSpinBox;
    spin->setRange(lo, hi);
    spin->setSingleStep(step);
    spin->setDecimals(decimals);
    spin->setAccelerated(true);
    return spin;
}

PromptEditor* makePromptEdit(const QString& placeholder, int lines) {
    auto* edit = new PromptEditor;
    edit->setPlaceholderText(placeholder);
    edit->setTabChangesFocus(true);
    edit->setFixedHeight(edit->fontMetrics().lineSpacing() * lines + 14);
    return edit;
}

// A die showing five: an icon that needs no theme and no emoji font.
QIcon diceIcon() {
    QPixmap pixmap(32, 32);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(70, 70, 70), 2));
    painter.setBrush(QColor(250, 250, 250));
    painter.drawRoundedRect(QRectF(3, 3, 26, 26), 6, 6);
    painter.setPen(Qt::NoPen);
    painter.setBrush(QColor(40, 40, 40));
    for (const QPointF& pip : {QPointF(10, 10), QPointF(22, 10), QPointF(16, 16), QPointF(10, 22), QPointF(22, 22)})
        painter.drawEllipse(pip, 2.6, 2.6);
    return QIcon(pixmap);
}

// A recycling arrow: reuse (the last run's seed), drawn so it needs no theme either.
QIcon reuseIcon() {
    QPixmap pixmap(32, 32);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(40, 110, 60), 3, Qt::SolidLine, Qt::RoundCap));
    painter.drawArc(QRectF(6, 6, 20, 20), 60 * 16, 290 * 16);
    painter.setPen(Qt::NoPen);
    painter.setBrush(QColor(40, 110, 60));
    painter.drawPolygon(QPolygonF({QPointF(17, 2), QPointF(26, 7.5), QPointF(17, 13)}));
    return QIcon(pixmap);
}

// validateAll's messages start with "field: "; beside the field that prefix is noise.
QString withoutFieldPrefix(const QString& field, const QString& message) {
    const QString prefix = field + QStringLiteral(": ");
    return message.startsWith(prefix) ? message.mid(prefix.size()) : message;
}

}  // namespace

ConfigPanel::ConfigPanel(QWidget* parent)
    : QWidget(parent), inspector_(new ModelInspector(this)), catalog_(new ModelCatalog(this)) {
    setObjectName(QStringLiteral("configPanel"));
    connect(inspector_, &ModelInspector::inspected, this, &ConfigPanel::onModelInspected);
    connect(inspector_, &ModelInspector::defaultModelLocated, this, [this](const QString& folder) {
        locatingDefault_ = false;
        setDefaultModelFolder(folder);
        emit modelChecked();
    });
    // Invalid editors get a red frame; the reason sits right under them.
    setStyleSheet(QStringLiteral(
        "QSpinBox[invalid=\"true\"], QDoubleSpinBox[invalid=\"true\"], QLineEdit[invalid=\"true\"],"
        " QComboBox[invalid=\"true\"], QPlainTextEdit[invalid=\"true\"] {"
        " border: 1px solid #d64541; border-radius: 3px; padding: 1px 2px; }"
        "QLabel[role=\"error\"] { color: #c0392b; }"
        "QLabel[role=\"hint\"] { color: #5a6270; }"
        "QLabel[role=\"warning\"] { color: #a05a00; }"));

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(buildModelGroup());
    layout->addWidget(buildPromptGroup());
    layout->addWidget(buildStartGroup());
    layout->addWidget(buildImageGroup());
    layout->addWidget(buildTilingGroup());
    layout->addWidget(buildGraphsGroup());
    layout->addWidget(buildCostGroup());
    otherProblems_ = new QLabel;
    otherProblems_->setObjectName(QStringLiteral("otherProblems"));
    otherProblems_->setProperty("role", QStringLiteral("error"));
    otherProblems_->setWordWrap(true);
    otherProblems_->hide();
    layout->addWidget(otherProblems_);
    layout->addStretch(1);

    auto* wheelGuard = new WheelGuard(this);
    const auto guard = [wheelGuard](QWidget* editor) {
        editor->setFocusPolicy(Qt::StrongFocus);  // not Qt::WheelFocus: the wheel gives no focus
        editor->installEventFilter(wheelGuard);
    };
    for (QComboBox* combo : findChildren<QComboBox*>()) guard(combo);
    for (QAbstractSpinBox* spin : findChildren<QAbstractSpinBox*>()) guard(spin);

    setConfig(RunConfig{});
}

QLabel* ConfigPanel::addErrorLabel(const QString& field, QWidget* editor) {
    auto* label = new QLabel;
    label->setObjectName(field + QStringLiteral("Error"));
    label->setProperty("role", QStringLiteral("error"));
    label->setWordWrap(true);
    label->hide();
    fields_[field] = FieldView{editor, label};
    return label;
}

QGroupBox* ConfigPanel::buildPromptGroup() {
    promptGroup_ = new QGroupBox(tr("Prompt"));
    promptGroup_->setObjectName(QStringLiteral("promptGroup"));
    auto* form = new QFormLayout(promptGroup_);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    // The group stays enabled so its reason stays readable; the editors do not.
    promptReason_ = new QLabel;
    promptReason_->setObjectName(QStringLiteral("promptReason"));
    promptReason_->setProperty("role", QStringLiteral("hint"));
    promptReason_->setWordWrap(true);
    form->addRow(promptReason_);

    prompt_ = makePromptEdit(tr("What to draw; A1111 syntax: (word:1.2), [word], BREAK"), 3);
    prompt_->setObjectName(QStringLiteral("promptEdit"));
    const QString emphasisHelp = tr("A1111 emphasis: (word) ×1.1, [word] ÷1.1, (word:1.3), \\( for a literal bracket, "
                                    "BREAK starts a new 75-token chunk. Ctrl+Up / Ctrl+Down change the weight of the "
                                    "selection or the word at the cursor by 0.1. Red: a bracket nothing closes or opens.");
    prompt_->setToolTip(emphasisHelp);
    const auto tokenLabel = [](const char* name) {
        auto* label = new QLabel;
        label->setObjectName(QString::fromLatin1(name));
        label->setProperty("role", QStringLiteral("hint"));
        label->setAlignment(Qt::AlignRight);
        label->setToolTip(tr("Tokens, as A1111 counts them: prompts run in chunks of 75"));
        return label;
    };
    promptTokens_ = tokenLabel("promptTokens");
    negativePromptTokens_ = tokenLabel("negativePromptTokens");
    form->addRow(tr("Prompt"), prompt_);
    form->addRow(QString(), promptTokens_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("prompt"), prompt_));
    negativePrompt_ = makePromptEdit(tr("What to avoid"), 2);
    negativePrompt_->setObjectName(QStringLiteral("negativePromptEdit"));
    negativePrompt_->setToolTip(emphasisHelp);
    form->addRow(tr("Negative"), negativePrompt_);
    form->addRow(QString(), negativePromptTokens_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("negative_prompt"), negativePrompt_));

    // Ranges wider than allowed, so validateAll (not the spin box clamping silently) says what is wrong.
    cfgScale_ = makeRealSpin(0, 1000, 0.5, 1);
    cfgScale_->setObjectName(QStringLiteral("cfgSpin"));
    cfgScale_->setToolTip(tr("Classifier-free guidance scale, 0 to %1 (1: the prompt alone, no negative half)")
                              .arg(kMaxCfgScale));
    clipSkip_ = makeSpin(0, 99);
    clipSkip_->setObjectName(QStringLiteral("clipSkipSpin"));
    clipSkip_->setToolTip(tr("A1111's Clip skip, 1 to %1: 1 uses the text encoder's usual layer, 2 one earlier…")
                              .arg(kMaxClipSkip));
    auto* guidanceRow = new QHBoxLayout;
    guidanceRow->setContentsMargins(0, 0, 0, 0);
    guidanceRow->addWidget(cfgScale_, 1);
    guidanceRow->addWidget(new QLabel(tr("Clip skip")));
    guidanceRow->addWidget(clipSkip_, 1);
    form->addRow(tr("CFG scale"), guidanceRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("cfg"), cfgScale_));
    form->addRow(QString(), addErrorLabel(QStringLiteral("clip_skip"), clipSkip_));

    for (QPlainTextEdit* edit : {prompt_, negativePrompt_}) {
        connect(edit, &QPlainTextEdit::textChanged, this, &ConfigPanel::onEdited);
        connect(edit, &QPlainTextEdit::textChanged, this, &ConfigPanel::requestTokenCounts);
    }
    connect(inspector_, &ModelInspector::tokensCounted, this,
            [this](quint64, const QString& field, int tokens, const QString& error) { onTokensCounted(field, tokens, error); });
    connect(cfgScale_, &QDoubleSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    connect(clipSkip_, &QSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    return promptGroup_;
}

namespace {

// The Scale list: factors (data > 0), "any factor" (the spin box's; data 0) and target size (-1).
constexpr double kAnyFactor = 0.0, kTargetSize = -1.0;

// Drops of one PNG or JPEG file on the start image group.
class StartImageDrop : public QObject {
public:
    StartImageDrop(QObject* parent, std::function<void(const QString&)> take) : QObject(parent), take_(std::move(take)) {}

protected:
    bool eventFilter(QObject*, QEvent* event) override {
        if (event->type() != QEvent::DragEnter && event->type() != QEvent::Drop) return false;
        auto* drop = static_cast<QDropEvent*>(event);
        const QString path = droppedImageFile(drop->mimeData());
        if (path.isEmpty()) return false;
        drop->acceptProposedAction();
        if (event->type() == QEvent::Drop) take_(path);
        return true;
    }

private:
    std::function<void(const QString&)> take_;
};

QString fileSizeText(std::uint64_t bytes) {
    if (bytes >= (std::uint64_t{1} << 20)) return QCoreApplication::translate("ConfigPanel", "%1 MiB").arg(bytes / 1048576.0, 0, 'f', 1);
    return QCoreApplication::translate("ConfigPanel", "%1 KiB").arg((bytes + 1023) / 1024);
}

}  // namespace

QGroupBox* ConfigPanel::buildStartGroup() {
    startGroup_ = new QGroupBox(tr("Start image"));
    startGroup_->setObjectName(QStringLiteral("startGroup"));
    startGroup_->setAcceptDrops(true);
    startGroup_->installEventFilter(new StartImageDrop(startGroup_, [this](const QString& path) { setStartImage(path); }));
    auto* form = new QFormLayout(startGroup_);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    startName_ = new QLabel;
    startName_->setObjectName(QStringLiteral("startImageName"));
    startName_->setWordWrap(true);
    startName_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* open = new QToolButton;
    open->setObjectName(QStringLiteral("startImageOpen"));
    open->setText(tr("Open…"));
    open->setToolTip(tr("Start from a PNG or JPEG (image-to-image, upscaling); you can also drop one here or on the canvas"));
    startClear_ = new QToolButton;
    startClear_->setObjectName(QStringLiteral("startImageClear"));
    startClear_->setText(tr("Clear"));
    startClear_->setToolTip(tr("Start from noise again"));
    auto* fileRow = new QHBoxLayout;
    fileRow->setContentsMargins(0, 0, 0, 0);
    fileRow->addWidget(open);
    fileRow->addWidget(startClear_);
    fileRow->addStretch(1);
    form->addRow(tr("Image"), fileRow);
    // The name on a row of its own: a wrapped label beside buttons gets too little height.
    form->addRow(QString(), startName_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("init"), startName_));

    strength_ = makeRealSpin(0, 1, 0.05, 2);
    strength_->setObjectName(QStringLiteral("strengthSpin"));
    strength_->setToolTip(tr("How much the image may change, above 0 to 1: 0.3 keeps the picture and adds detail, "
                             "1 keeps only its colours' layout"));
    form->addRow(tr("Strength"), strength_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("strength"), strength_));

    scale_ = new QComboBox;
    scale_->setObjectName(QStringLiteral("scaleCombo"));
    scale_->addItem(tr("×1"), 1.0);
    scale_->addItem(tr("×2"), 2.0);
    scale_->addItem(tr("×4"), 4.0);
    scale_->addItem(tr("Factor"), kAnyFactor);
    scale_->addItem(tr("Target size"), kTargetSize);
    scale_->setToolTip(tr("The canvas: the start image's size times a factor (rounded down to multiples of 8), or "
                          "the Size fields (Target size: the image is stretched to them)"));
    upscale_ = makeRealSpin(0, 100, 0.25, 2);
    upscale_->setObjectName(QStringLiteral("upscaleSpin"));
    upscale_->setSuffix(QStringLiteral(" ×"));
    upscale_->setToolTip(tr("The upscale factor, 1 to %1").arg(kMaxUpscale));
    auto* scaleRow = new QHBoxLayout;
    scaleRow->setContentsMargins(0, 0, 0, 0);
    scaleRow->addWidget(scale_, 1);
    scaleRow->addWidget(upscale_, 1);
    form->addRow(tr("Scale"), scaleRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("upscale"), upscale_));
    canvasSize_ = new QLabel;
    canvasSize_->setObjectName(QStringLiteral("startCanvasSize"));
    canvasSize_->setProperty("role", QStringLiteral("hint"));
    canvasSize_->setWordWrap(true);
    form->addRow(QString(), canvasSize_);

    connect(open, &QToolButton::clicked, this, &ConfigPanel::chooseStartImage);
    connect(startClear_, &QToolButton::clicked, this, [this] { setStartImage({}); });
    connect(strength_, &QDoubleSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    connect(scale_, &QComboBox::currentIndexChanged, this, [this] {
        // A preset factor goes into the factor box, which is what the run uses.
        const double factor = scale_->currentData().toDouble();
        if (factor > 0) {
            const QSignalBlocker block(upscale_);
            upscale_->setValue(factor);
        }
        onEdited();
    });
    connect(upscale_, &QDoubleSpinBox::valueChanged, this, [this](double factor) {
        // Typing 2 selects "×2"; typing 3 selects "Factor".
        if (scale_->currentData().toDouble() != kTargetSize) {
            const int preset = scale_->findData(factor);
            const QSignalBlocker block(scale_);
            scale_->setCurrentIndex(preset >= 0 ? preset : scale_->findData(kAnyFactor));
        }
        onEdited();
    });
    return startGroup_;
}

ConfigPanel::StartScale ConfigPanel::startScale() const {
    return scale_->currentData().toDouble() == kTargetSize ? StartScale::TargetSize : StartScale::Factor;
}

void ConfigPanel::setStartImage(const QString& path) {
    base_.initImage = path.toStdString();
    onEdited();
}

bool ConfigPanel::isCheckingStartImage() const {
    return !base_.initImage.empty() && !startHeader_ && startError_.isEmpty();
}

QString ConfigPanel::checkStartImage(const std::string& path) {
    if (path.empty()) return {};
    const QString asked = QString::fromStdString(path);
    if (asked != startAskedFor_) {
        // The header only (a few bytes), read off this thread; the newest request wins.
        startAskedFor_ = asked;
        startHeader_.reset();
        startError_.clear();
        startJob_ = imageJobs_.start(
            [path] { return readImageHeader(path); },
            [this, asked](quint64 id, const ImageHeader& header) {
                if (id != startJob_) return;
                startHeader_ = header;
                onEdited();  // the canvas size may follow from it
                emit startImageChecked();
            },
            [this](quint64 id, const QString& error) {
                if (id != startJob_) return;
                startError_ = error;
                revalidate();
                emit startImageChecked();
            });
    }
    if (!startError_.isEmpty()) return startError_;
    if (!startHeader_) return tr("reading the start image…");
    return {};
}

void ConfigPanel::applyStartImageSize() {
    const bool fromImage = !base_.initImage.empty() && startHeader_ && startScale() == StartScale::Factor &&
                           QString::fromStdString(base_.initImage) == startAskedFor_;
    if (fromImage && upscale_->value() >= 1.0 && upscale_->value() <= kMaxUpscale) {
        const QSignalBlocker blockW(width_), blockH(height_);
        width_->setValue(upscaledCanvasSide(startHeader_->width, upscale_->value()));
        height_->setValue(upscaledCanvasSide(startHeader_->height, upscale_->value()));
    }
    for (QSpinBox* side : {width_, height_}) {
        side->setReadOnly(fromImage);
        side->setToolTip(fromImage ? tr("The start image's size times the scale; choose Target size (Start image) "
                                        "to type a size")
                                   : (side == width_ ? tr("Image width") : tr("Image height")));
    }
}

void ConfigPanel::updateStartImageView() {
    const bool hasImage = !base_.initImage.empty();
    for (QWidget* editor : {static_cast<QWidget*>(strength_), static_cast<QWidget*>(scale_),
                            static_cast<QWidget*>(upscale_), static_cast<QWidget*>(startClear_)})
        editor->setEnabled(hasImage);
    upscale_->setVisible(startScale() == StartScale::Factor);
    if (!hasImage) {
        startName_->setText(tr("None: the run starts from noise"));
        startName_->setToolTip({});
        canvasSize_->setText(tr("Open or drop a PNG or JPEG to start from it (image-to-image, upscaling)"));
        return;
    }
    const QFileInfo file(QString::fromStdString(base_.initImage));
    startName_->setToolTip(QDir::toNativeSeparators(file.absoluteFilePath()));
    if (!startHeader_) {
        startName_->setText(file.fileName());
        canvasSize_->clear();
        return;
    }
    startName_->setText(tr("%1 — %2 × %3 px, %4")
                            .arg(file.fileName())
                            .arg(startHeader_->width)
                            .arg(startHeader_->height)
                            .arg(fileSizeText(startHeader_->fileBytes)));
    canvasSize_->setText(startScale() == StartScale::TargetSize
                             ? tr("Canvas %1 × %2 px (the Size fields); the image is stretched to it")
                                   .arg(width_->value())
                                   .arg(height_->value())
                             : tr("Canvas %1 × %2 px: the image × %3")
                                   .arg(width_->value())
                                   .arg(height_->value())
                                   .arg(upscale_->value()));
}

void ConfigPanel::chooseStartImage() {
    const QString current = QString::fromStdString(base_.initImage);
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a start image"),
                                                      current.isEmpty() ? QString() : QFileInfo(current).absolutePath(),
                                                      tr("Images (*.png *.jpg *.jpeg)"));
    if (!file.isEmpty()) setStartImage(file);
}

QGroupBox* ConfigPanel::buildImageGroup() {
    auto* group = new QGroupBox(tr("Image"));
    auto* form = new QFormLayout(group);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    width_ = makeSpin(0, kMaxSpin, tr(" px"));
    width_->setObjectName(QStringLiteral("widthSpin"));
    width_->setSingleStep(64);
    height_ = makeSpin(0, kMaxSpin, tr(" px"));
    height_->setObjectName(QStringLiteral("heightSpin"));
    height_->setSingleStep(64);
    width_->setToolTip(tr("Image width"));
    height_->setToolTip(tr("Image height"));
    auto* sizeRow = new QHBoxLayout;
    sizeRow->setContentsMargins(0, 0, 0, 0);
    sizeRow->addWidget(width_, 1);
    sizeRow->addWidget(new QLabel(QStringLiteral("×")));
    sizeRow->addWidget(height_, 1);
    form->addRow(tr("Size"), sizeRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("width"), width_));
    form->addRow(QString(), addErrorLabel(QStringLiteral("height"), height_));

    seed_ = new QLineEdit;
    seed_->setObjectName(QStringLiteral("seedEdit"));
    seed_->setValidator(new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9]{1,20}")), seed_));
    dice_ = new QToolButton;
    dice_->setObjectName(QStringLiteral("diceButton"));
    dice_->setIcon(diceIcon());
    dice_->setToolTip(tr("New random seed"));
    reuseSeed_ = new QToolButton;
    reuseSeed_->setObjectName(QStringLiteral("reuseSeedButton"));
    reuseSeed_->setIcon(reuseIcon());
    reuseSeed_->setEnabled(false);
    reuseSeed_->setToolTip(tr("Reuse the seed of the last run (none yet)"));
    auto* seedRow = new QHBoxLayout;
    seedRow->setContentsMargins(0, 0, 0, 0);
    seedRow->addWidget(seed_, 1);
    seedRow->addWidget(dice_);
    seedRow->addWidget(reuseSeed_);
    form->addRow(tr("Seed"), seedRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("seed"), seed_));

    steps_ = makeSpin(0, 100000);
    steps_->setObjectName(QStringLiteral("stepsSpin"));
    form->addRow(tr("Steps"), steps_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("steps"), steps_));

    scheduler_ = makeSamplerCombo();
    scheduler_->setObjectName(QStringLiteral("schedulerCombo"));
    scheduler_->setToolTip(tr("Sampler, as A1111 names it (\"Karras\": its Karras noise schedule)"));
    form->addRow(tr("Sampler"), scheduler_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("scheduler"), scheduler_));

    previewEvery_ = makeSpin(0, 100000);
    previewEvery_->setObjectName(QStringLiteral("previewEverySpin"));
    previewEvery_->setPrefix(tr("every "));
    previewEvery_->setSuffix(tr(" steps"));
    previewEvery_->setSpecialValueText(tr("never (the final image only)"));
    previewEvery_->setToolTip(tr("The canvas shows the image forming after every N steps (Stable Diffusion: A1111's "
                                 "\"Approx cheap\" preview of the latents; the VAE decodes the final image). 0: never."));
    form->addRow(tr("Preview"), previewEvery_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("preview_every"), previewEvery_));

    for (QSpinBox* spin : {width_, height_, steps_, previewEvery_})
        connect(spin, &QSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    connect(seed_, &QLineEdit::textChanged, this, &ConfigPanel::onEdited);
    connect(dice_, &QToolButton::clicked, this, &ConfigPanel::rollSeed);
    connect(reuseSeed_, &QToolButton::clicked, this, [this] {
        if (lastRunSeed_) seed_->setText(QString::number(*lastRunSeed_));
    });
    connect(scheduler_, &QComboBox::currentIndexChanged, this, &ConfigPanel::onEdited);
    return group;
}

QGroupBox* ConfigPanel::buildModelGroup() {
    auto* group = new QGroupBox(tr("Model"));
    auto* form = new QFormLayout(group);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    model_ = new QLineEdit;
    model_->setObjectName(QStringLiteral("modelEdit"));
    model_->setClearButtonEnabled(true);
    auto* browse = new QToolButton;
    browse->setObjectName(QStringLiteral("modelBrowse"));
    browse->setIcon(style()->standardIcon(QStyle::SP_DirOpenIcon));
    browse->setToolTip(tr("Choose a model folder: a diffusers UNet2DModel or a Stable Diffusion pipeline "
                          "(model_index.json)"));
    auto* browseFile = new QToolButton;
    browseFile->setObjectName(QStringLiteral("modelBrowseFile"));
    browseFile->setIcon(style()->standardIcon(QStyle::SP_FileIcon));
    browseFile->setToolTip(tr("Choose a Stable Diffusion 1.x / 2.x checkpoint (.safetensors)"));
    model_->setPlaceholderText(tr("a folder, a .safetensors checkpoint or random:sd15"));
    auto* pick = new QToolButton;
    pick->setObjectName(QStringLiteral("modelPick"));
    pick->setText(tr("Pick…"));
    pick->setToolTip(tr("Pick from the models folder, the recently used models or random weights, with each "
                        "model's family, size and hash"));
    auto* modelRow = new QHBoxLayout;
    modelRow->setContentsMargins(0, 0, 0, 0);
    modelRow->addWidget(model_, 1);
    modelRow->addWidget(pick);
    modelRow->addWidget(browse);
    modelRow->addWidget(browseFile);
    form->addRow(tr("Model"), modelRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("model"), model_));
    modelInfo_ = new QLabel;
    modelInfo_->setObjectName(QStringLiteral("modelInfo"));
    modelInfo_->setProperty("role", QStringLiteral("hint"));
    modelInfo_->setWordWrap(true);
    form->addRow(QString(), modelInfo_);

    precision_ = makeCombo<Precision>(
        {{Precision::FP16, tr("FP16")}, {Precision::BF16, tr("BF16")}, {Precision::FP32, tr("FP32")}});
    precision_->setObjectName(QStringLiteral("precisionCombo"));
    precision_->setToolTip(tr("Device arithmetic; the CPU reference engine always computes in FP32"));
    backend_ = makeCombo<BackendKind>(
        {{BackendKind::Auto, tr("Auto")}, {BackendKind::CUDA, tr("CUDA")}, {BackendKind::CPU, tr("CPU")}});
    backend_->setObjectName(QStringLiteral("backendCombo"));
    backend_->setToolTip(tr("Auto: CUDA when a device is usable, else the CPU reference engine"));
    auto* computeRow = new QHBoxLayout;
    computeRow->setContentsMargins(0, 0, 0, 0);
    computeRow->addWidget(precision_, 1);
    computeRow->addWidget(new QLabel(tr("on")));
    computeRow->addWidget(backend_, 1);
    form->addRow(tr("Precision"), computeRow);
    computeNote_ = new QLabel;
    computeNote_->setObjectName(QStringLiteral("computeNote"));
    computeNote_->setProperty("role", QStringLiteral("warning"));
    computeNote_->setWordWrap(true);
    computeNote_->hide();
    form->addRow(QString(), computeNote_);
    threads_ = makeSpin(0, 4096);
    threads_->setObjectName(QStringLiteral("threadsSpin"));
    threads_->setSpecialValueText(tr("all cores"));
    form->addRow(tr("Threads"), threads_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("threads"), threads_));

    connect(model_, &QLineEdit::textChanged, this, &ConfigPanel::onEdited);
    connect(browse, &QToolButton::clicked, this, &ConfigPanel::chooseModelFolder);
    connect(browseFile, &QToolButton::clicked, this, &ConfigPanel::chooseModelFile);
    connect(pick, &QToolButton::clicked, this, &ConfigPanel::openModelPicker);
    connect(precision_, &QComboBox::currentIndexChanged, this, &ConfigPanel::onEdited);
    connect(backend_, &QComboBox::currentIndexChanged, this, &ConfigPanel::onEdited);
    connect(threads_, &QSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    return group;
}

QGroupBox* ConfigPanel::buildTilingGroup() {
    auto* group = new QGroupBox(tr("Tiling"));
    auto* form = new QFormLayout(group);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    tile_ = makeSpin(0, kMaxSpin, tr(" px"));
    tile_->setObjectName(QStringLiteral("tileSpin"));
    tile_->setSingleStep(8);
    form->addRow(tr("Tile"), tile_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("tile"), tile_));

    overlap_ = makeSpin(0, kMaxSpin);
    overlap_->setObjectName(QStringLiteral("overlapSpin"));
    overlapUnit_ = new QComboBox;
    overlapUnit_->setObjectName(QStringLiteral("overlapUnitCombo"));
    overlapUnit_->addItem(tr("px"));
    overlapUnit_->addItem(tr("% of tile"));
    auto* overlapRow = new QHBoxLayout;
    overlapRow->setContentsMargins(0, 0, 0, 0);
    overlapRow->addWidget(overlap_, 1);
    overlapRow->addWidget(overlapUnit_);
    form->addRow(tr("Overlap"), overlapRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("overlap"), overlap_));
    stride_ = new QLabel;
    stride_->setObjectName(QStringLiteral("strideLabel"));
    stride_->setProperty("role", QStringLiteral("hint"));
    form->addRow(tr("Stride"), stride_);

    window_ = makeCombo<BlendWindowKind>({{BlendWindowKind::Hann, tr("Hann")},
                                          {BlendWindowKind::Gaussian, tr("Gaussian")},
                                          {BlendWindowKind::Linear, tr("Linear ramp")},
                                          {BlendWindowKind::None, tr("None (hard seams)")}});
    window_->setObjectName(QStringLiteral("windowCombo"));
    form->addRow(tr("Blend window"), window_);
    fusion_ = makeCombo<FusionRule>({{FusionRule::Sample, tr("Sample (MultiDiffusion)")},
                                     {FusionRule::Noise, tr("Noise (Mixture of Diffusers)")}});
    fusion_->setObjectName(QStringLiteral("fusionCombo"));
    form->addRow(tr("Fusion"), fusion_);
    tileBatch_ = makeSpin(0, 4096);
    tileBatch_->setObjectName(QStringLiteral("tileBatchSpin"));
    tileBatch_->setSpecialValueText(tr("auto"));
    tileBatch_->setToolTip(tr("Tiles evaluated per UNet call (0 = auto: every tile spread evenly over the fewest "
                              "calls of at most %1, fewer where the GPU's memory is short; the run's record "
                              "says what it chose). Larger calls are faster; smaller ones show the image "
                              "forming tile by tile.")
                               .arg(kAutoTileBatchMost));
    form->addRow(tr("Tile batch"), tileBatch_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("batch"), tileBatch_));

    for (QSpinBox* spin : {tile_, overlap_, tileBatch_})
        connect(spin, &QSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    for (QComboBox* combo : {window_, fusion_})
        connect(combo, &QComboBox::currentIndexChanged, this, &ConfigPanel::onEdited);
    connect(overlapUnit_, &QComboBox::currentIndexChanged, this, [this](int unit) {
        // Keep the overlap the same number of pixels when switching units.
        if (applying_) return;
        const int tile = std::max(1, tile_->value());
        const QSignalBlocker block(overlap_);
        if (unit == 1) {
            overlap_->setRange(0, 99);
            overlap_->setSuffix(tr(" %"));
            overlap_->setValue(static_cast<int>(std::lround(100.0 * base_.overlapPixels() / tile)));
        } else {
            overlap_->setRange(0, kMaxSpin);
            overlap_->setSuffix(tr(" px"));
            overlap_->setValue(base_.overlapPixels());
        }
        onEdited();
    });
    return group;
}

QGroupBox* ConfigPanel::buildGraphsGroup() {
    // The group box stays enabled so its reason label stays readable; the editors do not.
    graphsGroup_ = new QGroupBox(tr("CUDA graphs"));
    graphsGroup_->setObjectName(QStringLiteral("graphsGroup"));
    auto* form = new QFormLayout(graphsGroup_);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    graphMode_ = makeCombo<GraphMode>(
        {{GraphMode::Off, tr("Off")}, {GraphMode::Tile, tr("Per tile batch")}, {GraphMode::Step, tr("Whole step")}});
    graphMode_->setObjectName(QStringLiteral("graphModeCombo"));
    form->addRow(tr("Mode"), graphMode_);
    graphWarmup_ = makeSpin(0, 1000);
    graphWarmup_->setObjectName(QStringLiteral("graphWarmupSpin"));
    graphWarmup_->setToolTip(tr("Eager runs before capture (cuDNN/cuBLAS pick their algorithms)"));
    graphCache_ = makeSpin(0, 100000);
    graphCache_->setObjectName(QStringLiteral("graphCacheSpin"));
    graphCache_->setToolTip(tr("Captured graphs kept, one per tile-batch shape"));
    auto* graphRow = new QHBoxLayout;
    graphRow->setContentsMargins(0, 0, 0, 0);
    graphRow->addWidget(graphWarmup_, 1);
    graphRow->addWidget(new QLabel(tr("cache")));
    graphRow->addWidget(graphCache_, 1);
    form->addRow(tr("Warm-up"), graphRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("graph_warmup"), graphWarmup_));
    form->addRow(QString(), addErrorLabel(QStringLiteral("graph_cache"), graphCache_));
    lanes_ = makeSpin(0, 99);
    lanes_->setObjectName(QStringLiteral("lanesSpin"));
    lanes_->setSpecialValueText(tr("auto"));
    lanes_->setToolTip(tr("Tile batches in flight at once, each on its own CUDA stream with its own copy of the "
                          "activations (0 = auto: 4 for small forwards, else 2). More lanes fill the GPU when "
                          "one forward is small, at the cost of memory; the image is the same bits."));
    form->addRow(tr("Lanes"), lanes_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("lanes"), lanes_));
    graphsReason_ = new QLabel(tr("Looking for a CUDA device…"));
    graphsReason_->setObjectName(QStringLiteral("graphsReason"));
    graphsReason_->setProperty("role", QStringLiteral("hint"));
    graphsReason_->setWordWrap(true);
    form->addRow(graphsReason_);

    connect(graphMode_, &QComboBox::currentIndexChanged, this, &ConfigPanel::onEdited);
    for (QSpinBox* spin : {graphWarmup_, graphCache_, lanes_})
        connect(spin, &QSpinBox::valueChanged, this, &ConfigPanel::onEdited);
    return graphsGroup_;
}

QGroupBox* ConfigPanel::buildCostGroup() {
    auto* group = new QGroupBox(tr("Cost preview"));
    auto* form = new QFormLayout(group);
    auto value = [](const char* name) {
        auto* label = new QLabel;
        label->setObjectName(QString::fromLatin1(name));
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
        return label;
    };
    costTiles_ = value("costTiles");
    costRedundancy_ = value("costRedundancy");
    costEvaluations_ = value("costEvaluations");
    costBatches_ = value("costBatches");
    costRedundancy_->setToolTip(tr("Pixels computed per image pixel: the sum of tile areas over the image area"));
    form->addRow(tr("Tiles"), costTiles_);
    form->addRow(tr("Redundancy"), costRedundancy_);
    form->addRow(tr("UNet evaluations"), costEvaluations_);
    form->addRow(tr("Batches / step"), costBatches_);
    return group;
}

RunConfig ConfigPanel::config() const {
    RunConfig c = base_;
    c.width = width_->value();
    c.height = height_->value();
    c.seed = seed_->text().toULongLong();
    c.steps = steps_->value();
    c.previewEvery = previewEvery_->value();
    c.scheduler = parseScheduler(selectedName(scheduler_));
    if (hasKarras(c.scheduler)) c.schedulerOptions.karrasSigmas = scheduler_->currentData(kKarrasRole).toBool();
    // A model known to take no prompt gets none (the text stays in the disabled editors).
    c.prompt = modelTakesNoPrompt() ? std::string() : prompt_->toPlainText().toStdString();
    c.negativePrompt = modelTakesNoPrompt() ? std::string() : negativePrompt_->toPlainText().toStdString();
    c.cfgScale = cfgScale_->value();
    c.clipSkip = clipSkip_->value();
    c.strength = strength_->value();
    c.upscale = startScale() == StartScale::TargetSize ? 1.0 : upscale_->value();
    c.model = QDir::cleanPath(model_->text().trimmed()).toStdString();
    if (model_->text().trimmed().isEmpty()) c.model.clear();
    c.precision = parsePrecision(selectedName(precision_));
    c.backend = parseBackend(selectedName(backend_));
    c.tile = tile_->value();
    if (overlapUnit_->currentIndex() == 1) {
        c.overlapFraction = overlap_->value() / 100.0;
    } else {
        c.overlapFraction.reset();
        c.overlapPx = overlap_->value();
    }
    c.window = parseBlendWindow(selectedName(window_));
    c.fusion = parseFusionRule(selectedName(fusion_));
    c.tileBatch = tileBatch_->value();
    c.graphs = parseGraphMode(selectedName(graphMode_));
    c.graphWarmup = graphWarmup_->value();
    c.graphCacheSize = graphCache_->value();
    c.lanes = lanes_->value();
    c.threads = threads_->value();
    return c;
}

void ConfigPanel::setConfig(const RunConfig& config) {
    applying_ = true;
    base_ = config;
    width_->setValue(config.width);
    height_->setValue(config.height);
    seed_->setText(QString::number(config.seed));
    steps_->setValue(config.steps);
    previewEvery_->setValue(config.previewEvery);
    selectSampler(scheduler_, config.scheduler, config.schedulerOptions.karrasSigmas);
    prompt_->setPlainText(QString::fromStdString(config.prompt));
    negativePrompt_->setPlainText(QString::fromStdString(config.negativePrompt));
    cfgScale_->setValue(config.cfgScale);
    clipSkip_->setValue(config.clipSkip);
    strength_->setValue(config.strength);
    upscale_->setValue(config.upscale);
    // With a start image and no factor the Size fields are the canvas (what the run used).
    const int preset = scale_->findData(config.upscale);
    scale_->setCurrentIndex(!config.initImage.empty() && config.upscale == 1.0 ? scale_->findData(kTargetSize)
                            : preset >= 0                                     ? preset
                                                                              : scale_->findData(kAnyFactor));
    model_->setText(QString::fromStdString(config.model));
    selectIn(precision_, config.precision);
    selectIn(backend_, config.backend);
    tile_->setValue(config.tile);
    if (config.overlapFraction) {
        overlapUnit_->setCurrentIndex(1);
        overlap_->setRange(0, 99);
        overlap_->setSuffix(tr(" %"));
        overlap_->setValue(static_cast<int>(std::lround(*config.overlapFraction * 100.0)));
    } else {
        overlapUnit_->setCurrentIndex(0);
        overlap_->setRange(0, kMaxSpin);
        overlap_->setSuffix(tr(" px"));
        overlap_->setValue(config.overlapPx);
    }
    selectIn(window_, config.window);
    selectIn(fusion_, config.fusion);
    tileBatch_->setValue(config.tileBatch);
    selectIn(graphMode_, config.graphs);
    graphWarmup_->setValue(config.graphWarmup);
    graphCache_->setValue(config.graphCacheSize);
    lanes_->setValue(config.lanes);
    threads_->setValue(config.threads);
    applying_ = false;
    onEdited();
}

QStringList ConfigPanel::problems() const {
    QStringList list;
    for (const QString& field : problemOrder_) list << field + QStringLiteral(": ") + problems_.at(field);
    return list;
}

QString ConfigPanel::problemFor(const QString& field) const {
    const auto it = problems_.find(field);
    return it == problems_.end() ? QString() : it->second;
}

void ConfigPanel::locateDefaultModel(const QString& executableDir) {
    locatingDefault_ = true;
    inspector_->locateDefault(executableDir);
    revalidate();
}

bool ConfigPanel::isCheckingModel() const {
    return locatingDefault_ || (!inspectedFolder_.isEmpty() && !inspection_);
}

void ConfigPanel::setDefaultModelFolder(const QString& folder) {
    defaultModelFolder_ = folder;
    defaultKnown_ = true;
    model_->setPlaceholderText(folder.isEmpty() ? tr("no default model installed; choose a folder")
                                                : tr("default: %1").arg(QFileInfo(folder).fileName()));
    model_->setToolTip(folder.isEmpty() ? QString() : tr("Empty: the default model in %1").arg(folder));
    revalidate();
}

void ConfigPanel::setDeviceReport(const DeviceReport& report) {
    devices_ = report;
    updateGraphsAvailability();
    updateComputeNote();
}

QString ConfigPanel::computeNote() const {
    const BackendKind asked = parseBackend(selectedName(backend_));
    const bool cudaUsable = devices_ && devices_->cudaAvailable;
    QString note;
    if (asked == BackendKind::CUDA && devices_ && !cudaUsable)
        note = tr("CUDA cannot be used on this machine: %1. The run will use the CPU reference engine.")
                   .arg(QString::fromStdString(devices_->cudaReason));
    const bool onCpu = runsOnCpu();
    if (onCpu && parsePrecision(selectedName(precision_)) != Precision::FP32)
        note += (note.isEmpty() ? QString() : QStringLiteral(" ")) +
                tr("The CPU engine computes in FP32; %1 applies to CUDA runs.").arg(precision_->currentText());
    return note;
}

bool ConfigPanel::runsOnCpu() const {
    return parseBackend(selectedName(backend_)) == BackendKind::CPU || (devices_ && !devices_->cudaAvailable);
}

void ConfigPanel::updateComputeNote() {
    const QString note = computeNote();
    computeNote_->setText(note);
    computeNote_->setVisible(!note.isEmpty());
    // Threads are the CPU engine's: editable where the run goes there, kept (not cleared) otherwise.
    const bool onCpu = runsOnCpu();
    threads_->setEnabled(onCpu);
    const QString what = tr("Threads the CPU engine computes on (all cores: %1 here). The image is the same bits "
                            "for any count; fewer leave cores free for other work.")
                             .arg(QThread::idealThreadCount());
    threads_->setToolTip(onCpu ? what : what + QLatin1Char(' ') + tr("This run goes to the CUDA engine."));
}

QString ConfigPanel::graphsUnavailableReason() const {
    if (!devices_) return tr("Looking for a CUDA device…");
    if (!devices_->cudaAvailable)
        return tr("Disabled: %1. Runs use the CPU engine, which has no CUDA graphs.")
            .arg(QString::fromStdString(devices_->cudaReason));
    if (parseBackend(selectedName(backend_)) == BackendKind::CPU)
        return tr("Disabled: the CPU backend is selected; graphs need the CUDA backend.");
    return {};
}

void ConfigPanel::updateGraphsAvailability() {
    const QString reason = graphsUnavailableReason();
    const bool available = reason.isEmpty();
    for (QWidget* editor : {static_cast<QWidget*>(graphMode_), static_cast<QWidget*>(graphWarmup_),
                            static_cast<QWidget*>(graphCache_), static_cast<QWidget*>(lanes_)})
        editor->setEnabled(available);
    graphsReason_->setText(reason);
    graphsReason_->setVisible(!available);
}

bool ConfigPanel::modelIsStableDiffusion() const {
    return inspection_ && inspection_->stableDiffusion && inspection_->limits.has_value();
}

bool ConfigPanel::modelTakesNoPrompt() const {
    return inspection_ && !inspection_->stableDiffusion && inspection_->limits.has_value();
}

QString ConfigPanel::promptUnavailableReason() const {
    if (modelIsStableDiffusion()) return {};
    if (isCheckingModel()) return tr("Disabled while the model is checked.");
    if (modelTakesNoPrompt())
        return tr("Disabled: %1 is an unconditional UNet2DModel, which takes no prompt. Choose a Stable Diffusion "
                  "model (a pipeline folder, a .safetensors checkpoint or random:sd15) for prompts and guidance.")
            .arg(QFileInfo(inspection_->folder).fileName());
    return tr("Disabled until the model is known to be Stable Diffusion (a pipeline folder, a .safetensors "
              "checkpoint or random:sd15).");
}

void ConfigPanel::updatePromptAvailability() {
    // While a model is being checked (a path typed letter by letter) the last answer stands.
    if (isCheckingModel() && promptStateShown_) return;
    promptStateShown_ = true;
    const QString reason = promptUnavailableReason();
    const bool available = reason.isEmpty();
    for (QWidget* editor : {static_cast<QWidget*>(prompt_), static_cast<QWidget*>(negativePrompt_),
                            static_cast<QWidget*>(cfgScale_), static_cast<QWidget*>(clipSkip_)}) {
        editor->setEnabled(available);
        // The editor's own tooltip says what it is; a disabled one says why first.
        if (!editor->property("ownToolTip").isValid()) editor->setProperty("ownToolTip", editor->toolTip());
        const QString own = editor->property("ownToolTip").toString();
        editor->setToolTip(available ? own : (own.isEmpty() ? reason : reason + QStringLiteral("\n\n") + own));
    }
    promptReason_->setText(reason);
    promptReason_->setVisible(!available);
}

void ConfigPanel::requestTokenCounts() {
    if (!modelIsStableDiffusion()) {
        promptTokens_->clear();
        negativePromptTokens_->clear();
        return;
    }
    // The tokenizer is read (once) and the prompt chunked on the inspector's pool, never here.
    inspector_->countTokens(inspection_->folder, QStringLiteral("prompt"), prompt_->toPlainText());
    inspector_->countTokens(inspection_->folder, QStringLiteral("negative_prompt"), negativePrompt_->toPlainText());
}

void ConfigPanel::onTokensCounted(const QString& field, int tokens, const QString& error) {
    QLabel* label = field == QStringLiteral("prompt") ? promptTokens_ : negativePromptTokens_;
    if (!modelIsStableDiffusion()) return label->clear();
    if (tokens < 0) {
        label->setText(tr("?/75"));
        label->setToolTip(error);
        return;
    }
    // A1111: the count over the chunks it fills, 75 tokens each.
    const int chunks = std::max(1, (tokens + 74) / 75);
    label->setText(QStringLiteral("%1/%2").arg(tokens).arg(chunks * 75));
    label->setToolTip(tr("Tokens, as A1111 counts them: prompts run in chunks of 75"));
}

QString ConfigPanel::tokenCountText(const QString& field) const {
    return (field == QStringLiteral("prompt") ? promptTokens_ : negativePromptTokens_)->text();
}

void ConfigPanel::checkSdMultiples(const RunConfig& c, int multiple,
                                   const std::function<void(const QString&, const QString&)>& add) const {
    if (multiple <= 1) return;
    const auto check = [&](const char* field, int value, const QString& what) {
        if (value <= 0 || value % multiple == 0) return;
        const int below = value / multiple * multiple;
        add(QString::fromLatin1(field),
            tr("%1 is not a multiple of %2; %3 of a Stable Diffusion run must be (its VAE works in %2-pixel cells): use %4")
                .arg(value)
                .arg(multiple)
                .arg(what)
                .arg(below > 0 ? tr("%1 or %2").arg(below).arg(below + multiple) : QString::number(multiple)));
    };
    check("width", c.width, tr("the width"));
    check("height", c.height, tr("the height"));
    check("overlap", c.overlapPixels(), tr("the tile overlap"));
}

void ConfigPanel::onEdited() {
    if (applying_) return;
    applyStartImageSize();
    // Remember every value, so switching overlap units and setConfig round trips keep them.
    base_ = config();
    updateGraphsAvailability();
    revalidate();
    emit configChanged();
}

void ConfigPanel::revalidate() {
    const bool wasValid = problems_.empty();
    const RunConfig c = config();
    problems_.clear();
    problemOrder_.clear();
    auto addProblem = [this](const QString& field, const QString& reason) {
        if (problems_.count(field) != 0) return;  // the first reason per field is the one to fix first
        problems_[field] = reason;
        problemOrder_ << field;
    };

    // The model folder decides the limits (downsampling factor, training timesteps).
    ModelLimits limits;
    const QString modelFolder = c.model.empty() ? defaultModelFolder_ : QString::fromStdString(c.model);
    if (const QString problem = checkModel(modelFolder, c.model.empty(), &limits); !problem.isEmpty())
        addProblem(QStringLiteral("model"), problem);
    modelInfo_->setVisible(!modelInfo_->text().isEmpty());

    for (const ValidationError& problem : validateAll(c, limits)) {
        const QString field = QString::fromStdString(problem.field());
        addProblem(field, withoutFieldPrefix(field, QString::fromUtf8(problem.what())));
    }
    if (modelIsStableDiffusion()) checkSdMultiples(c, inspection_->pixelMultiple, addProblem);
    if (const QString problem = checkStartImage(c.initImage); !problem.isEmpty()) addProblem(QStringLiteral("init"), problem);
    updatePromptAvailability();
    updateStartImageView();

    QStringList unplaced;
    for (auto& [field, view] : fields_) {
        const QString reason = problemFor(field);
        view.error->setText(reason);
        view.error->setVisible(!reason.isEmpty());
        if (view.editor->property("invalid").toBool() != !reason.isEmpty()) {
            view.editor->setProperty("invalid", !reason.isEmpty());
            // Re-polish so the style sheet sees the property change.
            view.editor->style()->unpolish(view.editor);
            view.editor->style()->polish(view.editor);
        }
    }
    for (const QString& field : problemOrder_)
        if (fields_.count(field) == 0) unplaced << field + QStringLiteral(": ") + problems_.at(field);
    otherProblems_->setText(unplaced.join(QLatin1Char('\n')));
    otherProblems_->setVisible(!unplaced.isEmpty());

    updateComputeNote();
    updateCostPreview(c);
    if (wasValid != problems_.empty()) emit validityChanged(problems_.empty());
}

QString ConfigPanel::checkModel(const QString& folder, bool isDefault, ModelLimits* limits) {
    modelInfo_->clear();
    if (isDefault && !defaultKnown_) {
        *limits = lastLimits_;
        return locatingDefault_ ? tr("looking for the default model…") : tr("no default model is set; choose a model folder");
    }
    if (folder.isEmpty()) return tr("no default model is installed; choose a model folder");
    if (folder != inspectedFolder_) {
        // A folder not asked about yet: the inspector reads it (or its cache answers) off this thread.
        inspectedFolder_ = folder;
        inspection_.reset();
        inspector_->inspect(folder);
    }
    if (!inspection_) {
        // The last folder's limits stand in, so the other fields are not marked by a guess.
        *limits = lastLimits_;
        modelInfo_->setText(tr("Checking %1…").arg(QFileInfo(folder).fileName()));
        return tr("checking the model folder…");
    }
    if (!inspection_->limits) return inspection_->error;
    *limits = lastLimits_ = *inspection_->limits;
    const QString name = folder.startsWith(QString::fromLatin1(kRandomModelPrefix)) ? folder : QFileInfo(folder).fileName();
    if (inspection_->stableDiffusion)
        modelInfo_->setText(tr("%1: Stable Diffusion, tiles in multiples of %2, sizes and overlap of %3")
                                .arg(name)
                                .arg(limits->downsampleFactor)
                                .arg(inspection_->pixelMultiple));
    else
        modelInfo_->setText(tr("%1: %2 input channels, tiles in multiples of %3")
                                .arg(name)
                                .arg(limits->inChannels)
                                .arg(limits->downsampleFactor));
    return {};
}

void ConfigPanel::onModelInspected(quint64, const ModelInspection& inspection) {
    // The inspector answers only its newest request; a folder changed since is asked about anew.
    if (inspection.folder != inspectedFolder_) return;
    inspection_ = inspection;
    revalidate();
    requestTokenCounts();
    emit modelChecked();
}

void ConfigPanel::updateCostPreview(const RunConfig& c) {
    const int overlapPx = c.overlapPixels();
    stride_->setText(c.tile > overlapPx && overlapPx >= 0
                         ? tr("%1 px (tile %2 − overlap %3)").arg(c.tile - overlapPx).arg(c.tile).arg(overlapPx)
                         : tr("—"));
    const bool planOk = problems_.count(QStringLiteral("width")) == 0 && problems_.count(QStringLiteral("height")) == 0 &&
                        problems_.count(QStringLiteral("tile")) == 0 && problems_.count(QStringLiteral("overlap")) == 0;
    if (planOk) {
        try {
            const TilePlan plan = TilePlan::fromConfig(c);
            const int batch = resolveTileBatch(c.tileBatch, plan.count());
            costTiles_->setText(tr("%1 (%2 × %3) of %4×%5 px")
                                    .arg(plan.count())
                                    .arg(plan.cols())
                                    .arg(plan.rows())
                                    .arg(plan.tileW())
                                    .arg(plan.tileH()));
            costRedundancy_->setText(tr("%1×").arg(plan.redundancy(), 0, 'f', 2));
            costEvaluations_->setText(tr("%1 per step, %2 total")
                                          .arg(plan.evaluationsPerStep())
                                          .arg(QLocale().toString(static_cast<qlonglong>(plan.totalEvaluations(std::max(0, c.steps))))));
            costBatches_->setText(tr("%1 (batch %2)").arg((plan.count() + batch - 1) / batch).arg(batch));
            return;
        } catch (const std::exception& e) {
            costTiles_->setText(QString::fromUtf8(e.what()));
        }
    } else {
        costTiles_->setText(tr("— (fix the marked fields)"));
    }
    costRedundancy_->setText(tr("—"));
    costEvaluations_->setText(tr("—"));
    costBatches_->setText(tr("—"));
}

void ConfigPanel::chooseModelFolder() {
    QString start = model_->text().trimmed();
    if (start.isEmpty()) start = defaultModelFolder_;
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Choose a UNet2DModel folder"), start);
    if (!folder.isEmpty()) model_->setText(folder);
}

void ConfigPanel::chooseModelFile() {
    QString start = model_->text().trimmed();
    if (start.isEmpty() || start.startsWith(QString::fromLatin1(kRandomModelPrefix))) start = defaultModelFolder_;
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a Stable Diffusion checkpoint"), start,
                                                      tr("Safetensors checkpoints (*.safetensors)"));
    if (!file.isEmpty()) model_->setText(file);
}

void ConfigPanel::setRecentModels(const QStringList& models) {
    recentModels_.clear();
    for (const QString& model : models)
        if (!model.isEmpty() && !recentModels_.contains(model) && recentModels_.size() < kMaxRecentModels) recentModels_ << model;
}

void ConfigPanel::noteModelUsed(const QString& model) {
    if (model.isEmpty()) return;
    QStringList models = recentModels_;
    models.removeAll(model);
    models.prepend(model);
    setRecentModels(models);
}

ModelPicker* ConfigPanel::openModelPicker() {
    auto* picker = new ModelPicker(catalog_, modelsFolder_, recentModels_, this);
    picker->setAttribute(Qt::WA_DeleteOnClose);
    connect(picker, &ModelPicker::modelChosen, this, [this](const QString& path) { model_->setText(path); });
    connect(picker, &ModelPicker::modelsFolderChanged, this, [this](const QString& folder) {
        modelsFolder_ = folder;
        emit modelsFolderChanged(folder);
    });
    picker->open();
    return picker;
}

void ConfigPanel::setLastRunSeed(std::uint64_t seed) {
    lastRunSeed_ = seed;
    reuseSeed_->setEnabled(true);
    reuseSeed_->setToolTip(tr("Reuse the seed of the last run: %1").arg(seed));
}

void ConfigPanel::rollSeed() {
    // 32 bits: easy to read back, type and share.
    seed_->setText(QString::number(QRandomGenerator::global()->generate()));
}

}  // namespace tessera
