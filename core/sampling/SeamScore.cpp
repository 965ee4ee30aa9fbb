#include "core/sampling/SeamScore.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tessera {

namespace {

constexpr double kFlat = 1e-6;  // mean steps below this are a flat image: ratio 1
constexpr int kBand = 3;        // pixels averaged on each side of a line
constexpr int kSegment = 16;    // pixels along a line scored together

// Where neighbouring tiles meet along one axis: the middle of their overlap (where `none` hands
// a pixel from one tile to the next and the smooth windows cross), or the edge without overlap.
// Rolled by `shift` along an axis of `length`, a border at plan position b lies at canvas position
// (b - shift) mod length, and the plan's own edge (0) becomes a border at length - shift.
std::vector<int> borderPositions(const std::vector<int>& starts, int tile, int shift, int length) {
    std::vector<int> out;
    for (std::size_t i = 0; i + 1 < starts.size(); ++i)
        out.push_back(rolledSource((starts[i + 1] + starts[i] + tile) / 2, shift, length));
    if (shift > 0) out.push_back(length - shift);
    std::sort(out.begin(), out.end());
    return out;
}

// The level step across the line at `p` (vertical: between columns p-1 and p) for pixels
// [from, to) along it: |mean of the kBand pixels after - mean of the kBand before|, averaged over
// those pixels and the channels. Averaging bands keeps pixel noise out and keeps what a person
// sees as a seam: a change of tone or structure from one side to the other.
double bandStep(const ImageTensor& im, bool vertical, int p, int from, int to) {
    const std::size_t plane = static_cast<std::size_t>(im.height) * static_cast<std::size_t>(im.width);
    const auto at = [&](const float* base, int across, int along) {
        return static_cast<double>(vertical ? base[static_cast<std::size_t>(along) * im.width + across]
                                            : base[static_cast<std::size_t>(across) * im.width + along]);
    };
    double sum = 0;
    for (int c = 0; c < im.channels; ++c) {
        const float* base = im.data.data() + static_cast<std::size_t>(c) * plane;
        for (int i = from; i < to; ++i) {
            double after = 0, before = 0;
            for (int k = 0; k < kBand; ++k) {
                after += at(base, p + k, i);
                before += at(base, p - 1 - k, i);
            }
            sum += std::fabs(after - before) / kBand;
        }
    }
    return sum / (static_cast<double>(to - from) * im.channels);
}

void scoreAxis(const ImageTensor& im, bool vertical, const std::vector<int>& borders, std::vector<SeamLine>& lines,
               double& worst) {
    const int length = vertical ? im.width : im.height;
    const int along = vertical ? im.height : im.width;
    for (int p : borders) {
        // Reference lines 2 and 3 bands away on both sides, inside the image.
        std::vector<int> references;
        for (int q : {p - 2 * kBand, p + 2 * kBand, p - 3 * kBand, p + 3 * kBand})
            if (q >= kBand && q + kBand <= length) references.push_back(q);
        if (references.empty() || p < kBand || p + kBand > length) continue;
        double lineSum = 0;
        int segments = 0;
        for (int from = 0; from < along; from += kSegment) {
            const int to = std::min(along, from + kSegment);
            double reference = 0;
            for (int q : references) reference += bandStep(im, vertical, q, from, to);
            reference /= static_cast<double>(references.size());
            const double step = bandStep(im, vertical, p, from, to);
            const double ratio = reference < kFlat ? (step < kFlat ? 1.0 : step / kFlat) : step / reference;
            lineSum += ratio;
            worst = std::max(worst, ratio);
            ++segments;
        }
        lines.push_back(SeamLine{vertical, p, lineSum / segments});
    }
}

}  // namespace

SeamScore seamScore(const ImageTensor& image, const TilePlan& plan, CanvasShift shift) {
    SeamScore out;
    if (image.channels < 1 || image.width != plan.width() || image.height != plan.height()) return out;
    if (shift.dx < 0 || shift.dy < 0 || shift.dx >= plan.width() || shift.dy >= plan.height()) return out;
    scoreAxis(image, true, borderPositions(plan.columnPositions(), plan.tileW(), shift.dx, plan.width()), out.lines,
              out.worst);
    scoreAxis(image, false, borderPositions(plan.rowPositions(), plan.tileH(), shift.dy, plan.height()), out.lines,
              out.worst);
    if (out.lines.empty()) {
        out.worst = -1;
        return out;
    }
    double weighted = 0, total = 0;
    for (const SeamLine& line : out.lines) {
        const double length = line.vertical ? image.height : image.width;
        weighted += line.ratio * length;
        total += length;
    }
    out.score = weighted / total;
    return out;
}

}  // namespace tessera
