// Where the charts' legends go: in a row of their own above the plot, entries side by side, so
// a legend never covers data (QCustomPlot's default puts it inside the axis rect).
#pragma once

#include <QFont>
#include <QMargins>

#include <qcustomplot.h>

namespace tessera {

// Moves `plot`'s legend from its first axis rect's inset into a new top row of the plot
// layout (the axis rect moves to row 1) and shows it.
inline void placeLegendAbove(QCustomPlot* plot) {
    plot->axisRect()->insetLayout()->take(plot->legend);
    plot->plotLayout()->insertRow(0);
    plot->plotLayout()->addElement(0, 0, plot->legend);
    plot->plotLayout()->setRowStretchFactor(0, 0.001);
    plot->plotLayout()->setRowSpacing(0);
    plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot->legend->setFont(QFont(plot->font().family(), 8));
    plot->legend->setBorderPen(Qt::NoPen);
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setMargins(QMargins(0, 0, 0, 0));
    plot->legend->setVisible(true);
}

}  // namespace tessera
