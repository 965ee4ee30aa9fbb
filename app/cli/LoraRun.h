// LoraRun: the LoRAs / LyCORIS of a Stable Diffusion render as tessera-cli merges them, as A1111 does:
// the prompt's <lora:name:te:unet> and <lyco:...> tags (core/text/ExtraNetworks.h, in the order
// A1111 activates them) and then RunConfig::loras (--lora FILE[:W], like A1111's "Append LoRA to
// prompt" setting), each file found by name in the models folders' Lora/, LyCORIS/ and loras/ or by
// its path (core/run/LoraModelFile.h), opened and hashed (core/models/lora/LoraFile.h: safetensors,
// or a pickle through the restricted reader) and checked against the model's configurations before
// any weights are read; then, once the model is loaded, merged into its float32 weights in float64
// (core/models/lora/SdModelLoras.h) before the engine prepares them (and casts them to the run's
// precision). Qt-free: the window's worker can use it as the CLI does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/models/lora/LoraFile.h"
#include "core/models/lora/LoraFit.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"
#include "core/text/ExtraNetworks.h"

namespace tessera {

// Whether a run of `config` merges LoRAs: a <lora:...> / <lyco:...> tag in its prompt, or config.loras.
bool runHasLoras(const RunConfig& config);

// The models folders tessera-cli looks a LoRA's name up in (core/run/ModelFileLookup.h
// modelsFolders): $TESSERA_MODELS, then the folder holding the folder of `runModel` (--model).
std::vector<std::string> cliLoraFolders(const std::string& runModel);

// The record entry of one LoRA a run applies: its file, hashes and multipliers, and what its merge
// did (`report`; null when no merge report is at hand).
LoraRecord loraRecordOf(const LoraTag& tag, const LoraFile& file, const LoraMergeReport* report);

// What a merge left out, one note per kind (keys naming nothing, shapes that do not fit, algorithms
// not merged, entries that are no float tensors); none when everything merged.
std::vector<std::string> loraMergeNotes(const LoraMergeReport& report);

class LoraRun {
public:
    // The run's LoRAs, each found, opened and hashed, and, where the configurations of the model at
    // config.model can be read without its weights (app/cli/RunMemoryCheck.h readSdModelConfigs), checked
    // against them: the family the file is for, and that its modules name the model's with the right shapes
    // (checkLoraFit). Throws ValidationError on "prompt" for a tag A1111 refuses too (no name, a
    // multiplier that is no number), on "lora" for a file found nowhere (naming every folder looked
    // in), one that cannot be read (LoraFileError: a damaged file, a pickle the restricted reader
    // refuses), or one that does not fit the model (the fit's verdict, naming the file's family and
    // the model's). Notes (tags of other kinds, taken out and not applied) go to notes().
    LoraRun(const RunConfig& config, const std::vector<std::string>& modelsFolders);
    LoraRun(LoraRun&&) noexcept;
    LoraRun& operator=(LoraRun&&) noexcept;
    ~LoraRun();

    bool empty() const { return loras_.empty(); }
    // What the user is told before the merge: stderr notes, which addTo also keeps among the
    // record's messages.
    const std::vector<std::string>& notes() const { return notes_; }

    // `model` (loaded by the caller: loadSdModel, or with a separate VAE) with every LoRA merged into
    // its float32 weights, checked against it first where the configurations could not be: what
    // Engine::setSdModel pins. The caller's reference is taken: the weights change in place where
    // nothing else holds them (else they are copied first, SdModel::changeWeights). Throws as the
    // constructor does for a LoRA that does not fit, LoraFileError for a file that changed since.
    std::shared_ptr<const SdModel> merge(std::shared_ptr<const SdModel> model);
    // What the merge found, for stderr and the record: file keys that name nothing in the model,
    // modules that were not merged (a shape that does not fit, IA3, OFT, ...).
    const std::vector<std::string>& mergeNotes() const { return mergeNotes_; }

    // The record of a run on the merged model: its LoRAs (record.loras, which "Lora hashes" writes),
    // their lines and the notes among its messages, and the merge in its prepare time.
    void addTo(RunRecord& record) const;

    // One line per LoRA, for `plan`: "detail-tweaker: Lora/detail-tweaker.safetensors (hash
    // 0123456789ab), te 1, unet 1; fits Stable Diffusion 1.x: 16 of 16 modules".
    std::vector<std::string> describeLines() const;

    // --params-from: for each LoRA of this run that the PNG's "Lora hashes" names (as the tag names
    // it, ':' and ',' removed) with another hash than the file found here, a note saying so (A1111
    // compares them when an infotext is pasted: extensions-builtin/Lora/scripts/lora_script.py
    // infotext_pasted).
    std::vector<std::string> hashNotes(const std::vector<std::pair<std::string, std::string>>& pngHashes) const;

private:
    struct Lora;  // LoraRun.cpp
    void checkFit(SdFamily family, const LoraKeyMap& keys);

    std::vector<std::unique_ptr<LoraFile>> files_;  // each file once, kept for the merge
    std::vector<Lora> loras_;                       // in merge order
    std::vector<std::string> notes_, mergeNotes_;
    std::optional<SdFamily> checkedFamily_;  // the family the fit was checked against
    std::vector<LoraMergeReport> reports_;
    double mergeMs_ = 0;
};

}  // namespace tessera
