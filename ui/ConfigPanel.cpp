#include "ui/ConfigPanel.h"

#include <algorithm>
#include <exception>

#include <QAbstractSpinBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QEvent>
#include <QFileInfo>
#include <QLabel>
#include <QVBoxLayout>

#include "app/qt/ModelCatalog.h"
#include "core/models/sd/SdModel.h"
#include "ui/ControlNetGroup.h"
#include "ui/CostPreview.h"
#include "ui/GraphsGroup.h"
#include "ui/ImageGroup.h"
#include "ui/LoraGroup.h"
#include "ui/ModelGroup.h"
#include "ui/ModelPicker.h"
#include "ui/NoiseGroup.h"
#include "ui/PromptGroup.h"
#include "ui/TilingGroup.h"

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

// validateAll's messages start with "field: "; beside the field that prefix is noise.
QString withoutFieldPrefix(const QString& field, const QString& message) {
    const QString prefix = field + QStringLiteral(": ");
    return message.startsWith(prefix) ? message.mid(prefix.size()) : message;
}

const QString kPrompt = QStringLiteral("prompt");
const QString kNegativePrompt = QStringLiteral("negative_prompt");

}  // namespace

ConfigPanel::ConfigPanel(QWidget* parent)
    : QWidget(parent),
      inspector_(new ModelInspector(this)),
      catalog_(new ModelCatalog(this)),
      tokenCounter_(new PromptTokenCounter(this)) {
    setObjectName(QStringLiteral("configPanel"));
    connect(inspector_, &ModelInspector::inspected, this, &ConfigPanel::onModelInspected);
    connect(inspector_, &ModelInspector::defaultModelLocated, this, [this](const QString& folder) {
        locatingDefault_ = false;
        setDefaultModelFolder(folder);
        emit modelChecked();
    });
    connect(tokenCounter_, &PromptTokenCounter::counted, this,
            [this](quint64, const QString& field, int tokens, int embeddings, const QString& error) {
                onTokensCounted(field, tokens, embeddings, error);
            });
    // Invalid editors get a red frame; the reason sits right under them.
    setStyleSheet(
        QStringLiteral("QSpinBox[invalid=\"true\"], QDoubleSpinBox[invalid=\"true\"], QLineEdit[invalid=\"true\"],"
                       " QComboBox[invalid=\"true\"], QPlainTextEdit[invalid=\"true\"] {"
                       " border: 1px solid #d64541; border-radius: 3px; padding: 1px 2px; }"
                       "QLabel[role=\"error\"] { color: #c0392b; }"
                       "QLabel[role=\"hint\"] { color: #5a6270; }"
                       "QLabel[role=\"warning\"] { color: #a05a00; }"));

    model_ = new ModelGroup;
    prompt_ = new PromptGroup;
    lora_ = new LoraGroup;
    start_ = new StartImageGroup;
    controlNet_ = new ControlNetGroup;
    image_ = new ImageGroup;
    noise_ = new NoiseGroup;
    tiling_ = new TilingGroup;
    graphs_ = new GraphsGroup;
    groups_ = {model_, prompt_, lora_, start_, controlNet_, image_, noise_, tiling_, graphs_};
    cost_ = new CostPreview;
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    for (ConfigGroup* group : groups_) {
        layout->addWidget(group);
        connect(group, &ConfigGroup::edited, this, &ConfigPanel::onEdited);
    }
    layout->addWidget(cost_);
    otherProblems_ = new QLabel;
    otherProblems_->setObjectName(QStringLiteral("otherProblems"));
    otherProblems_->setProperty("role", QStringLiteral("error"));
    otherProblems_->setWordWrap(true);
    otherProblems_->hide();
    layout->addWidget(otherProblems_);
    layout->addStretch(1);

    connect(model_, &ModelGroup::pickRequested, this, &ConfigPanel::openModelPicker);
    connect(prompt_, &PromptGroup::promptTextChanged, this, &ConfigPanel::requestTokenCounts);
    connect(lora_, &LoraGroup::tagRequested, prompt_, &PromptGroup::toggleExtraNetworkTag);
    connect(start_, &StartImageGroup::startImageChosen, this, &ConfigPanel::setStartImage);
    connect(start_, &StartImageGroup::headerChecked, this, &ConfigPanel::onStartImageHeader);
    connect(tiling_, &TilingGroup::overlapUnitChanged, this, [this](int unit) {
        // Keep the overlap the same number of pixels when switching units.
        if (applying_) return;
        tiling_->convertOverlap(unit, base_.overlapPixels());
        onEdited();
    });

    auto* wheelGuard = new WheelGuard(this);
    const auto guard = [wheelGuard](QWidget* editor) {
        editor->setFocusPolicy(Qt::StrongFocus);  // not Qt::WheelFocus: the wheel gives no focus
        editor->installEventFilter(wheelGuard);
    };
    for (QComboBox* combo : findChildren<QComboBox*>()) guard(combo);
    for (QAbstractSpinBox* spin : findChildren<QAbstractSpinBox*>()) guard(spin);

    setConfig(RunConfig{});
}

