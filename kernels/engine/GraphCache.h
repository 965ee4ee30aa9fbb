// GraphCache: the CUDA engine's executable graphs (tile forwards and whole steps), kept
// across runs, least recently used first out, at most `capacity` of them.
//
// A graph is found by its key: the family (everything that fixes its topology and launch
// shapes: mode, variant, model generation, UNet plan, precision, tile, batch, tile plan,
// fusion...) and the pointers it bakes in (arena, backend I/O, events). On a miss the caller's
// work is captured on its stream (captureGraph, kernels/device/GraphCapture.h) and, in this
// order of preference:
//   - a cached graph of the same family whose pointers are stale (its arena is gone) is
//     updated in place with cudaGraphExecUpdate;
//   - when the cache is full, the least recently used graph is evicted and its executable
//     updated with the new graph where the topology allows (cudaGraphExecUpdate), else
//     destroyed;
//   - otherwise the graph is instantiated and uploaded.
// Counters: hits, misses, captures, evictions, instantiations, updates, invalidations
// (entries dropped by dropIf or a failed stale update), failures (captures that failed).
//
// Work that touches an existing executable (update, destroy) first waits for the stream,
// so no executable is changed while a launch of it may be in flight. No Qt.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>

#include "core/run/RunRecord.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/device/GraphCapture.h"  // GraphCaptureFailed

namespace tessera {

struct GraphKey {
    std::string family;    // topology and launch shapes, human readable
    std::string pointers;  // device addresses / handles baked into the nodes
    std::string text() const { return family + " @ " + pointers; }
};

struct GraphCacheCounters {
    long long hits = 0, misses = 0, captures = 0, evictions = 0, instantiations = 0, updates = 0;
    long long invalidations = 0, failures = 0;
    double captureMs = 0, instantiateMs = 0, updateMs = 0;
};

class GraphCache {
public:
    explicit GraphCache(int capacity = 16);
    ~GraphCache();
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;

    // Evicts least recently used graphs beyond the new capacity (>= 1).
    void setCapacity(int capacity, cudaStream_t stream);
    int capacity() const { return capacity_; }
    int size() const { return static_cast<int>(lru_.size()); }
    bool contains(const GraphKey& key) const { return index_.count(key.text()) != 0; }

    struct Acquired {
        cudaGraphExec_t exec = nullptr;
        bool hit = false;
        const GraphEntryStats* stats = nullptr;  // valid until the next call that changes the cache
    };
    // The executable graph for `key`; on a miss `record` enqueues the work on `stream` while
    // it is being captured. Graphs whose key text is in `keep` (acquired earlier for the same
    // launch sequence) are neither evicted nor recycled; when only those are left the cache
    // holds one more than its capacity until the next miss. Throws GraphCaptureFailed when
    // the capture fails (or `record` throws), CudaError when instantiation fails.
    Acquired acquire(const GraphKey& key, cudaStream_t stream, const std::function<void()>& record,
                     const std::vector<std::string>& keep = {});

    // Drops every graph whose key matches (e.g. graphs of a UNet plan that was replaced).
    void dropIf(const std::function<bool(const GraphKey&)>& match, cudaStream_t stream);
    void clear(cudaStream_t stream);

    const GraphCacheCounters& counters() const { return counters_; }
    // Device memory measured at instantiation, summed over the cached graphs.
    double deviceMiB() const;
    std::vector<GraphEntryStats> entries() const;  // most recently used first

private:
    struct Entry {
        GraphKey key;
        CudaGraphExec exec;
        GraphEntryStats stats;
    };
    using List = std::list<Entry>;

    // Tries cudaGraphExecUpdate of `entry`'s executable to `graph`; on success re-keys it.
    bool updateInto(List::iterator entry, cudaGraph_t graph, const GraphKey& key, double captureMs, int nodes);
    void erase(List::iterator entry);

    int capacity_;
    List lru_;  // front = most recently used
    std::unordered_map<std::string, List::iterator> index_;
    GraphCacheCounters counters_;
};

}  // namespace tessera
