#include "ui/GraphComparison.h"

#include <algorithm>
#include <string>

#include <QCoreApplication>
#include <QStringList>

namespace tessera {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("GraphComparison", text); }

QString modeName(GraphMode mode) { return QString::fromStdString(std::string(toString(mode))); }

}  // namespace

GraphComparison GraphComparison::plan(const RunConfig& base, int pairs, quint64 firstRunId) {
    GraphComparison comparison;
    comparison.onMode = base.graphs != GraphMode::Off ? base.graphs : GraphMode::Tile;
    comparison.firstRunId = firstRunId;
    const std::string onName(toString(comparison.onMode));
    for (int pair = 1; pair <= pairs; ++pair) {
        for (const bool on : {false, true}) {
            Run run;
            run.config = base;
            run.config.graphs = on ? comparison.onMode : GraphMode::Off;
            run.graphsOn = on;
            run.pair = pair;
            run.warmUp = pair == 1;
            // The label says what the run was in the history and the exports.
            std::string label = (base.label.empty() ? std::string() : base.label + " · ") + "graphs " +
                                (on ? onName : std::string("off")) + " · pair " + std::to_string(pair);
            if (run.warmUp) label += " (warm-up)";
            run.config.label = label;
            comparison.runs.push_back(std::move(run));
        }
    }
    comparison.active = true;
    return comparison;
}

std::vector<RunConfig> GraphComparison::configs() const {
    std::vector<RunConfig> configs;
    for (const Run& run : runs) configs.push_back(run.config);
    return configs;
}

QString GraphComparison::runStatus(int index) const {
    const Run& run = runs[static_cast<std::size_t>(index)];
    return tr("Compare graphs: run %1 of %2 — graphs %3, pair %4%5")
        .arg(index + 1)
        .arg(runs.size())
        .arg(modeName(run.config.graphs))
        .arg(run.pair)
        .arg(run.warmUp ? tr(" (warm-up, discarded)") : QString());
}

bool GraphComparison::chooseCompared() {
    std::vector<int> keptOff, keptOn;
    for (std::size_t i = 0; i < runs.size(); ++i)
        if (!runs[i].warmUp && runs[i].result) (runs[i].graphsOn ? keptOn : keptOff).push_back(static_cast<int>(i));
    if (keptOff.empty() || keptOn.empty()) return false;
    const auto median = [this](std::vector<int> indices) {
        std::sort(indices.begin(), indices.end(), [this](int x, int y) {
            return runs[static_cast<std::size_t>(x)].result->record.totalMs <
                   runs[static_cast<std::size_t>(y)].result->record.totalMs;
        });
        return indices[(indices.size() - 1) / 2];  // the lower median: always a real run
    };
    shownA = median(keptOff);
    shownB = median(keptOn);
    const int pairs = runs.back().pair;
    choice = keptOff.size() == 1
                 ? tr("Compared: the last pair (pair %1 of %1); pair 1 was a warm-up and is discarded.").arg(pairs)
                 : tr("Compared: the run of median total time of each mode over pairs 2–%1; pair 1 was a warm-up "
                      "and is discarded.")
                       .arg(pairs);
    return true;
}

QString GraphComparison::note() const {
    // Every run of the sequence, so the reader sees the spread and the warm-up.
    QStringList order, lines;
    for (const Run& run : runs) order << modeName(run.config.graphs);
    const int pairs = runs.empty() ? 0 : runs.back().pair;
    for (int pair = 1; pair <= pairs; ++pair) {
        QStringList times;
        for (const Run& run : runs)
            if (run.pair == pair && run.result)
                times << tr("%1 %2 s")
                             .arg(modeName(run.config.graphs))
                             .arg(run.result->record.totalMs / 1000.0, 0, 'f', 3);
        lines << tr("pair %1%2: %3")
                     .arg(pair)
                     .arg(pair == 1 ? tr(" (warm-up, discarded)") : QString(), times.join(QStringLiteral(", ")));
    }
    QString text = tr("Compare graphs, interleaved %1 — %2. %3")
                       .arg(order.join(QStringLiteral(", ")), lines.join(QStringLiteral("; ")), choice);
    if (shownB < 0) return text;
    const RunRecord& on = runs[static_cast<std::size_t>(shownB)].result->record;
    if (effectiveGraphMode(on.graphs) == GraphMode::Off)
        text += tr(" Graphs %1 ran as off (%2), so both runs launched eagerly: the times differ only by run-to-run "
                   "variation.")
                    .arg(modeName(onMode), on.environment.backend == "cpu"
                                               ? tr("the CPU engine has no CUDA graphs")
                                               : QString::fromStdString(on.graphs.fallbackReason));
    return text;
}

}  // namespace tessera
