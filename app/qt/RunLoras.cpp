#include "app/qt/RunLoras.h"

#include <filesystem>
#include <map>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/models/lora/LoraFit.h"
#include "core/models/lora/LoraKeyMap.h"
#include "core/models/lora/LoraNetwork.h"
#include "core/run/LoraModelFile.h"

namespace tessera {

RunLoras::RunLoras(RunLoras&&) noexcept = default;
RunLoras& RunLoras::operator=(RunLoras&&) noexcept = default;
RunLoras::~RunLoras() = default;

RunLoras::RunLoras(const RunConfig& config, const std::vector<std::string>& modelsFolders)
    : checked_(config, modelsFolders) {
    if (checked_.empty()) return;
    // The same LoRAs in the same order as LoraRun found them (it refused the run otherwise).
    std::vector<std::pair<LoraTag, std::string>> wanted;
    for (const LoraTag& tag : loraTags(parseExtraNetworks(config.prompt).tags)) wanted.emplace_back(tag, tag.name);
    for (const LoraSetting& setting : config.loras)
        wanted.emplace_back(LoraTag{loraName(setting.file), setting.teMultiplier, setting.unetMultiplier, std::nullopt},
                            setting.file);
    std::map<std::string, const LoraFile*> opened;
    for (const auto& [tag, given] : wanted) {
        const ModelFile found = findLoraFile(given, modelsFolders);
        const LoraFile*& file = opened[found.path];
        if (file == nullptr) {
            try {
                files_.push_back(std::make_unique<LoraFile>(LoraFile::open(found.path)));
            } catch (const LoraFileError& e) {  // changed since LoraRun read it a moment ago
                throw ValidationError("lora", "lora: " + inQuotes(tag.name) + ": " + e.what());
            }
            file = files_.back().get();
        }
        entries_.push_back(Entry{tag, file});
    }
}

const std::vector<std::string>& RunLoras::notes() const { return checked_.notes(); }

std::vector<LoraApplication> RunLoras::applications() const {
    std::vector<LoraApplication> applications;
    for (const Entry& e : entries_)
        applications.push_back(
            LoraApplication{e.file, e.tag.name, e.tag.teMultiplier, e.tag.unetMultiplier, e.tag.dyn});
    return applications;
}

std::string RunLoras::digest() const { return loraSetDigest(applications()); }

void RunLoras::checkFits(const SdModel& model) const {
    const LoraKeyMap keys = LoraKeyMap::forModel(model);
    std::map<const LoraFile*, bool> checked;
    for (const Entry& e : entries_) {
        if (checked.count(e.file) != 0) continue;
        checked[e.file] = true;
        const LoraFit fit = checkLoraFit(*e.file, buildLoraNetwork(*e.file), keys);
        if (!fit.fits(model.family))
            throw ValidationError("lora", "lora: " + inQuotes(e.tag.name) + " (" + shownPath(e.file->path()) +
                                              ") does not fit the model: " + fit.verdict(model.family));
    }
}

void RunLoras::addTo(RunRecord& record, const std::vector<LoraMergeReport>& reports, double mergeMs, bool kept) const {
    std::size_t modules = 0;
    std::vector<std::string> mergeNotes;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        const Entry& e = entries_[i];
        const LoraMergeReport* report = i < reports.size() ? &reports[i] : nullptr;
        LoraRecord r = loraRecordOf(e.tag, *e.file, report);
        modules += static_cast<std::size_t>(r.modulesMerged);
        if (report) {
            const std::vector<std::string> notes = loraMergeNotes(*report);
            mergeNotes.insert(mergeNotes.end(), notes.begin(), notes.end());
        }
        record.messages.push_back(describe(r));
        record.loras.push_back(std::move(r));
    }
    record.messages.insert(record.messages.end(), notes().begin(), notes().end());
    record.messages.insert(record.messages.end(), mergeNotes.begin(), mergeNotes.end());
    const std::string what = "lora: " + std::to_string(entries_.size()) + " LoRA(s), " + std::to_string(modules) +
                             " modules, merged into the model's float32 weights (deltas in float64)";
    if (kept) {
        record.messages.push_back(what + " for an earlier run and kept: the same set, nothing merged or read again");
    } else {
        record.messages.push_back(what + " in " + std::to_string(static_cast<long long>(mergeMs)) +
                                  " ms, before the engine prepared them");
        record.prepareMs += mergeMs;
    }
}

}  // namespace tessera
