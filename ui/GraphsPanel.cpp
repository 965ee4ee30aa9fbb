#include "ui/GraphsPanel.h"

#include <algorithm>
#include <cmath>

#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QTableWidget>
#include <QToolTip>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include "app/qt/Exporters.h"
#include "ui/ChartLegend.h"

namespace tessera {

namespace {

// The axis rect (unit panel) of each metric.
constexpr int kTotalRect = 0, kStepRect = 1, kMemoryRect = 2;
constexpr double kBarOffset = 0.2, kBarWidth = 0.38;

int rectOf(GraphsPanel::Metric metric) {
    switch (metric) {
        case GraphsPanel::TotalTime:
            return kTotalRect;
        case GraphsPanel::StepMedian:
        case GraphsPanel::StepP95:
        case GraphsPanel::HostEnqueue:
            return kStepRect;
        default:
            return kMemoryRect;
    }
}

// Position of the metric's group on its rect's key axis (groups 1, 2, 3 within a rect).
double groupKey(GraphsPanel::Metric metric) {
    switch (metric) {
        case GraphsPanel::TotalTime:
        case GraphsPanel::StepMedian:
            return 1;
        case GraphsPanel::StepP95:
            return 2;
        case GraphsPanel::HostEnqueue:
            return 3;
        case GraphsPanel::GraphMemory:
            return 1;
        default:
            return 2;
    }
}

const QColor kColorA(0x7f, 0x7f, 0x7f);  // eager: grey
const QColor kColorB(0x2c, 0xa0, 0x2c);  // graphs: the GPU green of the timing chart

QString modeText(const GraphRunMetrics& m) {
    QString text = QString::fromStdString(m.requestedMode);
    if (!m.effectiveMode.empty() && m.effectiveMode != m.requestedMode)
        text += QStringLiteral(" (ran %1)").arg(QString::fromStdString(m.effectiveMode));
    return text;
}

// Bar labels: about three significant digits, so neighbouring labels do not run together.
QString compactValue(double value) {
    const double magnitude = std::fabs(value);
    if (value == 0) return QStringLiteral("0");
    if (magnitude >= 10000) return QString::number(value / 1000.0, 'f', 1) + QStringLiteral("k");
    if (magnitude >= 100) return QString::number(value, 'f', 0);
    if (magnitude >= 10) return QString::number(value, 'f', 1);
    return QString::number(value, 'f', 2);
}

QString formatValue(double value, int decimals) {
    return value < 0 ? QStringLiteral("—") : QString::number(value, 'f', decimals);
}

}  // namespace

double medianOf(std::vector<double> values) {
    if (values.empty()) return -1;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double nearestRankPercentile(std::vector<double> values, double p) {
    if (values.empty()) return -1;
    std::sort(values.begin(), values.end());
    const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
    const auto index = static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
    return values[index];
}

GraphRunMetrics graphRunMetrics(const RunRecord& record) {
    GraphRunMetrics m;
    m.totalMs = record.totalMs;
    m.stepTimeOnGpu = !record.steps.empty() && std::all_of(record.steps.begin(), record.steps.end(),
                                                           [](const StepTiming& s) { return s.gpuMs >= 0; });
    std::vector<double> stepMs, enqueueMs;
    for (const StepTiming& step : record.steps) {
        stepMs.push_back(m.stepTimeOnGpu ? step.gpuMs : step.wallMs);
        enqueueMs.push_back(step.hostEnqueueMs);
    }
    m.stepMedianMs = medianOf(stepMs);
    m.stepP95Ms = nearestRankPercentile(stepMs, 95.0);
    m.enqueueMedianMs = medianOf(enqueueMs);
    m.graphMemMiB = record.graphs.graphMemMiB;
    m.peakOnDevice = record.peakDeviceMiB >= 0;
    m.peakMiB = peakMemoryMiB(record);
    m.requestedMode = std::string(toString(record.config.graphs));
    m.effectiveMode = record.graphs.mode;
    return m;
}

GraphsPanel::GraphsPanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("graphsPanel"));
    caption_ = new QLabel;
    caption_->setObjectName(QStringLiteral("graphsCaption"));
    caption_->setWordWrap(true);
    caption_->setTextFormat(Qt::RichText);

