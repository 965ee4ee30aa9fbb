// JobQueue: runs work off the thread that owns it, on a thread pool of its own, and hands each
// result back on the owner's thread through its event queue (never a direct call), in the
// style of KDAB/hotspot's JobTracker. The window's thread uses it for every file it reads or
// writes and every image it encodes (app/qt/GuiThreadGuard.h), so it stays responsive.
//
// Each start() gets an id, increasing from 1. Receivers that only want the newest answer of a
// kind (the model being inspected, the history being reloaded) keep the id of their latest
// request and drop results of any other: that is how stale results are discarded.
//
// Threads: create, start() and destroy on one thread (the owner's). `work` runs on a pool
// thread and must touch nothing the owner's thread uses without a lock; `deliver` and `fail`
// run on the owner's thread. The destructor waits for the jobs in flight and drops their
// results, so neither is ever called after it.
#pragma once

#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include <QObject>
#include <QString>
#include <QThreadPool>

namespace tessera {

class JobQueue : public QObject {
public:
    // maxThreads 1: the jobs run one at a time, in the order they were started.
    explicit JobQueue(int maxThreads, QObject* parent = nullptr);
    ~JobQueue() override;

    // Runs `work()` on the pool, then `deliver(id, result)` on the owner's thread, or, when
    // work throws, `fail(id, message)` there. Returns the job's id.
    template <typename Work, typename Deliver, typename Fail>
    quint64 start(Work work, Deliver deliver, Fail fail);

    // Jobs started whose deliver/fail has not run yet.
    int pending() const { return pending_; }

private:
    QThreadPool pool_;
    quint64 lastId_ = 0;
    int pending_ = 0;  // touched on the owner's thread only
};

template <typename Work, typename Deliver, typename Fail>
quint64 JobQueue::start(Work work, Deliver deliver, Fail fail) {
    using Result = std::invoke_result_t<Work&>;
    const quint64 id = ++lastId_;
    ++pending_;
    // The pool's thread posts the outcome back to this object; the destructor waits for the
    // pool first, so `this` outlives every post, and ~QObject drops posts not yet handled.
    pool_.start([this, id, work = std::move(work), deliver = std::move(deliver), fail = std::move(fail)]() mutable {
        std::shared_ptr<Result> result;
        QString error;
        try {
            result = std::make_shared<Result>(work());
        } catch (const std::exception& e) {
            error = QString::fromUtf8(e.what());
        } catch (...) {
            error = QStringLiteral("the background job failed with an unknown error");
        }
        QMetaObject::invokeMethod(
            this,
            [this, id, result = std::move(result), error = std::move(error), deliver = std::move(deliver),
             fail = std::move(fail)]() mutable {
                --pending_;
                if (result)
                    deliver(id, std::move(*result));
                else
                    fail(id, error);
            },
            Qt::QueuedConnection);
    });
    return id;
}

}  // namespace tessera
