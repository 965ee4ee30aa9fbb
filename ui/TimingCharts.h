// TimingCharts: live per-step time (host wall ms, GPU ms when the backend measures it) and
// memory over the run, in QCustomPlot. Data is appended as events arrive; redraws are
// coalesced by a short timer and done with a queued replot, so a fast run cannot flood the
// GUI thread with repaints.
//
// Also: the mean time of each tile as a heat map over the tile grid (live, as tile batches
// finish, and from the record's tile batches after a run; before a run, the empty grid of the
// planned tiles), the per-step times of earlier runs in grey behind the current
// one, values under the mouse in a tooltip, and a context menu on every chart to save it
// as PNG or PDF.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <QPointF>
#include <QSize>
#include <QTimer>
#include <QWidget>

#include "core/run/RunRecord.h"
#include "core/sampling/TilePlan.h"

class QCustomPlot;
class QCPGraph;
class QCPColorMap;
class QCPColorScale;
class QCPItemText;
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
    // The tile grid of the current settings. The same tiles as shown (same image size and tile
    // rectangles) keep their times; other tiles replace them with an empty grid; nullopt (no
    // valid plan) clears the heat map.
    void setTilePlan(const std::optional<TilePlan>& plan);
    // A run starts on `plan`: an empty grid of its tiles, whatever was shown.
    void startTileTimes(const TilePlan& plan);
    // Live: adds finished tile batches to the heat map (same rule as showTileTimes, so after
    // every batch of a run it shows what showTileTimes(record) shows).
    void addTileBatches(const std::vector<TileBatchTiming>& batches);
    // Columns x rows of the heat map's tile grid ((0, 0) when none).
    QSize tileGridSize() const { return {tileCols_, tileRows_}; }
    // Tiles with at least one time.
    int timedTileCount() const;
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
    // The tooltip-free summary over the tile heat map when it has no times yet (empty otherwise).
    QString tilePlaceholderText() const;
    // Replots pending (for tests and the screenshot path); normally the timer does this.
    void flush();

signals:
    // The tile heat map's times changed (live batches, a record, a new grid).
    void tileTimesChanged();

private:
    void resetTileGrid(const std::optional<TilePlan>& plan);
    void applyTileCell(int id);
    void refreshTileScale();
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
    QCPItemText* tilePlaceholder_ = nullptr;
    std::vector<double> tileMs_;  // mean ms per tile and step; -1 without a sample
    std::vector<double> tileSum_;
    std::vector<int> tileSamples_;
    int tileCols_ = 0, tileRows_ = 0;
    // The plan the heat map shows (image size and tile rectangles), to tell whether new
    // settings still describe the same tiles.
    int tilePlanWidth_ = 0, tilePlanHeight_ = 0;
    std::vector<TileRect> tilePlanTiles_;
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
