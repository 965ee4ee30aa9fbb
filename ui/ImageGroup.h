// ImageGroup: the settings panel's Image group: the size (read-only while a start image sets
// it), the seed with a dice (a new random seed) and a reuse button (the last run's seed), the
// steps, the sampler as A1111 names it (core/run/SamplerNames.h samplerDisplayName; a "Karras"
// entry sets schedulerOptions.karrasSigmas) and how often the canvas shows a preview.
#pragma once

#include <cstdint>
#include <optional>

#include <QSize>

#include "ui/ConfigGroup.h"

class QLineEdit;
class QSpinBox;
class QToolButton;

namespace tessera {

class ImageGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit ImageGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // The canvas the Size fields show.
    QSize canvasSize() const;
    // `follows`: the size is the start image's times its factor, read-only; `size` is then put
    // in the fields (without an edited signal) where known.
    void followStartImage(bool follows, const std::optional<QSize>& size);
    // The seed of the run shown last: the reuse button puts it back in the field.
    void setLastRunSeed(std::uint64_t seed);

private:
    void rollSeed();

    QSpinBox* width_ = nullptr;
    QSpinBox* height_ = nullptr;
    QLineEdit* seed_ = nullptr;
    QToolButton* dice_ = nullptr;
    QToolButton* reuseSeed_ = nullptr;  // enabled once a run's seed is known
    std::optional<std::uint64_t> lastRunSeed_;
    QSpinBox* steps_ = nullptr;
    QSpinBox* previewEvery_ = nullptr;  // RunConfig::previewEvery: live previews every N steps
    QComboBox* scheduler_ = nullptr;
};

}  // namespace tessera
