// GraphsPanel: CUDA graphs versus eager launches for two runs (normally the two kept runs of a
// "Compare graphs" sequence, or any two picked in the history): total time, per-step median
// and p95 time, host enqueue per step, graph memory and peak memory, as grouped bars (A and B
// side by side, one panel per unit) and a table with the ratio B / A. Hovering a bar shows its
// value; the chart saves as PNG or PDF (context menu, or saveChart).
//
// The numbers come from RunRecords only (graphRunMetrics), so the CLI's compare and this panel
// can be checked against each other and against the manifests.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <QPointF>
#include <QString>
#include <QWidget>

#include "core/run/RunRecord.h"

class QCustomPlot;
class QCPAxisRect;
class QLabel;
class QTableWidget;

namespace tessera {

// What the panel shows of one run.
struct GraphRunMetrics {
    double totalMs = 0;  // record.totalMs (sampling, prepare excluded)
    // Per-step time: the device time (StepTiming::gpuMs) when every step has one, else the
    // host wall time (the CPU engine measures no device time).
    bool stepTimeOnGpu = false;
    double stepMedianMs = -1;     // -1 without steps
    double stepP95Ms = -1;        // nearest-rank 95th percentile
    double enqueueMedianMs = -1;  // median StepTiming::hostEnqueueMs (CPU: the step's wall time)
    double graphMemMiB = 0;       // record.graphs.graphMemMiB
    // record.peakDeviceMiB when measured, else the largest memory sample (host RSS on CPU).
    bool peakOnDevice = false;
    double peakMiB = -1;
    std::string requestedMode;  // record.config.graphs ("off", "tile", "step")
    std::string effectiveMode;  // record.graphs.mode (differs after a fallback, or on CPU)
};

GraphRunMetrics graphRunMetrics(const RunRecord& record);
// Median (mean of the two middle values for an even count); -1 for no values.
double medianOf(std::vector<double> values);
// Nearest-rank percentile, p in (0, 100]: the smallest value with at least p% of the values at
// or below it; -1 for no values.
double nearestRankPercentile(std::vector<double> values, double p);

class GraphsPanel : public QWidget {
    Q_OBJECT
public:
    // The rows of the table and the bars of the chart, in order.
    enum Metric { TotalTime, StepMedian, StepP95, HostEnqueue, GraphMemory, PeakMemory, MetricCount };
    enum Side { SideA, SideB };

    explicit GraphsPanel(QWidget* parent = nullptr);

    // Shows A against B. `note` is shown under the caption (what the runs are: which pair of a
    // comparison, warm-up discarded...).
    void setRuns(const RunRecord& a, const RunRecord& b, const QString& note = {});
    void clear();
    bool hasRuns() const { return hasRuns_; }
    const GraphRunMetrics& metrics(Side side) const { return metrics_[side]; }
    // The value a bar shows, in its panel's unit (seconds for TotalTime, ms, MiB); -1 when the
    // bar is missing.
    double barValue(Side side, Metric metric) const;
    // The row label of `metric` as the table shows it (it names the measure: GPU or wall, device
    // or host).
    QString metricLabel(Metric metric) const;
    QString runIdA() const { return runIdA_; }
    QString runIdB() const { return runIdB_; }

    QCustomPlot* plot() const { return plot_; }
    QTableWidget* table() const { return table_; }
    QLabel* caption() const { return caption_; }
    // Tooltip text for the mouse at `pixel` over the chart; empty away from the bars.
    QString hoverText(QPointF pixel) const;
    // The centre of a bar in chart pixels (after a replot), for tests; (-1, -1) when missing.
    QPointF barCentre(Side side, Metric metric) const;
    // PNG or PDF by the suffix of `path`; false when it cannot be written.
    bool saveChart(const QString& path);

private:
    struct Bar {
        Side side;
        Metric metric;
        int rect;    // which axis rect (unit panel)
        double key;  // bar centre on that rect's key axis
        double value;
    };

    void rebuildChart();
    void fillTable();
    void showContextMenu(const QPoint& pos);
    QString unitOf(Metric metric) const;
    double valueOf(Side side, Metric metric) const;

    QLabel* caption_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    std::vector<QCPAxisRect*> rects_;  // total (s), per step (ms), memory (MiB)
    QTableWidget* table_ = nullptr;
    std::array<GraphRunMetrics, 2> metrics_;
    std::array<QString, 2> sideNames_;
    QString runIdA_, runIdB_;
    std::vector<Bar> bars_;
    bool hasRuns_ = false;
};

}  // namespace tessera
