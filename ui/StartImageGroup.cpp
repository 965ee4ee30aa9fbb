#include "ui/StartImageGroup.h"

#include <algorithm>
#include <functional>

#include <QAction>
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
#include <QStyle>
#include <QToolButton>

#include "app/cli/UpscaleModelRun.h"
#include "core/run/UpscaleModelFile.h"
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

// The Upscaler list's items: the setting each gives (Qt::UserRole; "" for None), and Browse…,
// which gives none (kBrowseRole set).
constexpr int kBrowseRole = Qt::UserRole + 1;

// The Upscaler list, read again each time it is opened (a model copied into ESRGAN/ meanwhile).
class UpscalerCombo : public QComboBox {
public:
    std::function<void()> aboutToOpen;
    void showPopup() override {
        if (aboutToOpen) aboutToOpen();
        QComboBox::showPopup();
    }
};

// A setting names a file (used as given) rather than a model to look up by name: as
// core/run/UpscaleModelFile.h findUpscaleModel tells them apart, without looking at the disk.
bool isPathValue(const QString& value) { return value.contains(QLatin1Char('/')) || value.contains(QLatin1Char('\\')); }

QString itemText(const UpscaleModelEntry& e) {
    if (!e.usable()) return StartImageGroup::tr("%1 — cannot be used").arg(e.name);
    return StartImageGroup::tr("%1 — %2× %3").arg(e.name).arg(e.scale).arg(e.family);
}

// What a list reads to compare: the list is filled again only when something shown changed.
bool sameModels(const UpscaleModelScan& a, const UpscaleModelScan& b) {
    const auto same = [](const QList<UpscaleModelEntry>& x, const QList<UpscaleModelEntry>& y) {
        if (x.size() != y.size()) return false;
        for (qsizetype i = 0; i < x.size(); ++i)
            if (x[i].path != y[i].path || x[i].architecture != y[i].architecture || x[i].error != y[i].error ||
                x[i].bytes != y[i].bytes)
                return false;
        return true;
    };
    return a.folders == b.folders && same(a.found, b.found) && same(a.others, b.others);
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

    addUpscalerRows(form);

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

void StartImageGroup::addUpscalerRows(QFormLayout* form) {
    auto* upscaler = new UpscalerCombo;
    upscaler->aboutToOpen = [this] { scanUpscaleModels(); };
    upscaler_ = upscaler;
    upscaler_->setObjectName(QStringLiteral("upscaleModelCombo"));
    // Long model names must not widen the settings panel: the list shows them whole.
    upscaler_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    upscaler_->setMinimumContentsLength(12);
    upscaler_->setToolTip(
        tr("An upscale model (ESRGAN, Real-ESRGAN Compact, SPAN) run over the start image before it is resized to "
           "the canvas, as A1111's SD upscale and ComfyUI's upscale models do; the models come from the models "
           "folders' ESRGAN/ and upscale_models/, or Browse… for a file"));
    noneText_ = tr("None (resize only)");
    upscaler_->addItem(noneText_, QString());
    form->addRow(tr("Upscaler"), upscaler_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("upscale_model"), upscaler_));
    upscalerInfo_ = makeRoleLabel("upscaleModelInfo", "hint");
    upscalerInfo_->hide();
    form->addRow(QString(), upscalerInfo_);
    upscaleOnly_ = new QToolButton;
    upscaleOnly_->setObjectName(QStringLiteral("upscaleOnlyButton"));
    upscaleOnly_->hide();  // until the window gives it its action
    form->addRow(QString(), upscaleOnly_);
    upscaleModels_ = new UpscaleModelCatalog(this);
    connect(upscaleModels_, &UpscaleModelCatalog::scanned, this, [this](quint64 id, const UpscaleModelScan& scan) {
        if (id == scanJob_) onUpscaleModelsScanned(scan);
    });
    connect(upscaler_, &QComboBox::activated, this, [this](int index) {
        if (upscaler_->itemData(index, kBrowseRole).toBool()) return browseUpscaleModel();
        wanted_ = upscaler_->itemData(index).toString();
        showUpscaleModelInfo();
        emit edited();
    });
}

