#include "ui/LoraGroup.h"

#include <QDir>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QStyle>
#include <QToolButton>
#include <QTreeWidget>

#include <utility>

#include "app/qt/UpscaleModelCatalog.h"
#include "core/base/FormatNumber.h"
#include "core/run/LoraModelFile.h"
#include "core/run/VaeFile.h"

namespace tessera {

namespace {

QString weightText(const LoraSetting& lora) {
    if (lora.teMultiplier == lora.unetMultiplier) return QString::fromStdString(formatNumber(lora.unetMultiplier));
    return QStringLiteral("%1 / %2").arg(QString::fromStdString(formatNumber(lora.teMultiplier)),
                                         QString::fromStdString(formatNumber(lora.unetMultiplier)));
}

}  // namespace

LoraGroup::LoraGroup(QWidget* parent) : ConfigGroup(tr("LoRA and VAE"), parent) {
    setObjectName(QStringLiteral("loraGroup"));
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    reason_ = makeRoleLabel("loraReason", "hint");
    reason_->hide();
    form->addRow(reason_);

    vae_ = new QComboBox;
    vae_->setObjectName(QStringLiteral("vaeCombo"));
    vae_->setToolTip(
        tr("A1111's SD VAE: Automatic decodes with the model's own VAE; a file of the models folder's VAE/ "
           "replaces it (its latent scaling stays the model's)"));
    refresh_ = new QToolButton;
    refresh_->setObjectName(QStringLiteral("loraRefresh"));
    refresh_->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
    refresh_->setToolTip(tr("List the models folder's LoRAs and VAEs again"));
    auto* vaeRow = new QHBoxLayout;
    vaeRow->setContentsMargins(0, 0, 0, 0);
    vaeRow->addWidget(vae_, 1);
    vaeRow->addWidget(refresh_);
    form->addRow(tr("VAE"), vaeRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("vae"), vae_));

    // FLUX.1 transformer files come without their text encoders (ComfyUI's DualCLIPLoader: clip_l and
    // t5xxl from text_encoders/ or clip/).
    clip_ = new QComboBox;
    clip_->setObjectName(QStringLiteral("clipEncoderCombo"));
    clip_->setToolTip(
        tr("FLUX.1's CLIP-L text encoder file (clip_l.safetensors) from the models folder's "
           "text_encoders/ or clip/; \"From the model\" for a FLUX.1 folder or an all-in-one file"));
    t5_ = new QComboBox;
    t5_->setObjectName(QStringLiteral("t5EncoderCombo"));
    t5_->setToolTip(
        tr("FLUX.1's T5-XXL text encoder file (t5xxl_fp16.safetensors, fp8 ones too; T5 v1.1's "
           "spiece.model beside it) from the models folder's text_encoders/ or clip/"));
    clipLabel_ = new QLabel(tr("CLIP-L"));
    t5Label_ = new QLabel(tr("T5-XXL"));
    form->addRow(clipLabel_, clip_);
    form->addRow(t5Label_, t5_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("text_encoder"), t5_));

    available_ = new QComboBox;
    available_->setObjectName(QStringLiteral("loraAvailableCombo"));
    available_->setToolTip(tr("The LoRAs and LyCORIS of the models folder's Lora/, LyCORIS/ and loras/"));
    weight_ = makeRealSpin(-10, 10, 0.05, 2);
    weight_->setObjectName(QStringLiteral("loraWeightSpin"));
    weight_->setValue(1.0);
    weight_->setToolTip(tr("The LoRA's weight (A1111's multiplier, for the text encoder and the UNet alike)"));
    auto* pickRow = new QHBoxLayout;
    pickRow->setContentsMargins(0, 0, 0, 0);
    pickRow->addWidget(available_, 1);
    pickRow->addWidget(weight_);
    form->addRow(tr("LoRA"), pickRow);

    add_ = new QPushButton(tr("Add"));
    add_->setObjectName(QStringLiteral("loraAdd"));
    add_->setToolTip(tr("Add the LoRA to the run's list with this weight"));
    insertTag_ = new QPushButton(tr("Insert tag"));
    insertTag_->setObjectName(QStringLiteral("loraInsertTag"));
    insertTag_->setToolTip(
        tr("Put <lora:name:weight> at the end of the prompt (or take it out where it is there), as a click on "
           "a card of A1111's Extra Networks tab does"));
    remove_ = new QPushButton(tr("Remove"));
    remove_->setObjectName(QStringLiteral("loraRemove"));
    remove_->setToolTip(tr("Take the selected LoRA out of the run's list"));
    auto* buttons = new QHBoxLayout;
    buttons->setContentsMargins(0, 0, 0, 0);
    buttons->addWidget(add_);
    buttons->addWidget(insertTag_);
    buttons->addStretch(1);
    buttons->addWidget(remove_);
    form->addRow(QString(), buttons);

    list_ = new QTreeWidget;
    list_->setObjectName(QStringLiteral("loraList"));
    list_->setColumnCount(2);
    list_->setHeaderLabels({tr("LoRA"), tr("Weight")});
    list_->setRootIsDecorated(false);
    list_->header()->setStretchLastSection(false);
    list_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    list_->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    list_->setFixedHeight(list_->fontMetrics().lineSpacing() * 4 + 12);
    list_->setToolTip(
        tr("The LoRAs merged into the model for the run, in order, after those the prompt's tags name "
           "(A1111's \"Append LoRA to prompt\"); the run's parameters write each as a prompt tag"));
    form->addRow(list_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("lora"), list_));

    catalog_ = new LoraCatalog(this);
    connect(catalog_, &LoraCatalog::scanned, this, [this](quint64 id, const LoraCatalogScan& scan) {
        if (id == scanJob_) onScanned(scan);
    });
    connect(vae_, &QComboBox::activated, this, [this] {
        wantedVae_ = vae_->currentData().toString().toStdString();
        emit edited();
    });
    connect(clip_, &QComboBox::activated, this, [this] {
        wantedClip_ = clip_->currentData().toString().toStdString();
        emit edited();
    });
    connect(t5_, &QComboBox::activated, this, [this] {
        wantedT5_ = t5_->currentData().toString().toStdString();
        emit edited();
    });
    connect(refresh_, &QToolButton::clicked, this, &LoraGroup::rescan);
    connect(add_, &QPushButton::clicked, this, &LoraGroup::addSelected);
    connect(insertTag_, &QPushButton::clicked, this, &LoraGroup::requestTag);
    connect(remove_, &QPushButton::clicked, this, &LoraGroup::removeSelected);
    connect(list_, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item) {
        // The weight of a listed LoRA: the spin box's value.
        const int row = list_->indexOfTopLevelItem(item);
        if (row < 0 || row >= static_cast<int>(loras_.size())) return;
        loras_[static_cast<std::size_t>(row)].teMultiplier = weight_->value();
        loras_[static_cast<std::size_t>(row)].unetMultiplier = weight_->value();
        fillList();
        emit edited();
    });
    fillAvailable();
    fillVae();
    fillTextEncoders();
    fillList();
    setFluxModel(QString());
}

