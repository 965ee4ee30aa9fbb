#include "ui/ControlNetGroup.h"

#include <algorithm>
#include <utility>

#include <QCheckBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QStyle>
#include <QTabBar>
#include <QToolButton>
#include <QVBoxLayout>

#include "app/qt/UpscaleModelCatalog.h"
#include "core/run/ControlNetInfotext.h"

namespace tessera {

namespace {

// The control image value of a unit that takes the start image.
bool takesStartImage(const std::string& image) { return image.empty() || image == "init"; }

QString preprocessorToolTip(const QString& name) {
    if (name == QLatin1String("none")) return QObject::tr("The control image as it is");
    if (name == QLatin1String("tile_resample"))
        return QObject::tr(
            "sd-webui-controlnet's tile_resample: the control image shrunk by the down sampling rate (OpenCV's area "
            "filter) and brought back to the run's size; a blurrier hint leaves the model more freedom");
    if (name == QLatin1String("tile_colorfix"))
        return QObject::tr(
            "sd-webui-controlnet's tile_colorfix: every step's prediction keeps the control image's colours (blurred "
            "by the Variation); the hint is the image as it is");
    return QObject::tr(
        "sd-webui-controlnet's tile_colorfix+sharp: as tile_colorfix, and the prediction's detail sharpened by the "
        "Sharpness; the hint is the image as it is");
}

}  // namespace

ControlNetGroup::ControlNetGroup(QWidget* parent) : ConfigGroup(tr("ControlNet"), parent) {
    setObjectName(QStringLiteral("controlNetGroup"));
    units_.resize(kUnits);
    auto* layout = new QVBoxLayout(this);
    reason_ = makeRoleLabel("controlNetReason", "hint");
    reason_->hide();
    layout->addWidget(reason_);

    tabs_ = new QTabBar;
    tabs_->setObjectName(QStringLiteral("controlNetUnitTabs"));
    tabs_->setDrawBase(false);
    tabs_->setExpanding(false);
    tabs_->setToolTip(tr("A1111's ControlNet units: each enabled unit steers the run with its own model and image"));
    for (int i = 0; i < kUnits; ++i) tabs_->addTab(QString());
    expander_ = new QToolButton;
    expander_->setObjectName(QStringLiteral("controlNetExpander"));
    expander_->setAutoRaise(true);
    expander_->setToolTip(tr("Show or fold away the unit's settings"));
    auto* top = new QHBoxLayout;
    top->setContentsMargins(0, 0, 0, 0);
    top->addWidget(tabs_, 1);
    top->addWidget(expander_);
    layout->addLayout(top);

    editors_ = new QWidget;
    editors_->setObjectName(QStringLiteral("controlNetEditors"));
    auto* form = new QFormLayout(editors_);
    form->setContentsMargins(0, 0, 0, 0);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    layout->addWidget(editors_);

    addUnitRows(form);

    catalog_ = new ControlNetCatalog(this);
    connectEditors();
    updateTabs();
    showUnit();
    setExpanded(false);
}

void ControlNetGroup::addUnitRows(QFormLayout* form) {
    enabled_ = new QCheckBox(tr("Enable"));
    enabled_->setObjectName(QStringLiteral("controlNetEnabled"));
    enabled_->setToolTip(tr("The unit steers the run (A1111's Enable)"));
    form->addRow(enabled_);

    model_ = new QComboBox;
    model_->setObjectName(QStringLiteral("controlNetModelCombo"));
    model_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    model_->setMinimumContentsLength(10);
    model_->setToolTip(
        tr("The ControlNets of the models folder's ControlNet/ (A1111) and controlnet/ (ComfyUI): a file "
           "(.safetensors, .pth) or a diffusers folder; it must be made for the checkpoint's family"));
    browseModel_ = new QPushButton(tr("Browse"));
    browseModel_->setObjectName(QStringLiteral("controlNetBrowseModel"));
    auto* browseMenu = new QMenu(browseModel_);
    browseMenu->addAction(tr("A file (.safetensors, .pth)…"), this, [this] { browseModel(false); });
    browseMenu->addAction(tr("A diffusers folder…"), this, [this] { browseModel(true); });
    browseModel_->setMenu(browseMenu);
    browseModel_->setToolTip(tr("Choose a ControlNet file or diffusers folder anywhere"));
    refresh_ = new QToolButton;
    refresh_->setObjectName(QStringLiteral("controlNetRefresh"));
    refresh_->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
    refresh_->setToolTip(tr("List the models folder's ControlNets again"));
    auto* modelRow = new QHBoxLayout;
    modelRow->setContentsMargins(0, 0, 0, 0);
    modelRow->addWidget(model_, 1);
    modelRow->addWidget(browseModel_);
    modelRow->addWidget(refresh_);
    form->addRow(tr("Model"), modelRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("controlnet"), model_));

