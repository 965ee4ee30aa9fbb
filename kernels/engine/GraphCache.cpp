#include "kernels/engine/GraphCache.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/device/CudaCheck.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double usedMiB() {
    std::size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess) return 0;
    return static_cast<double>(total - freeBytes) / (1024.0 * 1024.0);
}

}  // namespace

GraphCache::GraphCache(int capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

GraphCache::~GraphCache() = default;

void GraphCache::setCapacity(int capacity, cudaStream_t stream) {
    capacity_ = capacity < 1 ? 1 : capacity;
    if (size() <= capacity_) return;
    TESSERA_CHECK(cudaStreamSynchronize(stream));
    while (size() > capacity_) {
        erase(std::prev(lru_.end()));
        counters_.evictions += 1;
    }
}

void GraphCache::erase(List::iterator entry) {
    index_.erase(entry->key.text());
    lru_.erase(entry);  // destroys the executable
}

bool GraphCache::updateInto(List::iterator entry, cudaGraph_t graph, const GraphKey& key, double captureMs, int nodes) {
    const auto t0 = Clock::now();
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t status = cudaGraphExecUpdate(entry->exec.get(), graph, &info);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky; the caller instantiates instead
        return false;
    }
    const double ms = msSince(t0);
    counters_.updates += 1;
    counters_.updateMs += ms;
    index_.erase(entry->key.text());
    entry->key = key;
    entry->stats.name = key.family;
    entry->stats.nodes = nodes;
    entry->stats.captureMs = captureMs;
    entry->stats.instantiateMs = 0;
    entry->stats.updateMs = ms;
    entry->stats.updated = true;
    entry->stats.launches = 0;
    lru_.splice(lru_.begin(), lru_, entry);
    index_[key.text()] = lru_.begin();
    return true;
}

GraphCache::Acquired GraphCache::acquire(const GraphKey& key, cudaStream_t stream, const std::function<void()>& record,
                                         const std::vector<std::string>& keep) {
    const std::string text = key.text();
    if (const auto it = index_.find(text); it != index_.end()) {
        counters_.hits += 1;
        lru_.splice(lru_.begin(), lru_, it->second);
        Entry& e = lru_.front();
        e.stats.launches += 1;
        return {e.exec.get(), true, &e.stats};
    }
    counters_.misses += 1;

    // Nothing enqueued while capturing runs, so on failure the caller can simply enqueue the
    // same work again eagerly.
    CapturedGraph captured;
    try {
        captured = captureGraph(stream, record);
    } catch (const GraphCaptureFailed&) {
        counters_.failures += 1;
        throw;
    }
    const CudaGraph& graph = captured.graph;
    const double captureMs = captured.captureMs;
    const int nodes = captured.nodes;
    counters_.captures += 1;
    counters_.captureMs += captureMs;

    // From here on existing executables may change: none may be in flight.
    TESSERA_CHECK(cudaStreamSynchronize(stream));

    const auto kept = [&](List::iterator it) {
        return std::find(keep.begin(), keep.end(), it->key.text()) != keep.end();
    };
    // A graph of the same family with other pointers is stale (its arena was replaced):
    // update it in place.
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        if (it->key.family != key.family || kept(it)) continue;
        if (updateInto(it, graph.get(), key, captureMs, nodes)) {
            lru_.front().stats.launches = 1;
            return {lru_.front().exec.get(), false, &lru_.front().stats};
        }
        erase(it);
        counters_.invalidations += 1;
        break;
    }
    // Full: evict the least recently used graph, recycling its executable where the
    // topology allows.
    while (size() >= capacity_) {
        auto victim = lru_.end();
        for (auto it = lru_.end(); it != lru_.begin();) {
            --it;
            if (!kept(it)) {
                victim = it;
                break;
            }
        }
        if (victim == lru_.end()) break;
        counters_.evictions += 1;
        if (size() == capacity_ && updateInto(victim, graph.get(), key, captureMs, nodes)) {
            lru_.front().stats.launches = 1;
            return {lru_.front().exec.get(), false, &lru_.front().stats};
        }
        erase(victim);
    }

    const double before = usedMiB();
    const auto t1 = Clock::now();
    CudaGraphExec exec = instantiateGraph(graph.get());
    TESSERA_CHECK(cudaGraphUpload(exec.get(), stream));
    TESSERA_CHECK(cudaStreamSynchronize(stream));
    const double instantiateMs = msSince(t1);
    const double after = usedMiB();
    counters_.instantiations += 1;
    counters_.instantiateMs += instantiateMs;

    Entry entry;
    entry.key = key;
    entry.exec = std::move(exec);
    entry.stats.name = key.family;
    entry.stats.nodes = nodes;
    entry.stats.captureMs = captureMs;
    entry.stats.instantiateMs = instantiateMs;
    entry.stats.deviceMiB = after > before ? after - before : 0.0;
    entry.stats.launches = 1;
    lru_.push_front(std::move(entry));
    index_[text] = lru_.begin();
    return {lru_.front().exec.get(), false, &lru_.front().stats};
}

void GraphCache::dropIf(const std::function<bool(const GraphKey&)>& match, cudaStream_t stream) {
    bool synced = false;
    for (auto it = lru_.begin(); it != lru_.end();) {
        const auto next = std::next(it);
        if (match(it->key)) {
            if (!synced) {
                TESSERA_CHECK(cudaStreamSynchronize(stream));
                synced = true;
            }
            erase(it);
            counters_.invalidations += 1;
        }
        it = next;
    }
}

void GraphCache::clear(cudaStream_t stream) {
    dropIf([](const GraphKey&) { return true; }, stream);
}

double GraphCache::deviceMiB() const {
    double sum = 0;
    for (const Entry& e : lru_) sum += e.stats.deviceMiB;
    return sum;
}

std::vector<GraphEntryStats> GraphCache::entries() const {
    std::vector<GraphEntryStats> out;
    for (const Entry& e : lru_) out.push_back(e.stats);
    return out;
}

}  // namespace tessera
