#include "ui/ControlHintView.h"

#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "app/qt/RunWorker.h"
#include "core/base/FormatNumber.h"
#include "core/run/ControlNetInfotext.h"
#include "ui/CompareView.h"

namespace tessera {

namespace {

QString unitCaption(std::size_t index, const ControlNetUnit& unit) {
    QString preprocessor = QString::fromStdString(unit.preprocessor);
    if (unit.preprocessor == "tile_resample")
        preprocessor =
            QObject::tr("tile_resample, rate %1").arg(QString::fromStdString(formatNumber(unit.downSampling)));
    const QString image = unit.image.empty() || unit.image == "init"
                              ? QObject::tr("the start image")
                              : QFileInfo(QString::fromStdString(unit.image)).fileName();
    return QObject::tr("Unit %1: %2 · %3 · %4")
        .arg(index)
        .arg(QString::fromStdString(controlNetInfotextModel(unit.model, "")), preprocessor, image);
}

}  // namespace

ControlHintView::ControlHintView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("controlHintView"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    unit_ = new QComboBox;
    unit_->setObjectName(QStringLiteral("controlHintUnit"));
    unit_->setToolTip(tr("The ControlNet unit whose hint is shown"));
    caption_ = new QLabel;
    caption_->setObjectName(QStringLiteral("controlHintCaption"));
    caption_->setWordWrap(true);
    auto* top = new QHBoxLayout;
    top->setContentsMargins(0, 0, 0, 0);
    top->addWidget(unit_);
    top->addWidget(caption_, 1);
    layout->addLayout(top);
    pane_ = new CompareImagePane(tr("Hint"));
    pane_->setObjectName(QStringLiteral("controlHintPane"));
    pane_->setToolTip(
        tr("The hint canvas the ControlNet saw: its control image after the preprocessor, at the run's size; each "
           "tile's hint is the part under the tile. Wheel: zoom, drag: pan, double-click: fit"));
    layout->addWidget(pane_, 1);
    layout->addStretch(0);  // takes the room while the pane is hidden (no hint)
    connect(unit_, &QComboBox::currentIndexChanged, this, &ControlHintView::showUnit);
    clear();
}

void ControlHintView::showRun(const FinishedRun& run) {
    hints_ = run.controlHints;
    captions_.clear();
    const std::vector<ControlNetUnit>* units = run.result ? &run.result->record.config.controlNets : nullptr;
    for (std::size_t i = 0; i < hints_.size(); ++i)
        captions_ << (units && i < units->size() ? unitCaption(i, (*units)[i]) : tr("Unit %1").arg(i));
    const QSignalBlocker block(unit_);
    unit_->clear();
    for (std::size_t i = 0; i < hints_.size(); ++i) unit_->addItem(tr("Unit %1").arg(i));
    unit_->setVisible(hints_.size() > 1);
    if (hints_.empty()) {
        clear();
        // A run reopened from the history: its record names its ControlNets, the history keeps no hint.
        if (units && !units->empty())
            caption_->setText(
                tr("The history keeps no hint: run these settings again to see what the ControlNet "
                   "saw."));
        return;
    }
    unit_->setCurrentIndex(0);
    showUnit(0);
}

void ControlHintView::clear() {
    hints_.clear();
    captions_.clear();
    unit_->clear();
    unit_->hide();
    caption_->setText(
        tr("The run shown used no ControlNet. A run with one shows here the hint each unit saw (its "
           "control image after the preprocessor)."));
    pane_->setImage({});
    pane_->hide();
}

QImage ControlHintView::shownHint() const {
    const int unit = unit_->currentIndex();
    return unit >= 0 && unit < hintCount() ? hints_[static_cast<std::size_t>(unit)] : QImage();
}

QString ControlHintView::caption() const { return caption_->text(); }

void ControlHintView::selectUnit(int unit) {
    if (unit >= 0 && unit < hintCount()) unit_->setCurrentIndex(unit);
}

void ControlHintView::showUnit(int unit) {
    if (unit < 0 || unit >= hintCount()) return;
    const QImage& hint = hints_[static_cast<std::size_t>(unit)];
    caption_->setText(hint.isNull()
                          ? tr("%1 — no hint (the run had no image to take it from)").arg(captions_.value(unit))
                          : tr("%1 — %2×%3").arg(captions_.value(unit)).arg(hint.width()).arg(hint.height()));
    pane_->setImage(hint);
    pane_->setVisible(!hint.isNull());
    pane_->fitToView();
}

}  // namespace tessera
