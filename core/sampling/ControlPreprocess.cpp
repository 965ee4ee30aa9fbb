#include "core/sampling/ControlPreprocess.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

namespace tessera {

namespace {

void checkSizes(const Image8& image, int width, int height) {
    if (image.width <= 0 || image.height <= 0 || image.channels <= 0 ||
        image.pixels.size() != static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height) *
                                   static_cast<std::size_t>(image.channels))
        throw std::invalid_argument("resize: the image's size and pixels disagree");
    if (width <= 0 || height <= 0) throw std::invalid_argument("resize: the new size must be positive");
}

Image8 blank(const Image8& like, int width, int height) {
    Image8 out;
    out.width = width;
    out.height = height;
    out.channels = like.channels;
    out.pixels.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                      static_cast<std::size_t>(like.channels));
    return out;
}

// OpenCV's saturate_cast<uchar>(float): cvRound (to nearest, ties to even), then clamped.
std::uint8_t saturate(double v) {
    const double r = std::nearbyint(v);
    return static_cast<std::uint8_t>(std::clamp(r, 0.0, 255.0));
}

// One axis of INTER_AREA (computeResizeAreaTab): for each output cell [d * scale, (d + 1) * scale),
// the input pixels it covers with their share of the cell.
struct AreaWeight {
    int out, in;
    float alpha;
};

std::vector<AreaWeight> areaWeights(int inSize, int outSize) {
    const double scale = static_cast<double>(inSize) / outSize;
    std::vector<AreaWeight> tab;
    for (int d = 0; d < outSize; ++d) {
        const double f1 = d * scale, f2 = f1 + scale;
        const double cell = std::min(scale, inSize - f1);
        int s1 = static_cast<int>(std::ceil(f1)), s2 = static_cast<int>(std::floor(f2));
        s2 = std::min(s2, inSize - 1);
        s1 = std::min(s1, s2);
        if (s1 - f1 > 1e-3) tab.push_back({d, s1 - 1, static_cast<float>((s1 - f1) / cell)});
        for (int s = s1; s < s2; ++s) tab.push_back({d, s, static_cast<float>(1.0 / cell)});
        if (f2 - s2 > 1e-3) tab.push_back({d, s2, static_cast<float>(std::min(std::min(f2 - s2, 1.0), cell) / cell)});
    }
    return tab;
}

// interpolateCubic (a = -0.75) in float, then the 11-bit fixed-point coefficients
// (saturate_cast<short>(c * INTER_RESIZE_COEF_SCALE)).
std::array<int, 4> cubicCoefficients(float x) {
    constexpr float A = -0.75f;
    std::array<float, 4> c{};
    c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
    c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
    c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = 1.f - c[0] - c[1] - c[2];
    std::array<int, 4> fixed{};
    for (std::size_t k = 0; k < 4; ++k) fixed[k] = static_cast<int>(std::nearbyint(c[k] * 2048.0f));
    return fixed;
}

// Per output index: the first input index of the 4 taps (before clamping) and the coefficients.
struct CubicTap {
    int first;
    std::array<int, 4> coeff;
};

std::vector<CubicTap> cubicTaps(int inSize, int outSize) {
    const double scale = 1.0 / (static_cast<double>(outSize) / inSize);
    std::vector<CubicTap> taps(static_cast<std::size_t>(outSize));
    for (int d = 0; d < outSize; ++d) {
        float f = static_cast<float>((d + 0.5) * scale - 0.5);
        const int s = static_cast<int>(std::floor(f));
        f -= static_cast<float>(s);
        taps[static_cast<std::size_t>(d)] = {s - 1, cubicCoefficients(f)};
    }
    return taps;
}

// OpenCV's fast path for whole-number factors (resizeAreaFast_): the box's integer sum, rounded
// half up for 2 x 2 boxes (its SIMD kernel, (a + b + c + d + 2) >> 2), times 1 / area in float and
// rounded half to even otherwise.
Image8 resizeAreaWhole(const Image8& image, int width, int height, int fx, int fy) {
    const int c = image.channels;
    const int area = fx * fy;
    const float scale = 1.f / static_cast<float>(area);
    Image8 out = blank(image, width, height);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
            for (int k = 0; k < c; ++k) {
                int sum = 0;
                for (int j = 0; j < fy; ++j)
                    for (int i = 0; i < fx; ++i)
                        sum +=
                            image.pixels[((static_cast<std::size_t>(y) * fy + j) * image.width + x * fx + i) * c + k];
                out.pixels[(static_cast<std::size_t>(y) * width + x) * c + k] =
                    area == 4 && fx == 2 ? static_cast<std::uint8_t>((sum + 2) >> 2)
                                         : saturate(static_cast<float>(sum) * scale);
            }
    return out;
}

}  // namespace