void LoraGroup::readInto(RunConfig& c) const {
    c.loras = loras_;
    c.vae = wantedVae_;
    c.textEncoders.clear();
    if (flux_.isEmpty()) return;
    for (const std::string* e : {&wantedClip_, &wantedT5_})
        if (!e->empty()) c.textEncoders.push_back(*e);
}

void LoraGroup::showConfig(const RunConfig& c) {
    loras_ = c.loras;
    wantedVae_ = c.vae;
    // Which file is which by its name (the engine reads the kind from the tensors).
    wantedClip_.clear();
    wantedT5_.clear();
    for (const std::string& e : c.textEncoders) {
        QString name = QString::fromStdString(e).section(QLatin1Char('/'), -1).toLower();
        (name.contains(QLatin1String("t5")) || name.contains(QLatin1String("umt5")) ? wantedT5_ : wantedClip_) = e;
    }
    fillVae();
    fillTextEncoders();
    fillList();
}

void LoraGroup::setFluxModel(const QString& variant) {
    flux_ = variant;
    for (QWidget* w : {static_cast<QWidget*>(clip_), static_cast<QWidget*>(t5_), static_cast<QWidget*>(clipLabel_),
                       static_cast<QWidget*>(t5Label_)})
        w->setVisible(!variant.isEmpty());
    setTitle(variant.isEmpty() ? tr("LoRA and VAE") : tr("VAE, text encoders and LoRA"));
    updateEnabled();
}

void LoraGroup::setModelSources(const QString& windowModelsFolder, const std::string& runModel) {
    const QStringList folders = UpscaleModelCatalog::modelsFolders(windowModelsFolder, runModel);
    if (folders == folders_ && (scan_ || scanning_)) return;
    folders_ = folders;
    rescan();
}

void LoraGroup::rescan() {
    scanning_ = true;
    scanJob_ = catalog_->scan(folders_);
}

void LoraGroup::setUnavailableReason(const QString& reason) {
    unavailable_ = reason;
    updateEnabled();
}

void LoraGroup::updateEnabled() {
    const bool available = unavailable_.isEmpty();
    // FLUX.1: its VAE and text encoders, no LoRA (the engine refuses them by name).
    const bool loras = available && flux_.isEmpty();
    for (QWidget* w : {static_cast<QWidget*>(vae_), static_cast<QWidget*>(clip_), static_cast<QWidget*>(t5_)})
        w->setEnabled(available);
    for (QWidget* w : {static_cast<QWidget*>(available_), static_cast<QWidget*>(weight_), static_cast<QWidget*>(list_)})
        w->setEnabled(loras);
    add_->setEnabled(loras && available_->count() > 0);
    insertTag_->setEnabled(loras && available_->count() > 0);
    remove_->setEnabled(loras && !loras_.empty());
    const QString reason =
        !available ? unavailable_
                   : (flux_.isEmpty() ? QString()
                                      : tr("FLUX.1 LoRAs are not supported yet. A transformer file takes its VAE "
                                           "(ae.safetensors) and text encoders here; a FLUX.1 folder has its own."));
    reason_->setText(reason);
    reason_->setVisible(!reason.isEmpty());
}

