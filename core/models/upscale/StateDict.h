// StateDict: the named tensors of an upscale model file as detection and loading read them, from
// any container that lists (name, shape) and reads a tensor as float32: a safetensors file
// (core/formats/Safetensors.h) or a PyTorch checkpoint read without executing it, whose readers
// share that API (tensors() with .name and .shape; readFloat32(name)). Names are canonicalised
// as spandrel's canonicalize_state_dict does for the nested dicts of a checkpoint
// (spandrel __helpers/canonicalize.py): the wrapper a training tool saved the weights under
// ("params_ema.", preferred to "params." as Real-ESRGAN's RealESRGANer does) and a prefix every
// key shares ("module.", "netG.") are stripped. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"

namespace tessera {

class StateDict {
public:
    struct Entry {
        std::string name;  // canonical (wrapper and shared prefix stripped)
        std::vector<std::int64_t> shape;
    };
    // Reads the tensor stored under a file's own key (the canonical name with `prefix()` before it).
    using Reader = std::function<std::vector<float>(const std::string& fileKey)>;

    // `entries` under the file's own keys; canonicalised here. `source` names the file in messages.
    StateDict(std::vector<Entry> entries, Reader read, std::string source);

    // Any file whose tensors() lists entries with .name and .shape and which reads one as float32 by
    // name (SafetensorsFile, the PyTorch checkpoint reader). `file` must outlive the StateDict.
    template <class File>
    static StateDict fromFile(const File& file) {
        std::vector<Entry> entries;
        for (const auto& t : file.tensors()) entries.push_back(Entry{t.name, {t.shape.begin(), t.shape.end()}});
        return StateDict(
            std::move(entries), [&file](const std::string& key) { return file.readFloat32(key); }, file.path());
    }
    // Tensors held in memory (tests, tools); names as a file would hold them.
    static StateDict fromTensors(TensorMap tensors, std::string source = "tensors");

    const std::string& source() const { return source_; }
    // What was stripped from every file key ("params_ema.", "module."; "" none).
    const std::string& prefix() const { return prefix_; }
    // Canonical entries in the file's order.
    const std::vector<Entry>& entries() const { return entries_; }
    const Entry* find(const std::string& name) const;
    bool has(const std::string& name) const { return find(name) != nullptr; }
    // The shape under `name` (canonical); empty when absent.
    std::vector<std::int64_t> shape(const std::string& name) const;
    // The tensor under a canonical name as float32; throws ModelError naming the file and key.
    std::vector<float> read(const std::string& name) const;
    // Keys that the wrapper choice left out ("params." when "params_ema." was taken).
    std::size_t droppedCount() const { return dropped_; }

private:
    std::vector<Entry> entries_;
    std::map<std::string, std::size_t> index_;
    Reader read_;
    std::string source_, prefix_;
    std::size_t dropped_ = 0;
    std::shared_ptr<const TensorMap> owned_;  // fromTensors
};

// The keys a family expects of a state dict, checked all at once: each expected key present with
// its shape, optional keys checked when present, and no key left over. check() throws ModelError
// naming the family, the missing, mis-shaped and unexpected keys (the first few of each, and their
// counts).
class StateDictCheck {
public:
    explicit StateDictCheck(const StateDict& dict) : dict_(dict) {}
    void expect(const std::string& name, std::vector<std::int64_t> shape);
    void allow(const std::string& name, std::vector<std::int64_t> shape);
    void check(const std::string& family) const;

private:
    const StateDict& dict_;
    std::map<std::string, std::pair<std::vector<std::int64_t>, bool>> keys_;  // shape, required
};

// "a, b, c and 12 more" of at most `shown` names.
std::string listNames(const std::vector<std::string>& names, std::size_t shown = 6);

}  // namespace tessera
