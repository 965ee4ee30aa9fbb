// ConfigPanel: the run settings, grouped Image / Model / Tiling / Graphs, with each invalid
// value marked beside its field (the reason from validateAll) and a live cost preview
// (tiles, redundancy, UNet evaluations). Holds no run state; the window asks for config().
#pragma once

#include <map>
#include <optional>
#include <string>

#include <QLabel>
#include <QStringList>
#include <QWidget>

#include "app/EngineFactory.h"
#include "core/RunConfig.h"

class QComboBox;
class QGroupBox;
class QLineEdit;
class QSpinBox;
class QToolButton;

namespace tessera {

class ConfigPanel : public QWidget {
    Q_OBJECT
public:
    explicit ConfigPanel(QWidget* parent = nullptr);

    // The settings as shown (model left empty when the field is empty: the default model).
    RunConfig config() const;
    // Shows `config`; fields the panel has no widget for (scheduler options, label, init
    // image...) are kept and returned unchanged by config().
    void setConfig(const RunConfig& config);

    // No problem in any field (validateAll against the model's limits, plus the model folder).
    bool isValid() const { return problems_.empty(); }
    // Every problem as "field: reason", in the order validateAll gives them.
    QStringList problems() const;
    // The reason shown beside `field` ("tile", "overlap", "model"...), empty when it is fine.
    QString problemFor(const QString& field) const;

    // The folder used when the model field is empty (shown as its placeholder); may be empty.
    void setDefaultModelFolder(const QString& folder);
    QString defaultModelFolder() const { return defaultModelFolder_; }

    // What the worker found: enables the Graphs group only when a CUDA backend can run.
    void setDeviceReport(const DeviceReport& report);
    // Why CUDA graphs cannot be used with the settings shown (no device yet, no CUDA, the CPU
    // backend chosen), as shown under the Graphs group; empty when they can.
    QString graphsUnavailableReason() const;

signals:
    void configChanged();
    void validityChanged(bool valid);

private:
    struct FieldView {
        QWidget* editor = nullptr;
        QLabel* error = nullptr;
    };

    QGroupBox* buildImageGroup();
    QGroupBox* buildModelGroup();
    QGroupBox* buildTilingGroup();
    QGroupBox* buildGraphsGroup();
    QGroupBox* buildCostGroup();
    QLabel* addErrorLabel(const QString& field, QWidget* editor);

    void onEdited();
    void revalidate();
    void updateCostPreview(const RunConfig& config);
    void updateGraphsAvailability();
    void chooseModelFolder();
    void rollSeed();

    RunConfig base_;  // fields without a widget, carried through
    QString defaultModelFolder_;
    std::optional<DeviceReport> devices_;
    bool applying_ = false;  // setConfig in progress: one configChanged at the end, not one per field

    // Image
    QSpinBox* width_ = nullptr;
    QSpinBox* height_ = nullptr;
    QLineEdit* seed_ = nullptr;
    QToolButton* dice_ = nullptr;
    QSpinBox* steps_ = nullptr;
    QComboBox* scheduler_ = nullptr;
    // Model
    QLineEdit* model_ = nullptr;
    QComboBox* precision_ = nullptr;
    QComboBox* backend_ = nullptr;
    QLabel* modelInfo_ = nullptr;
    // Tiling
    QSpinBox* tile_ = nullptr;
    QSpinBox* overlap_ = nullptr;
    QComboBox* overlapUnit_ = nullptr;
    QLabel* stride_ = nullptr;
    QComboBox* window_ = nullptr;
    QComboBox* fusion_ = nullptr;
    QSpinBox* tileBatch_ = nullptr;
    // Graphs
    QGroupBox* graphsGroup_ = nullptr;
    QComboBox* graphMode_ = nullptr;
    QSpinBox* graphWarmup_ = nullptr;
    QSpinBox* lanes_ = nullptr;
    QSpinBox* graphCache_ = nullptr;
    QLabel* graphsReason_ = nullptr;
    // Cost preview
    QLabel* costTiles_ = nullptr;
    QLabel* costRedundancy_ = nullptr;
    QLabel* costEvaluations_ = nullptr;
    QLabel* costBatches_ = nullptr;
    // Problems in fields without a widget of their own.
    QLabel* otherProblems_ = nullptr;

    std::map<QString, FieldView> fields_;
    std::map<QString, QString> problems_;  // field -> reason
    QStringList problemOrder_;
};

}  // namespace tessera
