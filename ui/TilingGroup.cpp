#include "ui/TilingGroup.h"

#include <algorithm>
#include <cmath>

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

namespace tessera {

namespace {

constexpr int kPixels = 0, kPercent = 1;

}  // namespace

TilingGroup::TilingGroup(QWidget* parent) : ConfigGroup(tr("Tiling"), parent) {
    setObjectName(QStringLiteral("tilingGroup"));
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    tile_ = makeSpin(0, kMaxSpin, tr(" px"));
    tile_->setObjectName(QStringLiteral("tileSpin"));
    tile_->setSingleStep(8);
    form->addRow(tr("Tile"), tile_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("tile"), tile_));

    overlap_ = makeSpin(0, kMaxSpin);
    overlap_->setObjectName(QStringLiteral("overlapSpin"));
    overlapUnit_ = new QComboBox;
    overlapUnit_->setObjectName(QStringLiteral("overlapUnitCombo"));
    overlapUnit_->addItem(tr("px"));
    overlapUnit_->addItem(tr("% of tile"));
    auto* overlapRow = new QHBoxLayout;
    overlapRow->setContentsMargins(0, 0, 0, 0);
    overlapRow->addWidget(overlap_, 1);
    overlapRow->addWidget(overlapUnit_);
    form->addRow(tr("Overlap"), overlapRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("overlap"), overlap_));
    stride_ = makeRoleLabel("strideLabel", "hint");
    stride_->setWordWrap(false);
    form->addRow(tr("Stride"), stride_);
    clampNote_ = makeRoleLabel("tileClampNote", "warning");
    clampNote_->hide();
    form->addRow(QString(), clampNote_);

    window_ = makeCombo<BlendWindowKind>({{BlendWindowKind::Hann, tr("Hann")},
                                          {BlendWindowKind::Gaussian, tr("Gaussian")},
                                          {BlendWindowKind::Linear, tr("Linear ramp")},
                                          {BlendWindowKind::None, tr("None (hard seams)")}});
    window_->setObjectName(QStringLiteral("windowCombo"));
    form->addRow(tr("Blend window"), window_);
    fusion_ = makeCombo<FusionRule>(
        {{FusionRule::Sample, tr("Sample (MultiDiffusion)")}, {FusionRule::Noise, tr("Noise (Mixture of Diffusers)")}});
    fusion_->setObjectName(QStringLiteral("fusionCombo"));
    form->addRow(tr("Fusion"), fusion_);
    tileShift_ = makeCombo<TileShift>(
        {{TileShift::Off, tr("Off (tiles in place)")}, {TileShift::Random, tr("Random (SpotDiffusion)")}});
    tileShift_->setObjectName(QStringLiteral("tileShiftCombo"));
    tileShift_->setToolTip(
        tr("Random: every step lays the tiles over the image rolled by a random offset of up to a tile "
           "(SpotDiffusion, as ComfyUI-TiledDiffusion offers it), so the borders between tiles move from step "
           "to step instead of staying where a seam can form. With overlap 0 it needs far fewer tiles a step "
           "than an overlapping plan and blends nothing; tiles at the right and bottom edges wrap around to "
           "the other side. It changes the image."));
    form->addRow(tr("Tile shift"), tileShift_);
    tileBatch_ = makeSpin(0, 4096);
    tileBatch_->setObjectName(QStringLiteral("tileBatchSpin"));
    tileBatch_->setSpecialValueText(tr("auto"));
    tileBatch_->setToolTip(tr("Tiles evaluated per UNet call (0 = auto: every tile spread evenly over the fewest "
                              "calls of at most %1, fewer where the GPU's memory is short; the run's record "
                              "says what it chose). Larger calls are faster; smaller ones show the image "
                              "forming tile by tile.")
                               .arg(kAutoTileBatchMost));
    form->addRow(tr("Tile batch"), tileBatch_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("batch"), tileBatch_));

    for (QSpinBox* spin : {tile_, overlap_, tileBatch_})
        connect(spin, &QSpinBox::valueChanged, this, &TilingGroup::edited);
    for (QComboBox* combo : {window_, fusion_, tileShift_})
        connect(combo, &QComboBox::currentIndexChanged, this, &TilingGroup::edited);
    connect(overlapUnit_, &QComboBox::currentIndexChanged, this, &TilingGroup::overlapUnitChanged);
}

void TilingGroup::readInto(RunConfig& c) const {
    c.tile = tile_->value();
    if (overlapUnit_->currentIndex() == kPercent) {
        c.overlapFraction = overlap_->value() / 100.0;
    } else {
        c.overlapFraction.reset();
        c.overlapPx = overlap_->value();
    }
    c.window = parseBlendWindow(selectedName(window_));
    c.fusion = parseFusionRule(selectedName(fusion_));
    c.tileShift = parseTileShift(selectedName(tileShift_));
    c.tileBatch = tileBatch_->value();
}

void TilingGroup::showConfig(const RunConfig& c) {
    tile_->setValue(c.tile);
    if (c.overlapFraction) {
        overlapUnit_->setCurrentIndex(kPercent);
        showOverlap(kPercent, static_cast<int>(std::lround(*c.overlapFraction * 100.0)));
    } else {
        overlapUnit_->setCurrentIndex(kPixels);
        showOverlap(kPixels, c.overlapPx);
    }
    selectIn(window_, c.window);
    selectIn(fusion_, c.fusion);
    selectIn(tileShift_, c.tileShift);
    tileBatch_->setValue(c.tileBatch);
}

void TilingGroup::showOverlap(int unit, int value) {
    if (unit == kPercent) {
        overlap_->setRange(0, 99);
        overlap_->setSuffix(tr(" %"));
    } else {
        overlap_->setRange(0, kMaxSpin);
        overlap_->setSuffix(tr(" px"));
    }
    overlap_->setValue(value);
}

void TilingGroup::convertOverlap(int unit, int overlapPixels) {
    const int tile = std::max(1, tile_->value());
    const QSignalBlocker block(overlap_);
    showOverlap(unit, unit == kPercent ? static_cast<int>(std::lround(100.0 * overlapPixels / tile)) : overlapPixels);
}

void TilingGroup::showStride(const RunConfig& c) {
    // A tile longer than a side covers that side whole: the run's tiles are the image's size there.
    const int tileW = std::min(c.tile, c.width), tileH = std::min(c.tile, c.height);
    const bool clamped = c.tile > 0 && c.width > 0 && c.height > 0 && (tileW < c.tile || tileH < c.tile);
    clampNote_->setVisible(clamped);
    if (clamped)
        clampNote_->setText(tr("The %1 px tile is longer than the %2 × %3 px image: it is clamped to %4 × %5 px%6")
                                .arg(c.tile)
                                .arg(c.width)
                                .arg(c.height)
                                .arg(tileW)
                                .arg(tileH)
                                .arg(tileW == c.width && tileH == c.height ? tr(", one tile, no tiling") : QString()));
    const int overlapPx = c.overlapPixels();
    stride_->setText(c.tile > overlapPx && overlapPx >= 0
                         ? tr("%1 px (tile %2 − overlap %3)").arg(c.tile - overlapPx).arg(c.tile).arg(overlapPx)
                         : tr("—"));
}

}  // namespace tessera
