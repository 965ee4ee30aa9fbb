#include "app/cli/LoraRun.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "app/cli/RunMemoryCheck.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/lora/LoraKeyMap.h"
#include "core/models/lora/LoraNetwork.h"
#include "core/models/lora/SdModelLoras.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/run/LoraModelFile.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

bool isLoraKind(const std::string& kind) { return kind == "lora" || kind == "lyco"; }

// A1111's "Lora hashes" name of a tag's name: ':' and ',' removed (extra_networks_lora.py remove_symbols).
std::string hashName(const std::string& name) {
    std::string out;
    for (const char c : name)
        if (c != ':' && c != ',') out += c;
    return out;
}

// "a, b, c and 4 more".
std::string someOf(const std::vector<std::string>& items, std::size_t shown = 3) {
    std::string text;
    for (std::size_t i = 0; i < items.size() && i < shown; ++i) text += (i > 0 ? ", " : "") + excerpt(items[i], 120);
    if (items.size() > shown) text += " and " + std::to_string(items.size() - shown) + " more";
    return text;
}

// The key map of a model known by its configurations alone: the tensors each component declares
// (the names and shapes a load binds), no weights.
LoraKeyMap keyMapOf(const SdModelConfigs& c) {
    const SdFamily family = c.textEncoder2 ? SdFamily::SDXL : familyOfTextEncoder(c.textEncoder);
    return LoraKeyMap(family, c.unet, UNetCondModel::expectedTensors(c.unet),
                      ClipTextModel::expectedTensors(c.textEncoder),
                      c.textEncoder2 ? ClipTextModel::expectedTensors(*c.textEncoder2) : TensorList{});
}

}  // namespace

LoraRecord loraRecordOf(const LoraTag& tag, const LoraFile& file, const LoraMergeReport* report) {
    LoraRecord r;
    r.name = tag.name;
    r.file = std::filesystem::path(file.path()).filename().string();
    r.sha256 = file.sha256();
    r.shortHash = file.a1111ShortHash();
    r.teMultiplier = tag.teMultiplier;
    r.unetMultiplier = tag.unetMultiplier;
    if (report) {
        r.modulesMerged = static_cast<int>(report->modulesMerged);
        r.modulesSkipped = static_cast<int>(report->modulesSkipped);
        r.keysUnmatched = static_cast<int>(report->unmatchedKeys.size());
        r.modulesNotMerged = static_cast<int>(report->shapeMismatches.size() + report->notMerged.size());
    }
    return r;
}

std::vector<std::string> loraMergeNotes(const LoraMergeReport& r) {
    std::vector<std::string> notes;
    const std::string who = "lora: " + inQuotes(r.name) + ": ";
    if (!r.unmatchedKeys.empty())
        notes.push_back(who + std::to_string(r.unmatchedKeys.size()) +
                        " keys name nothing in the model and were not merged (" + someOf(r.unmatchedKeys) + ")");
    if (!r.shapeMismatches.empty())
        notes.push_back(who + std::to_string(r.shapeMismatches.size()) +
                        " modules do not fit their target's shape and were not merged (" + someOf(r.shapeMismatches) +
                        ")");
    if (!r.notMerged.empty())
        notes.push_back(who + std::to_string(r.notMerged.size()) +
                        " modules of an algorithm Tessera does not merge were left out (" + someOf(r.notMerged) + ")");
    if (!r.skippedEntries.empty())
        notes.push_back(who + std::to_string(r.skippedEntries.size()) + " entries are no float tensors (" +
                        someOf(r.skippedEntries) + ")");
    return notes;
}

struct LoraRun::Lora {
    LoraTag tag;  // name as given (a tag's, or the loraName of a --lora), multipliers, dyn
    const LoraFile* file = nullptr;
    std::string shownFile;       // for messages: the name in its models folder, or the path as given
    std::optional<LoraFit> fit;  // once checked
};

bool runHasLoras(const RunConfig& config) {
    if (!config.loras.empty()) return true;
    for (const ExtraNetworkTag& tag : parseExtraNetworks(config.prompt).tags)
        if (isLoraKind(tag.kind)) return true;
    return false;
}

std::vector<std::string> cliLoraFolders(const std::string& runModel) {
    const char* variable = std::getenv(kModelsFolderVariable);
    return modelsFolders(variable ? std::string_view(variable) : std::string_view(), runModel);
}

LoraRun::LoraRun(LoraRun&&) noexcept = default;
LoraRun& LoraRun::operator=(LoraRun&&) noexcept = default;
LoraRun::~LoraRun() = default;

