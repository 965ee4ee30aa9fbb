#include "ui/ModelGroup.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QStyle>
#include <QThread>
#include <QToolButton>

#include "core/models/sd/SdModel.h"

namespace tessera {

ModelGroup::ModelGroup(QWidget* parent) : ConfigGroup(tr("Model"), parent) {
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    model_ = new QLineEdit;
    model_->setObjectName(QStringLiteral("modelEdit"));
    model_->setClearButtonEnabled(true);
    auto* browse = new QToolButton;
    browse->setObjectName(QStringLiteral("modelBrowse"));
    browse->setIcon(style()->standardIcon(QStyle::SP_DirOpenIcon));
    browse->setToolTip(
        tr("Choose a model folder: a diffusers UNet2DModel or a Stable Diffusion pipeline "
           "(model_index.json)"));
    auto* browseFile = new QToolButton;
    browseFile->setObjectName(QStringLiteral("modelBrowseFile"));
    browseFile->setIcon(style()->standardIcon(QStyle::SP_FileIcon));
    browseFile->setToolTip(tr("Choose a Stable Diffusion 1.x / 2.x checkpoint (.safetensors)"));
    model_->setPlaceholderText(tr("a folder, a .safetensors checkpoint or random:sd15"));
    auto* pick = new QToolButton;
    pick->setObjectName(QStringLiteral("modelPick"));
    pick->setText(tr("Pick…"));
    pick->setToolTip(
        tr("Pick from the models folder, the recently used models or random weights, with each "
           "model's family, size and hash"));
    auto* modelRow = new QHBoxLayout;
    modelRow->setContentsMargins(0, 0, 0, 0);
    modelRow->addWidget(model_, 1);
    modelRow->addWidget(pick);
    modelRow->addWidget(browse);
    modelRow->addWidget(browseFile);
    form->addRow(tr("Model"), modelRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("model"), model_));
    modelInfo_ = makeRoleLabel("modelInfo", "hint");
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
    computeNote_ = makeRoleLabel("computeNote", "warning");
    computeNote_->hide();
    form->addRow(QString(), computeNote_);
    threads_ = makeSpin(0, 4096);
    threads_->setObjectName(QStringLiteral("threadsSpin"));
    threads_->setSpecialValueText(tr("all cores"));
    form->addRow(tr("Threads"), threads_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("threads"), threads_));

    connect(model_, &QLineEdit::textChanged, this, &ModelGroup::edited);
    connect(browse, &QToolButton::clicked, this, &ModelGroup::chooseModelFolder);
    connect(browseFile, &QToolButton::clicked, this, &ModelGroup::chooseModelFile);
    connect(pick, &QToolButton::clicked, this, &ModelGroup::pickRequested);
    connect(precision_, &QComboBox::currentIndexChanged, this, &ModelGroup::edited);
    connect(precision_, &QComboBox::activated, this, [this] { precisionPicked_ = true; });
    connect(backend_, &QComboBox::currentIndexChanged, this, &ModelGroup::edited);
    connect(threads_, &QSpinBox::valueChanged, this, &ModelGroup::edited);
}

void ModelGroup::readInto(RunConfig& c) const {
    c.model = modelText().isEmpty() ? std::string() : QDir::cleanPath(modelText()).toStdString();
    c.precision = precision();
    c.backend = backend();
    c.threads = threads_->value();
}

void ModelGroup::showConfig(const RunConfig& c) {
    model_->setText(QString::fromStdString(c.model));
    selectIn(precision_, c.precision);
    selectIn(backend_, c.backend);
    threads_->setValue(c.threads);
}

QString ModelGroup::modelText() const { return model_->text().trimmed(); }

void ModelGroup::setModelText(const QString& model) { model_->setText(model); }

void ModelGroup::setDefaultModelFolder(const QString& folder) {
    defaultModelFolder_ = folder;
    model_->setPlaceholderText(folder.isEmpty() ? tr("no default model installed; choose a folder")
                                                : tr("default: %1").arg(QFileInfo(folder).fileName()));
    model_->setToolTip(folder.isEmpty() ? QString() : tr("Empty: the default model in %1").arg(folder));
}

void ModelGroup::setModelInfo(const QString& text) {
    modelInfo_->setText(text);
    modelInfo_->setVisible(!text.isEmpty());
}

BackendKind ModelGroup::backend() const { return parseBackend(selectedName(backend_)); }

Precision ModelGroup::precision() const { return parsePrecision(selectedName(precision_)); }

QString ModelGroup::precisionText() const { return precision_->currentText(); }

void ModelGroup::defaultPrecisionTo(Precision precision) {
    if (!precisionPicked_) selectIn(precision_, precision);
}

void ModelGroup::showComputeNote(const QString& note, bool onCpu) {
    computeNote_->setText(note);
    computeNote_->setVisible(!note.isEmpty());
    // Threads are the CPU engine's: editable where the run goes there, kept (not cleared) otherwise.
    threads_->setEnabled(onCpu);
    const QString what = tr("Threads the CPU engine computes on (all cores: %1 here). The image is the same bits "
                            "for any count; fewer leave cores free for other work.")
                             .arg(QThread::idealThreadCount());
    threads_->setToolTip(onCpu ? what : what + QLatin1Char(' ') + tr("This run goes to the CUDA engine."));
}

void ModelGroup::chooseModelFolder() {
    QString start = modelText();
    if (start.isEmpty()) start = defaultModelFolder_;
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Choose a UNet2DModel folder"), start);
    if (!folder.isEmpty()) model_->setText(folder);
}

void ModelGroup::chooseModelFile() {
    QString start = modelText();
    if (start.isEmpty() || start.startsWith(QString::fromLatin1(kRandomModelPrefix))) start = defaultModelFolder_;
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a Stable Diffusion checkpoint"), start,
                                                      tr("Safetensors checkpoints (*.safetensors)"));
    if (!file.isEmpty()) model_->setText(file);
}

}  // namespace tessera