    plot_ = new QCustomPlot;
    plot_->setObjectName(QStringLiteral("graphsPlot"));
    plot_->setMinimumHeight(220);
    // Layout: the legend in a row of its own, then one axis rect per unit, side by side.
    QCPAxisRect* first = plot_->axisRect();
    placeLegendAbove(plot_);
    plot_->plotLayout()->take(first);
    auto* row = new QCPLayoutGrid;
    plot_->plotLayout()->addElement(1, 0, row);
    rects_ = {first, new QCPAxisRect(plot_), new QCPAxisRect(plot_)};
    const QString units[] = {tr("s"), tr("ms per step"), tr("MiB")};
    for (int i = 0; i < 3; ++i) {
        QCPAxisRect* rect = rects_[static_cast<std::size_t>(i)];
        row->addElement(0, i, rect);
        rect->axis(QCPAxis::atLeft)->setLabel(units[i]);
        rect->axis(QCPAxis::atBottom)->grid()->setVisible(false);
        rect->axis(QCPAxis::atBottom)->setTickLength(0, 0);
        rect->axis(QCPAxis::atBottom)->setTickLabelFont(QFont(font().family(), 8));
        // Slanted: in a narrow dock "median", "p95" and "enqueue" ran into each other level.
        rect->axis(QCPAxis::atBottom)->setTickLabelRotation(-40);
        rect->setupFullAxesBox(false);
        rect->axis(QCPAxis::atTop)->setVisible(false);
        rect->axis(QCPAxis::atRight)->setVisible(false);
    }
    // The per-step panel holds three groups: give it more room.
    row->setColumnStretchFactors({0.9, 2.5, 2.3});

    table_ = new QTableWidget(MetricCount, 3);
    table_->setObjectName(QStringLiteral("graphsTable"));
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setSelectionMode(QAbstractItemView::NoSelection);
    table_->setFocusPolicy(Qt::NoFocus);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    table_->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    table_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
    const int tableHeight = table_->verticalHeader()->defaultSectionSize() * MetricCount +
                            table_->horizontalHeader()->sizeHint().height() + 2 * table_->frameWidth() + 4;
    table_->setFixedHeight(tableHeight);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(caption_);
    layout->addWidget(plot_, 1);
    layout->addWidget(table_);

    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
        const QString text = hoverText(event->position());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(plot_->mapToGlobal(event->position().toPoint()), text, plot_);
    });
    plot_->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(plot_, &QWidget::customContextMenuRequested, this, &GraphsPanel::showContextMenu);
    clear();
}

void GraphsPanel::clear() {
    hasRuns_ = false;
    metrics_ = {};
    runIdA_.clear();
    runIdB_.clear();
    caption_->setText(
        tr("No comparison yet. <b>Compare graphs</b> (Run menu) runs the settings with graphs off "
           "and on; or pick two runs in the history and press Compare."));
    rebuildChart();
    fillTable();
}

void GraphsPanel::setRuns(const RunRecord& a, const RunRecord& b, const QString& note) {
    hasRuns_ = true;
    metrics_ = {graphRunMetrics(a), graphRunMetrics(b)};
    runIdA_ = QString::fromStdString(a.runId);
    runIdB_ = QString::fromStdString(b.runId);
    sideNames_ = {tr("A: graphs %1").arg(modeText(metrics_[SideA])), tr("B: graphs %1").arg(modeText(metrics_[SideB]))};
    QString text = tr("<b>A</b>: graphs %1 — %2<br><b>B</b>: graphs %3 — %4")
                       .arg(modeText(metrics_[SideA]).toHtmlEscaped(), runIdA_.toHtmlEscaped(),
                            modeText(metrics_[SideB]).toHtmlEscaped(), runIdB_.toHtmlEscaped());
    // Say plainly when neither run used graphs: then the bars only show run-to-run noise.
    if (metrics_[SideA].effectiveMode == "off" && metrics_[SideB].effectiveMode == "off")
        text += tr("<br><i>Neither run used CUDA graphs (effective mode off for both%1); the difference is "
                   "run-to-run variation.</i>")
                    .arg(a.environment.backend == "cpu" || b.environment.backend == "cpu"
                             ? tr(": the CPU engine has no CUDA graphs")
                             : QString());
    if (!metrics_[SideA].stepTimeOnGpu || !metrics_[SideB].stepTimeOnGpu)
        text += tr("<br><i>No device time measured: step times and host enqueue are host wall times.</i>");
    if (!note.isEmpty()) text += QStringLiteral("<br>") + note.toHtmlEscaped();
    caption_->setText(text);
    rebuildChart();
    fillTable();
}

QString GraphsPanel::metricLabel(Metric metric) const {
    const bool gpu = hasRuns_ && metrics_[SideA].stepTimeOnGpu && metrics_[SideB].stepTimeOnGpu;
    const bool device = hasRuns_ && metrics_[SideA].peakOnDevice && metrics_[SideB].peakOnDevice;
    switch (metric) {
        case TotalTime:
            return tr("Total time (s)");
        case StepMedian:
            return gpu ? tr("Step median, GPU (ms)") : tr("Step median, wall (ms)");
        case StepP95:
            return gpu ? tr("Step p95, GPU (ms)") : tr("Step p95, wall (ms)");
        case HostEnqueue:
            return tr("Host enqueue per step, median (ms)");
        case GraphMemory:
            return tr("Graph memory (MiB)");
        case PeakMemory:
            return device ? tr("Peak device memory (MiB)") : tr("Peak memory, host RSS (MiB)");
        case MetricCount:
            break;
    }
    return {};
}