RunConfig ConfigPanel::shownSettings() const {
    RunConfig c = base_;
    for (const ConfigGroup* group : groups_) group->readInto(c);
    return c;
}

RunConfig ConfigPanel::config() const {
    RunConfig c = shownSettings();
    // A model known to take no prompt gets none (the text stays in the disabled editors).
    if (modelTakesNoPrompt()) {
        c.prompt.clear();
        c.negativePrompt.clear();
    }
    return c;
}

void ConfigPanel::setConfig(const RunConfig& config) {
    applying_ = true;
    base_ = config;
    for (ConfigGroup* group :
         {static_cast<ConfigGroup*>(image_), static_cast<ConfigGroup*>(prompt_), static_cast<ConfigGroup*>(lora_),
          static_cast<ConfigGroup*>(start_), static_cast<ConfigGroup*>(model_), static_cast<ConfigGroup*>(tiling_),
          static_cast<ConfigGroup*>(graphs_), static_cast<ConfigGroup*>(noise_),
          static_cast<ConfigGroup*>(controlNet_)})
        group->showConfig(config);
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

bool ConfigPanel::isCheckingModel() const { return locatingDefault_ || (!inspectedFolder_.isEmpty() && !inspection_); }

void ConfigPanel::setDefaultModelFolder(const QString& folder) {
    defaultModelFolder_ = folder;
    defaultKnown_ = true;
    model_->setDefaultModelFolder(folder);
    revalidate();
}

void ConfigPanel::setDeviceReport(const DeviceReport& report) {
    devices_ = report;
    // Without a CUDA device every run computes in FP32 (the CPU engine): the precision follows,
    // unless the person chose one.
    if (!report.cudaAvailable) model_->defaultPrecisionTo(Precision::FP32);
    updateGraphsAvailability();
    updateComputeNote();
}

QString ConfigPanel::computeNote() const {
    const bool cudaUsable = devices_ && devices_->cudaAvailable;
    QString note;
    if (model_->backend() == BackendKind::CUDA && devices_ && !cudaUsable)
        note = tr("CUDA cannot be used on this machine: %1. The run will use the CPU reference engine.")
                   .arg(QString::fromStdString(devices_->cudaReason));
    if (runsOnCpu() && model_->precision() != Precision::FP32)
        note += (note.isEmpty() ? QString() : QStringLiteral(" ")) +
                tr("The CPU engine computes in FP32; %1 applies to CUDA runs.").arg(model_->precisionText());
    return note;
}

bool ConfigPanel::runsOnCpu() const {
    return model_->backend() == BackendKind::CPU || (devices_ && !devices_->cudaAvailable);
}

void ConfigPanel::updateComputeNote() { model_->showComputeNote(computeNote(), runsOnCpu()); }

QString ConfigPanel::graphsUnavailableReason() const {
    if (!devices_) return tr("Looking for a CUDA device…");
    if (!devices_->cudaAvailable)
        return tr("Disabled: %1. Runs use the CPU engine, which has no CUDA graphs.")
            .arg(QString::fromStdString(devices_->cudaReason));
    if (model_->backend() == BackendKind::CPU)
        return tr("Disabled: the CPU backend is selected; graphs need the CUDA backend.");
    return {};
}

void ConfigPanel::updateGraphsAvailability() { graphs_->setUnavailableReason(graphsUnavailableReason()); }

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
    return tr(
        "Disabled until the model is known to be Stable Diffusion (a pipeline folder, a .safetensors "
        "checkpoint or random:sd15).");
}

