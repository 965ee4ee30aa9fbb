// BlendWindow: per-tile blend weights and the per-pixel normaliser of a tiled run
// (docs/ENGINE_SEMANTICS.md "Blend windows"). Qt-free, immutable after construction.
#pragma once

#include <cstddef>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

// The 1-D window of `kind` over a tile of `length` pixels, i = 0 .. length-1, with `overlap`
// pixels (clamped to 0 .. length-1; only `linear` uses it). Exactly symmetric (w[i] == w[length-1-i]),
// strictly positive, computed in double and stored as float. For `none` this is all ones:
// the hard ownership of `none` depends on where the tile sits, see BlendWeights.
std::vector<float> axisWindow(BlendWindowKind kind, int length, int overlap);

// Weights for every tile of a plan: w_t(y, x) = wy_row(y) * wx_col(x) in tile-local coordinates,
// N(p) = sum over tiles covering p of w_t(p) (> 0 everywhere), and 1 / N(p).
// Tiles share weight maps: with a smooth window there is one map for all tiles; with `none`
// there are a few (first, interior, next-to-last and last along each axis), each stored once.
class BlendWeights {
public:
    // `overlap` = the configured overlap in pixels (normally plan.overlap()).
    BlendWeights(const TilePlan& plan, BlendWindowKind kind, int overlap);

    BlendWindowKind kind() const { return kind_; }
    int width() const { return width_; }
    int height() const { return height_; }
    int tileW() const { return tileW_; }
    int tileH() const { return tileH_; }
    int tileCount() const { return static_cast<int>(mapOfTile_.size()); }

    // Tile-local weights of tile `id`, row-major tileH x tileW floats; valid while *this lives.
    const float* tileWeights(int id) const;
    // Copies tileWeights(id) into out[0 .. tileH*tileW).
    void fillTileWeights(int id, float* out) const;
    float weight(int id, int localY, int localX) const;

    // The distinct maps (upload these once) and which one each tile uses.
    int mapCount() const { return static_cast<int>(maps_.size()); }
    const float* map(int index) const;
    int mapIndexOfTile(int id) const;

    // 1-D weights of one column (along x, tileW floats) and one row (along y, tileH floats).
    const std::vector<float>& columnWeights(int col) const;
    const std::vector<float>& rowWeights(int row) const;

    // Per-pixel normaliser and its inverse over the image, row-major height x width.
    const std::vector<float>& normalizer() const { return normalizer_; }
    const std::vector<float>& inverseNormalizer() const { return inverseNormalizer_; }
    float normalizerAt(int y, int x) const {
        return normalizer_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) +
                           static_cast<std::size_t>(x)];
    }

private:
    BlendWindowKind kind_;
    int width_ = 0, height_ = 0, tileW_ = 0, tileH_ = 0, cols_ = 0;
    // Distinct 1-D windows per axis and the class of each column/row.
    std::vector<std::vector<float>> xWindows_, yWindows_;
    std::vector<int> colClass_, rowClass_;
    std::vector<std::vector<float>> maps_;  // tileH*tileW each
    std::vector<int> mapOfTile_;
    std::vector<float> normalizer_, inverseNormalizer_;
};

}  // namespace tessera
