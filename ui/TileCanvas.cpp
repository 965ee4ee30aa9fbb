#include "ui/TileCanvas.h"

#include <algorithm>
#include <cmath>

#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>

namespace tessera {

namespace {

constexpr double kMinZoom = 1.0 / 32.0;
constexpr double kMaxZoom = 64.0;
constexpr int kFitMargin = 12;

const QColor kBackground(0x26, 0x28, 0x2b);
const QColor kEmptyImage(0x3a, 0x3d, 0x42);
const QColor kGridLine(255, 255, 255, 170);
const QColor kGridHalo(0, 0, 0, 90);
const QColor kOverlapBand(90, 170, 255, 56);
const QColor kActiveFill(255, 160, 40, 70);
const QColor kActiveEdge(255, 170, 50);

}  // namespace

TileCanvas::TileCanvas(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("tileCanvas"));
    setMouseTracking(false);
    setFocusPolicy(Qt::WheelFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMinimumSize(240, 200);
    setCursor(Qt::OpenHandCursor);
}

void TileCanvas::setPlan(std::optional<TilePlan> plan) {
    const QSize before = contentSize();
    plan_ = std::move(plan);
    active_.clear();
    if (fitting_ || contentSize() != before) applyFit();
    update();
}

void TileCanvas::setImage(const QImage& image) {
    const QSize before = contentSize();
    image_ = image;
    if (contentSize() != before) applyFit();
    update();
}

void TileCanvas::setActiveTiles(std::vector<int> ids) {
    active_ = std::move(ids);
    update();
}

void TileCanvas::setPlaceholderText(const QString& text) {
    placeholder_ = text;
    update();
}

void TileCanvas::setOverlayVisible(bool visible) {
    overlay_ = visible;
    update();
}

QSize TileCanvas::contentSize() const {
    if (plan_) return {plan_->width(), plan_->height()};
    return image_.size();
}

void TileCanvas::fitToView() {
    fitting_ = true;
    applyFit();
    update();
}

void TileCanvas::applyFit() {
    if (!fitting_) {
        // A new size while the user holds the view: keep the zoom, re-centre.
        const QSize content = contentSize();
        offset_ = QPointF((width() - content.width() * zoom_) / 2.0, (height() - content.height() * zoom_) / 2.0);
        return;
    }
    const QSize content = contentSize();
    if (content.isEmpty()) return;
    const double sx = (width() - 2.0 * kFitMargin) / content.width();
    const double sy = (height() - 2.0 * kFitMargin) / content.height();
    zoom_ = std::clamp(std::min(sx, sy), kMinZoom, kMaxZoom);
    offset_ = QPointF((width() - content.width() * zoom_) / 2.0, (height() - content.height() * zoom_) / 2.0);
}

void TileCanvas::showActualSize() {
    fitting_ = false;
    zoom_ = 1.0;
    applyFit();
    update();
}

void TileCanvas::zoomAbout(double factor, QPointF anchor) {
    const double next = std::clamp(zoom_ * factor, kMinZoom, kMaxZoom);
    // Keep the image point under the cursor where it is.
    const QPointF imagePoint = (anchor - offset_) / zoom_;
    zoom_ = next;
    offset_ = anchor - imagePoint * zoom_;
    fitting_ = false;
    update();
}

QRectF TileCanvas::tileRect(int id) const {
    if (!plan_ || id < 0 || id >= plan_->count()) return {};
    const TileRect& t = plan_->tile(id);
    return QRectF(t.x, t.y, t.w, t.h);
}

void TileCanvas::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    painter.fillRect(rect(), kBackground);
    const QSize content = contentSize();
    if (content.isEmpty()) {
        painter.setPen(palette().color(QPalette::Mid));
        painter.drawText(rect(), Qt::AlignCenter, tr("Fix the settings to see the tile plan"));
        return;
    }

