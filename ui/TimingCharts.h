// TimingCharts: live per-step time (host wall ms, GPU ms when the backend measures it) and
// memory over the run, in QCustomPlot. Data is appended as events arrive; redraws are
// coalesced by a short timer and done with a queued replot, so a fast run cannot flood the
// GUI thread with repaints.
#pragma once

#include <QTimer>
#include <QWidget>

#include "core/RunRecord.h"

class QCustomPlot;
class QCPGraph;
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
    // Replaces the live data with a finished record's (e.g. after a run or when loading one).
    void showRecord(const RunRecord& record);

    int stepCount() const { return steps_; }
    // Replots pending (for tests and the screenshot path); normally the timer does this.
    void flush();

private:
    void scheduleReplot();
    void replotNow();

    QCustomPlot* stepPlot_ = nullptr;
    QCustomPlot* memoryPlot_ = nullptr;
    QCPGraph* hostGraph_ = nullptr;
    QCPGraph* enqueueGraph_ = nullptr;
    QCPGraph* gpuGraph_ = nullptr;
    QCPGraph* memoryGraph_ = nullptr;
    QLabel* summary_ = nullptr;
    QTimer replotTimer_;
    int steps_ = 0;
    bool gpuSeen_ = false;
    double wallSum_ = 0, gpuSum_ = 0;
    bool deviceMemory_ = false;
};

}  // namespace tessera
