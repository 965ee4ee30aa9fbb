#include "ui/StartImageGroup.h"

#include <functional>

#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMimeData>
#include <QToolButton>

#include "ui/TileCanvas.h"

namespace tessera {

namespace {

// The Scale list: factors (data > 0), "any factor" (the spin box's; data 0) and target size (-1).
constexpr double kAnyFactor = 0.0, kTargetSize = -1.0;

// Drops of one PNG or JPEG file on the start image group.
class StartImageDrop : public QObject {
public:
    StartImageDrop(QObject* parent, std::function<void(const QString&)> take)
        : QObject(parent), take_(std::move(take)) {}

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
    if (bytes >= (std::uint64_t{1} << 20)) return StartImageGroup::tr("%1 MiB").arg(bytes / 1048576.0, 0, 'f', 1);
    return StartImageGroup::tr("%1 KiB").arg((bytes + 1023) / 1024);
}

}  // namespace

StartImageGroup::StartImageGroup(QWidget* parent) : ConfigGroup(tr("Start image"), parent) {
    setObjectName(QStringLiteral("startGroup"));
    setAcceptDrops(true);
    installEventFilter(new StartImageDrop(this, [this](const QString& path) { emit startImageChosen(path); }));
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    name_ = new QLabel;
    name_->setObjectName(QStringLiteral("startImageName"));
    name_->setWordWrap(true);
    name_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* open = new QToolButton;
    open->setObjectName(QStringLiteral("startImageOpen"));
    open->setText(tr("Open…"));
    open->setToolTip(
        tr("Start from a PNG or JPEG (image-to-image, upscaling); you can also drop one here or on the canvas"));
    clear_ = new QToolButton;
    clear_->setObjectName(QStringLiteral("startImageClear"));
    clear_->setText(tr("Clear"));
    clear_->setToolTip(tr("Start from noise again"));
    auto* fileRow = new QHBoxLayout;
    fileRow->setContentsMargins(0, 0, 0, 0);
    fileRow->addWidget(open);
    fileRow->addWidget(clear_);
    fileRow->addStretch(1);
    form->addRow(tr("Image"), fileRow);
    // The name on a row of its own: a wrapped label beside buttons gets too little height.
    form->addRow(QString(), name_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("init"), name_));

