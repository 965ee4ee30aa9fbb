#include "ui/CostPreview.h"

#include <algorithm>
#include <exception>

#include <QFormLayout>
#include <QLabel>
#include <QLocale>

#include "core/sampling/TilePlan.h"

namespace tessera {

CostPreview::CostPreview(QWidget* parent) : QGroupBox(tr("Cost preview"), parent) {
    auto* form = new QFormLayout(this);
    auto value = [](const char* name) {
        auto* label = new QLabel;
        label->setObjectName(QString::fromLatin1(name));
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
        return label;
    };
    tiles_ = value("costTiles");
    redundancy_ = value("costRedundancy");
    evaluations_ = value("costEvaluations");
    batches_ = value("costBatches");
    redundancy_->setToolTip(tr("Pixels computed per image pixel: the sum of tile areas over the image area"));
    form->addRow(tr("Tiles"), tiles_);
    form->addRow(tr("Redundancy"), redundancy_);
    form->addRow(tr("UNet evaluations"), evaluations_);
    form->addRow(tr("Batches / step"), batches_);
}

void CostPreview::showCost(const RunConfig& c, bool planValid) {
    if (planValid) {
        try {
            const TilePlan plan = TilePlan::fromConfig(c);
            const int batch = resolveTileBatch(c.tileBatch, plan.count());
            tiles_->setText(tr("%1 (%2 × %3) of %4×%5 px")
                                .arg(plan.count())
                                .arg(plan.cols())
                                .arg(plan.rows())
                                .arg(plan.tileW())
                                .arg(plan.tileH()));
            redundancy_->setText(tr("%1×").arg(plan.redundancy(), 0, 'f', 2));
            evaluations_->setText(
                tr("%1 per step, %2 total")
                    .arg(plan.evaluationsPerStep())
                    .arg(QLocale().toString(static_cast<qlonglong>(plan.totalEvaluations(std::max(0, loopSteps(c)))))));
            batches_->setText(tr("%1 (batch %2)").arg((plan.count() + batch - 1) / batch).arg(batch));
            return;
        } catch (const std::exception& e) {
            tiles_->setText(QString::fromUtf8(e.what()));
        }
    } else {
        tiles_->setText(tr("— (fix the marked fields)"));
    }
    redundancy_->setText(tr("—"));
    evaluations_->setText(tr("—"));
    batches_->setText(tr("—"));
}

}  // namespace tessera