    image_ = new QLineEdit;
    image_->setObjectName(QStringLiteral("controlNetImageEdit"));
    image_->setPlaceholderText(tr("the start image"));
    image_->setClearButtonEnabled(true);
    image_->setToolTip(
        tr("The control image: empty takes the run's start image (after the upscale model and the resize), as "
           "A1111's image-to-image does (clear the field for it); a file (PNG or JPEG) must have the run's size"));
    browseImage_ = new QPushButton(tr("Open…"));
    browseImage_->setObjectName(QStringLiteral("controlNetBrowseImage"));
    browseImage_->setToolTip(tr("Choose a control image file"));
    auto* imageRow = new QHBoxLayout;
    imageRow->setContentsMargins(0, 0, 0, 0);
    imageRow->addWidget(image_, 1);
    imageRow->addWidget(browseImage_);
    form->addRow(tr("Image"), imageRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("control_image"), image_));

    weight_ = makeRealSpin(0, 2, 0.05, 2);
    weight_->setObjectName(QStringLiteral("controlNetWeightSpin"));
    weight_->setToolTip(tr("A1111's Control Weight: the residuals are scaled by it (0 to 2)"));
    form->addRow(tr("Weight"), weight_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("control_weight"), weight_));

    start_ = makeRealSpin(0, 1, 0.05, 2);
    start_->setObjectName(QStringLiteral("controlNetStartSpin"));
    start_->setToolTip(tr("A1111's Starting Control Step: the fraction of the steps run before the unit acts"));
    end_ = makeRealSpin(0, 1, 0.05, 2);
    end_->setObjectName(QStringLiteral("controlNetEndSpin"));
    end_->setToolTip(tr("A1111's Ending Control Step: the fraction of the steps run after which the unit stops"));
    auto* guidanceRow = new QHBoxLayout;
    guidanceRow->setContentsMargins(0, 0, 0, 0);
    guidanceRow->addWidget(start_, 1);
    guidanceRow->addWidget(new QLabel(tr("to")));
    guidanceRow->addWidget(end_, 1);
    form->addRow(tr("Steps"), guidanceRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("control_start"), start_));

    mode_ = new QComboBox;
    mode_->setObjectName(QStringLiteral("controlNetModeCombo"));
    mode_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    mode_->setMinimumContentsLength(10);
    for (ControlMode mode : {ControlMode::Balanced, ControlMode::Prompt, ControlMode::ControlNet})
        mode_->addItem(QString::fromUtf8(a1111Name(mode)), QString::fromUtf8(toString(mode)));
    mode_->setItemData(0, tr("Every residual scaled by the weight"), Qt::ToolTipRole);
    mode_->setItemData(1, tr("Residual i also scaled by 0.825^(12 - i): the prompt weighs more"), Qt::ToolTipRole);
    mode_->setItemData(2, tr("Scaled as \"My prompt is more important\", and no control on the unconditional half"),
                       Qt::ToolTipRole);
    mode_->setToolTip(tr("A1111's Control Mode"));
    form->addRow(tr("Mode"), mode_);

    preprocessor_ = new QComboBox;
    preprocessor_->setObjectName(QStringLiteral("controlNetPreprocessorCombo"));
    for (const char* name : kControlPreprocessors) {
        preprocessor_->addItem(QString::fromLatin1(name), QString::fromLatin1(name));
        preprocessor_->setItemData(preprocessor_->count() - 1, preprocessorToolTip(QString::fromLatin1(name)),
                                   Qt::ToolTipRole);
    }
    preprocessor_->setToolTip(tr("A1111's Preprocessor, applied to the control image once per run"));
    form->addRow(tr("Preprocessor"), preprocessor_);

    // The preprocessor's settings, as the extension's sliders: tile_resample's Down Sampling Rate,
    // tile_colorfix's Variation, tile_colorfix+sharp's Variation and Sharpness.
    rate_ = makeRealSpin(1, 8, 0.1, 2);
    rate_->setObjectName(QStringLiteral("controlNetRateSpin"));
    rate_->setToolTip(tr("tile_resample's Down Sampling Rate (1 to 8): the control image is shrunk by it"));
    variation_ = makeRealSpin(kColorFixVariationMin, kColorFixVariationMax, 1, 0);
    variation_->setObjectName(QStringLiteral("controlNetVariationSpin"));
    variation_->setToolTip(
        tr("tile_colorfix's Variation (3 to 32 latent pixels): the blur radius of the colours kept from the control "
           "image; smaller keeps them closer"));
    sharpness_ = makeRealSpin(0, kColorFixSharpnessMax, 0.05, 2);
    sharpness_->setObjectName(QStringLiteral("controlNetSharpnessSpin"));
    sharpness_->setToolTip(tr("tile_colorfix+sharp's Sharpness (0 to 2): how much of the prediction's detail is kept"));
    parameters_ = new QWidget;
    parameters_->setObjectName(QStringLiteral("controlNetPreprocessorSettings"));
    auto* parameterRow = new QHBoxLayout(parameters_);
    parameterRow->setContentsMargins(0, 0, 0, 0);
    rateLabel_ = new QLabel(tr("Rate"));
    variationLabel_ = new QLabel(tr("Variation"));
    sharpnessLabel_ = new QLabel(tr("Sharpness"));
    for (auto [label, spin] : {std::pair<QLabel*, QDoubleSpinBox*>{rateLabel_, rate_},
                               {variationLabel_, variation_},
                               {sharpnessLabel_, sharpness_}}) {
        parameterRow->addWidget(label);
        parameterRow->addWidget(spin, 1);
    }
    form->addRow(QString(), parameters_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("control_preprocessor"), preprocessor_));
}