void ConfigPanel::updatePromptAvailability() {
    // While a model is being checked (a path typed letter by letter) the last answer stands.
    if (isCheckingModel() && promptStateShown_) return;
    promptStateShown_ = true;
    // SDXL conditions on both encoders' penultimate layers, whatever clip skip says (A1111 too).
    prompt_->setClipSkipIgnored(
        modelIsStableDiffusion() && inspection_->family == SdFamily::SDXL
            ? tr("Stable Diffusion XL ignores clip skip: it conditions on both text encoders' penultimate layers "
                 "(as A1111)")
            : QString());
    prompt_->setFluxModel(modelIsStableDiffusion() ? inspection_->flux : QString());
    prompt_->setUnavailableReason(promptUnavailableReason());
    lora_->setUnavailableReason(
        promptUnavailableReason().isEmpty()
            ? QString()
            : tr("LoRAs and a separate VAE apply to Stable Diffusion models. %1").arg(promptUnavailableReason()));
    lora_->setFluxModel(modelIsStableDiffusion() ? inspection_->flux : QString());
    controlNet_->setUnavailableReason(
        promptUnavailableReason().isEmpty()
            ? QString()
            : tr("ControlNets steer Stable Diffusion models. %1").arg(promptUnavailableReason()));
    if (modelIsStableDiffusion() && !inspection_->flux.isEmpty()) {
        controlNet_->setUnavailableReason(
            tr("Disabled: FLUX.1 ControlNets are not supported yet; these steer Stable Diffusion UNets."));
    }
}

void ConfigPanel::requestTokenCounts() {
    if (!modelIsStableDiffusion()) {
        prompt_->clearTokenCount(kPrompt);
        prompt_->clearTokenCount(kNegativePrompt);
        return;
    }
    // The tokenizer and the embeddings are read (once) and the prompt chunked on the counter's
    // queue, never here; embeddings count by their vectors, as in A1111.
    RunConfig counted = base_;
    counted.model = inspection_->folder.toStdString();
    tokenCounter_->count(counted, kPrompt, prompt_->promptText());
    if (!inspection_->flux.isEmpty()) return prompt_->clearTokenCount(kNegativePrompt);  // not used by FLUX.1
    tokenCounter_->count(counted, kNegativePrompt, prompt_->negativePromptText());
}

void ConfigPanel::onTokensCounted(const QString& field, int tokens, int embeddings, const QString& error) {
    if (!modelIsStableDiffusion() || (!inspection_->flux.isEmpty() && field == kNegativePrompt))
        return prompt_->clearTokenCount(field);
    prompt_->showTokenCount(field, tokens, error, embeddings);
}

QString ConfigPanel::tokenCountText(const QString& field) const { return prompt_->tokenCountText(field); }