    strength_ = makeRealSpin(0, 1, 0.05, 2);
    strength_->setObjectName(QStringLiteral("strengthSpin"));
    strength_->setToolTip(
        tr("How much the image may change, above 0 to 1: 0.3 keeps the picture and adds detail, "
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
    scale_->setToolTip(
        tr("The canvas: the start image's size times a factor (rounded down to multiples of 8), or "
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
    canvasSize_ = makeRoleLabel("startCanvasSize", "hint");
    form->addRow(QString(), canvasSize_);

    connect(open, &QToolButton::clicked, this, &StartImageGroup::chooseStartImage);
    connect(clear_, &QToolButton::clicked, this, [this] { emit startImageChosen({}); });
    connect(strength_, &QDoubleSpinBox::valueChanged, this, &StartImageGroup::edited);
    connect(scale_, &QComboBox::currentIndexChanged, this, [this] {
        // A preset factor goes into the factor box, which is what the run uses.
        const double factor = scale_->currentData().toDouble();
        if (factor > 0) {
            const QSignalBlocker block(upscale_);
            upscale_->setValue(factor);
        }
        emit edited();
    });
    connect(upscale_, &QDoubleSpinBox::valueChanged, this, [this](double factor) {
        // Typing 2 selects "×2"; typing 3 selects "Factor".
        if (scale_->currentData().toDouble() != kTargetSize) {
            const int preset = scale_->findData(factor);
            const QSignalBlocker block(scale_);
            scale_->setCurrentIndex(preset >= 0 ? preset : scale_->findData(kAnyFactor));
        }
        emit edited();
    });
}

void StartImageGroup::readInto(RunConfig& c) const {
    c.strength = strength_->value();
    c.upscale = scale() == Scale::TargetSize ? 1.0 : upscale_->value();
}

void StartImageGroup::showConfig(const RunConfig& c) {
    strength_->setValue(c.strength);
    upscale_->setValue(c.upscale);
    // With a start image and no factor the Size fields are the canvas (what the run used).
    const int preset = scale_->findData(c.upscale);
    scale_->setCurrentIndex(!c.initImage.empty() && c.upscale == 1.0 ? scale_->findData(kTargetSize)
                            : preset >= 0                            ? preset
                                                                     : scale_->findData(kAnyFactor));
}

StartImageGroup::Scale StartImageGroup::scale() const {
    return scale_->currentData().toDouble() == kTargetSize ? Scale::TargetSize : Scale::Factor;
}

QString StartImageGroup::check(const std::string& path) {
    if (path.empty()) return {};
    const QString asked = QString::fromStdString(path);
    if (asked != askedFor_) {
        // The header only (a few bytes), read off this thread; the newest request wins.
        askedFor_ = asked;
        header_.reset();
        error_.clear();
        job_ = headerJobs_.start([path] { return readImageHeader(path); },
                                 [this](quint64 id, const ImageHeader& header) {
                                     if (id != job_) return;
                                     header_ = header;
                                     emit headerChecked(true);
                                 },
                                 [this](quint64 id, const QString& error) {
                                     if (id != job_) return;
                                     error_ = error;
                                     emit headerChecked(false);
                                 });
    }
    if (!error_.isEmpty()) return error_;
    if (!header_) return tr("reading the start image…");
    return {};
}

StartImageGroup::Canvas StartImageGroup::canvasFromImage(const std::string& path) const {
    Canvas canvas;
    canvas.follows = !path.empty() && header_ && scale() == Scale::Factor && QString::fromStdString(path) == askedFor_;
    if (canvas.follows && upscale_->value() >= 1.0 && upscale_->value() <= kMaxUpscale)
        canvas.size = QSize(upscaledCanvasSide(header_->width, upscale_->value()),
                            upscaledCanvasSide(header_->height, upscale_->value()));
    return canvas;
}

void StartImageGroup::showStartImage(const std::string& path, QSize canvas) {
    shownPath_ = path;
    const bool hasImage = !path.empty();
    for (QWidget* editor : {static_cast<QWidget*>(strength_), static_cast<QWidget*>(scale_),
                            static_cast<QWidget*>(upscale_), static_cast<QWidget*>(clear_)})
        editor->setEnabled(hasImage);
    upscale_->setVisible(scale() == Scale::Factor);
    if (!hasImage) {
        name_->setText(tr("None: the run starts from noise"));
        name_->setToolTip({});
        canvasSize_->setText(tr("Open or drop a PNG or JPEG to start from it (image-to-image, upscaling)"));
        return;
    }
    const QFileInfo file(QString::fromStdString(path));
    name_->setToolTip(QDir::toNativeSeparators(file.absoluteFilePath()));
    if (!header_) {
        name_->setText(file.fileName());
        canvasSize_->clear();
        return;
    }
    name_->setText(tr("%1 — %2 × %3 px, %4")
                       .arg(file.fileName())
                       .arg(header_->width)
                       .arg(header_->height)
                       .arg(fileSizeText(header_->fileBytes)));
    canvasSize_->setText(
        scale() == Scale::TargetSize
            ? tr("Canvas %1 × %2 px (the Size fields); the image is stretched to it")
                  .arg(canvas.width())
                  .arg(canvas.height())
            : tr("Canvas %1 × %2 px: the image × %3").arg(canvas.width()).arg(canvas.height()).arg(upscale_->value()));
}

void StartImageGroup::chooseStartImage() {
    const QString current = QString::fromStdString(shownPath_);
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a start image"),
                                                      current.isEmpty() ? QString() : QFileInfo(current).absolutePath(),
                                                      tr("Images (*.png *.jpg *.jpeg)"));
    if (!file.isEmpty()) emit startImageChosen(file);
}

}  // namespace tessera
