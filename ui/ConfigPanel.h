// ConfigPanel: the run settings, in groups (ModelGroup, PromptGroup, LoraGroup, StartImageGroup,
// ControlNetGroup, ImageGroup, NoiseGroup, TilingGroup, GraphsGroup; each a ConfigGroup) and a CostPreview, with each invalid
// value marked beside its field (the reason from validateAll) and a live cost preview (tiles,
// redundancy, UNet evaluations). Holds no run state; the window asks for config().
//
// The panel is what ties the groups to each other and to what is known off this thread:
//  - the model's limits come from an app/qt ModelInspector (files read on a thread pool, cached
//    per folder and file times): a new folder is inspected when the model field (or the default
//    model) changes, never when another field does. Until its answer arrives the panel is not
//    valid ("model: checking the model folder…") and isCheckingModel() is true; the answer
//    revalidates every field and emits modelChecked();
//  - the Prompt group is enabled only when the inspection says the model is Stable Diffusion (a
//    pipeline folder, a .safetensors checkpoint, random:sd15 / random:sd21); for a UNet2DModel
//    folder it is disabled, says why, and config() carries no prompt (such a model refuses one);
//  - the start image's header (StartImageGroup) may set the Size fields (ImageGroup); until it
//    is read the panel is not valid ("init: reading the start image…");
//  - the LoRA and VAE group (Stable Diffusion, enabled with the Prompt group) lists the LoRAs and
//    VAEs of the models folders off this thread (as the upscale models); its Insert tag puts
//    <lora:name:weight> into the prompt;
//  - the Model group's Pick… opens a ModelPicker (ui/ModelPicker.h): recent models, the models
//    folder's checkpoints and diffusers folders with family, size and short hash, random weights.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <QStringList>
#include <QWidget>

#include "app/cli/EngineFactory.h"
#include "app/cli/InitImage.h"
#include "app/qt/ModelInspector.h"
#include "app/qt/PromptTokenCounter.h"
#include "core/run/RunConfig.h"
#include "ui/StartImageGroup.h"

class QLabel;

namespace tessera {

class ConfigGroup;
class ControlNetGroup;
class CostPreview;
class GraphsGroup;
class ImageGroup;
class LoraGroup;
class ModelCatalog;
class ModelGroup;
class ModelPicker;
class NoiseGroup;
class PromptGroup;
class TilingGroup;

class ConfigPanel : public QWidget {
    Q_OBJECT
public:
    explicit ConfigPanel(QWidget* parent = nullptr);

    // The settings as shown (model left empty when the field is empty: the default model).
    RunConfig config() const;
    // config() with the prompts kept where the model takes none (they stay in the disabled
    // editors): what the window saves, so that a restart with such a model loses no typed text.
    RunConfig shownSettings() const;
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
    // Looks for the default model of a binary in `executableDir` off the GUI thread, then
    // sets it (setDefaultModelFolder) and emits modelChecked().
    void locateDefaultModel(const QString& executableDir);
    // The default model is being looked for, or the model folder shown is being inspected.
    bool isCheckingModel() const;
    const ModelInspector& modelInspector() const { return *inspector_; }
    const PromptTokenCounter& tokenCounter() const { return *tokenCounter_; }

    // What the worker found: enables the Graphs group only when a CUDA backend can run.
    void setDeviceReport(const DeviceReport& report);
    // Why CUDA graphs cannot be used with the settings shown (no device yet, no CUDA, the CPU
    // backend chosen), as shown under the Graphs group; empty when they can.
    QString graphsUnavailableReason() const;
    // What will really compute, when it is not what the panel asks: a CUDA request where CUDA
    // cannot be used (and why, in words), or FP16/BF16 on the CPU engine. Empty when as asked.
    QString computeNote() const;
    // The token count shown under the prompt ("prompt") or negative prompt ("negative_prompt"),
    // as A1111 shows it ("12/75", an embedding's vectors counted as tokens: the embeddings of the
    // run's embeddings folders, read once per change of them); empty until counted or when the
    // model is not SD.
    QString tokenCountText(const QString& field) const;
    // Why the Prompt group is disabled ("" when the model is Stable Diffusion).
    QString promptUnavailableReason() const;

    // Images per Run (the Prompt group's batch count: seeds seed, seed + 1, ...); a window setting.
    int batchCount() const;
    void setBatchCount(int count);
    // The LoRA and VAE group (its lists, for the window and tests).
    LoraGroup* loraGroup() const { return lora_; }
    // The ControlNet group (its units and model list, for the window and tests).
    ControlNetGroup* controlNetGroup() const { return controlNet_; }

    // The seed of the run shown last (started, finished or reopened): the seed's reuse button
    // (beside the dice, which rolls a new one) puts it back in the field.
    void setLastRunSeed(std::uint64_t seed);

