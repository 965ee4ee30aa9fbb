#include "ui/TimingCharts.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include <QFileDialog>
#include <QFileInfo>
#include <QFontMetrics>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QStringList>
#include <QToolTip>
#include <QVBoxLayout>

#include "core/sampling/TilePlan.h"
#include "ui/ChartLegend.h"
#include "ui/HeatMap.h"

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
    placeLegendAbove(plot);
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

    // Which earlier runs reach above the fitted value axis: a line of its own under the legend
    // (in the layout only while there is something to say), so it covers no data and goes into
    // a saved chart.
    earlierNote_ = new QCPTextElement(stepPlot_, QString(), QFont(font().family(), 8));
    earlierNote_->setObjectName(QStringLiteral("earlierRunsNote"));
    earlierNote_->setTextColor(QColor(0x55, 0x5a, 0x60));
    earlierNote_->setMargins(QMargins(4, 0, 4, 2));
    earlierNote_->setVisible(false);

    memoryPlot_ = makePlot(tr("time (s)"), tr("MiB"));
    memoryPlot_->setObjectName(QStringLiteral("memoryPlot"));
    memoryGraph_ = addSeries(memoryPlot_, tr("host RSS"), QColor(0xd6, 0x27, 0x28), false);
    memoryGraph_->setBrush(QColor(0xd6, 0x27, 0x28, 22));

    // Per-tile time over the tile grid; row 0 at the top, as on the canvas.
    tilePlot_ = new QCustomPlot;
    tilePlot_->setObjectName(QStringLiteral("tilePlot"));
    tilePlot_->setMinimumHeight(150);
    tilePlot_->xAxis->setLabel(tr("tile column"));
    tilePlot_->yAxis->setLabel(tr("tile row"));
    tilePlot_->yAxis->setRangeReversed(true);
    tileMap_ = new QCPColorMap(tilePlot_->xAxis, tilePlot_->yAxis);
    tileMap_->setInterpolate(false);
    tileMap_->setTightBoundary(false);  // cells centred on whole columns and rows
    tileScale_ = new QCPColorScale(tilePlot_);
    tilePlot_->plotLayout()->addElement(0, 1, tileScale_);
    tileScale_->setType(QCPAxis::atRight);
    tileScale_->axis()->setLabel(tr("ms per tile and step"));
    tileMap_->setColorScale(tileScale_);
    QCPColorGradient gradient;
    gradient.clearColorStops();
    for (int i = 0; i <= 8; ++i) gradient.setColorStopAt(i / 8.0, heatColor(i / 8.0));
    gradient.setNanHandling(QCPColorGradient::nhNanColor);
    gradient.setNanColor(QColor(0xe4, 0xe6, 0xea));  // a tile without a time yet
    tileMap_->setGradient(gradient);
    // Cell borders: the sub-grid (at half numbers) drawn over the cells in white.
    for (QCPAxis* axis : {tilePlot_->xAxis, tilePlot_->yAxis}) {
        axis->grid()->setLayer(QStringLiteral("axes"));
        axis->grid()->setPen(Qt::NoPen);
        axis->grid()->setZeroLinePen(Qt::NoPen);
        axis->grid()->setSubGridPen(QPen(Qt::white, 1.5));
    }
    tilePlaceholder_ = new QCPItemText(tilePlot_);
    tilePlaceholder_->position->setType(QCPItemPosition::ptAxisRectRatio);
    tilePlaceholder_->position->setCoords(0.5, 0.5);
    tilePlaceholder_->setPositionAlignment(Qt::AlignCenter);
    tilePlaceholder_->setColor(QColor(0x55, 0x5a, 0x60));
    tilePlaceholder_->setBrush(QColor(255, 255, 255, 210));
    tilePlaceholder_->setPadding(QMargins(6, 3, 6, 3));
    tilePlaceholder_->setLayer(QStringLiteral("legend"));  // above the cell borders (layer "axes")
    // Over the whole plot where it is wider than the grid (a grid at the image's aspect can be narrow).
    tilePlaceholder_->setClipToAxisRect(false);
    auto* marginGroup = new QCPMarginGroup(tilePlot_);
    tilePlot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, marginGroup);
    tileScale_->setMarginGroup(QCP::msBottom | QCP::msTop, marginGroup);
    connect(tilePlot_, &QCustomPlot::afterLayout, this, &TimingCharts::keepTileAspect);

    summary_ = new QLabel(tr("No run yet"));
    summary_->setObjectName(QStringLiteral("chartSummary"));
    summary_->setWordWrap(true);  // "… · GPU mean 12.34 ms" does not fit the dock's width on one line

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(summary_);
    layout->addWidget(stepPlot_, 3);
    layout->addWidget(memoryPlot_, 2);
    layout->addWidget(tilePlot_, 2);

    // Hover: the value under the mouse. Right click: save the chart.
    const std::pair<Chart, QCustomPlot*> charts[] = {
        {Chart::Steps, stepPlot_}, {Chart::Memory, memoryPlot_}, {Chart::Tiles, tilePlot_}};
    for (const auto& [chart, plotWidget] : charts) {
        QCustomPlot* widget = plotWidget;
        const Chart which = chart;
        widget->setMouseTracking(true);
        connect(widget, &QCustomPlot::mouseMove, this, [this, widget, which](QMouseEvent* event) {
            const QString text = hoverText(which, event->position());
            if (text.isEmpty())
                QToolTip::hideText();
            else
                QToolTip::showText(widget->mapToGlobal(event->position().toPoint()), text, widget);
        });
        widget->setContextMenuPolicy(Qt::CustomContextMenu);
        connect(widget, &QWidget::customContextMenuRequested, this,
                [this, which](const QPoint& pos) { showContextMenu(which, pos); });
    }

    replotTimer_.setSingleShot(true);
    replotTimer_.setInterval(kReplotIntervalMs);
    connect(&replotTimer_, &QTimer::timeout, this, &TimingCharts::replotNow);
    clear();
    resetTileGrid(std::nullopt);
}

