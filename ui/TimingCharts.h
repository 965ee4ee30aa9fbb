// TimingCharts: live per-step time (host wall ms, GPU ms when the backend measures it) and
// memory over the run, in QCustomPlot. Data is appended as events arrive; redraws are
// coalesced by a short timer and done with a queued replot, so a fast run cannot flood the
// GUI thread with repaints.
//
// Also: the mean time of each tile as a heat map over the tile grid (live, as tile batches
// finish, and from the record's tile batches after a run; before a run, the empty grid of the
// planned tiles), drawn with the image's aspect; where every tile ran in one batch (one model
// call per step) there is no time per tile, and the map says the batch's time instead of
// colouring the tiles. The per-step times of earlier runs are drawn in grey behind the current
// one; the value axis fits the current run, so an earlier run far slower (another model, another
// size) is cut at the top and a note over the chart says so. Values under the mouse in a tooltip,
// and a context menu on every chart to save it as PNG or PDF.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <QMargins>
#include <QPointF>
#include <QSize>
#include <QStringList>
#include <QTimer>
#include <QWidget>

#include "core/run/RunRecord.h"
#include "core/sampling/TilePlan.h"

class QCustomPlot;
class QCPGraph;
class QCPColorMap;
class QCPColorScale;
class QCPItemText;
class QCPTextElement;
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
    // Earlier runs drawn in grey behind the current step times (null pointers skipped). The
    // value axis shows the current run whole and earlier runs up to kEarlierRunRangeFactor times
    // its slowest step; a slower one is cut at the top (earlierRunsNote says which).
    void setEarlierRuns(const std::vector<const RunRecord*>& runs);
    int earlierRunCount() const { return static_cast<int>(earlierGraphs_.size()); }
    static constexpr double kEarlierRunRangeFactor = 2.0;
    // The note over the step chart naming the earlier runs cut at its top; empty when none is.
    QString earlierRunsNote() const;

    enum class Chart { Steps, Memory, Tiles };
    QCustomPlot* plot(Chart chart) const;
    // Saves a chart as PNG or PDF (by the suffix of `path`); false when it cannot be written.
    bool saveChart(Chart chart, const QString& path);
    // The tooltip text for a mouse at `pixel` over `chart` (empty: nothing near).
    QString hoverText(Chart chart, QPointF pixel) const;
    // Mean ms of tile `id` in the heat map; -1 when unknown.
    double tileTimeMs(int id) const;

    int stepCount() const { return steps_; }
    // The text over the tile heat map: its empty grid ("5 × 5 tiles · no times yet"), or, when
    // every tile ran in one batch per step, that batch's time; empty while it shows per-tile times.
    QString tilePlaceholderText() const;
    // Every tile of a plan of more than one ran in the same batch (one call per step): the map
    // shows the batch's time, no per-tile colours and no colour scale.
    bool tileTimesPerBatchOnly() const { return oneBatchPerStep_; }
    // Replots pending (for tests and the screenshot path); normally the timer does this.
    void flush();

signals:
    // The tile heat map's times changed (live batches, a record, a new grid).
    void tileTimesChanged();

private:
    void resetTileGrid(const std::optional<TilePlan>& plan);
    void applyTileCell(int id);
    void refreshTileScale();
    // Minimum margins that letterbox the heat map's axis rect to the image's aspect (after the
    // plot's layout, when its size is known).
    void keepTileAspect();
    // The note naming the earlier runs cut at the step chart's top (`clipped` empty: none).
    void showEarlierRunsNote(const QStringList& clipped, double clippedTop, double currentTop);
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
    bool oneBatchPerStep_ = false;  // every batch so far held every tile (of more than one)
    double oneBatchMsSum_ = 0;
    int oneBatchCount_ = 0;
    QMargins tileLetterbox_;  // added to the heat map's automatic margins by keepTileAspect
    int tileAspectPasses_ = 0;
    QSize tileAspectOuter_;
    std::vector<QCPGraph*> earlierGraphs_;
    QCPTextElement* earlierNote_ = nullptr;  // in the step plot's layout only while shown
    std::vector<std::string> earlierNames_;
    QLabel* summary_ = nullptr;
    QTimer replotTimer_;
    int steps_ = 0;
    bool gpuSeen_ = false;
    double wallSum_ = 0, gpuSum_ = 0;
    bool deviceMemory_ = false;
};

}  // namespace tessera