void ControlNetGroup::connectEditors() {
    connect(catalog_, &ControlNetCatalog::scanned, this, [this](quint64 id, const ControlNetCatalogScan& scan) {
        if (id == scanJob_) onScanned(scan);
    });
    connect(tabs_, &QTabBar::currentChanged, this, [this](int index) {
        if (index < 0 || index >= unitCount()) return;
        current_ = index;
        showUnit();
    });
    connect(expander_, &QToolButton::clicked, this, [this] { setExpanded(!isExpanded()); });
    connect(refresh_, &QToolButton::clicked, this, &ControlNetGroup::rescan);
    connect(enabled_, &QCheckBox::toggled, this, [this](bool on) {
        if (showing_) return;
        state().enabled = on;
        // A unit enabled without a model takes the first one listed (a run needs one).
        if (on && state().unit.model.empty() && scan_ && !scan_->controlNets.isEmpty()) {
            state().unit.model = scan_->controlNets.front().path.toStdString();
            fillModels();
        }
        unitEdited();
    });
    connect(model_, &QComboBox::activated, this, [this] {
        state().unit.model = model_->currentData().toString().toStdString();
        unitEdited();
    });
    connect(image_, &QLineEdit::editingFinished, this, [this] {
        const std::string image = image_->text().trimmed().toStdString();
        if (image == state().unit.image || (takesStartImage(image) && takesStartImage(state().unit.image))) return;
        state().unit.image = image;
        unitEdited();
    });
    connect(image_, &QLineEdit::textChanged, this, [this](const QString& text) {
        // The clear button (and a cleared field) means the start image at once.
        if (showing_ || !text.isEmpty() || takesStartImage(state().unit.image)) return;
        state().unit.image.clear();
        unitEdited();
    });
    connect(browseImage_, &QPushButton::clicked, this, &ControlNetGroup::browseImage);
    const auto onSpin = [this](QDoubleSpinBox* spin, double ControlNetUnit::*field) {
        connect(spin, &QDoubleSpinBox::valueChanged, this, [this, field](double value) {
            if (showing_) return;
            state().unit.*field = value;
            unitEdited();
        });
    };
    onSpin(weight_, &ControlNetUnit::weight);
    onSpin(start_, &ControlNetUnit::start);
    onSpin(end_, &ControlNetUnit::end);
    onSpin(rate_, &ControlNetUnit::downSampling);
    onSpin(variation_, &ControlNetUnit::colorfixVariation);
    onSpin(sharpness_, &ControlNetUnit::colorfixSharpness);
    connect(mode_, &QComboBox::currentIndexChanged, this, [this] {
        if (showing_) return;
        state().unit.mode = controlModeFromString(selectedName(mode_)).value_or(ControlMode::Balanced);
        unitEdited();
    });
    connect(preprocessor_, &QComboBox::currentIndexChanged, this, [this] {
        if (showing_) return;
        state().unit.preprocessor = selectedName(preprocessor_);
        unitEdited();
    });
}

void ControlNetGroup::readInto(RunConfig& c) const {
    c.controlNets.clear();
    for (const UnitState& u : units_)
        if (u.enabled) c.controlNets.push_back(u.unit);
}

