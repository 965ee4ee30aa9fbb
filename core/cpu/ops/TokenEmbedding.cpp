// CLIP's token embedding and EOS pooling on the CPU (core/cpu/CpuOps.h; transformers
// models/clip/modeling_clip.py, CLIPTextEmbeddings and CLIPTextTransformer.forward), and T5's
// embedding without positions (models/t5/modeling_t5.py, T5Stack's embed_tokens).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/cpu/CpuOps.h"

namespace tessera {
namespace cpu {

void checkTokenIds(int batch, int tokens, std::int64_t vocab, const float* ids) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    for (std::int64_t r = 0; r < rows; ++r)
        if (!(ids[r] >= 0.0f && ids[r] < static_cast<float>(vocab)) || ids[r] != std::floor(ids[r]))
            throw std::out_of_range("token embedding: row " + std::to_string(r / tokens) + " position " +
                                    std::to_string(r % tokens) + " holds id " + std::to_string(ids[r]) +
                                    ", not an integer from 0 to " + std::to_string(vocab - 1));
}

void tokenEmbedding(WorkerPool& pool, int batch, int tokens, int channels, std::int64_t vocab, const float* ids,
                    const float* table, const float* positions, float* y) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    checkTokenIds(batch, tokens, vocab, ids);
    pool.parallelFor(rows, [&](std::int64_t r) {
        const float* t = table + static_cast<std::int64_t>(ids[r]) * channels;
        float* out = y + r * channels;
        if (!positions) {
            std::copy(t, t + channels, out);
            return;
        }
        const float* p = positions + (r % tokens) * channels;
        for (int c = 0; c < channels; ++c) out[c] = t[c] + p[c];
    });
}

void eosPool(int batch, int tokens, int channels, const float* x, const float* ids, int token, float* y) {
    for (int b = 0; b < batch; ++b) {
        const float* row = ids + std::int64_t(b) * tokens;
        // std::max_element and std::find both return the first match, as torch's argmax does.
        const float* at = token < 0 ? std::max_element(row, row + tokens) : std::find(row, row + tokens, float(token));
        const std::int64_t pos = at == row + tokens ? 0 : at - row;
        const float* src = x + (std::int64_t(b) * tokens + pos) * channels;
        std::copy(src, src + channels, y + std::int64_t(b) * channels);
    }
}

}  // namespace cpu
}  // namespace tessera
