// TilingGroup: the settings panel's Tiling group: the tile size, the overlap in pixels or in
// percent of the tile, the stride that follows, the blend window, the fusion rule and the tile
// batch (0: auto).
#pragma once

#include "ui/ConfigGroup.h"

class QSpinBox;

namespace tessera {

class TilingGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit TilingGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // Shows the overlap in `unit` (0: px, 1: % of the tile) as the same `overlapPixels`.
    void convertOverlap(int unit, int overlapPixels);
    // The stride line for `config`'s tile and overlap, and, where the tile is longer than a side
    // of the image, that it is clamped to the image (as every run does: TilePlan).
    void showStride(const RunConfig& config);

signals:
    // The user picked another overlap unit (0: px, 1: % of the tile); the value is still in the
    // unit before.
    void overlapUnitChanged(int unit);

private:
    void showOverlap(int unit, int value);

    QSpinBox* tile_ = nullptr;
    QSpinBox* overlap_ = nullptr;
    QComboBox* overlapUnit_ = nullptr;
    QLabel* stride_ = nullptr;
    QLabel* clampNote_ = nullptr;  // the tile clamped to the image
    QComboBox* window_ = nullptr;
    QComboBox* fusion_ = nullptr;
    QComboBox* tileShift_ = nullptr;
    QSpinBox* tileBatch_ = nullptr;
};

}  // namespace tessera