QString GraphsPanel::unitOf(Metric metric) const {
    switch (rectOf(metric)) {
        case kTotalRect:
            return tr("s");
        case kStepRect:
            return tr("ms");
        default:
            return tr("MiB");
    }
}

double GraphsPanel::valueOf(Side side, Metric metric) const {
    const GraphRunMetrics& m = metrics_[side];
    switch (metric) {
        case TotalTime:
            return m.totalMs / 1000.0;
        case StepMedian:
            return m.stepMedianMs;
        case StepP95:
            return m.stepP95Ms;
        case HostEnqueue:
            return m.enqueueMedianMs;
        case GraphMemory:
            return m.graphMemMiB;
        case PeakMemory:
            return m.peakMiB;
        case MetricCount:
            break;
    }
    return -1;
}

double GraphsPanel::barValue(Side side, Metric metric) const {
    for (const Bar& bar : bars_)
        if (bar.side == side && bar.metric == metric) return bar.value;
    return -1;
}

void GraphsPanel::rebuildChart() {
    plot_->clearPlottables();
    plot_->clearItems();
    bars_.clear();
    // Short names under each group; the table carries the full labels.
    const QString shortNames[MetricCount] = {tr("total"),
                                             tr("median"),
                                             tr("p95"),
                                             tr("enqueue"),
                                             tr("graph mem."),
                                             hasRuns_ && metrics_[SideA].peakOnDevice && metrics_[SideB].peakOnDevice
                                                 ? tr("peak device")
                                                 : tr("peak (host)")};
    std::array<QSharedPointer<QCPAxisTickerText>, 3> tickers;
    std::array<double, 3> top{};
    for (auto& ticker : tickers) ticker = QSharedPointer<QCPAxisTickerText>::create();
    std::array<std::array<QCPBars*, 3>, 2> series{};
    for (int side = 0; side < 2; ++side) {
        for (int r = 0; r < 3; ++r) {
            QCPAxisRect* rect = rects_[static_cast<std::size_t>(r)];
            auto* bars = new QCPBars(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            const QColor color = side == SideA ? kColorA : kColorB;
            bars->setPen(QPen(color.darker(130)));
            bars->setBrush(color);
            bars->setWidth(kBarWidth);
            bars->setName(hasRuns_ ? sideNames_[static_cast<std::size_t>(side)] : (side == SideA ? tr("A") : tr("B")));
            if (r != 0) bars->removeFromLegend();  // one legend entry per side
            series[static_cast<std::size_t>(side)][static_cast<std::size_t>(r)] = bars;
        }
    }
    for (int i = 0; i < MetricCount; ++i) {
        const auto metric = static_cast<Metric>(i);
        const int r = rectOf(metric);
        tickers[static_cast<std::size_t>(r)]->addTick(groupKey(metric), shortNames[i]);
        if (!hasRuns_) continue;
        for (int side = 0; side < 2; ++side) {
            const double value = valueOf(static_cast<Side>(side), metric);
            if (value < 0) continue;
            const double key = groupKey(metric) + (side == SideA ? -kBarOffset : kBarOffset);
            series[static_cast<std::size_t>(side)][static_cast<std::size_t>(r)]->addData(key, value);
            bars_.push_back({static_cast<Side>(side), metric, r, key, value});
            top[static_cast<std::size_t>(r)] = std::max(top[static_cast<std::size_t>(r)], value);
            // The value over its bar, so a screenshot or a PDF reads without hovering.
            QCPAxisRect* rect = rects_[static_cast<std::size_t>(r)];
            auto* label = new QCPItemText(plot_);
            label->setClipAxisRect(rect);
            label->position->setAxisRect(rect);
            label->position->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            label->position->setCoords(key, value);
            label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
            label->setPadding(QMargins(0, 0, 0, 2));
            label->setFont(QFont(font().family(), 7));
            label->setText(compactValue(value));
        }
    }
    const double groups[3] = {1, 3, 2};
    for (int r = 0; r < 3; ++r) {
        QCPAxisRect* rect = rects_[static_cast<std::size_t>(r)];
        rect->axis(QCPAxis::atBottom)->setTicker(tickers[static_cast<std::size_t>(r)]);
        rect->axis(QCPAxis::atBottom)->setRange(0.4, groups[r] + 0.6);
        const double t = top[static_cast<std::size_t>(r)];
        rect->axis(QCPAxis::atLeft)->setRange(0, t > 0 ? t * 1.18 : 1.0);
    }
    plot_->legend->setVisible(true);
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void GraphsPanel::fillTable() {
    const QString nameA = hasRuns_ ? sideNames_[SideA] : tr("A");
    const QString nameB = hasRuns_ ? sideNames_[SideB] : tr("B");
    // Short column titles: the dock is narrow; the caption and legend spell the modes out.
    const QString titleA = hasRuns_ ? tr("A: %1").arg(modeText(metrics_[SideA])) : nameA;
    const QString titleB = hasRuns_ ? tr("B: %1").arg(modeText(metrics_[SideB])) : nameB;
    table_->setHorizontalHeaderLabels({titleA, titleB, tr("B / A")});
    for (int i = 0; i < MetricCount; ++i) {
        const auto metric = static_cast<Metric>(i);
        table_->setVerticalHeaderItem(i, new QTableWidgetItem(metricLabel(metric)));
        const int decimals = rectOf(metric) == kMemoryRect ? 1 : (metric == TotalTime ? 3 : 2);
        const double a = hasRuns_ ? valueOf(SideA, metric) : -1;
        const double b = hasRuns_ ? valueOf(SideB, metric) : -1;
        const QString cells[3] = {formatValue(a, decimals), formatValue(b, decimals),
                                  a > 0 && b >= 0 ? QStringLiteral("%1×").arg(b / a, 0, 'f', 2) : QStringLiteral("—")};
        for (int c = 0; c < 3; ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table_->setItem(i, c, item);
        }
    }
}

QString GraphsPanel::hoverText(QPointF pixel) const {
    for (const Bar& bar : bars_) {
        QCPAxisRect* rect = rects_[static_cast<std::size_t>(bar.rect)];
        QCPAxis* keyAxis = rect->axis(QCPAxis::atBottom);
        QCPAxis* valueAxis = rect->axis(QCPAxis::atLeft);
        const double left = keyAxis->coordToPixel(bar.key - kBarWidth / 2);
        const double right = keyAxis->coordToPixel(bar.key + kBarWidth / 2);
        const double bottom = valueAxis->coordToPixel(0);
        // The bar and a few pixels above it (tiny bars are still easy to hit).
        const double topPixel = std::min(valueAxis->coordToPixel(bar.value), bottom) - 6;
        if (pixel.x() < std::min(left, right) || pixel.x() > std::max(left, right) || pixel.y() < topPixel ||
            pixel.y() > bottom)
            continue;
        const int decimals = bar.rect == kMemoryRect ? 1 : (bar.metric == TotalTime ? 3 : 2);
        return tr("%1 — %2: %3 %4")
            .arg(sideNames_[bar.side], metricLabel(bar.metric).section(QStringLiteral(" ("), 0, 0))
            .arg(bar.value, 0, 'f', decimals)
            .arg(unitOf(bar.metric));
    }
    return {};
}

QPointF GraphsPanel::barCentre(Side side, Metric metric) const {
    for (const Bar& bar : bars_) {
        if (bar.side != side || bar.metric != metric) continue;
        QCPAxisRect* rect = rects_[static_cast<std::size_t>(bar.rect)];
        return {rect->axis(QCPAxis::atBottom)->coordToPixel(bar.key),
                rect->axis(QCPAxis::atLeft)->coordToPixel(bar.value / 2)};
    }
    return {-1, -1};
}

bool GraphsPanel::saveChart(const QString& path) {
    plot_->replot(QCustomPlot::rpImmediateRefresh);
    if (QFileInfo(path).suffix().toLower() == QStringLiteral("pdf")) return plot_->savePdf(path);
    return plot_->savePng(path, 0, 0, 2.0);
}

void GraphsPanel::showContextMenu(const QPoint& pos) {
    QMenu menu(this);
    menu.addAction(tr("Save chart as PNG…"));
    QAction* pdf = menu.addAction(tr("Save chart as PDF…"));
    QAction* chosen = menu.exec(plot_->mapToGlobal(pos));
    if (!chosen) return;
    const bool asPdf = chosen == pdf;
    const QString path =
        QFileDialog::getSaveFileName(this, chosen->text().remove(QStringLiteral("…")),
                                     asPdf ? QStringLiteral("graphs.pdf") : QStringLiteral("graphs.png"),
                                     asPdf ? tr("PDF (*.pdf)") : tr("PNG images (*.png)"));
    if (path.isEmpty()) return;
    if (!saveChart(path)) QMessageBox::warning(this, tr("Save chart"), tr("%1 could not be written").arg(path));
}

}  // namespace tessera