void ControlNetGroup::showConfig(const RunConfig& c) {
    const std::size_t count = std::max<std::size_t>(kUnits, c.controlNets.size());
    units_.assign(count, UnitState{});
    for (std::size_t i = 0; i < c.controlNets.size(); ++i) units_[i] = UnitState{true, c.controlNets[i]};
    const QSignalBlocker block(tabs_);
    while (tabs_->count() < unitCount()) tabs_->addTab(QString());
    while (tabs_->count() > unitCount()) tabs_->removeTab(tabs_->count() - 1);
    current_ = std::min(current_, unitCount() - 1);
    if (!c.controlNets.empty() && !units_[static_cast<std::size_t>(current_)].enabled) current_ = 0;
    tabs_->setCurrentIndex(current_);
    updateTabs();
    showUnit();
    if (!c.controlNets.empty()) setExpanded(true);
}

std::vector<std::pair<bool, ControlNetUnit>> ControlNetGroup::allUnits() const {
    std::vector<std::pair<bool, ControlNetUnit>> all;
    for (const UnitState& u : units_) all.emplace_back(u.enabled, u.unit);
    return all;
}

void ControlNetGroup::restoreUnits(const std::vector<std::pair<bool, ControlNetUnit>>& units) {
    std::vector<ControlNetUnit> enabled;
    for (const auto& u : units)
        if (u.first) enabled.push_back(u.second);
    RunConfig shown;
    readInto(shown);
    if (units.empty() || enabled != shown.controlNets) return;
    units_.clear();
    for (const auto& u : units) units_.push_back(UnitState{u.first, u.second});
    while (units_.size() < static_cast<std::size_t>(kUnits)) units_.push_back(UnitState{});
    const QSignalBlocker block(tabs_);
    while (tabs_->count() < unitCount()) tabs_->addTab(QString());
    while (tabs_->count() > unitCount()) tabs_->removeTab(tabs_->count() - 1);
    current_ = std::min(current_, unitCount() - 1);
    tabs_->setCurrentIndex(current_);
    updateTabs();
    showUnit();
}

void ControlNetGroup::setModelSources(const QString& windowModelsFolder, const std::string& runModel) {
    const QStringList folders = UpscaleModelCatalog::modelsFolders(windowModelsFolder, runModel);
    if (folders == folders_ && (scan_ || scanning_)) return;
    folders_ = folders;
    rescan();
}

void ControlNetGroup::rescan() {
    scanning_ = true;
    scanJob_ = catalog_->scan(folders_);
}

void ControlNetGroup::setUnavailableReason(const QString& reason) {
    unavailable_ = reason;
    reason_->setText(reason);
    reason_->setVisible(!reason.isEmpty());
    updateEnabling();
}

void ControlNetGroup::selectUnit(int index) {
    if (index >= 0 && index < unitCount()) tabs_->setCurrentIndex(index);
}

bool ControlNetGroup::isExpanded() const { return !editors_->isHidden(); }

void ControlNetGroup::setExpanded(bool expanded) {
    editors_->setVisible(expanded);
    expander_->setArrowType(expanded ? Qt::DownArrow : Qt::RightArrow);
}

void ControlNetGroup::onScanned(const ControlNetCatalogScan& scan) {
    scanning_ = false;
    scan_ = scan;
    fillModels();
}

void ControlNetGroup::showUnit() {
    showing_ = true;
    const UnitState& s = units_[static_cast<std::size_t>(current_)];
    enabled_->setChecked(s.enabled);
    enabled_->setText(tr("Enable unit %1").arg(current_));
    fillModels();
    image_->setText(takesStartImage(s.unit.image) ? QString() : QString::fromStdString(s.unit.image));
    image_->setToolTip(takesStartImage(s.unit.image) ? tr("The control image: the run's start image")
                                                     : QString::fromStdString(s.unit.image));
    weight_->setValue(s.unit.weight);
    start_->setValue(s.unit.start);
    end_->setValue(s.unit.end);
    selectIn(mode_, s.unit.mode);
    int preprocessor = preprocessor_->findData(QString::fromStdString(s.unit.preprocessor));
    if (preprocessor < 0) {
        // A name this version does not list (a pasted infotext's): shown as it is named; a run refuses it.
        preprocessor_->addItem(QString::fromStdString(s.unit.preprocessor),
                               QString::fromStdString(s.unit.preprocessor));
        preprocessor = preprocessor_->count() - 1;
    }
    preprocessor_->setCurrentIndex(preprocessor);
    rate_->setValue(s.unit.downSampling);
    variation_->setValue(s.unit.colorfixVariation);
    sharpness_->setValue(s.unit.colorfixSharpness);
    showing_ = false;
    updateEnabling();
}