    painter.save();
    painter.translate(offset_);
    painter.scale(zoom_, zoom_);
    const QRectF imageRect(QPointF(0, 0), QSizeF(content));
    if (image_.isNull()) {
        painter.fillRect(imageRect, kEmptyImage);
    } else {
        // Smooth when shrinking, crisp pixels when zoomed in to inspect seams.
        painter.setRenderHint(QPainter::SmoothPixmapTransform, zoom_ < 2.0);
        painter.drawImage(imageRect, image_);
    }

    if (overlay_ && plan_) {
        const std::vector<int>& xs = plan_->columnPositions();
        const std::vector<int>& ys = plan_->rowPositions();
        const int tw = plan_->tileW(), th = plan_->tileH();
        // Overlap bands: where consecutive columns/rows share pixels, i.e. where blending happens.
        for (std::size_t c = 0; c + 1 < xs.size(); ++c) {
            const int from = xs[c + 1], to = xs[c] + tw;
            if (to > from) painter.fillRect(QRectF(from, 0, to - from, content.height()), kOverlapBand);
        }
        for (std::size_t r = 0; r + 1 < ys.size(); ++r) {
            const int from = ys[r + 1], to = ys[r] + th;
            if (to > from) painter.fillRect(QRectF(0, from, content.width(), to - from), kOverlapBand);
        }
        // Tile edges, as lines across the image (cheap for thousands of tiles): a dark halo
        // under a light line, so the grid reads over bright, dark and noisy images alike.
        QVector<QLineF> edges;
        for (int x : xs) {
            edges << QLineF(x, 0, x, content.height()) << QLineF(x + tw, 0, x + tw, content.height());
        }
        for (int y : ys) {
            edges << QLineF(0, y, content.width(), y) << QLineF(0, y + th, content.width(), y + th);
        }
        QPen halo(kGridHalo, 3.0);
        halo.setCosmetic(true);
        painter.setPen(halo);
        painter.drawLines(edges);
        painter.setPen(QPen(kGridLine, 0));  // cosmetic: one screen pixel at any zoom
        painter.drawLines(edges);
    }
    if (plan_ && !active_.empty()) {
        QPen edge(kActiveEdge, 3.0);
        edge.setCosmetic(true);
        painter.setPen(edge);
        painter.setBrush(kActiveFill);
        for (int id : active_) {
            const QRectF r = tileRect(id);
            if (!r.isEmpty()) painter.drawRect(r);
        }
    }
    painter.restore();

    if (image_.isNull()) {
        painter.setPen(QColor(200, 200, 200));
        const QRectF shown(offset_, QSizeF(content) * zoom_);
        painter.drawText(shown.intersected(QRectF(rect())), Qt::AlignCenter | Qt::TextWordWrap,
                         placeholder_.isEmpty()
                             ? tr("%1 × %2 px — press Run").arg(content.width()).arg(content.height())
                             : placeholder_);
    }
    // Zoom readout in the corner.
    const QString zoomText = QStringLiteral("%1%").arg(std::lround(zoom_ * 100.0));
    painter.setPen(QColor(220, 220, 220));
    painter.drawText(rect().adjusted(8, 6, -8, -6), Qt::AlignRight | Qt::AlignBottom, zoomText);
}

void TileCanvas::wheelEvent(QWheelEvent* event) {
    const double notches = event->angleDelta().y() / 120.0;
    if (notches == 0.0) return;
    zoomAbout(std::pow(1.25, notches), event->position());
    event->accept();
}

void TileCanvas::mousePressEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton || event->button() == Qt::MiddleButton) {
        dragFrom_ = event->position();
        setCursor(Qt::ClosedHandCursor);
        event->accept();
    }
}

void TileCanvas::mouseMoveEvent(QMouseEvent* event) {
    if (!dragFrom_) return;
    offset_ += event->position() - *dragFrom_;
    dragFrom_ = event->position();
    fitting_ = false;
    update();
}

void TileCanvas::mouseReleaseEvent(QMouseEvent*) {
    dragFrom_.reset();
    setCursor(Qt::OpenHandCursor);
}

void TileCanvas::mouseDoubleClickEvent(QMouseEvent*) { fitToView(); }

void TileCanvas::resizeEvent(QResizeEvent*) {
    if (fitting_) applyFit();
}

}  // namespace tessera
