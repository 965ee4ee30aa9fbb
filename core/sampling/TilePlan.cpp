#include "core/sampling/TilePlan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/run/RunConfig.h"
#include "core/sampling/Philox.h"

namespace tessera {

namespace {

[[noreturn]] void reject(const std::string& field, const std::string& message) {
    throw ValidationError(field, field + ": " + message);
}

}  // namespace

std::vector<int> TilePlan::axisPositions(int length, int tile, int overlap) {
    const int effective = std::min(tile, length);
    const int stride = tile - overlap;
    std::vector<int> positions{0};
    if (effective < tile || stride <= 0) return positions;  // the image is not longer than one tile
    for (int pos = stride; pos + effective < length; pos += stride) positions.push_back(pos);
    // The last tile is snapped inside the image rather than shrunk, so every tile is full size.
    if (positions.back() + effective < length) positions.push_back(length - effective);
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
    return positions;
}

TilePlan TilePlan::make(int width, int height, int tile, int overlap) {
    if (width < 1) reject("width", std::to_string(width) + " is not allowed; the image must be at least 1 pixel wide");
    if (height < 1)
        reject("height", std::to_string(height) + " is not allowed; the image must be at least 1 pixel high");
    if (tile < 1) reject("tile", std::to_string(tile) + " is not allowed; the tile size must be positive");
    if (overlap < 0 || overlap >= tile)
        reject("overlap", std::to_string(overlap) + " is not allowed; the overlap must be 0 to " +
                              std::to_string(tile - 1) + " pixels (below the tile, " + std::to_string(tile) + ")");

    TilePlan plan;
    plan.width_ = width;
    plan.height_ = height;
    plan.tile_ = tile;
    plan.overlap_ = overlap;
    plan.tileW_ = std::min(tile, width);
    plan.tileH_ = std::min(tile, height);
    plan.xs_ = axisPositions(width, tile, overlap);
    plan.ys_ = axisPositions(height, tile, overlap);
    plan.tiles_.reserve(plan.xs_.size() * plan.ys_.size());
    for (int row = 0; row < plan.rows(); ++row)
        for (int col = 0; col < plan.cols(); ++col)
            plan.tiles_.push_back(TileRect{row * plan.cols() + col, col, row, plan.xs_[static_cast<std::size_t>(col)],
                                           plan.ys_[static_cast<std::size_t>(row)], plan.tileW_, plan.tileH_});
    return plan;
}

TilePlan TilePlan::fromConfig(const RunConfig& config) {
    return make(config.width, config.height, config.tile, config.overlapPixels());
}

const TileRect& TilePlan::tile(int id) const {
    if (id < 0 || id >= count())
        throw std::out_of_range("tile id " + std::to_string(id) + " is outside 0.." + std::to_string(count() - 1));
    return tiles_[static_cast<std::size_t>(id)];
}

double TilePlan::redundancy() const {
    const double tileArea = static_cast<double>(tileW_) * tileH_;
    return tileArea * count() / (static_cast<double>(width_) * height_);
}

std::vector<CanvasShift> tileShifts(std::uint64_t seed, int steps, const TilePlan& plan) {
    std::vector<CanvasShift> shifts;
    for (int k = 0; k < steps; ++k) {
        const Philox4x32 r = philoxBits(seed, kTileShiftDraw, static_cast<std::uint64_t>(k));
        CanvasShift s;
        if (plan.rows() > 1) s.dy = static_cast<int>(r.v[0] % static_cast<std::uint32_t>(plan.tileH()));
        if (plan.cols() > 1) s.dx = static_cast<int>(r.v[1] % static_cast<std::uint32_t>(plan.tileW()));
        shifts.push_back(s);
    }
    return shifts;
}

}  // namespace tessera
