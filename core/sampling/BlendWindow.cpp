#include "core/sampling/BlendWindow.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace tessera {

namespace {

// Gaussian variance of Mixture of Diffusers, in units of the tile length squared.
constexpr double kGaussianVariance = 0.01;

double windowValue(BlendWindowKind kind, int i, int length, int overlap) {
    const double T = length;
    switch (kind) {
        case BlendWindowKind::None:
            return 1.0;
        case BlendWindowKind::Linear:
            if (overlap == 0) return 1.0;
            return std::min({1.0, (i + 0.5) / overlap, (T - i - 0.5) / overlap});
        case BlendWindowKind::Hann:
            return 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * (i + 0.5) / T);
        case BlendWindowKind::Gaussian: {
            const double d = i - (T - 1.0) / 2.0;
            return std::exp(-(d * d) / (T * T) / (2.0 * kGaussianVariance));
        }
    }
    return 1.0;
}

// Hard ownership along one axis for `none`: pixel p belongs to the covering tile whose centre is
// nearest (ties to the lower index). Compared in doubled integer units: |2p + 1 - (2 pos + T)|.
std::vector<float> ownedWindow(const std::vector<int>& positions, std::size_t index, int length, int tileLength) {
    std::vector<float> w(static_cast<std::size_t>(tileLength), 0.0f);
    const int own = positions[index];
    for (int i = 0; i < tileLength; ++i) {
        const int p = own + i;
        if (p >= length) break;
        std::size_t best = positions.size();
        long long bestDistance = 0;
        for (std::size_t t = 0; t < positions.size(); ++t) {
            if (p < positions[t] || p >= positions[t] + tileLength) continue;
            const long long d = std::llabs(2LL * p + 1 - (2LL * positions[t] + tileLength));
            if (best == positions.size() || d < bestDistance) {
                best = t;
                bestDistance = d;
            }
        }
        if (best == index) w[static_cast<std::size_t>(i)] = 1.0f;
    }
    return w;
}

// Windows of every column (or row), deduplicated: returns the distinct windows, class per index.
void axisClasses(BlendWindowKind kind, const std::vector<int>& positions, int length, int tileLength, int overlap,
                 std::vector<std::vector<float>>& windows, std::vector<int>& classes) {
    windows.clear();
    classes.clear();
    if (kind != BlendWindowKind::None) {
        windows.push_back(axisWindow(kind, tileLength, overlap));
        classes.assign(positions.size(), 0);
        return;
    }
    // Ownership only depends on the neighbours, so searching just them keeps this linear.
    for (std::size_t index = 0; index < positions.size(); ++index) {
        const std::size_t lo = index == 0 ? 0 : index - 1;
        const std::size_t hi = std::min(positions.size(), index + 2);
        std::vector<int> neighbourhood(positions.begin() + static_cast<std::ptrdiff_t>(lo),
                                       positions.begin() + static_cast<std::ptrdiff_t>(hi));
        auto w = ownedWindow(neighbourhood, index - lo, length, tileLength);
        auto found = std::find(windows.begin(), windows.end(), w);
        if (found == windows.end()) {
            windows.push_back(std::move(w));
            classes.push_back(static_cast<int>(windows.size()) - 1);
        } else {
            classes.push_back(static_cast<int>(found - windows.begin()));
        }
    }
}

}  // namespace

std::vector<float> axisWindow(BlendWindowKind kind, int length, int overlap) {
    if (length < 1) throw std::invalid_argument("axisWindow: tile length " + std::to_string(length) + " < 1");
    const int o = std::clamp(overlap, 0, length - 1);
    std::vector<float> w(static_cast<std::size_t>(length));
    // Compute the first half and mirror it, so the window is symmetric to the last bit.
    for (int i = 0; i < (length + 1) / 2; ++i) {
        const float v = static_cast<float>(windowValue(kind, i, length, o));
        w[static_cast<std::size_t>(i)] = v;
        w[static_cast<std::size_t>(length - 1 - i)] = v;
    }
    return w;
}