QCustomPlot* TimingCharts::plot(Chart chart) const {
    switch (chart) {
        case Chart::Steps:
            return stepPlot_;
        case Chart::Memory:
            return memoryPlot_;
        case Chart::Tiles:
            return tilePlot_;
    }
    return nullptr;
}

bool TimingCharts::saveChart(Chart chart, const QString& path) {
    QCustomPlot* widget = plot(chart);
    widget->replot(QCustomPlot::rpImmediateRefresh);
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix == QStringLiteral("pdf")) return widget->savePdf(path);
    // Twice the on-screen size, so the picture stays sharp in documents.
    return widget->savePng(path, 0, 0, 2.0);
}

void TimingCharts::showContextMenu(Chart chart, const QPoint& pos) {
    QMenu menu(this);
    menu.addAction(tr("Save chart as PNG…"));
    QAction* pdf = menu.addAction(tr("Save chart as PDF…"));
    QAction* chosen = menu.exec(plot(chart)->mapToGlobal(pos));
    if (!chosen) return;
    const bool asPdf = chosen == pdf;
    const QString name = plot(chart)->objectName() + (asPdf ? QStringLiteral(".pdf") : QStringLiteral(".png"));
    const QString path = QFileDialog::getSaveFileName(this, chosen->text().remove(QStringLiteral("…")), name,
                                                      asPdf ? tr("PDF (*.pdf)") : tr("PNG images (*.png)"));
    if (path.isEmpty()) return;
    if (!saveChart(chart, path)) QMessageBox::warning(this, tr("Save chart"), tr("%1 could not be written").arg(path));
}

