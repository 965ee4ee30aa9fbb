// T5's bidirectional relative position buckets (transformers models/t5/modeling_t5.py,
// T5Attention._relative_position_bucket with bidirectional=True): which row of an attention
// layer's position-bias table a query i and a key j share, from r = j - i (memory minus query).
// One definition for the graph's Attention op (ModelGraph.h, buckets > 0), every backend and the
// tests. Qt-free.
#pragma once

#include <cmath>
#include <cstdlib>
#include <vector>

namespace tessera {

// Half the buckets for keys after the query (r > 0), half for the others; within a half the
// first quarter of the buckets are the exact distances 0..quarter-1, the rest logarithmic up to
// maxDistance, beyond which every distance shares the half's last bucket. The logarithm is
// taken in float32 and truncated toward zero, as transformers does on float32 tensors.
// Requires buckets >= 4 and even, maxDistance > buckets / 4 (ModelGraph checks the op's).
inline int relativePositionBucket(int relative, int buckets, int maxDistance) {
    const int half = buckets / 2;
    const int base = relative > 0 ? half : 0;
    const int distance = std::abs(relative);
    const int maxExact = half / 2;
    if (distance < maxExact) return base + distance;
    const float ratio = std::log(static_cast<float>(distance) / static_cast<float>(maxExact)) /
                        static_cast<float>(std::log(static_cast<double>(maxDistance) / maxExact));
    const int large = maxExact + static_cast<int>(ratio * static_cast<float>(half - maxExact));
    return base + (large < half - 1 ? large : half - 1);
}

// The [queries, keys] table of buckets, row i holding bucket(j - i) for j = 0..keys-1.
inline std::vector<int> relativePositionBuckets(int queries, int keys, int buckets, int maxDistance) {
    std::vector<int> table(static_cast<std::size_t>(queries) * static_cast<std::size_t>(keys));
    for (int i = 0; i < queries; ++i)
        for (int j = 0; j < keys; ++j)
            table[static_cast<std::size_t>(i) * static_cast<std::size_t>(keys) + static_cast<std::size_t>(j)] =
                relativePositionBucket(j - i, buckets, maxDistance);
    return table;
}

}  // namespace tessera
