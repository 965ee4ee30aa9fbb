#include "ui/TimingCharts.h"

#include <algorithm>

#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace tessera {

namespace {

QCustomPlot* makePlot(const QString& xLabel, const QString& yLabel) {
    auto* plot = new QCustomPlot;
    plot->setMinimumHeight(150);
    plot->xAxis->setLabel(xLabel);
    plot->yAxis->setLabel(yLabel);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot->axisRect()->setRangeZoom(Qt::Horizontal);
    plot->axisRect()->setRangeDrag(Qt::Horizontal);
    plot->legend->setVisible(true);
    plot->legend->setFont(QFont(plot->font().family(), 8));
    plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    plot->setNoAntialiasingOnDrag(true);
    return plot;
}

QCPGraph* addSeries(QCustomPlot* plot, const QString& name, const QColor& color, bool scatter) {
    QCPGraph* graph = plot->addGraph();
    graph->setName(name);
    graph->setPen(QPen(color, 1.6));
    if (scatter) graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, color, Qt::white, 5));
    return graph;
}

// Axis range of a series with a little headroom; zero-based so bars of time read honestly.
void fitValueAxis(QCPAxis* axis, const std::initializer_list<QCPGraph*>& graphs) {
    double top = 0;
    for (QCPGraph* graph : graphs) {
        if (!graph->visible()) continue;
        bool found = false;
        const QCPRange range = graph->getValueRange(found);
        if (found) top = std::max(top, range.upper);
    }
    axis->setRange(0, top > 0 ? top * 1.12 : 1.0);
}

}  // namespace

TimingCharts::TimingCharts(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("timingCharts"));
    stepPlot_ = makePlot(tr("step"), tr("ms"));
    stepPlot_->setObjectName(QStringLiteral("stepPlot"));
    auto stepTicker = QSharedPointer<QCPAxisTickerFixed>::create();
    stepTicker->setTickStep(1.0);  // steps are whole numbers; more than ~10 ticks use multiples
    stepTicker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    stepPlot_->xAxis->setTicker(stepTicker);
    hostGraph_ = addSeries(stepPlot_, tr("wall (host)"), QColor(0x1f, 0x77, 0xb4), true);
    enqueueGraph_ = addSeries(stepPlot_, tr("host enqueue"), QColor(0x7f, 0x7f, 0x7f), false);
    gpuGraph_ = addSeries(stepPlot_, tr("GPU"), QColor(0x2c, 0xa0, 0x2c), true);
    // Until a backend reports device time, the GPU and enqueue series would be empty noise.
    enqueueGraph_->setVisible(false);
    gpuGraph_->setVisible(false);
    enqueueGraph_->removeFromLegend();
    gpuGraph_->removeFromLegend();

    memoryPlot_ = makePlot(tr("time (s)"), tr("MiB"));
    memoryPlot_->setObjectName(QStringLiteral("memoryPlot"));
    memoryGraph_ = addSeries(memoryPlot_, tr("host RSS"), QColor(0xd6, 0x27, 0x28), false);
    memoryGraph_->setBrush(QColor(0xd6, 0x27, 0x28, 22));

    summary_ = new QLabel(tr("No run yet"));
    summary_->setObjectName(QStringLiteral("chartSummary"));

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(summary_);
    layout->addWidget(stepPlot_, 3);
    layout->addWidget(memoryPlot_, 2);

    replotTimer_.setSingleShot(true);
    replotTimer_.setInterval(kReplotIntervalMs);
    connect(&replotTimer_, &QTimer::timeout, this, &TimingCharts::replotNow);
    clear();
}

void TimingCharts::clear() {
    for (QCPGraph* graph : {hostGraph_, enqueueGraph_, gpuGraph_, memoryGraph_}) graph->data()->clear();
    steps_ = 0;
    gpuSeen_ = false;
    wallSum_ = gpuSum_ = 0;
    enqueueGraph_->setVisible(false);
    gpuGraph_->setVisible(false);
    enqueueGraph_->removeFromLegend();
    gpuGraph_->removeFromLegend();
    summary_->setText(tr("No steps yet"));
    scheduleReplot();
}

void TimingCharts::addStep(const StepTiming& timing) {
    const double x = timing.step + 1;  // steps as people count them
    hostGraph_->addData(x, timing.wallMs);
    wallSum_ += timing.wallMs;
    if (timing.gpuMs >= 0) {
        if (!gpuSeen_) {
            gpuSeen_ = true;
            gpuGraph_->setVisible(true);
            enqueueGraph_->setVisible(true);
            gpuGraph_->addToLegend();
            enqueueGraph_->addToLegend();
        }
        gpuGraph_->addData(x, timing.gpuMs);
        enqueueGraph_->addData(x, timing.hostEnqueueMs);
        gpuSum_ += timing.gpuMs;
    }
    ++steps_;
    QString text = tr("%1 steps · mean %2 ms/step (wall) · last %3 ms")
                       .arg(steps_)
                       .arg(wallSum_ / steps_, 0, 'f', 1)
                       .arg(timing.wallMs, 0, 'f', 1);
    if (gpuSeen_) text += tr(" · GPU mean %1 ms").arg(gpuSum_ / steps_, 0, 'f', 2);
    summary_->setText(text);
    scheduleReplot();
}

void TimingCharts::addMemory(const MemorySample& sample, bool device) {
    if (device != deviceMemory_) {
        deviceMemory_ = device;
        memoryGraph_->setName(device ? tr("device in use") : tr("host RSS"));
    }
    memoryGraph_->addData(sample.tMs / 1000.0, sample.usedMiB);
    scheduleReplot();
}

void TimingCharts::showRecord(const RunRecord& record) {
    clear();
    const bool device = record.environment.backend != "cpu";
    for (const StepTiming& step : record.steps) addStep(step);
    for (const MemorySample& sample : record.memory) addMemory(sample, device);
}

void TimingCharts::scheduleReplot() {
    if (!replotTimer_.isActive()) replotTimer_.start();
}

void TimingCharts::flush() {
    replotTimer_.stop();
    replotNow();
}

void TimingCharts::replotNow() {
    stepPlot_->xAxis->setRange(0.5, std::max(steps_, 1) + 0.5);
    fitValueAxis(stepPlot_->yAxis, {hostGraph_, enqueueGraph_, gpuGraph_});
    bool found = false;
    const QCPRange keys = memoryGraph_->getKeyRange(found);
    memoryPlot_->xAxis->setRange(0, found && keys.upper > 0 ? keys.upper * 1.05 : 1.0);
    fitValueAxis(memoryPlot_->yAxis, {memoryGraph_});
    stepPlot_->replot(QCustomPlot::rpQueuedReplot);
    memoryPlot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace tessera
