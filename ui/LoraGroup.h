// LoraGroup: the settings panel's "LoRA and VAE" group (Stable Diffusion), as a daily user of
// A1111 knows them: the separate VAE (Automatic: the model's own; or a file of the models folders'
// VAE/: A1111's "SD VAE" setting) and the run's LoRAs: the models folders' Lora/, LyCORIS/ and
// loras/ files listed off the GUI thread (app/qt/LoraCatalog.h), each added to the run's list with
// a weight (RunConfig::loras, A1111's "Append LoRA to prompt"), removed from it, or inserted into
// the prompt as <lora:name:weight> (tagRequested), as a click on a card of A1111's Extra Networks
// tab does. Both are part of the configuration: saved with the settings, kept in a run's record and
// shown again when a run is reopened.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <QStringList>

#include "app/qt/LoraCatalog.h"
#include "ui/ConfigGroup.h"

class QDoubleSpinBox;
class QPushButton;
class QToolButton;
class QTreeWidget;

namespace tessera {

class LoraGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit LoraGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // The folders listed (UpscaleModelCatalog::modelsFolders of the window's models folder and the
    // run's model): listed again when they change. Reads nothing on this thread.
    void setModelSources(const QString& windowModelsFolder, const std::string& runModel);
    // Lists the folders again (the Refresh button).
    void rescan();
    // Empty: the editors are enabled; otherwise disabled, with the reason shown (a model that
    // takes no LoRA and no VAE).
    void setUnavailableReason(const QString& reason);
    // A FLUX.1 model ("flux-dev", "flux-schnell"; "" for none): the text encoder rows shown (a
    // transformer file needs CLIP-L and T5 files beside it, a FluxPipeline folder has its own), the
    // LoRA rows disabled saying why; the VAE row stays (ae.safetensors).
    void setFluxModel(const QString& variant);

    // What was listed last (nullopt before the first answer), and whether a newer list is awaited.
    const std::optional<LoraCatalogScan>& catalog() const { return scan_; }
    bool isScanning() const { return scanning_; }
    // Rows of the LoRA list as shown: "name ×weight".
    QStringList listedLoras() const;
    // Selects the available LoRA named `name` (tests, keyboard users); false when none is.
    bool selectAvailable(const QString& name);

signals:
    // The prompt should get (or, where it has it, lose) this <lora:name:weight> tag.
    void tagRequested(const QString& tag);

private:
    void onScanned(const LoraCatalogScan& scan);
    void fillAvailable();
    void fillVae();
    void fillTextEncoders();
    void fillList();
    void updateEnabled();
    void addSelected();
    void removeSelected();
    void requestTag();

    LoraCatalog* catalog_ = nullptr;
    QStringList folders_;
    std::optional<LoraCatalogScan> scan_;
    bool scanning_ = false;
    quint64 scanJob_ = 0;

    std::vector<LoraSetting> loras_;  // the run's list, in order
    std::string wantedVae_;           // RunConfig::vae shown ("" = Automatic)
    // RunConfig::textEncoders shown: FLUX.1's CLIP-L and T5 files ("" = the model's own).
    std::string wantedClip_, wantedT5_;
    QString flux_;         // setFluxModel's variant
    QString unavailable_;  // setUnavailableReason's reason

    QComboBox* vae_ = nullptr;
    QComboBox* clip_ = nullptr;
    QComboBox* t5_ = nullptr;
    QLabel* clipLabel_ = nullptr;
    QLabel* t5Label_ = nullptr;
    QComboBox* available_ = nullptr;
    QDoubleSpinBox* weight_ = nullptr;
    QPushButton* add_ = nullptr;
    QPushButton* insertTag_ = nullptr;
    QToolButton* refresh_ = nullptr;
    QTreeWidget* list_ = nullptr;
    QPushButton* remove_ = nullptr;
    QLabel* reason_ = nullptr;
};

}  // namespace tessera