QString TimingCharts::hoverText(Chart chart, QPointF pixel) const {
    if (chart == Chart::Tiles) {
        if (tileCols_ <= 0 || tileRows_ <= 0) return {};
        const double key = tilePlot_->xAxis->pixelToCoord(pixel.x());
        const double value = tilePlot_->yAxis->pixelToCoord(pixel.y());
        const int col = static_cast<int>(std::lround(key)), row = static_cast<int>(std::lround(value));
        if (col < 0 || row < 0 || col >= tileCols_ || row >= tileRows_) return {};
        const int id = row * tileCols_ + col;
        const double ms = tileMs_[static_cast<std::size_t>(id)];
        if (ms < 0) return tr("tile %1 (column %2, row %3): no time yet").arg(id).arg(col).arg(row);
        if (oneBatchPerStep_)
            return tr("tile %1 (column %2, row %3): ran with all %4 tiles in one batch, %5 ms per step")
                .arg(id)
                .arg(col)
                .arg(row)
                .arg(tileMs_.size())
                .arg(oneBatchMsSum_ / std::max(oneBatchCount_, 1), 0, 'f', 1);
        return tr("tile %1 (column %2, row %3): %4 ms per step").arg(id).arg(col).arg(row).arg(ms, 0, 'f', 2);
    }
    // The nearest data point (in pixels) of any visible graph, within a small radius.
    QCustomPlot* widget = plot(chart);
    constexpr double kRadius = 12.0;
    double best = kRadius * kRadius;
    QString text;
    for (int g = 0; g < widget->graphCount(); ++g) {
        QCPGraph* graph = widget->graph(g);
        if (!graph->visible()) continue;
        for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
            const double dx = widget->xAxis->coordToPixel(it->key) - pixel.x();
            const double dy = widget->yAxis->coordToPixel(it->value) - pixel.y();
            if (dx * dx + dy * dy >= best) continue;
            best = dx * dx + dy * dy;
            const QVariant runName = graph->property("runName");
            const QString series = runName.isValid() ? tr("earlier run %1").arg(runName.toString()) : graph->name();
            text = chart == Chart::Steps
                       ? tr("%1 — step %2: %3 ms").arg(series).arg(it->key, 0, 'f', 0).arg(it->value, 0, 'f', 2)
                       : tr("%1 — %2 s: %3 MiB").arg(graph->name()).arg(it->key, 0, 'f', 2).arg(it->value, 0, 'f', 1);
        }
    }
    return text;
}

double TimingCharts::tileTimeMs(int id) const {
    if (id < 0 || id >= static_cast<int>(tileMs_.size())) return -1;
    return tileMs_[static_cast<std::size_t>(id)];
}

void TimingCharts::resetTileGrid(const std::optional<TilePlan>& plan) {
    tileMs_.clear();
    tileSum_.clear();
    tileSamples_.clear();
    tileCols_ = tileRows_ = 0;
    tilePlanWidth_ = tilePlanHeight_ = 0;
    oneBatchPerStep_ = false;
    oneBatchMsSum_ = 0;
    oneBatchCount_ = 0;
    tileAspectPasses_ = 0;
    tilePlanTiles_.clear();
    tileMap_->data()->clear();
    if (plan && plan->count() > 0) {
        tileCols_ = plan->cols();
        tileRows_ = plan->rows();
        tilePlanWidth_ = plan->width();
        tilePlanHeight_ = plan->height();
        tilePlanTiles_ = plan->tiles();
        const auto count = static_cast<std::size_t>(plan->count());
        tileMs_.assign(count, -1.0);
        tileSum_.assign(count, 0.0);
        tileSamples_.assign(count, 0);
        tileMap_->data()->setSize(tileCols_, tileRows_);
        // Cell centres on whole numbers. QCPColorMap draws a single cell over the whole data
        // range (no half cell either side), so a lone column or row spans -0.5 to 0.5 itself.
        const auto cellRange = [](int cells) { return cells > 1 ? QCPRange(0, cells - 1) : QCPRange(-0.5, 0.5); };
        tileMap_->data()->setRange(cellRange(tileCols_), cellRange(tileRows_));
        // NaN: no time yet (drawn in the gradient's "no data" grey).
        for (int row = 0; row < tileRows_; ++row)
            for (int col = 0; col < tileCols_; ++col) tileMap_->data()->setCell(col, row, std::nan(""));
    }
    // Whole-number ticks, and thin borders between the cells (the sub-grid at the half
    // numbers) while the grid is small enough to label every tile.
    auto setupAxis = [](QCPAxis* axis, int cells) {
        auto ticker = QSharedPointer<QCPAxisTickerText>::create();
        const int step = std::max(1, (cells + 11) / 12);
        for (int i = 0; i < std::max(cells, 1); i += step) ticker->addTick(i, QString::number(i));
        ticker->setSubTickCount(step == 1 ? 1 : 0);
        axis->setTicker(ticker);
        axis->grid()->setSubGridVisible(step == 1 && cells > 1);
        axis->setRange(-0.5, std::max(cells, 1) - 0.5);
    };
    setupAxis(tilePlot_->xAxis, tileCols_);
    setupAxis(tilePlot_->yAxis, tileRows_);
    refreshTileScale();
    emit tileTimesChanged();
}

