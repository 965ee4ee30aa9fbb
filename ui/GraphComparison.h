// GraphComparison: one "Compare graphs" sequence. The settings run with graphs off and on,
// interleaved (off, on, off, on...) for a number of pairs as one sequence on the worker; the
// first pair warms up and is discarded. Of the kept runs of each mode, the one of median total
// time is compared (with one kept pair, that pair).
#pragma once

#include <memory>
#include <vector>

#include <QImage>
#include <QString>

#include "core/run/Engine.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct GraphComparison {
    struct Run {
        RunConfig config;
        bool graphsOn = false;                    // config.graphs is the "on" mode (else off)
        int pair = 0;                             // 1-based; pair 1 is the warm-up
        bool warmUp = false;                      // discarded: not compared, not kept in the history
        std::shared_ptr<const RunResult> result;  // null until it finished
        QImage image;
    };
    quint64 firstRunId = 0;  // run i has id firstRunId + i
    GraphMode onMode = GraphMode::Tile;
    std::vector<Run> runs;
    bool active = false;           // still running
    bool completed = false;        // every run finished
    int shownA = -1, shownB = -1;  // indices of the compared runs (A: off, B: on); -1 before
    QString choice;                // which runs were compared and why, as the views say it
    QString error;                 // the failure that ended it, if one did

    // The runs of `pairs` pairs of `base` (graphs off, then base's mode or tile when that is
    // off), labelled with their mode and pair, with ids from `firstRunId`; active.
    static GraphComparison plan(const RunConfig& base, int pairs, quint64 firstRunId);
    std::vector<RunConfig> configs() const;
    quint64 lastRunId() const { return firstRunId + runs.size() - 1; }
    // "Compare graphs: run 3 of 4 — graphs tile, pair 2", for run `index`.
    QString runStatus(int index) const;
    // Picks the compared runs (shownA, shownB) and says why (choice); false when a mode has no
    // kept run that finished.
    bool chooseCompared();
    // The whole story for the compare view: the order, every pair's times, the choice, and why
    // the times differ by noise only when the "on" runs ran eagerly.
    QString note() const;
};

}  // namespace tessera
