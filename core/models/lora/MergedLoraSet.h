// MergedLoraSet: LoRAs merged into a model's float32 weights in place, in prompt order (each on the
// weights the previous one left, as A1111 and ComfyUI apply several networks), with the originals of
// every tensor touched kept so that the set can be taken out again bit for bit and another merged
// without reading the checkpoint again (A1111 extensions-builtin/Lora/networks.py
// network_restore_weights_from_backup / store_weights_backup). Text-encoder modules take the te
// multiplier, UNet modules the unet multiplier (A1111 network.py NetworkModule.multiplier). Qt-free.
//
// Threads: merge() runs the modules of one LoRA on several threads (each module owns its target
// tensors); the caller must keep other readers and writers of the target away while it runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/lora/LoraDelta.h"
#include "core/models/lora/LoraFile.h"
#include "core/models/lora/LoraKeyMap.h"

namespace tessera {

// One LoRA of the set: A1111's <lora:name:te:unet[:dyn]>.
struct LoraApplication {
    const LoraFile* file = nullptr;  // read during merge() only
    std::string name;                // as the prompt names it (A1111's mentioned_name), for notes
    double teMultiplier = 1.0;
    double unetMultiplier = 1.0;
    std::optional<std::int64_t> dyn;  // A1111's DyLoRA rank limit (LoRA modules)
};

struct LoraMergeOptions {
    DoraConvention dora = DoraConvention::LyCORIS;
    // Threads merging modules; 0: one per hardware thread (at most 16) where OpenBLAS runs single-
    // threaded, else one (OpenBLAS then spreads each product over its own threads).
    int threads = 0;
};

// Where a merge writes: a model's tensors under diffusers' / transformers' names. Null components
// are not touched (their modules are reported as naming nothing).
struct LoraWeights {
    std::map<std::string, HostTensor>* unet = nullptr;
    std::map<std::string, HostTensor>* textEncoder = nullptr;
    std::map<std::string, HostTensor>* textEncoder2 = nullptr;
    std::map<std::string, HostTensor>* component(LoraComponent c) const;
};

// What one LoRA's merge did, as data for the run's notes.
struct LoraMergeReport {
    std::string name;  // LoraApplication::name
    std::string path;  // the file
    std::size_t modulesMerged = 0;
    std::size_t modulesSkipped = 0;  // their component's multiplier was 0: nothing to add
    // File keys that name no module of the model (unknown adapter suffixes included), sorted.
    std::vector<std::string> unmatchedKeys;
    // "<stem>: <why>": modules whose shapes do not fit their target (not merged).
    std::vector<std::string> shapeMismatches;
    // "<stem> (<algorithm>)": recognised modules Tessera does not merge (IA3, GLoRA, OFT).
    std::vector<std::string> notMerged;
    // "<key>: <why>": entries of the file that are not float tensors.
    std::vector<std::string> skippedEntries;
};

class MergedLoraSet {
public:
    MergedLoraSet() = default;  // nothing merged
    MergedLoraSet(MergedLoraSet&&) noexcept = default;
    MergedLoraSet& operator=(MergedLoraSet&&) noexcept = default;
    MergedLoraSet(const MergedLoraSet&) = delete;
    MergedLoraSet& operator=(const MergedLoraSet&) = delete;

    // Merges `loras` in order into `target`, whose tensors `keys` describes (LoraKeyMap::forModel).
    // Modules that do not fit are reported and left out; a file that fails while being read throws
    // LoraFileError after every tensor already changed has been put back (the target is then as it
    // was). To change a model's set: restore() the old one, then merge the new one.
    static MergedLoraSet merge(const LoraWeights& target, const LoraKeyMap& keys,
                               const std::vector<LoraApplication>& loras, const LoraMergeOptions& options = {});

    // Puts back the original of every tensor this set changed (bit for bit); the set is empty afterwards.
    // `target` must be the weights merge() wrote, not changed since by anything else.
    void restore(const LoraWeights& target);

    bool empty() const { return originals_.empty() && reports_.empty(); }
    // loraSetDigest of what was merged; empty for an empty set.
    const std::string& digest() const { return digest_; }
    const std::vector<LoraMergeReport>& reports() const { return reports_; }
    std::size_t tensorsChanged() const { return originals_.size(); }
    // Bytes of the originals kept for restore().
    std::uint64_t backupBytes() const;

private:
    using TensorKey = std::pair<LoraComponent, std::string>;
    void mergeOne(const LoraWeights& target, const LoraKeyMap& keys, const LoraApplication& lora,
                  const LoraMergeOptions& options);

    std::map<TensorKey, std::vector<float>> originals_;
    std::vector<LoraMergeReport> reports_;
    std::string digest_;
};

// A digest of a LoRA set for keying caches of what depends on the merged weights: SHA-256 (hex) over
// each LoRA's whole-file SHA-256, te and unet multipliers (exact), dyn, in order, and the DoRA
// convention; independent of file names and paths. Empty for an empty list.
std::string loraSetDigest(const std::vector<LoraApplication>& loras, const LoraMergeOptions& options = {});

}  // namespace tessera