void StartImageGroup::readInto(RunConfig& c) const {
    c.strength = strength_->value();
    c.upscale = scale() == Scale::TargetSize ? 1.0 : upscale_->value();
    c.upscaleModel = chosenUpscaleValue().toStdString();
}

void StartImageGroup::showConfig(const RunConfig& c) {
    wanted_ = QString::fromStdString(c.upscaleModel);
    fillUpscaleModels();
    // A file not listed yet (a run reopened, settings restored) is read to describe it.
    if (!wanted_.isEmpty() && isPathValue(wanted_) && !entryFor(wanted_)) scanUpscaleModels();
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
    for (QWidget* editor :
         {static_cast<QWidget*>(strength_), static_cast<QWidget*>(scale_), static_cast<QWidget*>(upscale_),
          static_cast<QWidget*>(clear_), static_cast<QWidget*>(upscaler_)})
        editor->setEnabled(hasImage);
    upscale_->setVisible(scale() == Scale::Factor);
    // The None item says what resizing alone does to this image (the filter a run without a
    // model uses: app/cli/UpscaleModelRun.h resizeFilterName).
    const std::string filter = hasImage && header_
                                   ? resizeFilterName(header_->width, header_->height, canvas.width(), canvas.height())
                                   : std::string("?");
    noneText_ = filter == "?"    ? tr("None (resize only)")
                : filter.empty() ? tr("None (no resize)")
                                 : tr("None (resize only: %1)").arg(QString::fromStdString(filter));
    const int none = upscaler_->findData(QString());
    if (none >= 0) upscaler_->setItemText(none, noneText_);
    showUpscaleModelInfo();
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

void StartImageGroup::setUpscaleModelSources(const QString& windowModelsFolder, const std::string& runModel) {
    const QStringList folders = UpscaleModelCatalog::modelsFolders(windowModelsFolder, runModel);
    if (folders == upscaleFolders_ && (scan_ || scanning_)) return;
    upscaleFolders_ = folders;
    scanUpscaleModels();
}

void StartImageGroup::scanUpscaleModels() {
    QStringList others = browsed_;
    if (isPathValue(wanted_) && !others.contains(wanted_)) others << wanted_;
    scanning_ = true;
    scanJob_ = upscaleModels_->scan(upscaleFolders_, others);
}

void StartImageGroup::onUpscaleModelsScanned(const UpscaleModelScan& scan) {
    const bool wasReading = isReadingUpscaleModel();
    const QString before = chosenUpscaleValue();
    scanning_ = false;
    const bool changed = !scan_ || !sameModels(*scan_, scan);
    scan_ = scan;
    if (changed) fillUpscaleModels();
    showUpscaleModelInfo();
    // The panel checks its fields again: the model's problems (and Run) may have changed.
    if (wasReading && !shownPath_.empty() && (header_ || !error_.isEmpty()))
        emit headerChecked(header_.has_value());
    else if (wasReading || changed || before != chosenUpscaleValue())
        emit edited();
}

const UpscaleModelEntry* StartImageGroup::entryFor(const QString& value) const {
    if (!scan_ || value.isEmpty()) return nullptr;
    if (isPathValue(value)) {
        const QString path = QFileInfo(value).absoluteFilePath();
        for (const QList<UpscaleModelEntry>* list : {&scan_->found, &scan_->others})
            for (const UpscaleModelEntry& e : *list)
                if (e.path == path) return &e;
        return nullptr;
    }
    // A name: the first model of that name, in the order a run looks it up.
    const QString name = QString::fromStdString(upscalerName(value.toStdString()));
    for (const UpscaleModelEntry& e : scan_->found)
        if (e.name == name) return &e;
    return nullptr;
}

void StartImageGroup::fillUpscaleModels() {
    const QSignalBlocker block(upscaler_);
    upscaler_->clear();
    upscaler_->addItem(noneText_, QString());
    const auto add = [this](const UpscaleModelEntry& e) {
        upscaler_->addItem(itemText(e), e.path);
        const int at = upscaler_->count() - 1;
        upscaler_->setItemData(
            at, QDir::toNativeSeparators(e.path) + QLatin1Char('\n') + (e.usable() ? e.architecture : e.error),
            Qt::ToolTipRole);
    };
    if (scan_) {
        if (!scan_->found.isEmpty()) upscaler_->insertSeparator(upscaler_->count());
        for (const UpscaleModelEntry& e : scan_->found) add(e);
        if (!scan_->others.isEmpty()) upscaler_->insertSeparator(upscaler_->count());
        for (const UpscaleModelEntry& e : scan_->others) add(e);
    }
    // The setting, where no item gives it: a name found nowhere, or a file not read yet.
    int selected = 0;
    if (!wanted_.isEmpty()) {
        const UpscaleModelEntry* entry = entryFor(wanted_);
        selected = entry ? upscaler_->findData(entry->path) : -1;
        if (selected < 0) {
            const QString name = QString::fromStdString(upscalerName(wanted_.toStdString()));
            upscaler_->addItem(scanning_ || !scan_ ? name : tr("%1 — not found").arg(name), wanted_);
            selected = upscaler_->count() - 1;
        }
    }
    upscaler_->insertSeparator(upscaler_->count());
    upscaler_->addItem(tr("Browse…"));
    upscaler_->setItemData(upscaler_->count() - 1, true, kBrowseRole);
    upscaler_->setItemData(upscaler_->count() - 1, tr("Choose an upscale model file (.safetensors, .pth, .pt)"),
                           Qt::ToolTipRole);
    upscaler_->setCurrentIndex(selected);
}

QString StartImageGroup::chosenUpscaleValue() const {
    if (upscaler_->currentIndex() < 0 || upscaler_->currentData(kBrowseRole).toBool()) return wanted_;
    return upscaler_->currentData().toString();
}

const UpscaleModelEntry* StartImageGroup::chosenUpscaleModel() const { return entryFor(chosenUpscaleValue()); }

bool StartImageGroup::isReadingUpscaleModel() const {
    const QString value = chosenUpscaleValue();
    return !value.isEmpty() && scanning_ && !entryFor(value);
}

void StartImageGroup::showUpscaleModelInfo() {
    const QString value = chosenUpscaleValue();
    const UpscaleModelEntry* entry = entryFor(value);
    QString text, role = QStringLiteral("hint");
    if (value.isEmpty()) {
        if (scan_ && scan_->found.isEmpty() && browsed_.isEmpty()) {
            text = tr("No upscale models in the models folders' ESRGAN/ or upscale_models/; Browse… for a file");
            upscalerInfo_->setToolTip(
                tr("Looked in:\n%1").arg(QDir::toNativeSeparators(scan_->folders.join(QLatin1Char('\n')))));
        }
    } else if (entry && entry->usable()) {
        const QString size = entry->bytes >= (qint64{1} << 20) ? tr("%1 MiB").arg(entry->bytes / 1048576.0, 0, 'f', 1)
                                                               : tr("%1 KiB").arg((entry->bytes + 1023) / 1024);
        text = tr("%1 · %2 · %3")
                   .arg(entry->architecture, size,
                        entry->pickle ? tr("PyTorch checkpoint, read without running code")
                                      : QStringLiteral("safetensors"));
        upscalerInfo_->setToolTip(QDir::toNativeSeparators(entry->path));
    } else if (entry && shownPath_.empty()) {
        // With a start image the panel shows why under the list (upscaleModelProblems).
        text = entry->error;
        role = QStringLiteral("error");
    } else if (!entry && isReadingUpscaleModel()) {
        text = tr("Reading the model…");
    }
    if (upscalerInfo_->property("role").toString() != role) {
        upscalerInfo_->setProperty("role", role);
        upscalerInfo_->style()->unpolish(upscalerInfo_);
        upscalerInfo_->style()->polish(upscalerInfo_);
    }
    upscalerInfo_->setText(text);
    upscalerInfo_->setVisible(!text.isEmpty());
}

std::vector<std::pair<QString, QString>> StartImageGroup::upscaleModelProblems(const RunConfig& c) const {
    std::vector<std::pair<QString, QString>> problems;
    if (c.initImage.empty() || c.upscaleModel.empty()) return problems;
    const QString value = QString::fromStdString(c.upscaleModel);
    const QString field = QStringLiteral("upscale_model");
    const UpscaleModelEntry* entry = entryFor(value);
    if (!entry) {
        if (scanning_ || !scan_)
            problems.emplace_back(field, tr("reading the upscale model…"));
        else if (!isPathValue(value))
            problems.emplace_back(field, tr("no upscale model named '%1' in the models folders' ESRGAN/ or "
                                            "upscale_models/; choose one from the list, or Browse… for its file")
                                             .arg(value));
        return problems;  // a path is always described (the list reads it), so never here
    }
    if (!entry->usable()) {
        problems.emplace_back(field, entry->error);
        return problems;
    }
    // As checkUpscaleModelRun says it: an output is only ever shrunk to the canvas, never enlarged.
    if (header_ && (c.width > header_->width * entry->scale || c.height > header_->height * entry->scale))
        problems.emplace_back(QStringLiteral("upscale"),
                              tr("%1×%2 upscaled to %3×%4 needs more than %5 gives (%6×: %7×%8); ask for %6 or "
                                 "less, or use a model of a larger scale")
                                  .arg(header_->width)
                                  .arg(header_->height)
                                  .arg(c.width)
                                  .arg(c.height)
                                  .arg(entry->name)
                                  .arg(entry->scale)
                                  .arg(header_->width * entry->scale)
                                  .arg(header_->height * entry->scale));
    return problems;
}

QString StartImageGroup::upscaleOnlyBlocker(const RunConfig& c) const {
    if (c.initImage.empty()) return tr("Open a start image to upscale first");
    if (!error_.isEmpty()) return error_;
    if (!header_) return tr("Reading the start image…");
    if (c.upscaleModel.empty()) return tr("Choose an upscale model under Start image ▸ Upscaler first");
    // The output upscaling alone makes: the image times the factor, each side truncated (as A1111's
    // extras tab), or the Size fields with Target size.
    RunConfig target = c;
    if (c.upscale != 1.0) {
        target.width = std::max(1, static_cast<int>(header_->width * c.upscale + 1e-9));
        target.height = std::max(1, static_cast<int>(header_->height * c.upscale + 1e-9));
    }
    const std::vector<std::pair<QString, QString>> problems = upscaleModelProblems(target);
    if (!problems.empty()) return problems.front().first + QStringLiteral(": ") + problems.front().second;
    return {};
}

void StartImageGroup::setUpscaleOnlyAction(QAction* action) {
    upscaleOnly_->setDefaultAction(action);
    upscaleOnly_->setToolButtonStyle(Qt::ToolButtonTextOnly);
    upscaleOnly_->setVisible(action != nullptr);
}

void StartImageGroup::chooseUpscaleModelFile(const QString& path) {
    if (path.isEmpty()) return;
    const QString file = QFileInfo(path).absoluteFilePath();
    if (!browsed_.contains(file)) browsed_ << file;
    wanted_ = file;
    fillUpscaleModels();
    scanUpscaleModels();
    showUpscaleModelInfo();
    emit edited();
}

void StartImageGroup::browseUpscaleModel() {
    // Back to the setting while the dialog is open (and when it is cancelled).
    fillUpscaleModels();
    QString dir;
    if (isPathValue(wanted_))
        dir = QFileInfo(wanted_).absolutePath();
    else if (!upscaleFolders_.isEmpty())
        dir = QDir(upscaleFolders_.front()).filePath(QLatin1String(kUpscaleModelFolders[0]));
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose an upscale model"), dir,
                                                      tr("Upscale models (*.safetensors *.pth *.pt)"));
    chooseUpscaleModelFile(file);
}

void StartImageGroup::chooseStartImage() {
    const QString current = QString::fromStdString(shownPath_);
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a start image"),
                                                      current.isEmpty() ? QString() : QFileInfo(current).absolutePath(),
                                                      tr("Images (*.png *.jpg *.jpeg)"));
    if (!file.isEmpty()) emit startImageChosen(file);
}

}  // namespace tessera
