// RunLoras: the LoRAs / LyCORIS of one window run, found, opened, hashed and checked as tessera-cli
// render checks them (app/cli/LoraRun.h: the prompt's <lora:...> / <lyco:...> tags in A1111's order,
// then RunConfig::loras; a file found nowhere, unreadable or made for another family is refused
// before any weights are read, in the CLI's words), with their files kept open for a merge into the
// model the worker keeps (app/qt/KeptSdModel.h), and the record of that merge written as the CLI
// writes it. Qt-free; used on the worker thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/cli/LoraRun.h"
#include "core/models/lora/LoraFile.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/sd/SdModel.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"
#include "core/text/ExtraNetworks.h"

namespace tessera {

class RunLoras {
public:
    // The run's LoRAs (none when runHasLoras(config) is false), each looked up in `modelsFolders`
    // (names) or as a path. Throws ValidationError on "prompt" or "lora" as LoraRun does.
    RunLoras(const RunConfig& config, const std::vector<std::string>& modelsFolders);
    RunLoras(RunLoras&&) noexcept;
    RunLoras& operator=(RunLoras&&) noexcept;
    ~RunLoras();

    bool empty() const { return entries_.empty(); }
    // Notes to show before the run (tags of other kinds, taken out and not applied).
    const std::vector<std::string>& notes() const;
    // What a merge applies, in order; the files stay open while this object lives.
    std::vector<LoraApplication> applications() const;
    // loraSetDigest of applications() (what the kept model is keyed on); "" for none.
    std::string digest() const;
    // Throws ValidationError on "lora" (as LoraRun) for a LoRA that does not fit `model`: the check
    // against the loaded model, for models whose configurations could not be read up front.
    void checkFits(const SdModel& model) const;

    // The record of a run on a model with these LoRAs merged (`reports` in the same order, from the
    // merge that put them there): as LoraRun::addTo, record.loras, one line per LoRA, the notes, the
    // keys that matched nothing and the modules left out, and a last line saying how the set came to
    // be in the weights: merged for this run (`mergeMs`, added to the prepare time) or kept from an
    // earlier run (`kept`: nothing merged, the checkpoint not read).
    void addTo(RunRecord& record, const std::vector<LoraMergeReport>& reports, double mergeMs, bool kept) const;

private:
    struct Entry {
        LoraTag tag;
        const LoraFile* file = nullptr;
    };
    LoraRun checked_;  // the CLI's finding and checks, and its notes
    std::vector<std::unique_ptr<LoraFile>> files_;
    std::vector<Entry> entries_;
};

}  // namespace tessera
