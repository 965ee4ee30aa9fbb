#include "kernels/backend/CudaMemoryPlan.h"

#include <algorithm>
#include <utility>

namespace tessera {

ActivationLayout placeBuffers(std::vector<PlanBuffer>& buffers, const std::vector<std::vector<int>>& buffersPerOp) {
    const int n = static_cast<int>(buffers.size());
    const int last = static_cast<int>(buffersPerOp.size());
    for (std::size_t i = 0; i < buffersPerOp.size(); ++i)
        for (int b : buffersPerOp[i]) {
            PlanBuffer& pb = buffers[static_cast<std::size_t>(b)];
            pb.first = std::min(pb.first, static_cast<int>(i));
            pb.last = std::max(pb.last, static_cast<int>(i));
        }
    for (PlanBuffer& b : buffers)
        if (b.wholeRun || b.last < 0) {
            b.first = 0;
            b.last = last;
        }
    std::vector<int> order(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return buffers[static_cast<std::size_t>(a)].bytes > buffers[static_cast<std::size_t>(b)].bytes;
    });
    std::vector<int> placed;
    ActivationLayout layout;
    for (int id : order) {
        PlanBuffer& b = buffers[static_cast<std::size_t>(id)];
        layout.unsharedBytes += b.bytes;
        std::vector<std::pair<std::size_t, std::size_t>> busy;
        for (int p : placed) {
            const PlanBuffer& q = buffers[static_cast<std::size_t>(p)];
            if (q.first <= b.last && b.first <= q.last) busy.emplace_back(q.offset, q.offset + q.bytes);
        }
        std::sort(busy.begin(), busy.end());
        std::size_t off = 0;
        for (const auto& [lo, hi] : busy) {
            if (off + b.bytes <= lo) break;
            off = std::max(off, hi);
        }
        b.offset = off;
        layout.bytes = std::max(layout.bytes, off + b.bytes);
        placed.push_back(id);
    }
    return layout;
}

}  // namespace tessera
