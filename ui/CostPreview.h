// CostPreview: the settings panel's Cost preview group: what the tile plan of the settings
// costs (tiles, redundancy, UNet evaluations, batches per step), before anything runs.
#pragma once

#include <QGroupBox>

#include "core/run/RunConfig.h"

class QLabel;

namespace tessera {

class CostPreview : public QGroupBox {
    Q_OBJECT
public:
    explicit CostPreview(QWidget* parent = nullptr);

    // The cost of `config`'s plan; `planValid` false (a size, tile or overlap marked invalid)
    // shows dashes.
    void showCost(const RunConfig& config, bool planValid);

private:
    QLabel* tiles_ = nullptr;
    QLabel* redundancy_ = nullptr;
    QLabel* evaluations_ = nullptr;
    QLabel* batches_ = nullptr;
};

}  // namespace tessera
