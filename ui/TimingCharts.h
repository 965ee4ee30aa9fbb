// TimingCharts: live per-step time (host wall ms, GPU ms when the backend measures it) and
// memory over the run, in QCustomPlot. Data is appended as events arrive; redraws are
// coalesced by a short timer and done with a queued replot, so a fast run cannot flood the
// GUI thread with repaints.
//
// Also: the mean time of each tile as a heat map over the tile grid (after a run, from the
// record's tile batches), the per-step times of earlier runs in grey behind the current
// one, values under the mouse in a tooltip, and a context menu on every chart to save it
// as PNG or PDF.
#pragma once

#include <string>
#include <vector>

#include <QPointF>
#include <QTimer>
#include <QWidget>

#include "core/RunRecord.h"

class QCustomPlot;
class QCPGraph;
class QCPColorMap;
class QCPColorScale;
class QLabel;

namespace tessera {

class TimingCharts : public QWidget {
    Q_OBJECT
public:
    explicit TimingCharts(QWidget* parent = nullptr);

    static constexpr int kReplotIntervalMs = 40;

    // Starts a new run: clears every series.
    void clear();
    void addStep(const StepTiming& timing);
    void addMemory(const MemorySample& sample, bool device);
    // Replaces the live data with a finished record's (e.g. after a run or when loading one),
    // tile heat map included.
    void showRecord(const RunRecord& record);
    // Per-tile mean time (ms per step: each batch's time, gpuMs where measured else hostMs,
    // split evenly over its tiles) over the record's tile grid. Empty record: cleared.
    void showTileTimes(const RunRecord& record);
    // Earlier runs drawn in grey behind the current step times (null pointers skipped).
    void setEarlierRuns(const std::vector<const RunRecord*>& runs);
    int earlierRunCount() const { return static_cast<int>(earlierGraphs_.size()); }

    enum class Chart { Steps, Memory, Tiles };
    QCustomPlot* plot(Chart chart) const;
    // Saves a chart as PNG or PDF (by the suffix of `path`); false when it cannot be written.
    bool saveChart(Chart chart, const QString& path);
    // The tooltip text for a mouse at `pixel` over `chart` (empty: nothing near).
    QString hoverText(Chart chart, QPointF pixel) const;
    // Mean ms of tile `id` in the heat map; -1 when unknown.
    double tileTimeMs(int id) const;

    int stepCount() const { return steps_; }
    // Replots pending (for tests and the screenshot path); normally the timer does this.
    void flush();

private:
    void scheduleReplot();
    void replotNow();
    void showContextMenu(Chart chart, const QPoint& pos);

    QCustomPlot* stepPlot_ = nullptr;
    QCustomPlot* memoryPlot_ = nullptr;
    QCPGraph* hostGraph_ = nullptr;
    QCPGraph* enqueueGraph_ = nullptr;
    QCPGraph* gpuGraph_ = nullptr;
    QCPGraph* memoryGraph_ = nullptr;
    QCustomPlot* tilePlot_ = nullptr;
    QCPColorMap* tileMap_ = nullptr;
    QCPColorScale* tileScale_ = nullptr;
    std::vector<double> tileMs_;
    int tileCols_ = 0, tileRows_ = 0;
    std::vector<QCPGraph*> earlierGraphs_;
    std::vector<std::string> earlierNames_;
    QLabel* summary_ = nullptr;
    QTimer replotTimer_;
    int steps_ = 0;
    bool gpuSeen_ = false;
    double wallSum_ = 0, gpuSum_ = 0;
    bool deviceMemory_ = false;
};

}  // namespace tessera
