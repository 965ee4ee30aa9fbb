// The CPU backend's colour fix (core/cpu/CpuOps.h colorFix): sd-webui-controlnet's tile_colorfix
// correction of a UNet output (scripts/hook.py, UnetHook.hook.forward, "Post-processing for color
// fix", with its predict_start_from_noise, predict_noise_from_start and blur), in double per plane.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/CpuOps.h"

namespace tessera {
namespace cpu {

namespace {

// out = the mean of the (2k + 1)^2 box around each pixel of the h x w plane v, pixels beyond the
// edge replicating it (F.pad(mode="replicate") then F.avg_pool2d, stride 1). The box's sum is
// separable: the clamped row sums, then the clamped column sums of those.
void boxBlur(const std::vector<double>& v, int h, int w, int k, std::vector<double>& rows, std::vector<double>& out) {
    rows.assign(v.size(), 0.0);
    out.assign(v.size(), 0.0);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            double s = 0.0;
            for (int d = -k; d <= k; ++d) s += v[static_cast<std::size_t>(y) * w + std::clamp(x + d, 0, w - 1)];
            rows[static_cast<std::size_t>(y) * w + x] = s;
        }
    const double n = static_cast<double>(2 * k + 1) * (2 * k + 1);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            double s = 0.0;
            for (int d = -k; d <= k; ++d) s += rows[static_cast<std::size_t>(std::clamp(y + d, 0, h - 1)) * w + x];
            out[static_cast<std::size_t>(y) * w + x] = s / n;
        }
}

}  // namespace

int colorFixTimestep(float timestep, int tableSize) {
    // torch.round (half to even) then .long(); indices beyond the table clamp to it.
    const double t = std::nearbyint(static_cast<double>(timestep));
    return static_cast<int>(std::clamp(t, 0.0, static_cast<double>(tableSize - 1)));
}

void colorFix(WorkerPool& pool, const ColorFixShape& s, const float* eps, const float* xt, const float* latent,
              const float* timesteps, const float* condMark, const float* table, float* y) {
    const std::size_t plane = static_cast<std::size_t>(s.h) * s.w;
    pool.parallelFor(std::int64_t(s.batch) * s.channels, [&](std::int64_t task) {
        const auto b = static_cast<std::size_t>(task / s.channels);
        const std::size_t at = static_cast<std::size_t>(task) * plane;
        const int t = colorFixTimestep(timesteps[b], s.tableSize);
        const double a = table[t], r = table[s.tableSize + t];  // sqrt(1 / abar), sqrt(1 / abar - 1)
        const double mark = 1.0 + static_cast<double>(condMark[2 * b]);
        std::vector<double> x0(plane), z(plane), rows, blurred, blurredZ;
        for (std::size_t i = 0; i < plane; ++i) {
            x0[i] = a * xt[at + i] - r * eps[at + i];
            z[i] = latent[at + i];
        }
        boxBlur(x0, s.h, s.w, s.radius, rows, blurred);
        boxBlur(z, s.h, s.w, s.radius, rows, blurredZ);
        for (std::size_t i = 0; i < plane; ++i) x0[i] = x0[i] - blurred[i] + blurredZ[i];
        if (s.sharpness >= 0.0f) {
            const double d = s.sharpness;
            boxBlur(x0, s.h, s.w, s.radius, rows, blurred);
            for (std::size_t i = 0; i < plane; ++i) {
                const double negative = d * blurred[i] + (1.0 - d) * x0[i];
                x0[i] = mark * x0[i] + (1.0 - mark) * negative;
            }
        }
        const double w = s.weight;
        for (std::size_t i = 0; i < plane; ++i) {
            const double fixed = (a * xt[at + i] - x0[i]) / r;
            y[at + i] = static_cast<float>(fixed * w + static_cast<double>(eps[at + i]) * (1.0 - w));
        }
    });
}

}  // namespace cpu
}  // namespace tessera