void ControlNetGroup::fillModels() {
    const std::string& wanted = units_[static_cast<std::size_t>(current_)].unit.model;
    const QString wantedText = QString::fromStdString(wanted);
    model_->clear();
    model_->addItem(tr("None"), QString());
    int byPath = wanted.empty() ? 0 : -1, byName = -1;
    if (scan_)
        for (const ModelFileEntry& e : scan_->controlNets) {
            model_->addItem(e.name, e.path);
            model_->setItemData(model_->count() - 1, QDir::toNativeSeparators(e.path), Qt::ToolTipRole);
            if (e.path == wantedText) byPath = model_->count() - 1;
            if (byName < 0 && e.name == wantedText) byName = model_->count() - 1;
        }
    int index = byPath >= 0 ? byPath : byName;
    if (index < 0) {
        // A ControlNet the configuration names that is not listed (a file chosen with Browse…, a
        // pasted infotext's name): shown as it is named, so that it stays the unit's; a run says
        // where it was looked for.
        model_->addItem(QString::fromStdString(controlNetInfotextModel(wanted, "")), wantedText);
        model_->setItemData(model_->count() - 1, wantedText, Qt::ToolTipRole);
        index = model_->count() - 1;
    }
    model_->setCurrentIndex(index);
    if (!scan_ && model_->count() == 1)
        model_->setItemText(0, scanning_ ? tr("None (listing the models folder…)") : tr("None"));
}

void ControlNetGroup::updateTabs() {
    for (int i = 0; i < unitCount(); ++i) {
        const bool on = units_[static_cast<std::size_t>(i)].enabled;
        tabs_->setTabText(i, on ? tr("Unit %1 ✓").arg(i) : tr("Unit %1").arg(i));
        tabs_->setTabToolTip(i, on ? tr("Unit %1: enabled, %2")
                                         .arg(i)
                                         .arg(QString::fromStdString(controlNetInfotextModel(
                                             units_[static_cast<std::size_t>(i)].unit.model, "")))
                                   : tr("Unit %1: off").arg(i));
    }
}

void ControlNetGroup::updateEnabling() {
    const bool available = unavailable_.isEmpty();
    for (QWidget* w :
         std::initializer_list<QWidget*>{tabs_, enabled_, model_, browseModel_, refresh_, image_, browseImage_, weight_,
                                         start_, end_, mode_, preprocessor_, rate_, variation_, sharpness_})
        w->setEnabled(available);
    const std::string preprocessor = selectedName(preprocessor_);
    const bool resample = preprocessor == "tile_resample", colorfix = isColorFixPreprocessor(preprocessor);
    rateLabel_->setVisible(resample);
    rate_->setVisible(resample);
    variationLabel_->setVisible(colorfix);
    variation_->setVisible(colorfix);
    sharpnessLabel_->setVisible(preprocessor == "tile_colorfix+sharp");
    sharpness_->setVisible(preprocessor == "tile_colorfix+sharp");
    parameters_->setVisible(resample || colorfix);
}

void ControlNetGroup::unitEdited() {
    updateTabs();
    updateEnabling();
    emit edited();
}

void ControlNetGroup::browseModel(bool folder) {
    const std::string& wanted = state().unit.model;
    QString dir;
    if (!wanted.empty() && QDir::isAbsolutePath(QString::fromStdString(wanted)))
        dir = QFileInfo(QString::fromStdString(wanted)).absolutePath();
    else if (!folders_.isEmpty())
        dir = QDir(folders_.front()).filePath(QStringLiteral("ControlNet"));
    const QString chosen =
        folder ? QFileDialog::getExistingDirectory(this, tr("Choose a ControlNet diffusers folder"), dir)
               : QFileDialog::getOpenFileName(this, tr("Choose a ControlNet file"), dir,
                                              tr("ControlNet files (*.safetensors *.pth *.ckpt *.bin)"));
    if (chosen.isEmpty()) return;
    state().unit.model = chosen.toStdString();
    fillModels();
    unitEdited();
}

void ControlNetGroup::browseImage() {
    const std::string& current = state().unit.image;
    const QString file = QFileDialog::getOpenFileName(
        this, tr("Choose a control image"),
        takesStartImage(current) ? QString() : QFileInfo(QString::fromStdString(current)).absolutePath(),
        tr("Images (*.png *.jpg *.jpeg)"));
    if (file.isEmpty()) return;
    state().unit.image = file.toStdString();
    showUnit();
    unitEdited();
}

}  // namespace tessera
