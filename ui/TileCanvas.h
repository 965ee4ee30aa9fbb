// TileCanvas: the image as it forms, with the tile grid, the overlap bands where tiles are
// blended, and the tile batch being computed highlighted. Zoom and pan are ZoomPanView's
// (wheel, drag, double-click to fit). Paints only; no run state.
//
// The image stays while the plan changes under it (settings edited after a run): it is drawn
// over the plan's canvas (scaled and dimmed, with a caption, when the sizes differ) and the
// overlays of the new plan on top of it.
//
// Before/after: with a start image set (image-to-image), the canvas can show it left of a
// vertical split and the image right of it, both over the same canvas rectangle; drag the
// split line to move it (dragging elsewhere pans). The plan overlays are not drawn then.
//
// A PNG or JPEG dropped on the canvas is offered as a start image (imageDropped); other files
// are left to the window.
//
// Overlays, each toggled on its own (a legend in the lower-left corner gives the scale):
//  - TileGrid: tile edges and overlap bands;
//  - BlendWeights: the normalised blend weight w_t / N of the tile under the cursor over that
//    tile, or, with no tile hovered, the normaliser N over the whole image (core/sampling/BlendWindow.h);
//  - SeamMap: the run's seam map (per-pixel disagreement of overlapping tiles), as heat.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <QImage>
#include <QPointF>
#include <QWidget>

#include "core/run/Engine.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/TilePlan.h"
#include "ui/ZoomPanView.h"

class QMimeData;

namespace tessera {

enum class CanvasOverlay { TileGrid, BlendWeights, SeamMap };

// The one local PNG or JPEG file a drag carries (by its name), else empty: what the canvas and
// the settings panel's Start image group take as a start image.
QString droppedImageFile(const QMimeData* mime);

class TileCanvas : public ZoomPanView {
    Q_OBJECT
public:
    explicit TileCanvas(QWidget* parent = nullptr);

    // The run's tiles (and image size). nullopt: no valid plan; only the image is drawn.
    void setPlan(std::optional<TilePlan> plan);
    // The current image (a preview or the final one); a null image shows the empty canvas.
    void setImage(const QImage& image);
    const QImage& image() const { return image_; }
    // Tiles (TilePlan ids) being computed; empty clears the highlight.
    void setActiveTiles(std::vector<int> ids);
    const std::vector<int>& activeTiles() const { return active_; }
    // Shifted tiles: the current step's tiles (and the grid) lie over the image rolled by this
    // (image pixels, core/base/CanvasShift.h); another plan resets it, the same plan keeps it.
    void setTileShift(CanvasShift shift);
    CanvasShift tileShift() const { return shift_; }
    // The rectangles tile `id` covers on the image rolled by the tile shift: one, or up to four where
    // it wraps around the image's edges.
    std::vector<QRectF> rolledTileRects(int id) const;

    // Text over the empty canvas; empty: the image size and "press Run".
    void setPlaceholderText(const QString& text);
    // The image is shown under a plan of another size (settings edited since it was made).
    bool imageMatchesPlan() const;

    // The start image of the image shown, for the before/after view; null: none.
    void setBeforeImage(const QImage& image);
    // The tags either side of the split ("Before: start image", "After" unless set).
    void setBeforeAfterLabels(const QString& before, const QString& after);
    const QImage& beforeImage() const { return before_; }
    // The before/after view is on and has both images to show.
    bool isBeforeAfterShown() const { return beforeAfter_ && !before_.isNull() && !image_.isNull(); }
    // Where the split is, as a fraction of the canvas width (0: all after, 1: all before).
    double splitPosition() const { return split_; }
    void setSplitPosition(double fraction);
    // The split line's x in widget pixels.
    double splitX() const;

    // The blend window of the plan shown (for the BlendWeights overlay).
    void setBlendWindow(BlendWindowKind kind);
    // The seam map (1 x H x W) of the image shown; an empty tensor clears it.
    void setSeamMap(const ImageTensor& map);
    bool hasSeamMap() const { return !seamImage_.isNull(); }
    double seamMax() const { return seamMax_; }

    bool isOverlayEnabled(CanvasOverlay overlay) const;
    void setOverlayEnabled(CanvasOverlay overlay, bool enabled);
    // The tile whose normalised weight the BlendWeights overlay shows; -1: none (N is shown).
    // Normally follows the cursor; tests and screenshots set it directly.
    int hoveredTile() const { return hovered_; }
    void setHoveredTile(int id);
    // The tile that "owns" image pixel (x, y): the covering tile with the largest weight
    // there (the one whose centre is nearest for `none`); -1 outside the plan.
    int tileAt(QPointF imagePoint) const;
    // The scale the legend currently shows (low, high), for tests; both 0 without a legend.
    std::pair<double, double> legendRange() const { return legendRange_; }
    // The canvas in image pixels: the plan's size, else the image's (empty: neither).
    QSize canvasSize() const { return contentSize(); }
    QSize sizeHint() const override { return {720, 640}; }

public slots:
    void setOverlayVisible(bool visible);
    void setBlendOverlayVisible(bool visible);
    void setSeamOverlayVisible(bool visible);
    // Shows the before/after split (when there is a start image) at 1:1, or the plain canvas.
    void setBeforeAfterVisible(bool visible);

signals:
    // A PNG or JPEG file was dropped on the canvas.
    void imageDropped(const QString& path);
    // The user dragged the before/after split to `fraction`.
    void splitMoved(double fraction);

protected:
    // QWidget's event handlers, overridden as ZoomPanView's are (the canvas extends its mouse handling).
    void paintEvent(QPaintEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    QSize contentSize() const override;  // the plan's size, else the image's

private:
    QRectF tileRect(int id) const;
    const BlendWeights* blendWeights() const;  // built on first use for plan_ and window_
    const QImage& blendImage() const;          // the heat image for hovered_ (or N), cached
    void invalidateBlend();
    void paintLegend(QPainter& painter);
    void paintOverlays(QPainter& painter, QSize content);
    void paintBeforeAfter(QPainter& painter, const QRectF& imageRect);
    void paintSplitHandle(QPainter& painter);
    bool nearSplit(QPointF widgetPoint) const;

    std::optional<TilePlan> plan_;
    QImage image_;
    std::vector<int> active_;
    CanvasShift shift_;
    QString placeholder_;
    bool overlay_ = true;
    bool blendOverlay_ = false;
    bool seamOverlay_ = false;
    BlendWindowKind window_ = BlendWindowKind::Hann;
    mutable std::unique_ptr<BlendWeights> weights_;
    mutable QImage blendImage_;
    mutable int blendImageTile_ = -2;  // which tile blendImage_ shows (-1: N); -2: stale
    mutable double normalizerMin_ = 0, normalizerMax_ = 0;
    int hovered_ = -1;
    QImage seamImage_;
    double seamMax_ = 0;
    std::pair<double, double> legendRange_{0, 0};
    QImage before_;
    QString beforeLabel_, afterLabel_;
    bool beforeAfter_ = false;
    double split_ = 0.5;
    bool draggingSplit_ = false;
};

}  // namespace tessera