void TimingCharts::setTilePlan(const std::optional<TilePlan>& plan) {
    if (plan && plan->width() == tilePlanWidth_ && plan->height() == tilePlanHeight_ && plan->tiles() == tilePlanTiles_)
        return;  // the same tiles: their times still apply
    if (!plan && tilePlanTiles_.empty()) return;
    resetTileGrid(plan);
}

void TimingCharts::startTileTimes(const TilePlan& plan) { resetTileGrid(plan); }

void TimingCharts::applyTileCell(int id) {
    const auto i = static_cast<std::size_t>(id);
    tileMs_[i] = tileSamples_[i] > 0 ? tileSum_[i] / tileSamples_[i] : -1.0;
    tileMap_->data()->setCell(id % tileCols_, id / tileCols_, tileMs_[i] >= 0 ? tileMs_[i] : std::nan(""));
}

void TimingCharts::addTileBatches(const std::vector<TileBatchTiming>& batches) {
    if (tileCols_ <= 0 || batches.empty()) return;
    const int count = static_cast<int>(tileMs_.size());
    const bool firstTimes = timedTileCount() == 0;
    bool allTogether = count > 1 && (firstTimes || oneBatchPerStep_);
    for (const TileBatchTiming& batch : batches) {
        if (batch.tileIds.empty()) continue;
        // Device time where measured, else host time.
        const double batchMs = batch.gpuMs >= 0 ? batch.gpuMs : batch.hostMs;
        if (static_cast<int>(batch.tileIds.size()) == count) {
            oneBatchMsSum_ += batchMs;
            ++oneBatchCount_;
        } else {
            allTogether = false;
        }
        // A batch's time split evenly over its tiles.
        const double ms = batchMs / static_cast<double>(batch.tileIds.size());
        for (int id : batch.tileIds) {
            if (id < 0 || id >= count) continue;
            tileSum_[static_cast<std::size_t>(id)] += ms;
            ++tileSamples_[static_cast<std::size_t>(id)];
            applyTileCell(id);
        }
    }
    oneBatchPerStep_ = allTogether && oneBatchCount_ > 0;
    refreshTileScale();
    emit tileTimesChanged();
    scheduleReplot();
}

int TimingCharts::timedTileCount() const {
    return static_cast<int>(std::count_if(tileMs_.begin(), tileMs_.end(), [](double ms) { return ms >= 0; }));
}

QString TimingCharts::tilePlaceholderText() const {
    return tilePlaceholder_->visible() ? tilePlaceholder_->text() : QString();
}

void TimingCharts::refreshTileScale() {
    // The colour range over the tiles with a time (NaN cells would poison QCustomPlot's own
    // rescale).
    double low = 0, high = 0;
    bool any = false;
    for (double ms : tileMs_) {
        if (ms < 0) continue;
        low = any ? std::min(low, ms) : ms;
        high = any ? std::max(high, ms) : ms;
        any = true;
    }
    // Tiles within a tenth of the slowest one's time took the same time as far as a reader can
    // tell (a batch's time is shared by its tiles): the scale spans at least that tenth, about
    // the middle, so two batches 0.01 ms apart are not painted black and yellow.
    const double minSpan = high > 0 ? 0.1 * high : 1.0;
    if (any && high - low < minSpan) {
        const double middle = (low + high) / 2;
        low = std::max(0.0, middle - minSpan / 2);
        high = middle + minSpan / 2;
    }
    tileMap_->setDataRange(any ? QCPRange(low, high) : QCPRange(0, 1));
    // One batch of every tile: the same time for all of them says nothing about any tile. The
    // cells are drawn in one flat colour, the colour scale hidden, and the batch's time written.
    QCPColorGradient gradient = tileMap_->gradient();
    gradient.setNanColor(oneBatchPerStep_ ? QColor(0xb9, 0xcf, 0xe4) : QColor(0xe4, 0xe6, 0xea));
    tileMap_->setGradient(gradient);
    tileScale_->setVisible(!oneBatchPerStep_);
    if (oneBatchPerStep_) {
        for (int id = 0; id < static_cast<int>(tileMs_.size()); ++id)
            tileMap_->data()->setCell(id % tileCols_, id / tileCols_, std::nan(""));
        tilePlaceholder_->setText(tr("one batch of %1 tiles: %2 ms per step\n(all in one call: no per-tile times)")
                                      .arg(tileMs_.size())
                                      .arg(oneBatchMsSum_ / std::max(oneBatchCount_, 1), 0, 'f', 0));
    } else if (tileCols_ <= 0) {
        tilePlaceholder_->setText(tr("No valid tile plan"));
    } else if (any) {
        for (int id = 0; id < static_cast<int>(tileMs_.size()); ++id) applyTileCell(id);
    } else {
        tilePlaceholder_->setText(tr("%1 × %2 tiles · no times yet").arg(tileCols_).arg(tileRows_));
    }
    tilePlaceholder_->setVisible(!any || oneBatchPerStep_);
    tilePlot_->replot(QCustomPlot::rpQueuedReplot);
}

