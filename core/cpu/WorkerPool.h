// WorkerPool: the CPU backend's fixed set of worker threads (core/cpu/CpuBackend.h says how the
// backend spreads a call's work over them, and why the bits do not depend on their number).
// Qt-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessera {
namespace cpu {

// All hardware threads (at least 1): the thread count 0 stands for.
int hardwareThreads();
// threads, or hardwareThreads() for threads <= 0.
int resolveThreads(int threads);

// A fixed set of worker threads running parallelFor. The calling thread takes part (worker 0),
// so a pool of 1 runs everything inline. Not reentrant: call parallelFor from one thread at a
// time, never from inside a body.
class WorkerPool {
public:
    explicit WorkerPool(int threads);  // threads <= 0: hardwareThreads()
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }
    // Calls body(i), or body(i, worker) with worker in [0, threads()), once for every i in
    // [0, n), on whichever thread is free next (no fixed order); blocks until all are done.
    // A body must not throw and must not write what another index writes.
    template <class F>
    void parallelFor(std::int64_t n, F&& body) {
        using Body = std::remove_reference_t<F>;
        run(
            n,
            [](void* ctx, std::int64_t i, int worker) {
                Body& f = *static_cast<Body*>(ctx);
                if constexpr (std::is_invocable_v<Body&, std::int64_t, int>)
                    f(i, worker);
                else
                    f(i);
            },
            const_cast<void*>(static_cast<const void*>(std::addressof(body))));
    }

    // body(begin, end) for the pieces [i * grain, min(n, (i + 1) * grain)) of [0, n), as parallelFor.
    template <class F>
    void parallelRange(std::int64_t n, std::int64_t grain, F&& body) {
        parallelFor((n + grain - 1) / grain, [&](std::int64_t i) { body(i * grain, std::min(n, (i + 1) * grain)); });
    }

    // Each worker's own scratch of at least `floats` floats (grown here, never shrunk; call it
    // outside parallelFor, then read scratch(worker) inside a body).
    void reserveScratch(std::size_t floats);
    float* scratch(int worker) {
        const auto w = static_cast<std::size_t>(worker);
        return w < scratch_.size() ? scratch_[w].data() : helperScratch_[w - scratch_.size()];
    }
    std::size_t scratchFloats() const;  // of all workers

    // Helpers: threads from outside the pool that take part in its calls for a while. Helper
    // `slot` runs its tasks as worker threads() + slot, with the scratch helperScratch[slot]
    // (each at least what reserveScratch asked; set while no call runs, kept by the caller).
    void setHelperScratch(std::vector<float*> helperScratch);
    int helperSlots() const { return static_cast<int>(helperScratch_.size()); }
    // Takes tasks of this pool's calls as helper `slot` (no other helper in that slot at the same
    // time) until `busy` reads false. While a helper is here, calls of a one-thread pool are
    // shared out instead of run inline; the results are the same, as a task's result does not
    // depend on which worker runs it.
    void helpWhile(int slot, const std::atomic<bool>& busy);

private:
    using Task = void (*)(void*, std::int64_t, int);
    void run(std::int64_t n, Task task, void* ctx);
    void workerLoop(int worker);
    void claimTasks(std::uint32_t generation, int worker);

    std::vector<std::thread> workers_;
    std::vector<std::vector<float>> scratch_;
    std::vector<float*> helperScratch_;
    std::atomic<int> helpers_{0};  // threads in helpWhile now
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    bool stop_ = false;  // under mutex_
    // generation << 32 | the next index to hand out (WorkerPool::claimTasks in the .cpp says how a
    // late worker is kept from taking an index of a later call).
    std::atomic<std::uint64_t> state_{0};
    std::atomic<std::int64_t> n_{0}, finished_{0};
    std::atomic<Task> task_{nullptr};
    std::atomic<void*> ctx_{nullptr};
};

}  // namespace cpu
}  // namespace tessera
