#include "ui/TileCanvas.h"

#include <algorithm>
#include <cmath>

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QMimeData>
#include <QMouseEvent>
#include <QPainter>
#include <QUrl>

#include "ui/HeatMap.h"

namespace tessera {

namespace {

// Widget pixels left free on each side of the fitted canvas.
constexpr int kFitMargin = 12;

const QColor kBackground(0x26, 0x28, 0x2b);
const QColor kEmptyImage(0x3a, 0x3d, 0x42);
const QColor kGridLine(255, 255, 255, 170);
const QColor kGridHalo(0, 0, 0, 90);
const QColor kOverlapBand(90, 170, 255, 56);
const QColor kActiveFill(255, 160, 40, 70);
const QColor kActiveEdge(255, 170, 50);
// The split handle is grabbed within this many widget pixels of the line.
constexpr double kSplitGrab = 8.0;

}  // namespace

QString droppedImageFile(const QMimeData* mime) {
    const QList<QUrl> urls = mime->urls();
    if (urls.size() != 1 || !urls.front().isLocalFile()) return {};
    const QString path = urls.front().toLocalFile();
    const QString suffix = QFileInfo(path).suffix().toLower();
    return suffix == QLatin1String("png") || suffix == QLatin1String("jpg") || suffix == QLatin1String("jpeg")
               ? path
               : QString();
}

TileCanvas::TileCanvas(QWidget* parent) : ZoomPanView(QSize(2 * kFitMargin, 2 * kFitMargin), parent) {
    setObjectName(QStringLiteral("tileCanvas"));
    setMouseTracking(true);  // the blend overlay follows the cursor
    setFocusPolicy(Qt::WheelFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMinimumSize(240, 200);
    setAcceptDrops(true);
}

bool TileCanvas::imageMatchesPlan() const { return !plan_ || image_.isNull() || image_.size() == contentSize(); }

void TileCanvas::setBeforeImage(const QImage& image) {
    before_ = image;
    update();
}

void TileCanvas::setBeforeAfterLabels(const QString& before, const QString& after) {
    beforeLabel_ = before;
    afterLabel_ = after;
    update();
}

void TileCanvas::setBeforeAfterVisible(bool visible) {
    beforeAfter_ = visible;
    // At 1:1, centred: the pixels themselves are what a before/after comparison is about.
    if (isBeforeAfterShown()) showActualSize();
    update();
}

void TileCanvas::setSplitPosition(double fraction) {
    split_ = std::clamp(fraction, 0.0, 1.0);
    update();
}

double TileCanvas::splitX() const { return contentOrigin().x() + split_ * contentSize().width() * zoom(); }

bool TileCanvas::nearSplit(QPointF p) const { return isBeforeAfterShown() && std::abs(p.x() - splitX()) <= kSplitGrab; }

void TileCanvas::dragEnterEvent(QDragEnterEvent* event) {
    if (!droppedImageFile(event->mimeData()).isEmpty())
        event->acceptProposedAction();
    else
        event->ignore();  // the window takes presets, manifests and run PNGs elsewhere
}

void TileCanvas::dropEvent(QDropEvent* event) {
    const QString path = droppedImageFile(event->mimeData());
    if (path.isEmpty()) return event->ignore();
    event->acceptProposedAction();
    emit imageDropped(path);
}

void TileCanvas::setPlan(std::optional<TilePlan> plan) {
    const QSize before = contentSize();
    // The same plan again (the settings re-applied after a run) keeps the shift of the last step shown:
    // the seam map kept with it measured those borders.
    const bool same = plan_ && plan && plan_->width() == plan->width() && plan_->height() == plan->height() &&
                      plan_->tiles() == plan->tiles();
    plan_ = std::move(plan);
    active_.clear();
    if (!same) shift_ = {};
    hovered_ = -1;
    invalidateBlend();
    // A seam map of another size belongs to another plan.
    if (!seamImage_.isNull() && seamImage_.size() != contentSize()) setSeamMap({});
    contentSizeChanged(before);
}

void TileCanvas::setImage(const QImage& image) {
    const QSize before = contentSize();
    image_ = image;
    contentSizeChanged(before);
}

void TileCanvas::setActiveTiles(std::vector<int> ids) {
    active_ = std::move(ids);
    update();
}

void TileCanvas::setTileShift(CanvasShift shift) {
    if (shift == shift_) return;
    shift_ = shift;
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

void TileCanvas::setBlendOverlayVisible(bool visible) {
    blendOverlay_ = visible;
    update();
}

void TileCanvas::setSeamOverlayVisible(bool visible) {
    seamOverlay_ = visible;
    update();
}

bool TileCanvas::isOverlayEnabled(CanvasOverlay overlay) const {
    switch (overlay) {
        case CanvasOverlay::TileGrid:
            return overlay_;
        case CanvasOverlay::BlendWeights:
            return blendOverlay_;
        case CanvasOverlay::SeamMap:
            return seamOverlay_;
    }
    return false;
}

void TileCanvas::setOverlayEnabled(CanvasOverlay overlay, bool enabled) {
    switch (overlay) {
        case CanvasOverlay::TileGrid:
            setOverlayVisible(enabled);
            break;
        case CanvasOverlay::BlendWeights:
            setBlendOverlayVisible(enabled);
            break;
        case CanvasOverlay::SeamMap:
            setSeamOverlayVisible(enabled);
            break;
    }
}

void TileCanvas::setBlendWindow(BlendWindowKind kind) {
    if (kind == window_) return;
    window_ = kind;
    invalidateBlend();
    update();
}

void TileCanvas::invalidateBlend() {
    weights_.reset();
    blendImage_ = {};
    blendImageTile_ = -2;
}

void TileCanvas::setSeamMap(const ImageTensor& map) {
    seamImage_ = {};
    seamMax_ = 0;
    if (!map.data.empty() && map.channels == 1 &&
        map.data.size() == static_cast<std::size_t>(map.width) * static_cast<std::size_t>(map.height)) {
        for (float v : map.data) seamMax_ = std::max(seamMax_, static_cast<double>(v));
        // Low disagreement stays see-through, so the image shows where tiles agree.
        seamImage_ = heatImage(map.data.data(), map.width, map.height, 0.0, seamMax_, 70);
    }
    update();
}

void TileCanvas::setHoveredTile(int id) {
    if (!plan_ || id < 0 || id >= plan_->count()) id = -1;
    if (id == hovered_) return;
    hovered_ = id;
    if (blendOverlay_) update();
}

const BlendWeights* TileCanvas::blendWeights() const {
    if (!plan_) return nullptr;
    if (!weights_) {
        try {
            weights_ = std::make_unique<BlendWeights>(*plan_, window_, plan_->overlap());
        } catch (const std::exception&) {
            return nullptr;  // a plan the window cannot weigh: no overlay rather than a crash
        }
    }
    return weights_.get();
}

int TileCanvas::tileAt(QPointF p) const {
    if (!plan_) return -1;
    const int x = static_cast<int>(std::floor(p.x())), y = static_cast<int>(std::floor(p.y()));
    if (x < 0 || y < 0 || x >= plan_->width() || y >= plan_->height()) return -1;
    const BlendWeights* weights = blendOverlay_ ? blendWeights() : nullptr;
    int best = -1;
    double bestScore = -1;
    for (const TileRect& t : plan_->tiles()) {
        if (x < t.x || x >= t.x + t.w || y < t.y || y >= t.y + t.h) continue;
        // With weights: the tile that contributes most here. Without: nearest centre.
        const double dx = x + 0.5 - (t.x + t.w / 2.0), dy = y + 0.5 - (t.y + t.h / 2.0);
        double score = 1.0 / (1.0 + dx * dx + dy * dy);
        if (weights) score = weights->weight(t.id, y - t.y, x - t.x) + 1e-9 * score;
        if (score > bestScore) {
            bestScore = score;
            best = t.id;
        }
    }
    return best;
}

const QImage& TileCanvas::blendImage() const {
    if (blendImageTile_ == hovered_ && !blendImage_.isNull()) return blendImage_;
    blendImage_ = {};
    blendImageTile_ = hovered_;
    const BlendWeights* weights = blendWeights();
    if (!weights) return blendImage_;
    const std::vector<float>& n = weights->normalizer();
    const auto [lo, hi] = std::minmax_element(n.begin(), n.end());
    normalizerMin_ = *lo;
    normalizerMax_ = *hi;
    if (hovered_ < 0) {
        // N from 0, so "1" (one tile, full weight) and the overlap peaks read on one scale.
        blendImage_ = heatImage(n.data(), weights->width(), weights->height(), 0.0, normalizerMax_);
        return blendImage_;
    }
    const TileRect& t = plan_->tile(hovered_);
    std::vector<float> normalised(static_cast<std::size_t>(t.w) * static_cast<std::size_t>(t.h));
    for (int y = 0; y < t.h; ++y)
        for (int x = 0; x < t.w; ++x)
            normalised[static_cast<std::size_t>(y) * t.w + x] =
                weights->weight(t.id, y, x) / weights->normalizerAt(t.y + y, t.x + x);
    blendImage_ = heatImage(normalised.data(), t.w, t.h, 0.0, 1.0);
    return blendImage_;
}

QSize TileCanvas::contentSize() const {
    if (plan_) return {plan_->width(), plan_->height()};
    return image_.size();
}

QRectF TileCanvas::tileRect(int id) const {
    if (!plan_ || id < 0 || id >= plan_->count()) return {};
    const TileRect& t = plan_->tile(id);
    return QRectF(t.x, t.y, t.w, t.h);
}

namespace {

// [from, to) of the plan along an axis of `length`, on the image rolled by `shift`: one span, or two
// where it crosses the image's edge.
std::vector<std::pair<int, int>> rolledSpans(int from, int to, int shift, int length) {
    if (shift == 0 || length <= 0) return {{from, to}};
    const int a = ((from - shift) % length + length) % length;
    const int n = to - from;
    if (a + n <= length) return {{a, a + n}};
    return {{a, length}, {0, a + n - length}};
}

// A plan line at `position` on the image rolled by `shift`.
int rolledLine(int position, int shift, int length) {
    return length > 0 ? ((position - shift) % length + length) % length : position;
}

}  // namespace

std::vector<QRectF> TileCanvas::rolledTileRects(int id) const {
    if (!plan_ || id < 0 || id >= plan_->count()) return {};
    const TileRect& t = plan_->tile(id);
    std::vector<QRectF> out;
    for (const auto& [y0, y1] : rolledSpans(t.y, t.y + t.h, shift_.dy, plan_->height()))
        for (const auto& [x0, x1] : rolledSpans(t.x, t.x + t.w, shift_.dx, plan_->width()))
            out.emplace_back(x0, y0, x1 - x0, y1 - y0);
    return out;
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
    painter.translate(contentOrigin());
    painter.scale(zoom(), zoom());
    const QRectF imageRect(QPointF(0, 0), QSizeF(content));
    // Smooth when shrinking, crisp pixels when zoomed in to inspect seams.
    painter.setRenderHint(QPainter::SmoothPixmapTransform, zoom() < 2.0);
    if (image_.isNull()) {
        painter.fillRect(imageRect, kEmptyImage);
    } else if (isBeforeAfterShown()) {
        paintBeforeAfter(painter, imageRect);
    } else {
        // An image of another size than the plan (settings edited since) is stretched over
        // the plan's canvas and dimmed: the overlays show the next run, the image the last.
        painter.fillRect(imageRect, kEmptyImage);
        if (!imageMatchesPlan()) painter.setOpacity(0.6);
        painter.drawImage(imageRect, image_);
        painter.setOpacity(1.0);
    }
    if (!isBeforeAfterShown()) paintOverlays(painter, content);
    painter.restore();

    if (image_.isNull()) {
        painter.setPen(QColor(200, 200, 200));
        const QRectF shown(contentOrigin(), QSizeF(content) * zoom());
        painter.drawText(shown.intersected(QRectF(rect())), Qt::AlignCenter | Qt::TextWordWrap,
                         placeholder_.isEmpty()
                             ? tr("%1 × %2 px — press Run").arg(content.width()).arg(content.height())
                             : placeholder_);
    } else if (!imageMatchesPlan() && !isBeforeAfterShown()) {
        painter.setPen(QColor(230, 230, 230));
        painter.drawText(rect().adjusted(10, 8, -10, -8), Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap,
                         tr("Last image (%1 × %2 px) under the tile plan of the settings shown (%3 × %4 px)")
                             .arg(image_.width())
                             .arg(image_.height())
                             .arg(content.width())
                             .arg(content.height()));
    }
    if (isBeforeAfterShown()) paintSplitHandle(painter);
    paintLegend(painter);
    // Zoom readout in the corner.
    const QString zoomText = QStringLiteral("%1%").arg(std::lround(zoom() * 100.0));
    painter.setPen(QColor(220, 220, 220));
    painter.drawText(rect().adjusted(8, 6, -8, -6), Qt::AlignRight | Qt::AlignBottom, zoomText);
}

void TileCanvas::paintBeforeAfter(QPainter& painter, const QRectF& imageRect) {
    // Both images over the same canvas rectangle: the start image left of the split, the
    // result right of it, so one point of the picture is at one place in both.
    const double splitAt = split_ * imageRect.width();
    painter.save();
    painter.setClipRect(QRectF(imageRect.topLeft(), QSizeF(splitAt, imageRect.height())));
    painter.drawImage(imageRect, before_);
    painter.setClipRect(QRectF(QPointF(splitAt, 0), QSizeF(imageRect.width() - splitAt, imageRect.height())));
    painter.drawImage(imageRect, image_);
    painter.restore();
}

void TileCanvas::paintSplitHandle(QPainter& painter) {
    const QRectF shown = QRectF(contentOrigin(), QSizeF(contentSize()) * zoom()).intersected(QRectF(rect()));
    const double x = splitX();
    if (shown.isEmpty() || x < shown.left() - 1 || x > shown.right() + 1) return;
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(0, 0, 0, 120), 4));
    painter.drawLine(QPointF(x, shown.top()), QPointF(x, shown.bottom()));
    painter.setPen(QPen(QColor(255, 255, 255), 2));
    painter.drawLine(QPointF(x, shown.top()), QPointF(x, shown.bottom()));
    // A grip in the middle, and which side is which.
    const QPointF grip(x, shown.center().y());
    painter.setBrush(QColor(255, 255, 255));
    painter.setPen(QPen(QColor(40, 40, 40), 1.5));
    painter.drawEllipse(grip, 11, 11);
    painter.drawLine(grip + QPointF(-5, 0), grip + QPointF(-2, -3));
    painter.drawLine(grip + QPointF(-5, 0), grip + QPointF(-2, 3));
    painter.drawLine(grip + QPointF(5, 0), grip + QPointF(2, -3));
    painter.drawLine(grip + QPointF(5, 0), grip + QPointF(2, 3));
    const QFontMetrics metrics(painter.font());
    const auto tag = [&](const QString& full, bool left) {
        // Cut with "…" to the room beside the split, so a long tag never runs off the canvas.
        const double room = (left ? x - 10 - rect().left() : rect().right() - x - 10) - 8 - 14;
        const QString text = metrics.elidedText(full, Qt::ElideRight, static_cast<int>(std::max(0.0, room)));
        if (text.isEmpty()) return;
        const QSizeF size(metrics.horizontalAdvance(text) + 14, metrics.height() + 6);
        const QRectF box(left ? x - 10 - size.width() : x + 10, shown.top() + 10, size.width(), size.height());
        painter.setPen(Qt::NoPen);
        painter.setBrush(QColor(0, 0, 0, 150));
        painter.drawRoundedRect(box, 4, 4);
        painter.setPen(QColor(240, 240, 240));
        painter.drawText(box, Qt::AlignCenter, text);
    };
    tag(beforeLabel_.isEmpty() ? tr("Before: start image") : beforeLabel_, true);
    tag(afterLabel_.isEmpty() ? tr("After") : afterLabel_, false);
    painter.restore();
}

void TileCanvas::paintOverlays(QPainter& painter, QSize content) {
    if (seamOverlay_ && !seamImage_.isNull()) {
        painter.setRenderHint(QPainter::SmoothPixmapTransform, false);
        painter.drawImage(QRectF(QPointF(0, 0), QSizeF(seamImage_.size())), seamImage_);
    }
    if (blendOverlay_ && plan_) {
        const QImage& heat = blendImage();
        if (!heat.isNull()) {
            painter.save();
            painter.setOpacity(0.78);
            painter.setRenderHint(QPainter::SmoothPixmapTransform, false);
            const QRectF target = hovered_ >= 0 ? tileRect(hovered_) : QRectF(QPointF(0, 0), QSizeF(heat.size()));
            painter.drawImage(target, heat);
            painter.restore();
            if (hovered_ >= 0) {
                QPen edge(QColor(120, 220, 255), 2.0);
                edge.setCosmetic(true);
                painter.setPen(edge);
                painter.setBrush(Qt::NoBrush);
                painter.drawRect(tileRect(hovered_));
            }
        }
    }

    if (overlay_ && plan_) {
        const std::vector<int>& xs = plan_->columnPositions();
        const std::vector<int>& ys = plan_->rowPositions();
        const int tw = plan_->tileW(), th = plan_->tileH();
        // Overlap bands: where consecutive columns/rows share pixels, i.e. where blending happens;
        // with shifted tiles, where the current step's tiles lie (the plan rolled by shift_).
        const int W = plan_->width(), H = plan_->height();
        for (std::size_t c = 0; c + 1 < xs.size(); ++c) {
            const int from = xs[c + 1], to = xs[c] + tw;
            if (to > from)
                for (const auto& [a, b] : rolledSpans(from, to, shift_.dx, W))
                    painter.fillRect(QRectF(a, 0, b - a, content.height()), kOverlapBand);
        }
        for (std::size_t r = 0; r + 1 < ys.size(); ++r) {
            const int from = ys[r + 1], to = ys[r] + th;
            if (to > from)
                for (const auto& [a, b] : rolledSpans(from, to, shift_.dy, H))
                    painter.fillRect(QRectF(0, a, content.width(), b - a), kOverlapBand);
        }
        // Tile edges, as lines across the image (cheap for thousands of tiles): a dark halo
        // under a light line, so the grid reads over bright, dark and noisy images alike.
        QVector<QLineF> edges;
        for (int x : xs)
            for (const int e : {rolledLine(x, shift_.dx, W), rolledLine(x + tw, shift_.dx, W)})
                edges << QLineF(e, 0, e, content.height());
        for (int y : ys)
            for (const int e : {rolledLine(y, shift_.dy, H), rolledLine(y + th, shift_.dy, H)})
                edges << QLineF(0, e, content.width(), e);
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
        for (int id : active_)
            for (const QRectF& r : rolledTileRects(id))
                if (!r.isEmpty()) painter.drawRect(r);
    }
}

void TileCanvas::paintLegend(QPainter& painter) {
    legendRange_ = {0, 0};
    if (isBeforeAfterShown()) return;  // no overlays there
    QPoint anchor(10, height() - 10);
    if (seamOverlay_ && !seamImage_.isNull()) {
        const QRect box = drawHeatLegend(painter, anchor, tr("Seam map: tile disagreement (std. dev.)"), 0.0, seamMax_);
        anchor.setY(box.top() - 6);
        legendRange_ = {0.0, seamMax_};
    }
    if (blendOverlay_ && plan_ && !blendImage_.isNull()) {
        if (hovered_ >= 0) {
            drawHeatLegend(painter, anchor, tr("Normalised weight w/N of tile %1").arg(hovered_), 0.0, 1.0);
            legendRange_ = {0.0, 1.0};
        } else {
            drawHeatLegend(painter, anchor,
                           tr("Normaliser N (sum of weights; %1 … %2)")
                               .arg(formatScaleValue(normalizerMin_), formatScaleValue(normalizerMax_)),
                           0.0, normalizerMax_);
            legendRange_ = {0.0, normalizerMax_};
        }
    }
}

void TileCanvas::leaveEvent(QEvent*) { setHoveredTile(-1); }

void TileCanvas::mousePressEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton && nearSplit(event->position())) {
        draggingSplit_ = true;
        event->accept();
        return;
    }
    ZoomPanView::mousePressEvent(event);
}

void TileCanvas::mouseMoveEvent(QMouseEvent* event) {
    if (draggingSplit_) {
        const double width = contentSize().width() * zoom();
        if (width > 0) setSplitPosition((event->position().x() - contentOrigin().x()) / width);
        emit splitMoved(split_);
        return;
    }
    if (!isPanning()) {
        if (blendOverlay_) setHoveredTile(tileAt(toContent(event->position())));
        setCursor(nearSplit(event->position()) ? Qt::SplitHCursor : Qt::OpenHandCursor);
        return;
    }
    ZoomPanView::mouseMoveEvent(event);
}

void TileCanvas::mouseReleaseEvent(QMouseEvent* event) {
    ZoomPanView::mouseReleaseEvent(event);
    draggingSplit_ = false;
    setCursor(nearSplit(event->position()) ? Qt::SplitHCursor : Qt::OpenHandCursor);
}

}  // namespace tessera
