#include "core/cpu/WorkerPool.h"

#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera {
namespace cpu {

namespace {

// How long an idle thread spins before it sleeps: ops follow each other within microseconds,
// and waking a sleeping thread costs more than that.
constexpr std::chrono::microseconds kSpin{50};

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// Spins until pred() or kSpin has passed; returns pred().
template <class Pred>
bool spinUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
        if (pred()) return true;
        cpuRelax();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
    }
}

}  // namespace

int hardwareThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int resolveThreads(int threads) { return threads > 0 ? threads : hardwareThreads(); }

WorkerPool::WorkerPool(int threads) {
    threads = resolveThreads(threads);
    scratch_.resize(static_cast<std::size_t>(threads));
    workers_.reserve(static_cast<std::size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void WorkerPool::reserveScratch(std::size_t floats) {
    for (std::vector<float>& s : scratch_)
        if (s.size() < floats) s.assign(floats, 0.0f);
}

std::size_t WorkerPool::scratchFloats() const {
    std::size_t n = 0;
    for (const std::vector<float>& s : scratch_) n += s.size();
    return n;
}

// state_ is (generation << 32 | next index). A call moves through two generations: an odd one
// that closes the previous call (no index can be claimed, so no late worker can take an index
// while task_, ctx_ and n_ change), then an even one that opens the new call at index 0. A
// task is claimed by a compare-and-swap of the whole state, so only in its own generation.
// (All atomics are sequentially consistent: a worker that claims an index read n_ before the
// claim, hence before the close.)
void WorkerPool::claimTasks(std::uint32_t generation, int worker) {
    const std::int64_t n = n_.load();
    std::uint64_t state = state_.load();
    for (;;) {
        const auto index = static_cast<std::int64_t>(state & 0xffffffffu);
        if (state >> 32 != generation || index >= n) return;
        if (!state_.compare_exchange_weak(state, state + 1)) continue;
        // Claimed: the call cannot finish (nor task_ change) before this index is done.
        task_.load()(ctx_.load(), index, worker);
        if (finished_.fetch_add(1) + 1 == n) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_.notify_one();
        }
        state = state_.load();
    }
}

void WorkerPool::setHelperScratch(std::vector<float*> helperScratch) { helperScratch_ = std::move(helperScratch); }

void WorkerPool::helpWhile(int slot, const std::atomic<bool>& busy) {
    if (slot < 0 || slot >= helperSlots())
        throw std::out_of_range("WorkerPool::helpWhile: slot " + std::to_string(slot) + " of " +
                                std::to_string(helperSlots()));
    const int worker = threads() + slot;
    helpers_.fetch_add(1);
    // A call not yet seen, as workerLoop; 1 (odd) stands for none, so a call open now is joined.
    std::uint32_t seen = 1;
    for (int i = 0; busy.load(); ++i) {
        const auto generation = static_cast<std::uint32_t>(state_.load() >> 32);
        if (generation % 2 == 0 && generation != seen) {
            seen = generation;
            claimTasks(generation, worker);
        } else {
            cpuRelax();
            if ((i & 1023) == 1023) std::this_thread::yield();
        }
    }
    helpers_.fetch_sub(1);
}

void WorkerPool::run(std::int64_t n, Task task, void* ctx) {
    if (n <= 0) return;
    if (n == 1 || (workers_.empty() && helpers_.load() == 0)) {
        for (std::int64_t i = 0; i < n; ++i) task(ctx, i, 0);
        return;
    }
    if (n > std::numeric_limits<std::int32_t>::max())
        throw std::length_error("WorkerPool::parallelFor: " + std::to_string(n) + " tasks");
    const auto closed = static_cast<std::uint32_t>((state_.load() >> 32) + 1), open = closed + 1;
    state_.store(std::uint64_t(closed) << 32 | 0xffffffffu);
    task_.store(task);
    ctx_.store(ctx);
    n_.store(n);
    finished_.store(0);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        state_.store(std::uint64_t(open) << 32);
    }
    wake_.notify_all();
    claimTasks(open, 0);
    const auto allDone = [&] { return finished_.load() == n; };
    if (spinUntil(allDone)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, allDone);
}

void WorkerPool::workerLoop(int worker) {
    std::uint32_t seen = 0;
    // A call to join: an open (even) generation not yet seen.
    const auto next = [&] {
        const auto generation = static_cast<std::uint32_t>(state_.load() >> 32);
        return generation != seen && generation % 2 == 0;
    };
    for (;;) {
        if (!spinUntil(next)) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || next(); });
            if (stop_) return;
        }
        seen = static_cast<std::uint32_t>(state_.load() >> 32);
        if (seen % 2 == 0) claimTasks(seen, worker);
    }
}

}  // namespace cpu
}  // namespace tessera
