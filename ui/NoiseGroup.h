// NoiseGroup: the settings panel's Noise group, under the seed: where a run's noise comes from
// (RunConfig::noiseSource: Tessera's Philox, torch's CPU or CUDA generator as A1111 draws them,
// A1111's NV emulation, ComfyUI's) and, behind an "Extra" expander as A1111 keeps them under its
// seed, A1111's variation seed and strength, "Resize seed from" and the eta noise seed delta
// (ENSD). The extras act on the A1111 sources (CPU, GPU, NV); the group says so when another
// source is chosen. The expander opens by itself when a configuration shown sets any of them
// (a pasted infotext, a reopened run), and its button says when closed extras are set.
#pragma once

#include <vector>

#include "ui/ConfigGroup.h"

class QFormLayout;
class QLineEdit;
class QSpinBox;
class QToolButton;

namespace tessera {

class NoiseGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit NoiseGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // The extras are shown (the Extra button checked).
    bool extrasShown() const;
    void setExtrasShown(bool shown);

private:
    // Any extra differs from off (a variation strength, a resize size, an ENSD).
    bool extrasSet() const;
    void updateHints();
    // Shows or hides the form row whose field is `row` (a layout or a widget).
    void setRowShown(QObject* row, bool shown);

    QComboBox* source_ = nullptr;
    QToolButton* extra_ = nullptr;
    QFormLayout* form_ = nullptr;
    std::vector<QObject*> extraRows_;  // the fields of the extras' rows
    QLineEdit* variationSeed_ = nullptr;
    QDoubleSpinBox* variationStrength_ = nullptr;
    QSpinBox* resizeWidth_ = nullptr;
    QSpinBox* resizeHeight_ = nullptr;
    QLineEdit* ensd_ = nullptr;
    QLabel* ignored_ = nullptr;  // the extras do not apply to the source chosen
};

}  // namespace tessera
