// ZoomPanView: a widget showing content (an image, a tile canvas) that the user zooms and pans.
// The wheel zooms about the cursor (x1.25 a notch, 1/32 to 64), dragging with the left or middle
// button pans, a double-click fits. Until the user zooms or pans, the content is fitted to the
// widget (less the fit margin, centred) and stays fitted as the widget resizes; once the user has
// moved it, the content point at the widget's centre stays there.
//
// Subclasses give the content's size (contentSize) and paint it through contentOrigin() and
// zoom(); they call contentSizeChanged() when that size may have changed.
#pragma once

#include <optional>

#include <QPointF>
#include <QSize>
#include <QWidget>

namespace tessera {

class ZoomPanView : public QWidget {
    Q_OBJECT
public:
    // Screen pixels per content pixel: 1 is 1:1.
    double zoom() const { return zoom_; }
    // The content point shown at the widget's centre.
    QPointF centre() const { return centre_; }
    // The view follows the widget's size (no zoom or pan since the last fit).
    bool isFitting() const { return fitting_; }

    static constexpr double kMinZoom = 1.0 / 32.0;
    static constexpr double kMaxZoom = 64.0;

public slots:
    // Shows content point `centre` at the widget's centre at `zoom` (clamped); stops fitting.
    // Emits nothing: views that follow each other call it from viewChanged.
    void setView(double zoom, QPointF centre);
    // Scales the content to fit the widget and keeps fitting it as the widget resizes.
    void fitToView();
    // One content pixel per screen pixel, centred.
    void showActualSize();

signals:
    // The user zoomed, panned or double-clicked to fit.
    void viewChanged(double zoom, QPointF centre);

protected:
    // `fitMargin`: widget pixels left free across each axis around fitted content.
    explicit ZoomPanView(QSize fitMargin, QWidget* parent = nullptr);

    // The content's size in its own pixels; empty when there is nothing to show.
    virtual QSize contentSize() const = 0;
    // Call after the content's size may have changed from `before`: fits again while fitting;
    // otherwise a new size keeps the zoom and is centred.
    void contentSizeChanged(QSize before);

    // Widget position of content pixel (0, 0).
    QPointF contentOrigin() const;
    QPointF toContent(QPointF widgetPoint) const { return (widgetPoint - contentOrigin()) / zoom_; }
    // A drag is panning the view.
    bool isPanning() const { return panFrom_.has_value(); }

    // QWidget's event handlers, overridden as TileCanvas's are (it extends the mouse handling).
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void applyFit();
    void centreContent();

    QSize fitMargin_;
    bool fitting_ = true;
    double zoom_ = 1.0;
    QPointF centre_;
    std::optional<QPointF> panFrom_;
};

}  // namespace tessera
