// How the CUDA suites compare a backend's output with the CPU reference: relative L2 over the
// output below `tol`, and the largest absolute difference at most 10 x tol x the largest
// reference magnitude; every output finite. Header-only (not a suite: no tst_ prefix).
#pragma once

#include <QString>
#include <QtGlobal>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/run/Engine.h"
#include "core/run/RunConfig.h"
#include "core/sampling/ImageOps.h"

namespace tessera::testing {

// PSNR in dB of two model-space images as 8-bit RGB (what their PNGs hold); 99 when equal, 0 when
// their sizes differ.
inline double psnr8(const ImageTensor& a, const ImageTensor& b) {
    const Rgb8Image x = toRgb8(a), y = toRgb8(b);
    if (x.pixels.size() != y.pixels.size() || x.pixels.empty()) return 0;
    double se = 0;
    for (std::size_t i = 0; i < x.pixels.size(); ++i) {
        const double d = static_cast<double>(x.pixels[i]) - y.pixels[i];
        se += d * d;
    }
    const double mse = se / static_cast<double>(x.pixels.size());
    return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

inline const char* precisionName(Precision p) {
    return p == Precision::FP32 ? "fp32" : (p == Precision::FP16 ? "fp16" : "bf16");
}

// The per-op tolerances of tests/cuda/tst_backendops.cpp (its header says why).
inline double opTolerance(Precision p) { return p == Precision::FP32 ? 2e-5 : (p == Precision::FP16 ? 4e-3 : 3e-2); }

// Empty when `out` matches `ref` within `tol`, else what is wrong (prefixed by `what`). With
// `log`, the measures are printed (qInfo) either way.
inline QString outputMismatch(const std::vector<float>& ref, const std::vector<float>& out, double tol,
                              const QString& what, bool log = false) {
    double num = 0, den = 0, maxAbs = 0, maxRef = 0;
    long long nonFinite = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        const double r = ref[i], d = double(out[i]) - r;
        if (!std::isfinite(out[i])) ++nonFinite;
        num += d * d;
        den += r * r;
        maxAbs = std::max(maxAbs, std::abs(d));
        maxRef = std::max(maxRef, std::abs(r));
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    if (log)
        qInfo("%s: relative L2 %.3e, max |d| %.3e (max |ref| %.3e), tolerance %.0e", qPrintable(what), rel, maxAbs,
              maxRef, tol);
    if (nonFinite)
        return QString("%1: %2 of %3 outputs not finite (unwritten?)").arg(what).arg(nonFinite).arg(out.size());
    if (!(rel < tol)) return QString("%1: relative L2 %2 exceeds %3").arg(what).arg(rel).arg(tol);
    if (!(maxAbs <= 10 * tol * maxRef))
        return QString("%1: max |d| %2 exceeds %3 x max |ref| %4").arg(what).arg(maxAbs).arg(10 * tol).arg(maxRef);
    return {};
}

}  // namespace tessera::testing
