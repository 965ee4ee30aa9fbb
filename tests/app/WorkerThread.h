// A RunWorker on a thread of its own, as the window runs it, for the app test suites: start a
// run or an upscale through queued calls and wait for its end. Header-only (not a suite).
#pragma once

#include <QMetaObject>
#include <QSignalSpy>
#include <QString>
#include <QTest>
#include <QThread>
#include <functional>
#include <optional>

#include "app/qt/RunWorker.h"

namespace tessera::testing {

class WorkerThread {
public:
    WorkerThread() : worker(new RunWorker) {
        worker->moveToThread(&thread_);
        QObject::connect(&thread_, &QThread::finished, worker, &QObject::deleteLater);
        thread_.start();
    }
    ~WorkerThread() {
        thread_.quit();
        thread_.wait();
    }
    WorkerThread(const WorkerThread&) = delete;
    WorkerThread& operator=(const WorkerThread&) = delete;

    void start(const RunConfig& config, quint64 runId) {
        RunWorker* w = worker;
        QMetaObject::invokeMethod(
            w, [w, config, runId] { w->start(config, runId); }, Qt::QueuedConnection);
    }
    void startUpscale(const RunConfig& config, quint64 runId) {
        RunWorker* w = worker;
        QMetaObject::invokeMethod(
            w, [w, config, runId] { w->startUpscale(config, runId); }, Qt::QueuedConnection);
    }
    RunWorker* worker;

private:
    QThread thread_;
};

// The run's end: its FinishedRun, or the failure's message in `error`.
struct Ended {
    std::optional<FinishedRun> run;
    QString error;
};

// Calls `start` (which starts one run on `worker`) and waits up to 300 s for that run's end.
inline Ended waitForEnd(RunWorker* worker, const std::function<void()>& start) {
    QSignalSpy finished(worker, &RunWorker::runFinished);
    QSignalSpy failed(worker, &RunWorker::runFailed);
    start();
    Ended ended;
    if (!QTest::qWaitFor([&] { return !finished.isEmpty() || !failed.isEmpty(); }, 300000)) {
        ended.error = QStringLiteral("no end within 300 s");
        return ended;
    }
    if (!failed.isEmpty())
        ended.error = failed.at(0).at(1).toString();
    else
        ended.run = finished.at(0).at(1).value<FinishedRun>();
    return ended;
}

}  // namespace tessera::testing
