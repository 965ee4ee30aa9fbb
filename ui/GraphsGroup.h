// GraphsGroup: the settings panel's CUDA graphs group: the graph mode, the eager warm-up runs,
// the graphs cache and the lanes (tile batches in flight). Where graphs cannot run (no CUDA
// device, the CPU backend chosen) the editors are disabled and the group says why; the group box
// itself stays enabled so that reason stays readable.
#pragma once

#include "ui/ConfigGroup.h"

class QSpinBox;

namespace tessera {

class GraphsGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit GraphsGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // Empty `reason`: the editors are enabled; otherwise disabled with the reason under them.
    void setUnavailableReason(const QString& reason);

private:
    QComboBox* graphMode_ = nullptr;
    QSpinBox* graphWarmup_ = nullptr;
    QSpinBox* lanes_ = nullptr;
    QSpinBox* graphCache_ = nullptr;
    QLabel* reason_ = nullptr;
};

}  // namespace tessera