void TimingCharts::showTileTimes(const RunRecord& record) {
    std::optional<TilePlan> plan;
    try {
        if (record.tileCount > 0) plan = TilePlan::fromConfig(record.config);
    } catch (const std::exception&) {
        plan.reset();
    }
    if (plan && plan->count() != record.tileCount) plan.reset();
    resetTileGrid(plan);
    if (plan) addTileBatches(record.batches);
}

void TimingCharts::setEarlierRuns(const std::vector<const RunRecord*>& runs) {
    for (QCPGraph* graph : earlierGraphs_) stepPlot_->removeGraph(graph);
    earlierGraphs_.clear();
    earlierNames_.clear();
    bool first = true;
    for (const RunRecord* run : runs) {
        if (!run || run->steps.empty()) continue;
        QCPGraph* graph = stepPlot_->addGraph();
        std::string name = run->config.label.empty() ? run->runId : run->config.label;
        if (!run->modelName.empty()) name += " (" + run->modelName + ")";
        graph->setName(tr("earlier: %1").arg(QString::fromStdString(name)));
        graph->setPen(QPen(QColor(150, 150, 150, 150), 1.0));
        for (const StepTiming& step : run->steps) graph->addData(step.step + 1, step.wallMs);
        // One legend entry for all of them; the tooltip names each.
        if (first)
            graph->setName(tr("earlier runs"));
        else
            graph->removeFromLegend();
        // Behind the current run's series.
        graph->setLayer(stepPlot_->layer(QStringLiteral("grid")));
        graph->setProperty("runName", QString::fromStdString(name));
        first = false;
        earlierGraphs_.push_back(graph);
        earlierNames_.push_back(name);
    }
    scheduleReplot();
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
    showTileTimes(record);
}

QString TimingCharts::earlierRunsNote() const { return earlierNote_->visible() ? earlierNote_->text() : QString(); }

void TimingCharts::showEarlierRunsNote(const QStringList& clipped, double clippedTop, double currentTop) {
    QCPLayoutGrid* layout = stepPlot_->plotLayout();
    const bool shown = layout->hasElement(1, 0) && layout->element(1, 0) == earlierNote_;
    if (clipped.isEmpty()) {
        earlierNote_->setVisible(false);
        earlierNote_->setText({});
        if (shown) {
            layout->take(earlierNote_);
            layout->simplify();
        }
        return;
    }
    // Two short lines: the charts dock is narrow and a text element does not wrap.
    const QString who =
        clipped.size() == 1
            ? tr("Earlier run %1")
                  .arg(QFontMetrics(earlierNote_->font()).elidedText(clipped.front(), Qt::ElideMiddle, 260))
            : tr("%1 earlier runs").arg(clipped.size());
    const double ratio = clippedTop / currentTop;
    earlierNote_->setText(tr("%1 cut off at the top:\nup to %2 ms/step, %3× this run's slowest step")
                              .arg(who)
                              .arg(clippedTop, 0, 'f', 0)
                              .arg(ratio, 0, 'f', ratio < 10 ? 1 : 0));
    earlierNote_->setVisible(true);
    if (!shown) {
        // Under the legend (row 0), above the axis rect.
        layout->insertRow(1);
        layout->addElement(1, 0, earlierNote_);
        layout->setRowStretchFactor(1, 0.001);
    }
}