LoraRun::LoraRun(const RunConfig& config, const std::vector<std::string>& modelsFolders) {
    const ExtraNetworkPrompt parsed = parseExtraNetworks(config.prompt);
    std::vector<std::pair<LoraTag, std::string>> wanted;  // each LoRA and the text that finds its file
    for (const LoraTag& tag : loraTags(parsed.tags)) wanted.emplace_back(tag, tag.name);
    for (const LoraSetting& setting : config.loras)
        wanted.emplace_back(LoraTag{loraName(setting.file), setting.teMultiplier, setting.unetMultiplier, std::nullopt},
                            setting.file);
    for (const ExtraNetworkTag& tag : parsed.tags)
        if (!isLoraKind(tag.kind))
            notes_.push_back("prompt: <" + excerpt(tag.kind, 40) + ":" +
                             excerpt(tag.items.empty() ? std::string() : tag.items.front(), 80) +
                             "> is taken out of the prompt and not applied: Tessera merges LoRA and LyCORIS "
                             "(<lora:...>, <lyco:...>) only");

    std::map<std::string, const LoraFile*> opened;  // by the path found
    for (const auto& [tag, given] : wanted) {
        const ModelFile found = findLoraFile(given, modelsFolders);
        const LoraFile*& file = opened[found.path];
        if (file == nullptr) {
            try {
                files_.push_back(std::make_unique<LoraFile>(LoraFile::open(found.path)));
            } catch (const LoraFileError& e) {  // names the file; the message says which LoRA too
                throw ValidationError("lora", "lora: " + inQuotes(tag.name) + ": " + e.what());
            }
            file = files_.back().get();
        }
        Lora lora;
        lora.tag = tag;
        lora.file = file;
        lora.shownFile = found.byName ? std::filesystem::path(found.path).parent_path().filename().string() + "/" +
                                            std::filesystem::path(found.path).filename().string()
                                      : shownPath(found.path);
        loras_.push_back(std::move(lora));
    }
    if (loras_.empty()) return;
    if (const std::optional<SdModelConfigs> configs = readSdModelConfigs(config.model)) {
        const LoraKeyMap keys = keyMapOf(*configs);
        checkFit(keys.family(), keys);
    }
}

void LoraRun::checkFit(SdFamily family, const LoraKeyMap& keys) {
    std::map<const LoraFile*, LoraFit> fits;
    for (Lora& lora : loras_) {
        auto it = fits.find(lora.file);
        if (it == fits.end())
            it = fits.emplace(lora.file, checkLoraFit(*lora.file, buildLoraNetwork(*lora.file), keys)).first;
        lora.fit = it->second;
        if (!lora.fit->fits(family))
            throw ValidationError("lora", "lora: " + inQuotes(lora.tag.name) + " (" + lora.shownFile +
                                              ") does not fit the model: " + lora.fit->verdict(family));
    }
    checkedFamily_ = family;
}

std::shared_ptr<const SdModel> LoraRun::merge(std::shared_ptr<const SdModel> model) {
    // A copy of the model's parts, the caller's reference dropped: where it was the only one, the
    // components are this copy's alone and change in place.
    SdModel merged = *model;
    model.reset();
    if (checkedFamily_ != merged.family) checkFit(merged.family, LoraKeyMap::forModel(merged));

    const auto start = Clock::now();
    std::vector<LoraApplication> applications;
    for (const Lora& lora : loras_)
        applications.push_back(
            LoraApplication{lora.file, lora.tag.name, lora.tag.teMultiplier, lora.tag.unetMultiplier, lora.tag.dyn});
    // The originals a restore would need go with the set: this model serves one render.
    reports_ = mergeLoras(merged, applications).reports();
    mergeMs_ = msSince(start);
    for (const LoraMergeReport& r : reports_) {
        const std::vector<std::string> notes = loraMergeNotes(r);
        mergeNotes_.insert(mergeNotes_.end(), notes.begin(), notes.end());
    }
    return std::make_shared<const SdModel>(std::move(merged));
}

void LoraRun::addTo(RunRecord& record) const {
    std::size_t modules = 0;
    for (std::size_t i = 0; i < loras_.size(); ++i) {
        const Lora& lora = loras_[i];
        LoraRecord r = loraRecordOf(lora.tag, *lora.file, i < reports_.size() ? &reports_[i] : nullptr);
        modules += static_cast<std::size_t>(r.modulesMerged);
        record.messages.push_back(describe(r));
        record.loras.push_back(std::move(r));
    }
    record.messages.insert(record.messages.end(), notes_.begin(), notes_.end());
    record.messages.insert(record.messages.end(), mergeNotes_.begin(), mergeNotes_.end());
    record.messages.push_back("lora: " + std::to_string(loras_.size()) + " LoRA(s), " + std::to_string(modules) +
                              " modules, merged into the model's float32 weights (deltas in float64) in " +
                              std::to_string(static_cast<long long>(mergeMs_)) +
                              " ms, before the engine prepared them");
    record.prepareMs += mergeMs_;
}

std::vector<std::string> LoraRun::describeLines() const {
    std::vector<std::string> lines;
    for (const Lora& lora : loras_) {
        std::string line = lora.tag.name + ": " + lora.shownFile + " (hash " + lora.file->a1111ShortHash() + "), te " +
                           formatNumber(lora.tag.teMultiplier) + ", unet " + formatNumber(lora.tag.unetMultiplier);
        if (lora.fit && checkedFamily_) line += "; " + lora.fit->verdict(*checkedFamily_);
        lines.push_back(std::move(line));
    }
    return lines;
}

std::vector<std::string> LoraRun::hashNotes(const std::vector<std::pair<std::string, std::string>>& pngHashes) const {
    std::vector<std::string> notes;
    for (const Lora& lora : loras_) {
        const std::string name = hashName(lora.tag.name), here = lora.file->a1111ShortHash();
        for (const auto& [pngName, pngHash] : pngHashes)
            if (pngName == name && !pngHash.empty() && pngHash != here) {
                notes.push_back("lora: " + inQuotes(lora.tag.name) + " is " + lora.shownFile + " here (hash " + here +
                                "); the PNG was made with hash " + excerpt(pngHash, 40) +
                                ": another file or version, so the image may differ");
                break;
            }
    }
    return notes;
}

}  // namespace tessera
