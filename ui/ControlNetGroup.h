// ControlNetGroup: the settings panel's "ControlNet" group (Stable Diffusion), as A1111's
// ControlNet extension shows its units: a unit selector (kUnits units, more when a configuration
// names more), and for the unit selected: Enable, the model (the ControlNets of the models folders'
// ControlNet/ and controlnet/, listed off the GUI thread by app/qt/ControlNetCatalog.h, or a file or
// diffusers folder chosen with Browse…), the control image (the start image, or a file), the
// weight, the guidance start and end, the control mode (A1111's three names) and the preprocessor
// (none, tile_resample with its down sampling rate, tile_colorfix with its variation,
// tile_colorfix+sharp with its variation and sharpness).
//
// The enabled units are RunConfig::controlNets, in unit order (what a run, its record, its PNG
// parameters and the saved settings carry); a configuration shown (settings, a reopened run, pasted
// A1111 parameters) fills the first units, enabled, and clears the others. The editors fold away
// (the expander beside the selector) and open when a unit is enabled.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/qt/ControlNetCatalog.h"
#include "core/run/ControlNetUnit.h"
#include "ui/ConfigGroup.h"

class QCheckBox;
class QDoubleSpinBox;
class QFormLayout;
class QLineEdit;
class QPushButton;
class QTabBar;
class QToolButton;
class QWidget;

namespace tessera {

class ControlNetGroup : public ConfigGroup {
    Q_OBJECT
public:
    // A1111's default number of units.
    static constexpr int kUnits = 3;

    explicit ControlNetGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // The folders listed (UpscaleModelCatalog::modelsFolders of the window's models folder and the
    // run's model): listed again when they change. Reads nothing on this thread.
    void setModelSources(const QString& windowModelsFolder, const std::string& runModel);
    // Lists the folders again (the refresh button).
    void rescan();
    // Empty: the editors are enabled; otherwise disabled, with the reason shown (a model that
    // takes no ControlNet).
    void setUnavailableReason(const QString& reason);

    // What was listed last (nullopt before the first answer), and whether a newer list is awaited.
    const std::optional<ControlNetCatalogScan>& catalog() const { return scan_; }
    bool isScanning() const { return scanning_; }

    // The units shown (at least kUnits) and the one whose editors are shown.
    int unitCount() const { return static_cast<int>(units_.size()); }
    int currentUnit() const { return current_; }
    void selectUnit(int index);
    // Unit `index` as edited, and whether it is enabled.
    const ControlNetUnit& unit(int index) const { return units_[static_cast<std::size_t>(index)].unit; }
    bool isUnitEnabled(int index) const { return units_[static_cast<std::size_t>(index)].enabled; }
    // Every unit as edited, switched-off ones too: what the window's settings keep beside the
    // configuration (which holds the enabled units only), so that a unit switched off keeps its
    // model and settings across a restart, as A1111's units do.
    std::vector<std::pair<bool, ControlNetUnit>> allUnits() const;
    // Sets the units from an earlier allUnits() when its enabled units are the ones shown (else the
    // shown configuration stays as it is: it came from elsewhere since).
    void restoreUnits(const std::vector<std::pair<bool, ControlNetUnit>>& units);
    // The editors are shown (not folded away).
    bool isExpanded() const;
    void setExpanded(bool expanded);

private:
    struct UnitState {
        bool enabled = false;
        ControlNetUnit unit;
    };

    UnitState& state() { return units_[static_cast<std::size_t>(current_)]; }
    // The selected unit's editors, as rows of `form`; their signals.
    void addUnitRows(QFormLayout* form);
    void connectEditors();
    void onScanned(const ControlNetCatalogScan& scan);
    // The editors from the selected unit's state (no edited signal).
    void showUnit();
    void fillModels();
    void updateTabs();
    void updateEnabling();
    void browseModel(bool folder);
    void browseImage();
    // The selected unit changed by an editor: tabs, enabling, edited().
    void unitEdited();

    ControlNetCatalog* catalog_ = nullptr;
    QStringList folders_;
    std::optional<ControlNetCatalogScan> scan_;
    bool scanning_ = false;
    quint64 scanJob_ = 0;
    QString unavailable_;  // setUnavailableReason's

    std::vector<UnitState> units_;
    int current_ = 0;
    bool showing_ = false;  // showUnit in progress: editor signals are not edits

    QTabBar* tabs_ = nullptr;
    QToolButton* expander_ = nullptr;
    QWidget* editors_ = nullptr;
    QLabel* reason_ = nullptr;
    QCheckBox* enabled_ = nullptr;
    QComboBox* model_ = nullptr;
    QPushButton* browseModel_ = nullptr;
    QToolButton* refresh_ = nullptr;
    QLineEdit* image_ = nullptr;
    QPushButton* browseImage_ = nullptr;
    QDoubleSpinBox* weight_ = nullptr;
    QDoubleSpinBox* start_ = nullptr;
    QDoubleSpinBox* end_ = nullptr;
    QComboBox* mode_ = nullptr;
    QComboBox* preprocessor_ = nullptr;
    QWidget* parameters_ = nullptr;  // the preprocessor's settings below it
    QLabel* rateLabel_ = nullptr;
    QDoubleSpinBox* rate_ = nullptr;
    QLabel* variationLabel_ = nullptr;
    QDoubleSpinBox* variation_ = nullptr;
    QLabel* sharpnessLabel_ = nullptr;
    QDoubleSpinBox* sharpness_ = nullptr;
};

}  // namespace tessera
