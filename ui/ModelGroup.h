// ModelGroup: the settings panel's Model group: the model (a folder, a .safetensors checkpoint or
// random:*; empty: the default model, named in the placeholder), Pick… (the panel opens a
// ModelPicker), the folder and file browsers, what the inspection said of the model, the
// precision and backend with a note where the run will compute otherwise, and the CPU engine's
// threads.
#pragma once

#include "ui/ConfigGroup.h"

class QLineEdit;
class QSpinBox;

namespace tessera {

class ModelGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit ModelGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // The model field as typed, trimmed (empty: the default model).
    QString modelText() const;
    void setModelText(const QString& model);
    // The default model's folder, named in the empty field's placeholder; empty: none installed.
    void setDefaultModelFolder(const QString& folder);
    // What the inspection said of the model (under the field); empty hides it.
    void setModelInfo(const QString& text);
    BackendKind backend() const;
    Precision precision() const;
    QString precisionText() const;
    // Shows `precision` unless the person picked one in the list (what the device computes is the
    // default where it computes in one precision only).
    void defaultPrecisionTo(Precision precision);
    // Where the run will not compute as asked (`note`, empty: as asked), and whether it goes to
    // the CPU engine (its threads are editable only then).
    void showComputeNote(const QString& note, bool onCpu);

signals:
    // Pick… was pressed.
    void pickRequested();

private:
    void chooseModelFolder();
    void chooseModelFile();

    QString defaultModelFolder_;
    QLineEdit* model_ = nullptr;
    QComboBox* precision_ = nullptr;
    QComboBox* backend_ = nullptr;
    QLabel* modelInfo_ = nullptr;
    QLabel* computeNote_ = nullptr;
    QSpinBox* threads_ = nullptr;   // the CPU engine's threads (0: all cores)
    bool precisionPicked_ = false;  // the person chose a precision in the list
};

}  // namespace tessera
