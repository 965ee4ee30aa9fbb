// PromptGroup: the settings panel's Prompt group (Stable Diffusion): the prompt and negative
// prompt in PromptEditors (A1111's emphasis syntax; Ctrl+Up/Down change weights) with their
// token counts as A1111 shows them ("12/75"), the CFG scale and clip skip, and the batch count (A1111's
// "Batch count": that many images one after the other, seeds seed, seed + 1, ...; a window setting,
// not part of a run's configuration: each image is a run of its own). The panel enables the
// editors only for a model known to be Stable Diffusion; the group box itself stays enabled so
// the reason it gives stays readable.
#pragma once

#include "ui/ConfigGroup.h"

class QPlainTextEdit;
class QSpinBox;

namespace tessera {

class PromptGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit PromptGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // Empty `reason`: the editors are enabled; otherwise disabled, the reason above them and
    // first in each editor's tooltip.
    void setUnavailableReason(const QString& reason);
    // Non-empty `reason`: the model ignores clip skip (SDXL): its box is disabled, the reason its
    // tooltip. Applies while the editors are enabled.
    void setClipSkipIgnored(const QString& reason);
    // A FLUX.1 model ("flux-dev" or "flux-schnell"; empty: none): the negative prompt, CFG and
    // clip skip are disabled, each saying why (guidance distillation: one evaluation per step);
    // the Guidance box (the scale the model takes as an input) shows, enabled for dev. Applies
    // while the editors are enabled.
    void setFluxModel(const QString& variant);
    QString promptText() const;
    QString negativePromptText() const;
    // The count of `field` ("prompt" or "negative_prompt"): tokens < 0 shows "?" with `error` as
    // its tooltip; `embeddings` (the textual-inversion embeddings the count includes, each vector
    // a token) is named in the tooltip.
    void showTokenCount(const QString& field, int tokens, const QString& error, int embeddings = 0);
    void clearTokenCount(const QString& field);
    QString tokenCountText(const QString& field) const;
    // Puts an extra network tag (<lora:name:weight>) at the end of the prompt, or, where the prompt
    // already names that network, takes its tag out: as a click on a card of A1111's Extra
    // Networks tab (javascript/extraNetworks.js cardClicked, tryToRemoveExtraNetworkFromPrompt).
    void toggleExtraNetworkTag(const QString& tag);
    // Images per Run, 1 to kMaxBatchCount.
    static constexpr int kMaxBatchCount = 100;
    int batchCount() const;
    void setBatchCount(int count);

signals:
    // The text of either prompt changed (the panel asks for new token counts).
    void promptTextChanged();

private:
    QLabel* tokenLabel(const QString& field) const;

    QPlainTextEdit* prompt_ = nullptr;
    QPlainTextEdit* negativePrompt_ = nullptr;
    QDoubleSpinBox* cfgScale_ = nullptr;
    QDoubleSpinBox* guidance_ = nullptr;  // FLUX.1-dev's embedded guidance
    QLabel* guidanceLabel_ = nullptr;
    QString flux_;  // the FLUX.1 variant shown; "" for other models
    QSpinBox* clipSkip_ = nullptr;
    QSpinBox* batchCount_ = nullptr;
    QLabel* reason_ = nullptr;
    QString clipSkipIgnored_;         // why the model ignores clip skip; "" when it applies
    QLabel* promptTokens_ = nullptr;  // "n/75", counted by the panel's token counter off this thread
    QLabel* negativePromptTokens_ = nullptr;
};

}  // namespace tessera
