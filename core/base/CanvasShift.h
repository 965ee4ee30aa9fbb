// CanvasShift: the rolled canvas of SpotDiffusion's shifted tiles (RunConfig::tileShift). Step k lays
// the pass's tile plan over the canvas rolled by (dy, dx), torch.roll's sense (ComfyUI-TiledDiffusion's
// SpotDiffusion rolls the latent before tiling and back after): the plan's pixel (y, x) is the
// canvas's pixel ((y - dy) mod H, (x - dx) mod W). A tile that crosses the canvas's right or bottom
// edge so takes the pixels of the other side, and the borders between tiles sit somewhere else in
// the image every step. The blend weights and their normalizer stay in plan coordinates, the
// canvases (latents, noise, x0, history, accumulators, seam sums) in canvas coordinates, so the
// noise of a canvas pixel does not depend on the shift. Qt-free; the mapping is shared with the
// CUDA kernels; the shifts themselves are tileShifts' (core/sampling/TilePlan.h).
#pragma once

#include "core/base/HostDevice.h"

namespace tessera {

struct CanvasShift {
    int dy = 0, dx = 0;  // 0 <= dy < height, 0 <= dx < width
};
// Spelled out: the CUDA sources compile as C++17 (no defaulted comparisons).
TESSERA_HD bool operator==(CanvasShift a, CanvasShift b) { return a.dy == b.dy && a.dx == b.dx; }
TESSERA_HD bool operator!=(CanvasShift a, CanvasShift b) { return !(a == b); }

// Along an axis of `length` rolled by `shift` (both coordinates in [0, length), 0 <= shift < length):
// the canvas coordinate under plan coordinate f, and the plan coordinate over canvas coordinate p.
TESSERA_HD int rolledSource(int f, int shift, int length) {
    const int v = f - shift;
    return v < 0 ? v + length : v;
}
TESSERA_HD int rolledPlace(int p, int shift, int length) {
    const int v = p + shift;
    return v >= length ? v - length : v;
}

}  // namespace tessera