Image8 resizeArea(const Image8& image, int width, int height) {
    checkSizes(image, width, height);
    if (image.width % width == 0 && image.height % height == 0)
        return resizeAreaWhole(image, width, height, image.width / width, image.height / height);
    const int c = image.channels;
    const std::vector<AreaWeight> xs = areaWeights(image.width, width), ys = areaWeights(image.height, height);
    // Rows first into float sums (OpenCV's buffer is float), then the columns' weights.
    std::vector<float> rows(static_cast<std::size_t>(image.height) * width * c, 0.0f);
    for (int y = 0; y < image.height; ++y)
        for (const AreaWeight& w : xs)
            for (int k = 0; k < c; ++k)
                rows[(static_cast<std::size_t>(y) * width + w.out) * c + k] +=
                    w.alpha * image.pixels[(static_cast<std::size_t>(y) * image.width + w.in) * c + k];
    std::vector<float> sums(static_cast<std::size_t>(height) * width * c, 0.0f);
    for (const AreaWeight& w : ys)
        for (int x = 0; x < width * c; ++x)
            sums[static_cast<std::size_t>(w.out) * width * c + x] +=
                w.alpha * rows[static_cast<std::size_t>(w.in) * width * c + x];
    Image8 out = blank(image, width, height);
    for (std::size_t i = 0; i < sums.size(); ++i) out.pixels[i] = saturate(sums[i]);
    return out;
}

Image8 resizeCubic(const Image8& image, int width, int height) {
    checkSizes(image, width, height);
    const int c = image.channels;
    const std::vector<CubicTap> xs = cubicTaps(image.width, width), ys = cubicTaps(image.height, height);
    const auto clampIndex = [](int i, int size) { return std::clamp(i, 0, size - 1); };
    // Horizontal pass in integers (HResizeCubic), every input row.
    std::vector<int> rows(static_cast<std::size_t>(image.height) * width * c);
    for (int y = 0; y < image.height; ++y)
        for (int x = 0; x < width; ++x) {
            const CubicTap& t = xs[static_cast<std::size_t>(x)];
            for (int k = 0; k < c; ++k) {
                int sum = 0;
                for (std::size_t j = 0; j < 4; ++j) {
                    const int sx = clampIndex(t.first + static_cast<int>(j), image.width);
                    sum += t.coeff[j] * image.pixels[(static_cast<std::size_t>(y) * image.width + sx) * c + k];
                }
                rows[(static_cast<std::size_t>(y) * width + x) * c + k] = sum;
            }
        }
    // Vertical pass (VResizeCubic with FixedPtCast: 22 bits of scale, rounded, saturated).
    Image8 out = blank(image, width, height);
    for (int y = 0; y < height; ++y) {
        const CubicTap& t = ys[static_cast<std::size_t>(y)];
        for (int x = 0; x < width * c; ++x) {
            long long sum = 0;
            for (std::size_t j = 0; j < 4; ++j) {
                const int sy = clampIndex(t.first + static_cast<int>(j), image.height);
                sum += static_cast<long long>(t.coeff[j]) * rows[static_cast<std::size_t>(sy) * width * c + x];
            }
            const long long v = (sum + (1LL << 21)) >> 22;
            out.pixels[static_cast<std::size_t>(y) * width * c + x] =
                static_cast<std::uint8_t>(std::clamp(v, 0LL, 255LL));
        }
    }
    return out;
}

