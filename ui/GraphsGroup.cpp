#include "ui/GraphsGroup.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

namespace tessera {

GraphsGroup::GraphsGroup(QWidget* parent) : ConfigGroup(tr("CUDA graphs"), parent) {
    setObjectName(QStringLiteral("graphsGroup"));
    auto* form = new QFormLayout(this);
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
    lanes_->setToolTip(
        tr("Tile batches in flight at once, each on its own CUDA stream with its own copy of the "
           "activations (0 = auto: 4 for small forwards, else 2). More lanes fill the GPU when "
           "one forward is small, at the cost of memory; the image is the same bits."));
    form->addRow(tr("Lanes"), lanes_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("lanes"), lanes_));
    reason_ = makeRoleLabel("graphsReason", "hint");
    reason_->setText(tr("Looking for a CUDA device…"));
    form->addRow(reason_);

    connect(graphMode_, &QComboBox::currentIndexChanged, this, &GraphsGroup::edited);
    for (QSpinBox* spin : {graphWarmup_, graphCache_, lanes_})
        connect(spin, &QSpinBox::valueChanged, this, &GraphsGroup::edited);
}

void GraphsGroup::readInto(RunConfig& c) const {
    c.graphs = parseGraphMode(selectedName(graphMode_));
    c.graphWarmup = graphWarmup_->value();
    c.graphCacheSize = graphCache_->value();
    c.lanes = lanes_->value();
}

void GraphsGroup::showConfig(const RunConfig& c) {
    selectIn(graphMode_, c.graphs);
    graphWarmup_->setValue(c.graphWarmup);
    graphCache_->setValue(c.graphCacheSize);
    lanes_->setValue(c.lanes);
}

void GraphsGroup::setUnavailableReason(const QString& reason) {
    const bool available = reason.isEmpty();
    for (QWidget* editor : {static_cast<QWidget*>(graphMode_), static_cast<QWidget*>(graphWarmup_),
                            static_cast<QWidget*>(graphCache_), static_cast<QWidget*>(lanes_)})
        editor->setEnabled(available);
    reason_->setText(reason);
    reason_->setVisible(!available);
}

}  // namespace tessera
