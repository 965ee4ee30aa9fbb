// KeptSdModel: the Stable Diffusion model the window's worker keeps between runs, as A1111 keeps
// its loaded checkpoint. It is read once per (model, separate VAE); the run's LoRA set is merged
// into its float32 weights in place, and when a later run asks for another set (other files,
// weights or order, or none) the kept set is taken out again bit for bit and the new one merged
// (core/models/lora/SdModelLoras.h, through SdModel::changeWeights), so that adding, changing or
// removing LoRAs never reads the checkpoint again. The merge is tessera-cli render's
// (app/cli/LoraRun.h): the same LoRAs in the same order on the file's own weights, so the images
// are the CLI's bit for bit. Qt-free; create, use and destroy on the worker thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/VaeReplacement.h"
#include "app/qt/RunLoras.h"
#include "core/base/LoadProgress.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

class KeptSdModel {
public:
    // How a run got its model: for the record and the tests.
    struct Use {
        bool read = false;     // the checkpoint (and VAE) were read for this run
        bool merged = false;   // the LoRA set was (re)merged for this run
        double loadMs = 0;     // the read, when read
        double mergeMs = 0;    // the restore of the kept set and the merge, when merged
        std::string restored;  // the digest of the set taken out before the merge ("" when none)
    };

    // The model for a run of `config` with `vae` in place of the model's own (null: its own) and
    // `loras` merged (empty: none): the kept one where it is of the same model and VAE, else read
    // (`progress` hears the read; it may throw LoadCancelled, which leaves nothing kept). The kept
    // LoRA set is kept where `loras` has the same digest, else restored and `loras` merged (checked
    // against the model first: ValidationError on "lora" for one that does not fit; LoraFileError
    // for a file that changed since it was opened, the weights then as the file's). The model
    // returned changes at the next call that merges or reads: give it to the engine again then.
    std::shared_ptr<const SdModel> modelFor(const RunConfig& config, VaeReplacement* vae, const RunLoras& loras,
                                            const LoadProgressCallback& progress, Use* use);
    // Drops the model (a run of another kind of model; memory back).
    void clear();

    // Bumped whenever the model or its weights change: an engine given the model at another
    // generation must be given it again.
    unsigned generation() const { return generation_; }
    // Checkpoint reads so far (each read of a model, with its VAE when one replaces its own).
    int reads() const { return reads_; }
    // The reports of the set merged in the kept model, in merge order (empty: none merged).
    const std::vector<LoraMergeReport>& mergeReports() const { return set_.reports(); }
    const std::string& mergedDigest() const { return set_.digest(); }
    // The separate VAE the kept model was read with, as that read recorded it (nullopt: its own).
    const std::optional<VaeReplacement>& vae() const { return vae_; }

private:
    std::shared_ptr<SdModel> model_;
    std::string modelPath_;
    std::string vaePath_;  // "" for the model's own
    std::optional<VaeReplacement> vae_;
    MergedLoraSet set_;
    unsigned generation_ = 0;
    int reads_ = 0;
};

}  // namespace tessera
