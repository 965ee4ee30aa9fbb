#include "ui/HeatMap.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <QFontMetrics>
#include <QLinearGradient>
#include <QPainter>

namespace tessera {

namespace {

struct Stop {
    double t;
    int r, g, b;
};

// Sampled from matplotlib's "inferno" at 0, 1/6, ... 1; linear in between is close enough
// for an overlay and keeps the ramp monotonic in lightness (reads in grey print too).
constexpr std::array<Stop, 7> kStops{{{0.0, 0, 0, 4},
                                      {1.0 / 6, 40, 11, 84},
                                      {2.0 / 6, 101, 21, 110},
                                      {3.0 / 6, 159, 42, 99},
                                      {4.0 / 6, 212, 72, 66},
                                      {5.0 / 6, 245, 125, 21},
                                      {1.0, 252, 255, 164}}};

}  // namespace

QColor heatColor(double t) {
    if (!(t > 0)) t = 0;  // also NaN
    t = std::min(t, 1.0);
    for (std::size_t i = 1; i < kStops.size(); ++i) {
        if (t <= kStops[i].t) {
            const Stop& a = kStops[i - 1];
            const Stop& b = kStops[i];
            const double f = (t - a.t) / (b.t - a.t);
            return QColor(static_cast<int>(std::lround(a.r + f * (b.r - a.r))),
                          static_cast<int>(std::lround(a.g + f * (b.g - a.g))),
                          static_cast<int>(std::lround(a.b + f * (b.b - a.b))));
        }
    }
    return QColor(kStops.back().r, kStops.back().g, kStops.back().b);
}

QImage heatImage(const float* values, int width, int height, double low, double high, int alphaFloor) {
    if (!values || width <= 0 || height <= 0) return {};
    // A lookup table: maps can have tens of millions of pixels.
    constexpr int kLevels = 256;
    std::array<QRgb, kLevels> table{};
    alphaFloor = std::clamp(alphaFloor, 0, 255);
    for (int i = 0; i < kLevels; ++i) {
        const double t = i / double(kLevels - 1);
        const QColor c = heatColor(t);
        const int alpha = alphaFloor + static_cast<int>(std::lround(t * (255 - alphaFloor)));
        table[static_cast<std::size_t>(i)] = qPremultiply(qRgba(c.red(), c.green(), c.blue(), alpha));
    }
    const double span = high - low;
    QImage image(width, height, QImage::Format_ARGB32_Premultiplied);
    for (int y = 0; y < height; ++y) {
        auto* line = reinterpret_cast<QRgb*>(image.scanLine(y));
        const float* row = values + static_cast<std::size_t>(y) * static_cast<std::size_t>(width);
        for (int x = 0; x < width; ++x) {
            const double t = span > 0 ? (row[x] - low) / span : 0.0;
            const int level = t > 0 ? static_cast<int>(std::min(t, 1.0) * (kLevels - 1) + 0.5) : 0;
            line[x] = table[static_cast<std::size_t>(level)];
        }
    }
    return image;
}

QString formatScaleValue(double value) {
    if (value == 0) return QStringLiteral("0");
    const double magnitude = std::fabs(value);
    if (magnitude >= 1e5 || magnitude < 1e-3) return QString::number(value, 'e', 2);
    return QString::number(value, 'g', 3);
}

QRect drawHeatLegend(QPainter& painter, QPoint anchor, const QString& title, double low, double high,
                     const QString& unit) {
    painter.save();
    const QFontMetrics metrics(painter.font());
    constexpr int kBarW = 180, kBarH = 10, kPad = 6;
    const QString lowText = formatScaleValue(low) + unit;
    const QString midText = formatScaleValue((low + high) / 2) + unit;
    const QString highText = formatScaleValue(high) + unit;
    const int width = std::max(kBarW, metrics.horizontalAdvance(title)) + 2 * kPad;
    const int height = kPad + metrics.height() + 3 + kBarH + 2 + metrics.height() + kPad;
    const QRect box(anchor.x(), anchor.y() - height, width, height);
    painter.setPen(Qt::NoPen);
    painter.setBrush(QColor(20, 20, 24, 200));
    painter.drawRoundedRect(box, 4, 4);

    painter.setPen(QColor(235, 235, 235));
    const QRect titleRect(box.left() + kPad, box.top() + kPad, width - 2 * kPad, metrics.height());
    painter.drawText(titleRect, Qt::AlignLeft | Qt::AlignVCenter, title);

    const QRect bar(box.left() + kPad, titleRect.bottom() + 4, kBarW, kBarH);
    QLinearGradient gradient(bar.topLeft(), bar.topRight());
    for (int i = 0; i <= 12; ++i) gradient.setColorAt(i / 12.0, heatColor(i / 12.0));
    painter.fillRect(bar, gradient);
    painter.setPen(QColor(235, 235, 235, 120));
    painter.setBrush(Qt::NoBrush);
    painter.drawRect(bar.adjusted(0, 0, -1, -1));

    painter.setPen(QColor(235, 235, 235));
    const QRect labels(bar.left(), bar.bottom() + 3, kBarW, metrics.height());
    painter.drawText(labels, Qt::AlignLeft | Qt::AlignVCenter, lowText);
    painter.drawText(labels, Qt::AlignHCenter | Qt::AlignVCenter, midText);
    painter.drawText(labels, Qt::AlignRight | Qt::AlignVCenter, highText);
    painter.restore();
    return box;
}

}  // namespace tessera
