// Heat colours shared by the canvas overlays, the compare view's difference image and the
// charts: one perceptually ordered ramp (dark blue -> purple -> orange -> light yellow, after
// matplotlib's "inferno"/"plasma" family), images of float maps in it, and a legend bar.
#pragma once

#include <QColor>
#include <QImage>
#include <QRect>
#include <QString>

class QPainter;

namespace tessera {

// t in [0, 1] (clamped) -> colour on the ramp.
QColor heatColor(double t);

// A width x height map (row-major floats) as an ARGB32 image, value `low` -> ramp start,
// `high` -> ramp end. alphaFloor < 255 makes low values translucent: alpha grows linearly
// from alphaFloor at `low` to 255 at `high`, so an overlay shows the image where nothing
// happens. high <= low draws everything at the ramp start.
QImage heatImage(const float* values, int width, int height, double low, double high, int alphaFloor = 255);

// The legend: a title, a horizontal colour bar and its scale (low, middle, high) in a
// translucent box whose bottom-left corner is at `anchor` (widget coordinates). Returns the
// box it painted.
QRect drawHeatLegend(QPainter& painter, QPoint anchor, const QString& title, double low, double high,
                     const QString& unit = {});

// Compact number for legends: 3 significant digits, no exponent for everyday ranges.
QString formatScaleValue(double value);

}  // namespace tessera
