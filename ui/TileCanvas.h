// TileCanvas: the image as it forms, with the tile grid, the overlap bands where tiles are
// blended, and the tile batch being computed highlighted. Wheel zooms about the cursor,
// dragging pans; fitToView / showActualSize reset the view. Paints only; no run state.
#pragma once

#include <optional>
#include <vector>

#include <QImage>
#include <QPointF>
#include <QWidget>

#include "core/TilePlan.h"

namespace tessera {

class TileCanvas : public QWidget {
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

    // Text over the empty canvas; empty: the image size and "press Run".
    void setPlaceholderText(const QString& text);

    bool overlayVisible() const { return overlay_; }
    double zoom() const { return zoom_; }
    QSize sizeHint() const override { return {720, 640}; }

public slots:
    void setOverlayVisible(bool visible);
    // Scales the image to fit the widget and keeps fitting it as the widget resizes.
    void fitToView();
    // One image pixel per screen pixel, centred.
    void showActualSize();

protected:
    void paintEvent(QPaintEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    QSize contentSize() const;  // image pixels being shown (the plan's size, else the image's)
    void zoomAbout(double factor, QPointF anchor);
    void applyFit();
    QRectF tileRect(int id) const;

    std::optional<TilePlan> plan_;
    QImage image_;
    std::vector<int> active_;
    QString placeholder_;
    bool overlay_ = true;
    bool fitting_ = true;   // re-fit on resize until the user zooms or pans
    double zoom_ = 1.0;
    QPointF offset_;        // widget position of image pixel (0, 0)
    std::optional<QPointF> dragFrom_;
};

}  // namespace tessera