void TimingCharts::keepTileAspect() {
    QCPAxisRect* rect = tilePlot_->axisRect();
    if (rect->outerRect().size() != tileAspectOuter_) {  // resized: settle afresh
        tileAspectOuter_ = rect->outerRect().size();
        tileAspectPasses_ = 0;
    }
    // The margins QCustomPlot chose itself: the ones in effect less the letterbox added before.
    const QMargins current = rect->margins();
    const QMargins automatic(
        std::max(0, current.left() - tileLetterbox_.left()), std::max(0, current.top() - tileLetterbox_.top()),
        std::max(0, current.right() - tileLetterbox_.right()), std::max(0, current.bottom() - tileLetterbox_.bottom()));
    QMargins letterbox;
    const QRect room = rect->outerRect().marginsRemoved(automatic);
    if (tilePlanWidth_ > 0 && tilePlanHeight_ > 0 && room.width() > 0 && room.height() > 0) {
        // The grid spans the image: as wide and high as the room allows at the image's aspect.
        const double aspect = static_cast<double>(tilePlanWidth_) / tilePlanHeight_;
        const int width = std::min(room.width(), static_cast<int>(std::lround(room.height() * aspect)));
        const int height = std::min(room.height(), static_cast<int>(std::lround(room.width() / aspect)));
        const int spareX = room.width() - width, spareY = room.height() - height;
        letterbox = QMargins(spareX / 2, spareY / 2, spareX - spareX / 2, spareY - spareY / 2);
    }
    const QMargins change = letterbox - tileLetterbox_;
    if (std::max({std::abs(change.left()), std::abs(change.top()), std::abs(change.right()),
                  std::abs(change.bottom())}) <= 1) {
        tileAspectPasses_ = 0;
        return;
    }
    // A few passes at most: the margins settle in one unless the tick labels change with them.
    if (++tileAspectPasses_ > 3) return;
    tileLetterbox_ = letterbox;
    rect->setMinimumMargins(automatic + letterbox);
    tilePlot_->replot(QCustomPlot::rpQueuedReplot);
}

void TimingCharts::scheduleReplot() {
    if (!replotTimer_.isActive()) replotTimer_.start();
}

void TimingCharts::flush() {
    replotTimer_.stop();
    replotNow();
}

void TimingCharts::replotNow() {
    // The steps that ran, numbered as the schedule numbers them: an image-to-image run starts
    // part-way (strength 0.35 of 20 steps runs steps 14 to 20).
    double firstStep = 1, lastStep = 1;
    bool anyStep = false;
    const auto cover = [&](const QCPGraph* graph) {
        bool found = false;
        const QCPRange keys = graph->getKeyRange(found);
        if (!found) return;
        firstStep = anyStep ? std::min(firstStep, keys.lower) : keys.lower;
        lastStep = anyStep ? std::max(lastStep, keys.upper) : keys.upper;
        anyStep = true;
    };
    cover(hostGraph_);
    for (const QCPGraph* graph : earlierGraphs_) cover(graph);
    stepPlot_->xAxis->setRange(firstStep - 0.5, lastStep + 0.5);
    fitValueAxis(stepPlot_->yAxis, {hostGraph_, enqueueGraph_, gpuGraph_});
    // The current run stays readable: earlier runs widen the value axis only up to a few times
    // its slowest step; one far slower (another model or size) is cut at the top and named.
    double currentTop = 0;
    for (const QCPGraph* graph : {hostGraph_, enqueueGraph_, gpuGraph_}) {
        bool found = false;
        const QCPRange range = graph->getValueRange(found);
        if (found && graph->visible()) currentTop = std::max(currentTop, range.upper);
    }
    const double cap = currentTop > 0 ? currentTop * kEarlierRunRangeFactor : -1;
    QStringList clipped;
    double clippedTop = 0;
    for (QCPGraph* graph : earlierGraphs_) {
        bool found = false;
        const QCPRange range = graph->getValueRange(found);
        if (!found) continue;
        if (cap > 0 && range.upper > cap) {
            clipped << graph->property("runName").toString();
            clippedTop = std::max(clippedTop, range.upper);
            continue;
        }
        if (range.upper * 1.12 > stepPlot_->yAxis->range().upper) stepPlot_->yAxis->setRangeUpper(range.upper * 1.12);
    }
    showEarlierRunsNote(clipped, clippedTop, currentTop);
    bool found = false;
    const QCPRange keys = memoryGraph_->getKeyRange(found);
    memoryPlot_->xAxis->setRange(0, found && keys.upper > 0 ? keys.upper * 1.05 : 1.0);
    fitValueAxis(memoryPlot_->yAxis, {memoryGraph_});
    reflowLegend(stepPlot_);
    stepPlot_->replot(QCustomPlot::rpQueuedReplot);
    memoryPlot_->replot(QCustomPlot::rpQueuedReplot);
    tilePlot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace tessera
