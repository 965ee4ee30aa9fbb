// SeamScore: how visible the tile borders are in a finished image, measured on the image itself
// (not the disagreement of overlapping tiles, which reads 0 for `none`, whose hard block edges are
// plainly visible).
//
// Lines are where neighbouring tiles meet: the middle of their overlap (where `none` hands a
// pixel from one tile to the next and smooth windows cross over), the shared edge without
// overlap. Along each line, in segments of 16 pixels, the step in level across it (the mean of 3
// pixels on one side against the 3 on the other) is divided by the same step measured 6 and 9
// pixels away on both sides: the image's own statistics there. 1.0 means the border cannot be told
// from the image around it; 2.0 means the change across it is twice what the image does nearby.
// The score is the mean over lines (weighted by length) of their segments' mean ratio; `worst`
// is the largest segment ratio.
// Qt-free.
#pragma once

#include <vector>

#include "core/base/CanvasShift.h"
#include "core/run/Engine.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

struct SeamLine {
    bool vertical = true;  // a vertical line between columns position-1 and position
    int position = 0;
    double ratio = 1.0;  // mean over its segments of: step across the line / step near it
};

struct SeamScore {
    double score = -1;  // -1: no border lines (one tile), or an image too small to measure
    double worst = -1;  // the most visible 16-pixel segment of any line
    std::vector<SeamLine> lines;
};

// `plan` in the image's pixels (for a latent run: the plan of the image, not of the latents). With
// shifted tiles (core/base/CanvasShift.h), `shift` (image pixels) of the step that made the
// image: the lines are the plan's borders rolled by it, and the line where the rolled canvas wraps.
SeamScore seamScore(const ImageTensor& image, const TilePlan& plan, CanvasShift shift = {});

}  // namespace tessera
