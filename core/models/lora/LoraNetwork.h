// LoraNetwork: a LoRA file's keys grouped into modules, each with the algorithm its tensor suffixes
// select, as A1111's Lora extension tries module types in order and takes the first that accepts a
// module's key set (extensions-builtin/Lora/networks.py module_types: network_lora, network_hada,
// network_ia3, network_lokr, network_full, network_norm, network_glora, network_oft) and ComfyUI's
// adapters do (comfy/weight_adapter/lora.py LoRAAdapter.load lists the key spellings). Names only,
// no tensor data: a network is built from a file's listing in microseconds. Qt-free.
//
// A key is split into a module stem and an adapter suffix by the longest known suffix (not at the first
// dot: PEFT and diffusers keys are dotted module paths), e.g.
//   lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight   (kohya: sd-scripts networks/lora.py)
//   unet.down_blocks.0.attentions.0.proj_in.lora_A.weight           (diffusers / PEFT)
//   unet.down_blocks.0....attn1.processor.to_q_lora.down.weight      (diffusers attention processors)
//   text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_linear_layer.down.weight
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/models/lora/LoraFile.h"

namespace tessera {

enum class LoraAlgorithm {
    LoRA,  // lora_up / lora_down [lora_mid] (LoCon, its Tucker form), or lora_B / lora_A
    LoHa,  // hada_w1_a, hada_w1_b, hada_w2_a, hada_w2_b [hada_t1, hada_t2]
    LoKr,  // lokr_w1 | lokr_w1_a + lokr_w1_b, lokr_w2 | lokr_w2_a + lokr_w2_b [lokr_t2]
    Full,  // diff [diff_b]: the whole weight (and bias) difference
    Norm,  // w_norm [b_norm]: a norm layer's weight (and bias) difference
    // Recognised, not merged (named in the merge's notes): IA3, GLoRA, OFT / BOFT.
    IA3,
    GLoRA,
    OFT,
};
std::string_view toString(LoraAlgorithm);  // "LoRA", "LoHa", "LoKr", "full", "norm", "IA3", "GLoRA", "OFT"
bool isMergeable(LoraAlgorithm);

// What a tensor is to its module.
enum class LoraPart {
    Up,
    Down,
    Mid,
    HadaW1A,
    HadaW1B,
    HadaW2A,
    HadaW2B,
    HadaT1,
    HadaT2,
    LokrW1,
    LokrW1A,
    LokrW1B,
    LokrW2,
    LokrW2A,
    LokrW2B,
    LokrT2,
    Diff,
    DiffBias,
    NormWeight,
    NormBias,
    Alpha,            // 0-d: scale alpha / rank (kohya networks/lora.py LoRAModule)
    Scale,            // 0-d: replaces alpha / rank (A1111 network.py NetworkModule.calc_scale)
    DoraScale,        // LyCORIS / kohya DoRA magnitude, [out, 1, ...] or [1, in, ...]
    MagnitudeVector,  // PEFT DoRA magnitude (lora_magnitude_vector), [out]
    Other,            // a key of an algorithm Tessera does not merge (IA3, GLoRA, OFT)
};

struct LoraModule {
    std::string stem;  // the key without its adapter suffix: the module's name in the file
    LoraAlgorithm algorithm = LoraAlgorithm::LoRA;
    std::map<LoraPart, const LoraTensorInfo*> parts;  // into the LoraFile the network was built from
    std::vector<std::string> keys;                    // every file key of the module, sorted
    const LoraTensorInfo* part(LoraPart p) const {
        const auto it = parts.find(p);
        return it == parts.end() ? nullptr : it->second;
    }
    // The LoRA rank (lora_down's rows) or, for LoHa, hada_w1_b's rows; 0 for the others.
    std::int64_t rank() const;
};

struct LoraNetwork {
    std::vector<LoraModule> modules;  // mergeable or recognised, by stem
    // Keys with no known adapter suffix, and modules whose key set no algorithm accepts (a lone
    // lora_up, an alpha without factors): "<key>" each, sorted.
    std::vector<std::string> unknownKeys;
};

// Groups `file`'s tensors (names and shapes only). The network points into `file`, which must
// outlive it.
LoraNetwork buildLoraNetwork(const LoraFile& file);

// The module stem and part of one key; nullopt when no adapter suffix matches. For tests and tools.
struct LoraKeySplit {
    std::string stem;
    LoraPart part = LoraPart::Other;
};
std::optional<LoraKeySplit> splitLoraKey(std::string_view key);

}  // namespace tessera
