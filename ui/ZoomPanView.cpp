#include "ui/ZoomPanView.h"

#include <algorithm>
#include <cmath>

#include <QMouseEvent>
#include <QWheelEvent>

namespace tessera {

ZoomPanView::ZoomPanView(QSize fitMargin, QWidget* parent) : QWidget(parent), fitMargin_(fitMargin) {
    setCursor(Qt::OpenHandCursor);
}

QPointF ZoomPanView::contentOrigin() const { return QPointF(width() / 2.0, height() / 2.0) - centre_ * zoom_; }

void ZoomPanView::setView(double zoom, QPointF centre) {
    zoom_ = std::clamp(zoom, kMinZoom, kMaxZoom);
    centre_ = centre;
    fitting_ = false;
    update();
}

void ZoomPanView::fitToView() {
    fitting_ = true;
    applyFit();
    update();
}

void ZoomPanView::showActualSize() {
    fitting_ = false;
    zoom_ = 1.0;
    centreContent();
    update();
}

void ZoomPanView::contentSizeChanged(QSize before) {
    if (fitting_)
        applyFit();
    else if (contentSize() != before)
        centreContent();
    update();
}

void ZoomPanView::centreContent() {
    const QSize content = contentSize();
    centre_ = QPointF(content.width() / 2.0, content.height() / 2.0);
}

void ZoomPanView::applyFit() {
    const QSize content = contentSize();
    if (content.isEmpty()) return;
    const double sx = (width() - fitMargin_.width()) / static_cast<double>(content.width());
    const double sy = (height() - fitMargin_.height()) / static_cast<double>(content.height());
    zoom_ = std::clamp(std::min(sx, sy), kMinZoom, kMaxZoom);
    centreContent();
}

void ZoomPanView::wheelEvent(QWheelEvent* event) {
    const double notches = event->angleDelta().y() / 120.0;
    if (notches == 0.0 || contentSize().isEmpty()) return;
    // The content point under the cursor stays under it.
    const QPointF fromCentre = event->position() - QPointF(width() / 2.0, height() / 2.0);
    const QPointF anchor = centre_ + fromCentre / zoom_;
    const double next = std::clamp(zoom_ * std::pow(1.25, notches), kMinZoom, kMaxZoom);
    setView(next, anchor - fromCentre / next);
    emit viewChanged(zoom_, centre_);
    event->accept();
}

void ZoomPanView::mousePressEvent(QMouseEvent* event) {
    if (event->button() != Qt::LeftButton && event->button() != Qt::MiddleButton) return;
    panFrom_ = event->position();
    setCursor(Qt::ClosedHandCursor);
    event->accept();
}

void ZoomPanView::mouseMoveEvent(QMouseEvent* event) {
    if (!panFrom_) return;
    setView(zoom_, centre_ - (event->position() - *panFrom_) / zoom_);
    panFrom_ = event->position();
    emit viewChanged(zoom_, centre_);
}

void ZoomPanView::mouseReleaseEvent(QMouseEvent*) {
    panFrom_.reset();
    setCursor(Qt::OpenHandCursor);
}

void ZoomPanView::mouseDoubleClickEvent(QMouseEvent*) {
    fitToView();
    emit viewChanged(zoom_, centre_);
}

void ZoomPanView::resizeEvent(QResizeEvent*) {
    if (fitting_) applyFit();
}

}  // namespace tessera
