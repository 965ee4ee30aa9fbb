// CompareView: two runs side by side. Run A, run B and their difference image share one view
// (zoom with the wheel, drag to pan, double-click to fit: every pane follows), and a table
// gives the deltas: total time, speedup, peak memory, max pixel difference, mean seam score.
#pragma once

#include <QImage>
#include <QPointF>
#include <QString>
#include <QWidget>

#include <vector>

#include "core/run/ConfigDiff.h"
#include "core/run/RunRecord.h"
#include "ui/ZoomPanView.h"

class QKeyEvent;
class QLabel;
class QTableWidget;

namespace tessera {

// One side of a comparison.
struct CompareSide {
    RunRecord record;
    QImage image;          // the run's image; may be null (then no pixel difference)
    double seamMean = -1;  // mean of its seam map; < 0: unknown
};

struct CompareDeltas {
    double totalMsA = 0, totalMsB = 0;
    double speedup = 0;  // totalMsA / totalMsB (> 1: B is faster); 0 when unknown
    // The settings B differs from A in; sameWork is false when one of them changes the work
    // (steps, size, model, ...): the time ratio is then not a speedup and is labelled so.
    std::vector<SettingDifference> differences;
    bool sameWork = true;
    double peakMiBA = -1, peakMiBB = -1;
    int maxPixelDiff = -1;  // 0..255 over R, G, B; -1 when the sizes differ or an image is missing
    double meanPixelDiff = -1;
    double seamMeanA = -1, seamMeanB = -1;    // tile disagreement: the mean of the seam maps
    double seamScoreA = -1, seamScoreB = -1;  // border visibility in the image (core/sampling/SeamScore.h)
};

// The numbers in the table (pure; no widgets).
CompareDeltas compareRuns(const CompareSide& a, const CompareSide& b);
// |A - B| per pixel (max over R, G, B) as heat, scaled so `scaleMax` is the top of the ramp
// (scaleMax <= 0: the largest difference). Null when the sizes differ or an image is null.
QImage differenceImage(const QImage& a, const QImage& b, int scaleMax = 0);

// One image of a comparison, zoomed and panned as ZoomPanView does; the view emits viewChanged
// so that every pane of a CompareView follows the one the user moves.
class CompareImagePane : public ZoomPanView {
    Q_OBJECT
public:
    explicit CompareImagePane(QString title, QWidget* parent = nullptr);
    void setImage(const QImage& image);
    const QImage& image() const { return image_; }
    // Legend under the image: the difference pane shows its scale (max value), others none.
    void setLegend(const QString& title, double low, double high);
    QSize sizeHint() const override { return {360, 360}; }

protected:
    void paintEvent(QPaintEvent* event) override;
    QSize contentSize() const override { return image_.size(); }

private:
    QString title_;
    QImage image_;
    QString legendTitle_;
    double legendLow_ = 0, legendHigh_ = 0;
    bool hasLegend_ = false;
};

class CompareView : public QWidget {
    Q_OBJECT
public:
    CompareView(const CompareSide& a, const CompareSide& b, QWidget* parent = nullptr);

    const CompareDeltas& deltas() const { return deltas_; }
    QTableWidget* deltaTable() const { return table_; }
    CompareImagePane* paneA() const { return paneA_; }
    CompareImagePane* paneB() const { return paneB_; }
    CompareImagePane* differencePane() const { return paneDiff_; }
    // A line under the caption saying where the two runs come from (e.g. which runs of a
    // graphs comparison are shown); empty hides it.
    void setNote(const QString& note);
    QString note() const;
    // "Settings differ: steps 20 -> 10, ..." or "Same settings".
    QString differencesText() const;

protected:
    void keyPressEvent(QKeyEvent* event) override;  // Escape closes

private:
    void fillTable(const CompareSide& a, const CompareSide& b);

    CompareDeltas deltas_;
    CompareImagePane* paneA_ = nullptr;
    CompareImagePane* paneB_ = nullptr;
    CompareImagePane* paneDiff_ = nullptr;
    QTableWidget* table_ = nullptr;
    QLabel* note_ = nullptr;
    QLabel* differences_ = nullptr;
};

}  // namespace tessera