void ConfigPanel::checkSdMultiples(const RunConfig& c, int multiple,
                                   const std::function<void(const QString&, const QString&)>& add) const {
    if (multiple <= 1) return;
    const auto check = [&](const char* field, int value, const QString& what) {
        if (value <= 0 || value % multiple == 0) return;
        const int below = value / multiple * multiple;
        add(QString::fromLatin1(field),
            tr("%1 is not a multiple of %2; %3 of a Stable Diffusion run must be (its VAE works in %2-pixel cells): "
               "use %4")
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
    QString modelInfo;
    const QString modelFolder = c.model.empty() ? defaultModelFolder_ : QString::fromStdString(c.model);
    if (const QString problem = checkModel(modelFolder, c.model.empty(), &limits, &modelInfo); !problem.isEmpty())
        addProblem(QStringLiteral("model"), problem);
    model_->setModelInfo(modelInfo);

    for (const ValidationError& problem : validateAll(c, limits)) {
        const QString field = QString::fromStdString(problem.field());
        addProblem(field, withoutFieldPrefix(field, QString::fromUtf8(problem.what())));
    }
    if (modelIsStableDiffusion()) checkSdMultiples(c, inspection_->pixelMultiple, addProblem);
    if (const QString problem = start_->check(c.initImage); !problem.isEmpty())
        addProblem(QStringLiteral("init"), problem);
    // The upscale models of the models folders (and the model's own), listed off this thread.
    start_->setUpscaleModelSources(modelsFolder_, c.model.empty() ? defaultModelFolder_.toStdString() : c.model);
    // The LoRAs and VAEs of the same folders, listed off this thread.
    lora_->setModelSources(modelsFolder_, c.model.empty() ? defaultModelFolder_.toStdString() : c.model);
    // The ControlNets of the same folders, listed off this thread.
    controlNet_->setModelSources(modelsFolder_, c.model.empty() ? defaultModelFolder_.toStdString() : c.model);
    for (const auto& problem : start_->upscaleModelProblems(c)) addProblem(problem.first, problem.second);
    updatePromptAvailability();
    start_->showStartImage(base_.initImage, image_->canvasSize());

    QStringList unplaced;
    for (ConfigGroup* group : groups_) group->markProblems(problems_);
    for (const QString& field : problemOrder_)
        if (std::none_of(groups_.begin(), groups_.end(), [&field](const ConfigGroup* g) { return g->hasField(field); }))
            unplaced << field + QStringLiteral(": ") + problems_.at(field);
    otherProblems_->setText(unplaced.join(QLatin1Char('\n')));
    otherProblems_->setVisible(!unplaced.isEmpty());

    updateComputeNote();
    tiling_->showStride(c);
    const bool planValid =
        problems_.count(QStringLiteral("width")) == 0 && problems_.count(QStringLiteral("height")) == 0 &&
        problems_.count(QStringLiteral("tile")) == 0 && problems_.count(QStringLiteral("overlap")) == 0;
    cost_->showCost(c, planValid);
    if (wasValid != problems_.empty()) emit validityChanged(problems_.empty());
}

QString ConfigPanel::checkModel(const QString& folder, bool isDefault, ModelLimits* limits, QString* info) {
    info->clear();
    if (isDefault && !defaultKnown_) {
        *limits = lastLimits_;
        return locatingDefault_ ? tr("looking for the default model…")
                                : tr("no default model is set; choose a model folder");
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
        *info = tr("Checking %1…").arg(QFileInfo(folder).fileName());
        return tr("checking the model folder…");
    }
    if (!inspection_->limits) return inspection_->error;
    *limits = lastLimits_ = *inspection_->limits;
    const QString name =
        folder.startsWith(QString::fromLatin1(kRandomModelPrefix)) ? folder : QFileInfo(folder).fileName();
    if (!inspection_->flux.isEmpty())
        *info =
            tr("%1: %2 transformer, sizes, tiles and overlap in multiples of 16")
                .arg(name, inspection_->flux == QStringLiteral("flux-dev") ? tr("FLUX.1-dev") : tr("FLUX.1-schnell"));
    else if (inspection_->stableDiffusion)
        *info = tr("%1: %2, tiles in multiples of %3, sizes and overlap of %4")
                    .arg(name, QString::fromUtf8(familyLabel(inspection_->family).data(),
                                                 static_cast<qsizetype>(familyLabel(inspection_->family).size())))
                    .arg(limits->downsampleFactor)
                    .arg(inspection_->pixelMultiple);
    else
        *info = tr("%1: %2 input channels, tiles in multiples of %3")
                    .arg(name)
                    .arg(limits->inChannels)
                    .arg(limits->downsampleFactor);
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

ConfigPanel::StartScale ConfigPanel::startScale() const { return start_->scale(); }

void ConfigPanel::setStartImage(const QString& path) {
    base_.initImage = path.toStdString();
    onEdited();
}

bool ConfigPanel::isCheckingStartImage() const { return start_->isChecking(base_.initImage); }

const std::optional<ImageHeader>& ConfigPanel::startImageHeader() const { return start_->header(); }

void ConfigPanel::onStartImageHeader(bool usable) {
    if (usable)
        onEdited();  // the canvas size may follow from it
    else
        revalidate();
    emit startImageChecked();
}

void ConfigPanel::applyStartImageSize() {
    const StartImageGroup::Canvas canvas = start_->canvasFromImage(base_.initImage);
    image_->followStartImage(canvas.follows, canvas.size);
}

void ConfigPanel::setModelsFolder(const QString& folder) {
    modelsFolder_ = folder;
    revalidate();  // the upscale models listed follow it
}

void ConfigPanel::setRecentModels(const QStringList& models) {
    recentModels_.clear();
    for (const QString& model : models)
        if (!model.isEmpty() && !recentModels_.contains(model) && recentModels_.size() < kMaxRecentModels)
            recentModels_ << model;
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
    connect(picker, &ModelPicker::modelChosen, this, [this](const QString& path) { model_->setModelText(path); });
    connect(picker, &ModelPicker::modelsFolderChanged, this, [this](const QString& folder) {
        setModelsFolder(folder);
        emit modelsFolderChanged(folder);
    });
    picker->open();
    return picker;
}

void ConfigPanel::setLastRunSeed(std::uint64_t seed) { image_->setLastRunSeed(seed); }

int ConfigPanel::batchCount() const { return prompt_->batchCount(); }

void ConfigPanel::setBatchCount(int count) { prompt_->setBatchCount(count); }

}  // namespace tessera
