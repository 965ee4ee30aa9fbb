// Where the charts' legends go: in a row of their own above the plot, entries side by side, so
// a legend never covers data (QCustomPlot's default puts it inside the axis rect).
#pragma once

#include <QFont>
#include <QMargins>

#include <qcustomplot.h>

namespace tessera {

// At most this many entries side by side; more wrap to a second row (the charts dock is about
// 350 px wide: four entries in one row were cut short).
constexpr int kLegendColumns = 3;

// Moves `plot`'s legend from its first axis rect's inset into a new top row of the plot
// layout (the axis rect moves to row 1) and shows it.
inline void placeLegendAbove(QCustomPlot* plot) {
    plot->axisRect()->insetLayout()->take(plot->legend);
    plot->plotLayout()->insertRow(0);
    plot->plotLayout()->addElement(0, 0, plot->legend);
    plot->plotLayout()->setRowStretchFactor(0, 0.001);
    plot->plotLayout()->setRowSpacing(0);
    plot->legend->setWrap(kLegendColumns);
    plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot->legend->setIconSize(20, 10);
    plot->legend->setFont(QFont(plot->font().family(), 8));
    plot->legend->setBorderPen(Qt::NoPen);
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setMargins(QMargins(0, 0, 0, 0));
    plot->legend->setVisible(true);
}

// Lays the legend's entries out again after some were added or removed (QCustomPlot appends and
// removes cells without re-wrapping the others).
inline void reflowLegend(QCustomPlot* plot) { plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true); }

}  // namespace tessera
