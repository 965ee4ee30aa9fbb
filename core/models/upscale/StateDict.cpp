#include "core/models/upscale/StateDict.h"

#include <algorithm>

#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"

namespace tessera {

namespace {

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool allStartWith(const std::vector<StateDict::Entry>& entries, const std::string& prefix) {
    return !entries.empty() && std::all_of(entries.begin(), entries.end(),
                                           [&](const StateDict::Entry& e) { return startsWith(e.name, prefix); });
}

}  // namespace

std::string listNames(const std::vector<std::string>& names, std::size_t shown) {
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
    return s;
}

StateDict::StateDict(std::vector<Entry> entries, Reader read, std::string source)
    : read_(std::move(read)), source_(std::move(source)) {
    // The dicts a training tool wraps the weights in, in spandrel's order; "model" and "net" are
    // left out: flattened, "model." is the original ESRGAN's own first module.
    for (const char* wrapper : {"model_state_dict.", "state_dict.", "params_ema.", "params-ema.", "params."}) {
        const std::string w = wrapper;
        const auto inside =
            std::count_if(entries.begin(), entries.end(), [&](const Entry& e) { return startsWith(e.name, w); });
        if (inside == 0) continue;
        dropped_ = entries.size() - static_cast<std::size_t>(inside);
        std::vector<Entry> kept;
        for (Entry& e : entries)
            if (startsWith(e.name, w)) kept.push_back(Entry{e.name.substr(w.size()), std::move(e.shape)});
        entries = std::move(kept);
        prefix_ = w;
        break;
    }
    for (const char* common : {"module.", "netG."})
        if (allStartWith(entries, common)) {
            const std::string c = common;
            for (Entry& e : entries) e.name.erase(0, c.size());
            prefix_ += c;
        }
    entries_ = std::move(entries);
    for (std::size_t i = 0; i < entries_.size(); ++i)
        if (!index_.emplace(entries_[i].name, i).second)
            throw ModelError(source_ + ": the key '" + prefix_ + entries_[i].name + "' appears twice");
}

StateDict StateDict::fromTensors(TensorMap tensors, std::string source) {
    auto owned = std::make_shared<const TensorMap>(std::move(tensors));
    std::vector<Entry> entries;
    for (const auto& [name, t] : *owned) entries.push_back(Entry{name, t.shape});
    StateDict dict(
        std::move(entries), [owned](const std::string& key) { return owned->at(key).data; }, std::move(source));
    dict.owned_ = owned;
    return dict;
}

const StateDict::Entry* StateDict::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
}

std::vector<std::int64_t> StateDict::shape(const std::string& name) const {
    const Entry* e = find(name);
    return e ? e->shape : std::vector<std::int64_t>{};
}

std::vector<float> StateDict::read(const std::string& name) const {
    if (!has(name)) throw ModelError(source_ + ": no tensor '" + prefix_ + name + "'");
    try {
        return read_(prefix_ + name);
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    } catch (const TorchCheckpointError& e) {
        throw ModelError(e.what());
    }
}

void StateDictCheck::expect(const std::string& name, std::vector<std::int64_t> shape) {
    keys_[name] = {std::move(shape), true};
}

void StateDictCheck::allow(const std::string& name, std::vector<std::int64_t> shape) {
    keys_[name] = {std::move(shape), false};
}

void StateDictCheck::check(const std::string& family) const {
    std::vector<std::string> missing, misshaped, unexpected;
    for (const auto& [name, want] : keys_) {
        const StateDict::Entry* e = dict_.find(name);
        if (!e) {
            if (want.second) missing.push_back(dict_.prefix() + name);
        } else if (e->shape != want.first) {
            misshaped.push_back(dict_.prefix() + name + " " + shapeToString(e->shape) + " (expected " +
                                shapeToString(want.first) + ")");
        }
    }
    for (const StateDict::Entry& e : dict_.entries())
        if (!keys_.count(e.name)) unexpected.push_back(dict_.prefix() + e.name);
    if (missing.empty() && misshaped.empty() && unexpected.empty()) return;
    std::string message = dict_.source() + ": not a " + family + " state dict as its keys and shapes say:";
    if (!missing.empty())
        message += " missing " + std::to_string(missing.size()) + " key(s): " + listNames(missing) + ";";
    if (!misshaped.empty())
        message += " " + std::to_string(misshaped.size()) + " key(s) of another shape: " + listNames(misshaped) + ";";
    if (!unexpected.empty())
        message += " " + std::to_string(unexpected.size()) + " unexpected key(s): " + listNames(unexpected) + ";";
    message.pop_back();
    throw ModelError(message);
}

}  // namespace tessera
