#include "kernels/backend/AttentionPlan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace tessera {

long long AttentionPlan::passes(int batch, int heads, long long queries) const {
    auto ceilDiv = [](long long a, long long b) { return (a + b - 1) / b; };
    return ceilDiv(batch, imagesPerPass) * ceilDiv(heads, headsPerPass) * ceilDiv(queries, queryBlock);
}

std::string AttentionPlan::describe(long long queries) const {
    char text[160];
    std::snprintf(text, sizeof text,
                  "query block %d of %lld, %d %s x %d %s per pass, scores %.1f MiB + probabilities %.1f MiB",
                  queryBlock, queries, headsPerPass, headsPerPass == 1 ? "head" : "heads", imagesPerPass,
                  imagesPerPass == 1 ? "image" : "images", static_cast<double>(scoreBytes) / (1 << 20),
                  static_cast<double>(probBytes) / (1 << 20));
    return text;
}

AttentionPlan planAttention(int maxBatch, int heads, long long queries, long long keys, std::size_t probElementBytes,
                            std::size_t budgetBytes) {
    if (maxBatch < 1 || heads < 1 || queries < 1 || keys < 1 || probElementBytes < 1)
        throw std::invalid_argument("planAttention: batch " + std::to_string(maxBatch) + ", heads " +
                                    std::to_string(heads) + ", queries " + std::to_string(queries) + ", keys " +
                                    std::to_string(keys) + ": every size must be at least 1");
    const std::size_t rowBytes = static_cast<std::size_t>(keys) * sizeof(float);
    const std::size_t matrixBytes = rowBytes * static_cast<std::size_t>(queries);
    AttentionPlan p;
    if (matrixBytes <= budgetBytes) {
        const auto fit = static_cast<long long>(budgetBytes / matrixBytes);
        p.queryBlock = static_cast<int>(queries);
        if (heads == 1)
            p.imagesPerPass = static_cast<int>(std::min<long long>(maxBatch, fit));
        else
            p.headsPerPass = static_cast<int>(std::min<long long>(heads, fit));
    } else {
        long long rows = std::max<long long>(1, static_cast<long long>(budgetBytes / rowBytes));
        if (rows >= 64) rows = rows / 64 * 64;
        p.queryBlock = static_cast<int>(std::min(rows, queries));
    }
    const std::size_t matrices = static_cast<std::size_t>(heads == 1 ? p.imagesPerPass : p.headsPerPass);
    const std::size_t elements = matrices * static_cast<std::size_t>(p.queryBlock) * static_cast<std::size_t>(keys);
    p.scoreBytes = elements * sizeof(float);
    p.probBytes = elements * probElementBytes;
    return p;
}

}  // namespace tessera