    // The models folder the picker lists (a setting; may be empty) and the models used last,
    // newest first (at most kMaxRecentModels). The window keeps both in its settings.
    static constexpr int kMaxRecentModels = 10;
    void setModelsFolder(const QString& folder);
    QString modelsFolder() const { return modelsFolder_; }
    void setRecentModels(const QStringList& models);
    QStringList recentModels() const { return recentModels_; }
    // `model` (a path or random:*) was used: first in the recent list.
    void noteModelUsed(const QString& model);
    // Opens the model picker (Model group, "Pick…"; window-modal, not blocking) and returns it;
    // a model chosen there goes into the model field.
    ModelPicker* openModelPicker();
    ModelCatalog& modelCatalog() const { return *catalog_; }

    // The start image (image-to-image): `path` becomes config().initImage and its header is
    // read off this thread (startImageChecked when known). An empty path clears it.
    void setStartImage(const QString& path);
    // The start image's header is being read.
    bool isCheckingStartImage() const;
    // What its header said (nullopt without a start image, while reading, or when unusable).
    const std::optional<ImageHeader>& startImageHeader() const;
    // How the canvas size follows from the start image.
    using StartScale = StartImageGroup::Scale;
    StartScale startScale() const;
    // The Start image group (its Upscaler list, for the window and tests).
    StartImageGroup* startImageGroup() const { return start_; }
    // Why the upscale model cannot run alone over the start image shown ("" when it can).
    QString upscaleOnlyBlocker() const { return start_->upscaleOnlyBlocker(config()); }

signals:
    void configChanged();
    // The picker's Browse… changed the models folder.
    void modelsFolderChanged(const QString& folder);
    void validityChanged(bool valid);
    // An answer about the model arrived (default folder located, or a folder inspected) and
    // the fields were checked again with it.
    void modelChecked();
    // The start image's header was read (or found unusable) and the fields were checked again.
    void startImageChecked();

private:
    void onEdited();
    void revalidate();
    // The problem with model folder `folder` ("" when it is fine, with *limits set from it), as
    // far as known, and in *info what is known of it; asks the inspector about a folder not
    // asked about yet.
    QString checkModel(const QString& folder, bool isDefault, ModelLimits* limits, QString* info);
    void onModelInspected(quint64 jobId, const ModelInspection& inspection);
    void onStartImageHeader(bool usable);
    void updateGraphsAvailability();
    void updateComputeNote();
    // Whether a run would go to the CPU engine: asked for, or CUDA found unusable.
    bool runsOnCpu() const;
    void updatePromptAvailability();
    // Asks the inspector for the token counts of the prompts shown (SD models only).
    void requestTokenCounts();
    void onTokensCounted(const QString& field, int tokens, int embeddings, const QString& error);
    // The model is known to be Stable Diffusion / known to be a model that takes no prompt.
    bool modelIsStableDiffusion() const;
    bool modelTakesNoPrompt() const;
    // SD: width, height and overlap in multiples of the VAE's cell (core/models/sd/SdPipeline.h checkSdRun).
    void checkSdMultiples(const RunConfig& config, int multiple,
                          const std::function<void(const QString&, const QString&)>& add) const;
    // Size fields from the start image and the scale (Factor), else editable (TargetSize).
    void applyStartImageSize();

    RunConfig base_;  // fields without a widget, carried through
    QString defaultModelFolder_;
    bool defaultKnown_ = false;     // setDefaultModelFolder was called (or the search answered)
    bool locatingDefault_ = false;  // locateDefaultModel's answer is awaited
    ModelInspector* inspector_ = nullptr;
    ModelCatalog* catalog_ = nullptr;             // the picker's listings and hashes (kept between pickers)
    PromptTokenCounter* tokenCounter_ = nullptr;  // the prompts' "n/75", embeddings counted
    QString modelsFolder_;
    QStringList recentModels_;
    QString inspectedFolder_;                    // the folder of the newest inspection
    std::optional<ModelInspection> inspection_;  // its answer; empty while awaited
    ModelLimits lastLimits_;                     // of the last folder that had limits: used while checking
    std::optional<DeviceReport> devices_;
    bool promptStateShown_ = false;  // the Prompt group shows an answer about the model
    bool applying_ = false;          // setConfig in progress: one configChanged at the end, not one per field

    ModelGroup* model_ = nullptr;
    PromptGroup* prompt_ = nullptr;
    LoraGroup* lora_ = nullptr;
    StartImageGroup* start_ = nullptr;
    ControlNetGroup* controlNet_ = nullptr;
    ImageGroup* image_ = nullptr;
    NoiseGroup* noise_ = nullptr;
    TilingGroup* tiling_ = nullptr;
    GraphsGroup* graphs_ = nullptr;
    std::vector<ConfigGroup*> groups_;  // the nine above, top to bottom
    CostPreview* cost_ = nullptr;
    // Problems in fields without a widget of their own.
    QLabel* otherProblems_ = nullptr;

    std::map<QString, QString> problems_;  // field -> reason
    QStringList problemOrder_;
};

}  // namespace tessera