Image8 resizeNearest(const Image8& image, int width, int height) {
    checkSizes(image, width, height);
    const int c = image.channels;
    const double fx = static_cast<double>(image.width) / width, fy = static_cast<double>(image.height) / height;
    Image8 out = blank(image, width, height);
    for (int y = 0; y < height; ++y) {
        const int sy = std::min(static_cast<int>(std::floor(y * fy)), image.height - 1);
        for (int x = 0; x < width; ++x) {
            const int sx = std::min(static_cast<int>(std::floor(x * fx)), image.width - 1);
            for (int k = 0; k < c; ++k)
                out.pixels[(static_cast<std::size_t>(y) * width + x) * c + k] =
                    image.pixels[(static_cast<std::size_t>(sy) * image.width + sx) * c + k];
        }
    }
    return out;
}

std::string_view a1111Name(ControlResizeMode mode) {
    return mode == ControlResizeMode::JustResize ? "Just Resize" : "Crop and Resize";
}

Image8 highQualityResize(const Image8& image, int width, int height, std::string* how) {
    checkSizes(image, width, height);
    const auto say = [how](const char* text) {
        if (how) *how = text;
    };
    if (image.width == width && image.height == height) {
        say("none");
        return image;
    }
    std::unordered_set<std::uint32_t> colours;
    const int c = image.channels;
    for (std::size_t p = 0; p + static_cast<std::size_t>(c) <= image.pixels.size() && colours.size() < 200;
         p += static_cast<std::size_t>(c)) {
        std::uint32_t key = 0;
        for (int k = 0; k < std::min(c, 4); ++k) key = key << 8 | image.pixels[p + static_cast<std::size_t>(k)];
        colours.insert(key);
    }
    if (colours.size() > 2 && colours.size() < 200) {
        say("nearest");
        return resizeNearest(image, width, height);
    }
    if (static_cast<long long>(width) * height < static_cast<long long>(image.width) * image.height) {
        say("area");
        return resizeArea(image, width, height);
    }
    say("cubic");
    return resizeCubic(image, width, height);
}

Image8 detectmapResize(const Image8& image, ControlResizeMode mode, int width, int height, std::string* how) {
    if (mode == ControlResizeMode::JustResize) return highQualityResize(image, width, height, how);
    const double k = std::max(static_cast<double>(height) / image.height, static_cast<double>(width) / image.width);
    // np.round: to nearest, ties to even.
    const int w = static_cast<int>(std::nearbyint(image.width * k)),
              h = static_cast<int>(std::nearbyint(image.height * k));
    const Image8 scaled = highQualityResize(image, w, h, how);
    const int top = std::max(0, (scaled.height - height) / 2), left = std::max(0, (scaled.width - width) / 2);
    if (scaled.height - top < height || scaled.width - left < width)
        throw std::logic_error("detectmapResize: the scaled map does not cover the target");
    Image8 out = blank(image, width, height);
    const int c = image.channels;
    for (int y = 0; y < height; ++y)
        std::copy_n(scaled.pixels.begin() + ((static_cast<std::ptrdiff_t>(top) + y) * scaled.width + left) * c,
                    static_cast<std::ptrdiff_t>(width) * c,
                    out.pixels.begin() + static_cast<std::ptrdiff_t>(y) * width * c);
    return out;
}

Image8 tileResample(const Image8& image, double rate) {
    if (rate < 1.1) return image;
    const int w = static_cast<int>(image.width / rate), h = static_cast<int>(image.height / rate);
    return resizeArea(image, std::max(w, 1), std::max(h, 1));
}

std::vector<float> tileResampleHint(const std::vector<float>& hint, int channels, int height, int width, double rate,
                                    ControlResizeMode mode) {
    if (rate < 1.1) return hint;
    const std::size_t plane = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
    if (channels <= 0 || hint.size() != plane * static_cast<std::size_t>(channels))
        throw std::invalid_argument("tileResampleHint: the hint is not channels x height x width");
    Image8 image;
    image.width = width;
    image.height = height;
    image.channels = channels;
    image.pixels.resize(hint.size());
    for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t k = 0; k < static_cast<std::size_t>(channels); ++k)
            image.pixels[p * channels + k] = saturate(std::clamp(hint[k * plane + p], 0.0f, 1.0f) * 255.0);
    const Image8 back = detectmapResize(tileResample(image, rate), mode, width, height);
    std::vector<float> out(hint.size());
    for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t k = 0; k < static_cast<std::size_t>(channels); ++k)
            out[k * plane + p] = static_cast<float>(back.pixels[p * channels + k]) / 255.0f;
    return out;
}

}  // namespace tessera