BlendWeights::BlendWeights(const TilePlan& plan, BlendWindowKind kind, int overlap)
    : kind_(kind),
      width_(plan.width()),
      height_(plan.height()),
      tileW_(plan.tileW()),
      tileH_(plan.tileH()),
      cols_(plan.cols()) {
    axisClasses(kind, plan.columnPositions(), width_, tileW_, overlap, xWindows_, colClass_);
    axisClasses(kind, plan.rowPositions(), height_, tileH_, overlap, yWindows_, rowClass_);

    // One map per (row class, column class) pair that occurs.
    const int xClasses = static_cast<int>(xWindows_.size());
    std::vector<int> mapOfPair(yWindows_.size() * xWindows_.size(), -1);
    mapOfTile_.reserve(static_cast<std::size_t>(plan.count()));
    for (const TileRect& t : plan.tiles()) {
        const int yc = rowClass_[static_cast<std::size_t>(t.row)];
        const int xc = colClass_[static_cast<std::size_t>(t.col)];
        int& m = mapOfPair[static_cast<std::size_t>(yc * xClasses + xc)];
        if (m < 0) {
            const auto& wy = yWindows_[static_cast<std::size_t>(yc)];
            const auto& wx = xWindows_[static_cast<std::size_t>(xc)];
            std::vector<float> map(static_cast<std::size_t>(tileH_) * static_cast<std::size_t>(tileW_));
            for (int y = 0; y < tileH_; ++y)
                for (int x = 0; x < tileW_; ++x)
                    map[static_cast<std::size_t>(y) * static_cast<std::size_t>(tileW_) + static_cast<std::size_t>(x)] =
                        wy[static_cast<std::size_t>(y)] * wx[static_cast<std::size_t>(x)];
            maps_.push_back(std::move(map));
            m = static_cast<int>(maps_.size()) - 1;
        }
        mapOfTile_.push_back(m);
    }

    // N = the sum of the same float weights the tiles use, accumulated in double.
    const std::size_t pixels = static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_);
    std::vector<double> sum(pixels, 0.0);
    for (const TileRect& t : plan.tiles()) {
        const float* w = tileWeights(t.id);
        for (int y = 0; y < tileH_; ++y) {
            double* dst = sum.data() + static_cast<std::size_t>(t.y + y) * static_cast<std::size_t>(width_) +
                          static_cast<std::size_t>(t.x);
            const float* src = w + static_cast<std::size_t>(y) * static_cast<std::size_t>(tileW_);
            for (int x = 0; x < tileW_; ++x) dst[x] += src[x];
        }
    }
    normalizer_.resize(pixels);
    inverseNormalizer_.resize(pixels);
    for (std::size_t p = 0; p < pixels; ++p) {
        normalizer_[p] = static_cast<float>(sum[p]);
        inverseNormalizer_[p] = static_cast<float>(1.0 / sum[p]);
    }
}

const float* BlendWeights::tileWeights(int id) const { return map(mapIndexOfTile(id)); }

void BlendWeights::fillTileWeights(int id, float* out) const {
    const float* src = tileWeights(id);
    std::copy(src, src + static_cast<std::size_t>(tileH_) * static_cast<std::size_t>(tileW_), out);
}

float BlendWeights::weight(int id, int localY, int localX) const {
    if (localY < 0 || localY >= tileH_ || localX < 0 || localX >= tileW_)
        throw std::out_of_range("tile-local pixel (" + std::to_string(localY) + ", " + std::to_string(localX) +
                                ") is outside the " + std::to_string(tileH_) + "x" + std::to_string(tileW_) + " tile");
    return tileWeights(
        id)[static_cast<std::size_t>(localY) * static_cast<std::size_t>(tileW_) + static_cast<std::size_t>(localX)];
}

const float* BlendWeights::map(int index) const {
    if (index < 0 || index >= mapCount())
        throw std::out_of_range("weight map " + std::to_string(index) + " is outside 0.." +
                                std::to_string(mapCount() - 1));
    return maps_[static_cast<std::size_t>(index)].data();
}

int BlendWeights::mapIndexOfTile(int id) const {
    if (id < 0 || id >= tileCount())
        throw std::out_of_range("tile id " + std::to_string(id) + " is outside 0.." + std::to_string(tileCount() - 1));
    return mapOfTile_[static_cast<std::size_t>(id)];
}

const std::vector<float>& BlendWeights::columnWeights(int col) const {
    if (col < 0 || col >= cols_) throw std::out_of_range("column " + std::to_string(col) + " out of range");
    return xWindows_[static_cast<std::size_t>(colClass_[static_cast<std::size_t>(col)])];
}

const std::vector<float>& BlendWeights::rowWeights(int row) const {
    if (row < 0 || row >= static_cast<int>(rowClass_.size()))
        throw std::out_of_range("row " + std::to_string(row) + " out of range");
    return yWindows_[static_cast<std::size_t>(rowClass_[static_cast<std::size_t>(row)])];
}

}  // namespace tessera
