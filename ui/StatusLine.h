// StatusLine: the window's status bar fields. On the left the status text (red for an error;
// drawn cut with "…" where it is longer than the room left, the whole text its tooltip),
// replaced for 8 s by a run's note (showNote: drawn cut with "…" where it is longer than the
// room left, the whole note its tooltip); on the right the progress text (as wide as it is where
// the bar has room, else cut with "…", the whole text its tooltip) and two bars, step k/N
// (or the model load's fraction and phase) and the tiles of the step: the bar fills as tiles
// finish and says which tile, or with several tiles per call which batch, is under way
// ("batch 2/3 of step 5/20"). Before a run the bars are hidden and the progress text says what
// a run of the settings would do.
#pragma once

#include <algorithm>
#include <vector>

#include <QObject>
#include <QString>

#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

class QLabel;
class QProgressBar;
class QStatusBar;
class QTimer;

namespace tessera {

// Where a run is, as the status bar shows it.
struct RunProgress {
    int step = 0, steps = 0;       // steps completed / total, as the schedule counts them
    int firstStep = 0;             // schedule index of the first step run (image-to-image: > 0)
    int tilesDone = 0, tiles = 0;  // tiles completed in the current step / per step
    int tilesPerBatch = 0;         // tiles per model call; 0: the status line's own (setTilesPerBatch)
    bool started = false;          // the engine reported the run started (prepare done)
    double loadFraction = -1;      // of the model load in progress; -1 while none was reported
    QString loadPhase;
    bool loading() const { return !started && loadFraction >= 0.0 && loadFraction < 1.0; }

    // A tile batch of schedule step batch.step finished: its tiles (batch.tileIds) count towards
    // tilesDone once, whatever order the batches of a step finish in (the CUDA engine's lanes
    // finish a step's batches out of order), so tilesDone never steps back within a step and
    // reaches exactly `tiles` when every batch of the step is in. A batch of a later step starts
    // that step's count (and moves `step` on); one of a step already finished is left out.
    void countFinishedBatch(const TileBatchTiming& batch);
    // Schedule step `scheduleStep` finished: `step` moves past it and the count starts again at 0
    // (unless batches of a later step are already counted).
    void finishStep(int scheduleStep);

private:
    int countedStep_ = -1;             // the schedule step tilesDone counts
    std::vector<int> countedBatches_;  // its batches already counted (batchIndex)
};

class StatusLine : public QObject {
    Q_OBJECT
public:
    // Adds the fields to `bar`, which owns them (and this).
    explicit StatusLine(QStatusBar* bar);

    void setStatusText(const QString& text, bool error = false);
    // `text` for 8 s in place of the status text.
    void showNote(const QString& text);

    // No run: the bars hidden; what a run of `config` would do (steps, tile batches), or, when
    // the settings are not `valid`, that they need fixing.
    void showReady(bool valid, const RunConfig& config);
    // What `record` ran on and made ("CPU FP32 · 512 × 512 px · seed 3") in the progress text.
    void showRanOn(const RunRecord& record);
    void setProgressText(const QString& text);
    void clearProgressText();

    void showBars();
    void hideBars();
    // Both bars from `progress`. `running`: the step bar shows the step in progress (1-based),
    // the load's fraction while a model loads and is busy while the engine prepares; otherwise
    // the steps completed.
    // The tile bar counts finished tiles; while running its text names the tile in progress
    // ("tile 8/25 of step 5/20"), or with several tiles per call the batch ("batch 2/3 of step
    // 5/20"); afterwards the tiles done.
    void showProgress(const RunProgress& progress, bool running);
    // Tiles per model call of the run shown (RunRecord::tileBatch->ran when it starts; showReady
    // sets the planned one); used where RunProgress::tilesPerBatch is 0.
    void setTilesPerBatch(int tiles) { tilesPerBatch_ = std::max(0, tiles); }
    int tilesPerBatch() const { return tilesPerBatch_; }
    void showStepBar(const RunProgress& progress, bool running);

private:
    QLabel* statusText_ = nullptr;
    QLabel* noteText_ = nullptr;  // a run's note, for 8 s (showNote)
    QTimer* noteTimer_ = nullptr;
    QLabel* progressText_ = nullptr;
    QProgressBar* stepBar_ = nullptr;
    QProgressBar* tileBar_ = nullptr;
    int tilesPerBatch_ = 0;
};

}  // namespace tessera
