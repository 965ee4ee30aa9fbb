#include "ui/StatusLine.h"

#include <algorithm>
#include <exception>

#include <QCoreApplication>
#include <QLabel>
#include <QPainter>
#include <QProgressBar>
#include <QStatusBar>
#include <QTimer>

#include "core/sampling/TilePlan.h"

namespace tessera {

namespace {

// A one-line label drawn cut with "…" to its current width, never wider than the room it is given:
// a run's note in the status bar keeps the fields beside it and shows that it goes on (the whole
// note is its tooltip). QStatusBar::showMessage would cut it at the progress fields without a sign.
class ElidedLabel : public QLabel {
public:
    // `asWideAsText`: the label asks for its text's width (and is cut only where the bar is
    // short); otherwise it takes the room the bar's stretch gives it.
    explicit ElidedLabel(const QString& text = {}, bool asWideAsText = false)
        : QLabel(text), asWideAsText_(asWideAsText) {}
    QSize minimumSizeHint() const override { return {0, QLabel::minimumSizeHint().height()}; }
    QSize sizeHint() const override {
        return {asWideAsText_ ? QLabel::sizeHint().width() : 0, QLabel::sizeHint().height()};
    }

protected:
    void paintEvent(QPaintEvent*) override {
        QPainter painter(this);
        painter.setPen(palette().color(QPalette::WindowText));
        const QRect r = contentsRect();
        painter.drawText(r, Qt::AlignLeft | Qt::AlignVCenter,
                         fontMetrics().elidedText(text(), Qt::ElideRight, r.width()));
    }

private:
    bool asWideAsText_ = false;
};

// How long a run's note stays in place of the status text.
constexpr int kNoteMs = 8000;
// The step bar's resolution while it shows a load's fraction.
constexpr int kLoadBarSteps = 1000;

}  // namespace

StatusLine::StatusLine(QStatusBar* bar) : QObject(bar) {
    // Drawn cut with "…" like a note: a run's messages follow its summary and often run past the
    // progress fields (the whole text is the tooltip).
    statusText_ = new ElidedLabel(tr("Ready"));
    statusText_->setObjectName(QStringLiteral("statusText"));
    statusText_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    statusText_->setMinimumWidth(200);
    // As wide as its text where there is room, cut with "…" where there is not (the whole text its
    // tooltip): a long phase name never widens the window past the screen.
    progressText_ = new ElidedLabel({}, true);
    progressText_->setObjectName(QStringLiteral("progressText"));
    stepBar_ = new QProgressBar;
    stepBar_->setObjectName(QStringLiteral("stepProgress"));
    stepBar_->setFormat(tr("step %v/%m"));
    stepBar_->setFixedWidth(170);
    tileBar_ = new QProgressBar;
    tileBar_->setObjectName(QStringLiteral("tileProgress"));
    tileBar_->setFormat(tr("tile %v/%m"));
    tileBar_->setFixedWidth(tileBar_->fontMetrics().horizontalAdvance(tr("batch 88/88 of step 888/888")) + 24);
    for (QProgressBar* progress : {stepBar_, tileBar_}) {
        progress->setRange(0, 1);
        progress->setValue(0);
        progress->setTextVisible(true);
    }
    noteText_ = new ElidedLabel;
    noteText_->setObjectName(QStringLiteral("statusNote"));
    noteText_->setContentsMargins(3, 0, 0, 0);  // where QStatusBar draws its messages
    noteText_->setMinimumWidth(200);            // as the status text: a long progress text is cut first
    noteText_->hide();
    noteTimer_ = new QTimer(this);
    noteTimer_->setSingleShot(true);
    connect(noteTimer_, &QTimer::timeout, this, [this] {
        noteText_->hide();
        statusText_->show();
    });
    bar->addWidget(statusText_, 1);
    bar->addWidget(noteText_, 1);
    bar->addPermanentWidget(progressText_);
    bar->addPermanentWidget(stepBar_);
    bar->addPermanentWidget(tileBar_);
}

void StatusLine::setStatusText(const QString& text, bool error) {
    statusText_->setText(text);
    statusText_->setToolTip(text);
    statusText_->setStyleSheet(error ? QStringLiteral("color: #c0392b;") : QString());
}

void StatusLine::showNote(const QString& text) {
    noteText_->setText(text);
    noteText_->setToolTip(text);
    statusText_->hide();
    noteText_->show();
    noteTimer_->start(kNoteMs);
}

void StatusLine::showReady(bool valid, const RunConfig& config) {
    // Before a run the bars would read "step 0/1": say what a run would do instead.
    hideBars();
    if (!valid) {
        setProgressText(tr("not ready: fix the marked settings"));
        return;
    }
    try {
        const TilePlan plan = TilePlan::fromConfig(config);
        const int batch = resolveTileBatch(config.tileBatch, plan.count());
        const int batches = (plan.count() + batch - 1) / batch;
        tilesPerBatch_ = batch;
        setProgressText(tr("ready: %1 steps × %2 tile batches (%3 tiles, batch %4%5)")
                            .arg(config.steps)
                            .arg(batches)
                            .arg(plan.count())
                            .arg(batch)
                            .arg(config.tileBatch <= 0 ? tr(", auto") : QString()));
    } catch (const std::exception&) {
        setProgressText(tr("not ready: fix the marked settings"));
    }
}

void StatusLine::showRanOn(const RunRecord& record) {
    setProgressText(tr("%1 %2 · %3 × %4 px · seed %5")
                        .arg(QString::fromStdString(record.environment.backend).toUpper(),
                             QString::fromUtf8(toString(record.config.precision).data()).toUpper())
                        .arg(record.config.width)
                        .arg(record.config.height)
                        .arg(record.config.seed));
}

void StatusLine::setProgressText(const QString& text) {
    progressText_->setText(text);
    progressText_->setToolTip(text);
    progressText_->updateGeometry();
}

void StatusLine::clearProgressText() { setProgressText({}); }

void StatusLine::showBars() {
    stepBar_->show();
    tileBar_->show();
}

void StatusLine::hideBars() {
    stepBar_->hide();
    tileBar_->hide();
}

void RunProgress::countFinishedBatch(const TileBatchTiming& batch) {
    if (batch.step < step) return;  // its step finished: every tile of it was counted
    if (batch.step != countedStep_) {
        countedStep_ = batch.step;
        countedBatches_.clear();
        tilesDone = 0;
    }
    step = batch.step;
    if (std::find(countedBatches_.begin(), countedBatches_.end(), batch.batchIndex) != countedBatches_.end()) return;
    countedBatches_.push_back(batch.batchIndex);
    tilesDone += static_cast<int>(batch.tileIds.size());
    if (tiles > 0) tilesDone = std::min(tilesDone, tiles);
}

void RunProgress::finishStep(int scheduleStep) {
    if (scheduleStep < countedStep_) return;  // a later step's batches are in: its count stands
    step = std::max(step, scheduleStep + 1);
    tilesDone = 0;
    countedStep_ = -1;
    countedBatches_.clear();
}

void StatusLine::showProgress(const RunProgress& p, bool running) {
    showStepBar(p, running);
    const int tiles = std::max(1, p.tiles);
    const int tilesDone = std::clamp(p.tilesDone, 0, tiles);
    tileBar_->setRange(0, tiles);
    tileBar_->setValue(tilesDone);
    if (!running || !p.started || p.tiles <= 0) {
        tileBar_->setFormat(tr("tile %v/%m"));
        return;
    }
    // What is under way: the tile, or the batch when a call computes several (all of a step's
    // tiles in one call finish together, so a count of finished tiles alone would read 0 until
    // the step ends).
    const int runSteps = std::max(1, p.steps - p.firstStep);
    const int step = std::clamp(p.step + 1 - p.firstStep, 1, runSteps);
    const int perBatch = std::clamp(p.tilesPerBatch > 0 ? p.tilesPerBatch : tilesPerBatch_, 1, tiles);
    if (perBatch > 1) {
        const int batches = (tiles + perBatch - 1) / perBatch;
        const int batchesDone = (tilesDone + perBatch - 1) / perBatch;
        tileBar_->setFormat(tr("batch %1/%2 of step %3/%4")
                                .arg(std::min(batchesDone + 1, batches))
                                .arg(batches)
                                .arg(step)
                                .arg(runSteps));
    } else {
        tileBar_->setFormat(
            tr("tile %1/%2 of step %3/%4").arg(std::min(tilesDone + 1, tiles)).arg(tiles).arg(step).arg(runSteps));
    }
}

void StatusLine::showStepBar(const RunProgress& p, bool running) {
    if (running && p.loading()) {
        stepBar_->setFormat(p.loadPhase + QStringLiteral(" %p%"));
        stepBar_->setRange(0, kLoadBarSteps);
        stepBar_->setValue(static_cast<int>(p.loadFraction * kLoadBarSteps));
        return;
    }
    stepBar_->setFormat(tr("step %v/%m"));
    // The steps this run evaluates (image-to-image at strength 0.35 of 20: 7, not 20). While
    // running, the step in progress (1-based); afterwards, the steps completed. Busy while the
    // engine prepares (and loads a model that reports no fraction).
    const int runSteps = std::max(1, p.steps - p.firstStep);
    stepBar_->setRange(0, running && !p.started ? 0 : runSteps);
    stepBar_->setValue(std::clamp(running && p.started ? p.step + 1 - p.firstStep : p.step - p.firstStep, 0, runSteps));
}

}  // namespace tessera
