// TilePlan: the tile rectangles that cover an image (docs/ENGINE_SEMANTICS.md "Tile plan").
// Edge tiles are snapped inside the image, so no tile is smaller than the tile size unless
// the image itself is (then one tile covers that axis). Qt-free, immutable after make().
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/CanvasShift.h"

namespace tessera {

struct RunConfig;

// One tile in image pixels. id = row * cols + col; (x, y) is the top-left corner. A plain record of
// ints, alike in shape to other field lists (ClipTextConfig's).
struct TileRect {
    int id = 0;
    int col = 0;
    int row = 0;
    int x = 0;
    int y = 0;
    int w = 0;
    int h = 0;
    bool operator==(const TileRect&) const = default;
};

class TilePlan {
public:
    // Throws ValidationError (field "width", "height", "tile" or "overlap") when width/height < 1,
    // tile < 1 or overlap outside 0 .. tile-1. Model constraints are validate()'s job, not this.
    static TilePlan make(int width, int height, int tile, int overlap);
    // make(config.width, config.height, config.tile, config.overlapPixels()).
    static TilePlan fromConfig(const RunConfig& config);

    int width() const { return width_; }
    int height() const { return height_; }
    int tileW() const { return tileW_; }             // min(tile, width)
    int tileH() const { return tileH_; }             // min(tile, height)
    int stride() const { return tile_ - overlap_; }  // configured tile - overlap
    int overlap() const { return overlap_; }         // configured overlap in pixels
    int cols() const { return static_cast<int>(xs_.size()); }
    int rows() const { return static_cast<int>(ys_.size()); }
    int count() const { return static_cast<int>(tiles_.size()); }
    const std::vector<TileRect>& tiles() const { return tiles_; }
    const TileRect& tile(int id) const;  // throws std::out_of_range for a bad id
    // Tile positions along each axis: x of every column, y of every row (ascending).
    const std::vector<int>& columnPositions() const { return xs_; }
    const std::vector<int>& rowPositions() const { return ys_; }

    // Sum of tile areas / image area (1 when tiles do not overlap).
    double redundancy() const;
    // UNet evaluations per sampling step (one per tile) and over a whole run.
    int evaluationsPerStep() const { return count(); }
    std::int64_t totalEvaluations(int steps) const { return static_cast<std::int64_t>(count()) * steps; }

    // Positions along one axis of length `length` for configured tile/overlap (the rule above).
    static std::vector<int> axisPositions(int length, int tile, int overlap);

private:
    TilePlan() = default;

    int width_ = 0, height_ = 0, tile_ = 0, overlap_ = 0, tileW_ = 0, tileH_ = 0;
    std::vector<int> xs_, ys_;
    std::vector<TileRect> tiles_;
};

// The Philox draw of the shifts (core/sampling/Philox.h's keying: index = the step index k).
constexpr std::uint32_t kTileShiftDraw = 0x80000001u;

// The shifts of a sampling pass of `steps` steps over `plan`: step k's (dy, dx) uniform in
// [0, tileH) x [0, tileW) (SpotDiffusion's range: up to one tile), from Philox (seed, kTileShiftDraw,
// k) words 0 and 1. An axis that one tile covers stays put: a roll there would only move the canvas's
// own edge into the middle of the tile.
std::vector<CanvasShift> tileShifts(std::uint64_t seed, int steps, const TilePlan& plan);

}  // namespace tessera