QStringList LoraGroup::listedLoras() const {
    QStringList rows;
    for (const LoraSetting& lora : loras_)
        rows << QStringLiteral("%1 ×%2").arg(QString::fromStdString(loraName(lora.file)), weightText(lora));
    return rows;
}

bool LoraGroup::selectAvailable(const QString& name) {
    const int index = available_->findText(name);
    if (index < 0) return false;
    available_->setCurrentIndex(index);
    return true;
}

void LoraGroup::onScanned(const LoraCatalogScan& scan) {
    scanning_ = false;
    scan_ = scan;
    fillAvailable();
    fillVae();
    fillTextEncoders();
}

void LoraGroup::fillAvailable() {
    const QString current = available_->currentData().toString();
    available_->clear();
    if (scan_)
        for (const ModelFileEntry& e : scan_->loras) {
            available_->addItem(e.name, e.path);
            available_->setItemData(available_->count() - 1, QDir::toNativeSeparators(e.path), Qt::ToolTipRole);
        }
    const bool any = available_->count() > 0;
    if (!any)
        available_->setPlaceholderText(scan_ ? tr("no LoRA in the models folder's Lora/, LyCORIS/ or loras/")
                                             : tr("listing the models folder…"));
    const int keep = available_->findData(current);
    available_->setCurrentIndex(keep >= 0 ? keep : (any ? 0 : -1));
    updateEnabled();
}

void LoraGroup::fillVae() {
    vae_->clear();
    vae_->addItem(tr("Automatic (the model's own)"), QString());
    bool found = wantedVae_.empty();
    if (scan_)
        for (const ModelFileEntry& e : scan_->vaes) {
            vae_->addItem(QStringLiteral("%1 (%2)").arg(e.name, e.folder), e.path);
            vae_->setItemData(vae_->count() - 1, QDir::toNativeSeparators(e.path), Qt::ToolTipRole);
            if (e.path.toStdString() == wantedVae_) found = true;
        }
    if (!found) {
        // A VAE the configuration names (a reopened run, a pasted infotext) that is not listed: shown
        // as it is named, so that it stays the run's VAE; the run says where it was looked for.
        const QString wanted = QString::fromStdString(wantedVae_);
        vae_->addItem(QString::fromStdString(vaeName(wantedVae_)), wanted);
        vae_->setItemData(vae_->count() - 1, wanted, Qt::ToolTipRole);
    }
    vae_->setCurrentIndex(vae_->findData(QString::fromStdString(wantedVae_)));
}

void LoraGroup::fillTextEncoders() {
    for (auto [combo, wanted] : {std::pair{clip_, &wantedClip_}, std::pair{t5_, &wantedT5_}}) {
        combo->clear();
        combo->addItem(tr("From the model (its folder or all-in-one file)"), QString());
        bool found = wanted->empty();
        if (scan_)
            for (const ModelFileEntry& e : scan_->textEncoders) {
                combo->addItem(QStringLiteral("%1 (%2)").arg(e.name, e.folder), e.path);
                combo->setItemData(combo->count() - 1, QDir::toNativeSeparators(e.path), Qt::ToolTipRole);
                if (e.path.toStdString() == *wanted) found = true;
            }
        if (!found) {  // named by the configuration but not listed: kept as named (as the VAE)
            const QString name = QString::fromStdString(*wanted);
            combo->addItem(name.section(QLatin1Char('/'), -1), name);
            combo->setItemData(combo->count() - 1, name, Qt::ToolTipRole);
        }
        combo->setCurrentIndex(combo->findData(QString::fromStdString(*wanted)));
    }
}

void LoraGroup::fillList() {
    list_->clear();
    for (const LoraSetting& lora : loras_) {
        auto* item = new QTreeWidgetItem({QString::fromStdString(loraName(lora.file)), weightText(lora)});
        item->setToolTip(0, QString::fromStdString(lora.file));
        item->setToolTip(1, tr("Double-click: the weight in the box above"));
        list_->addTopLevelItem(item);
    }
    updateEnabled();
}

void LoraGroup::addSelected() {
    const QString path = available_->currentData().toString();
    if (path.isEmpty()) return;
    loras_.push_back(LoraSetting{path.toStdString(), weight_->value(), weight_->value()});
    fillList();
    emit edited();
}

void LoraGroup::removeSelected() {
    const int row = list_->indexOfTopLevelItem(list_->currentItem());
    const int at = row >= 0 ? row : static_cast<int>(loras_.size()) - 1;
    if (at < 0 || at >= static_cast<int>(loras_.size())) return;
    loras_.erase(loras_.begin() + at);
    fillList();
    emit edited();
}

void LoraGroup::requestTag() {
    const QString name = available_->currentText();
    if (name.isEmpty()) return;
    emit tagRequested(QStringLiteral("<lora:%1:%2>").arg(name, QString::fromStdString(formatNumber(weight_->value()))));
}

}  // namespace tessera
