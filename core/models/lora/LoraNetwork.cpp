// LoraNetwork: adapter suffixes and the algorithm each key set selects (A1111
// extensions-builtin/Lora/network_lora.py ModuleTypeLora, network_hada.py, network_ia3.py,
// network_lokr.py, network_full.py, network_norm.py, network_glora.py, network_oft.py create_module;
// ComfyUI comfy/weight_adapter/lora.py LoRAAdapter.load for the diffusers / PEFT spellings).
#include "core/models/lora/LoraNetwork.h"

#include <algorithm>
#include <array>
#include <set>
#include <utility>

namespace tessera {

namespace {

struct SuffixRule {
    std::string_view suffix;  // with its separator: ".lora_up.weight", "_lora.up.weight"
    LoraPart part;
    LoraAlgorithm other;  // for LoraPart::Other: the algorithm the key belongs to
};

// clang-format off
constexpr std::array kSuffixes{
    // kohya sd-scripts networks/lora.py, LyCORIS locon
    SuffixRule{".lora_up.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora_down.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    SuffixRule{".lora_mid.weight", LoraPart::Mid, LoraAlgorithm::LoRA},
    // PEFT (lora_A = down, lora_B = up), with and without the adapter name ComfyUI also accepts
    SuffixRule{".lora_B.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora_A.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    SuffixRule{".lora_B.default.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora_A.default.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    SuffixRule{".lora_B", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora_A", LoraPart::Down, LoraAlgorithm::LoRA},
    // diffusers: attention processors (to_q_lora.down), LoRACompatible layers (.lora.down) and the
    // text encoder's MLP (lora_linear_layer); loaders/lora_conversion_utils.py _convert_unet_lora_key
    SuffixRule{"_lora.up.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{"_lora.down.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    SuffixRule{".lora.up.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora.down.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    SuffixRule{".lora_linear_layer.up.weight", LoraPart::Up, LoraAlgorithm::LoRA},
    SuffixRule{".lora_linear_layer.down.weight", LoraPart::Down, LoraAlgorithm::LoRA},
    // LyCORIS LoHa / LoKr
    SuffixRule{".hada_w1_a", LoraPart::HadaW1A, LoraAlgorithm::LoHa},
    SuffixRule{".hada_w1_b", LoraPart::HadaW1B, LoraAlgorithm::LoHa},
    SuffixRule{".hada_w2_a", LoraPart::HadaW2A, LoraAlgorithm::LoHa},
    SuffixRule{".hada_w2_b", LoraPart::HadaW2B, LoraAlgorithm::LoHa},
    SuffixRule{".hada_t1", LoraPart::HadaT1, LoraAlgorithm::LoHa},
    SuffixRule{".hada_t2", LoraPart::HadaT2, LoraAlgorithm::LoHa},
    SuffixRule{".lokr_w1", LoraPart::LokrW1, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_w1_a", LoraPart::LokrW1A, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_w1_b", LoraPart::LokrW1B, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_w2", LoraPart::LokrW2, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_w2_a", LoraPart::LokrW2A, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_w2_b", LoraPart::LokrW2B, LoraAlgorithm::LoKr},
    SuffixRule{".lokr_t2", LoraPart::LokrT2, LoraAlgorithm::LoKr},
    // LyCORIS full / norm
    SuffixRule{".diff", LoraPart::Diff, LoraAlgorithm::Full},
    SuffixRule{".diff_b", LoraPart::DiffBias, LoraAlgorithm::Full},
    SuffixRule{".w_norm", LoraPart::NormWeight, LoraAlgorithm::Norm},
    SuffixRule{".b_norm", LoraPart::NormBias, LoraAlgorithm::Norm},
    // modifiers
    SuffixRule{".alpha", LoraPart::Alpha, LoraAlgorithm::LoRA},
    SuffixRule{".scale", LoraPart::Scale, LoraAlgorithm::LoRA},
    SuffixRule{".dora_scale", LoraPart::DoraScale, LoraAlgorithm::LoRA},
    SuffixRule{".lora_magnitude_vector", LoraPart::MagnitudeVector, LoraAlgorithm::LoRA},
    SuffixRule{".lora_magnitude_vector.weight", LoraPart::MagnitudeVector, LoraAlgorithm::LoRA},
    // recognised, not merged
    SuffixRule{".on_input", LoraPart::Other, LoraAlgorithm::IA3},
    SuffixRule{".a1.weight", LoraPart::Other, LoraAlgorithm::GLoRA},
    SuffixRule{".a2.weight", LoraPart::Other, LoraAlgorithm::GLoRA},
    SuffixRule{".b1.weight", LoraPart::Other, LoraAlgorithm::GLoRA},
    SuffixRule{".b2.weight", LoraPart::Other, LoraAlgorithm::GLoRA},
    SuffixRule{".oft_blocks", LoraPart::Other, LoraAlgorithm::OFT},
    SuffixRule{".oft_diag", LoraPart::Other, LoraAlgorithm::OFT},
    SuffixRule{".boft_blocks", LoraPart::Other, LoraAlgorithm::OFT},
};
// clang-format on

const SuffixRule* longestRule(std::string_view key) {
    const SuffixRule* best = nullptr;
    for (const SuffixRule& r : kSuffixes)
        if (key.size() > r.suffix.size() && key.ends_with(r.suffix) &&
            (best == nullptr || r.suffix.size() > best->suffix.size()))
            best = &r;
    return best;
}

// The parts an algorithm reads; any other part of its module is reported, not dropped.
bool usesPart(LoraAlgorithm a, LoraPart p) {
    switch (a) {
        case LoraAlgorithm::LoRA:
            return p == LoraPart::Up || p == LoraPart::Down || p == LoraPart::Mid || p == LoraPart::Alpha ||
                   p == LoraPart::Scale || p == LoraPart::DoraScale || p == LoraPart::MagnitudeVector;
        case LoraAlgorithm::LoHa:
            return (p >= LoraPart::HadaW1A && p <= LoraPart::HadaT2) || p == LoraPart::Alpha || p == LoraPart::Scale ||
                   p == LoraPart::DoraScale;
        case LoraAlgorithm::LoKr:
            return (p >= LoraPart::LokrW1 && p <= LoraPart::LokrT2) || p == LoraPart::Alpha || p == LoraPart::Scale ||
                   p == LoraPart::DoraScale;
        case LoraAlgorithm::Full:
            return p == LoraPart::Diff || p == LoraPart::DiffBias || p == LoraPart::Alpha || p == LoraPart::Scale;
        case LoraAlgorithm::Norm:
            return p == LoraPart::NormWeight || p == LoraPart::NormBias;
        case LoraAlgorithm::IA3:
        case LoraAlgorithm::GLoRA:
        case LoraAlgorithm::OFT:
            return true;
    }
    return false;
}

struct Group {
    std::map<LoraPart, const LoraTensorInfo*> parts;
    std::vector<std::string> keys;
    std::set<LoraAlgorithm> others;                  // algorithms named by LoraPart::Other keys
    std::map<std::string, LoraAlgorithm> otherKeys;  // those keys
    std::set<std::string> unused;                    // keys of the module its algorithm does not read
};

// A1111's module_types order: LoRA, LoHa, IA3, LoKr, full, norm, GLoRA, OFT.
std::optional<LoraAlgorithm> algorithmOf(const Group& g) {
    const auto has = [&](LoraPart p) { return g.parts.count(p) != 0; };
    if (has(LoraPart::Up) && has(LoraPart::Down)) return LoraAlgorithm::LoRA;
    if (has(LoraPart::HadaW1A) && has(LoraPart::HadaW1B) && has(LoraPart::HadaW2A) && has(LoraPart::HadaW2B))
        return LoraAlgorithm::LoHa;
    if (g.others.count(LoraAlgorithm::IA3)) return LoraAlgorithm::IA3;
    const bool w1 = has(LoraPart::LokrW1) || (has(LoraPart::LokrW1A) && has(LoraPart::LokrW1B));
    const bool w2 = has(LoraPart::LokrW2) || (has(LoraPart::LokrW2A) && has(LoraPart::LokrW2B));
    if (w1 && w2) return LoraAlgorithm::LoKr;
    if (has(LoraPart::Diff)) return LoraAlgorithm::Full;
    if (has(LoraPart::NormWeight)) return LoraAlgorithm::Norm;
    if (g.others.count(LoraAlgorithm::GLoRA)) return LoraAlgorithm::GLoRA;
    if (g.others.count(LoraAlgorithm::OFT)) return LoraAlgorithm::OFT;
    return std::nullopt;
}

}  // namespace

std::string_view toString(LoraAlgorithm a) {
    switch (a) {
        case LoraAlgorithm::LoRA:
            return "LoRA";
        case LoraAlgorithm::LoHa:
            return "LoHa";
        case LoraAlgorithm::LoKr:
            return "LoKr";
        case LoraAlgorithm::Full:
            return "full";
        case LoraAlgorithm::Norm:
            return "norm";
        case LoraAlgorithm::IA3:
            return "IA3";
        case LoraAlgorithm::GLoRA:
            return "GLoRA";
        case LoraAlgorithm::OFT:
            return "OFT";
    }
    return "?";
}

bool isMergeable(LoraAlgorithm a) {
    return a == LoraAlgorithm::LoRA || a == LoraAlgorithm::LoHa || a == LoraAlgorithm::LoKr ||
           a == LoraAlgorithm::Full || a == LoraAlgorithm::Norm;
}

std::int64_t LoraModule::rank() const {
    if (const LoraTensorInfo* d = part(LoraPart::Down); d && !d->shape.empty()) return d->shape[0];
    if (const LoraTensorInfo* b = part(LoraPart::HadaW1B); b && !b->shape.empty()) return b->shape[0];
    return 0;
}

std::optional<LoraKeySplit> splitLoraKey(std::string_view key) {
    const SuffixRule* r = longestRule(key);
    if (r == nullptr) return std::nullopt;
    return LoraKeySplit{std::string(key.substr(0, key.size() - r->suffix.size())), r->part};
}

LoraNetwork buildLoraNetwork(const LoraFile& file) {
    std::map<std::string, Group> groups;
    std::vector<const LoraTensorInfo*> unsplit;
    for (const LoraTensorInfo& t : file.tensors()) {
        const SuffixRule* r = longestRule(t.key);
        if (r == nullptr) {
            unsplit.push_back(&t);
            continue;
        }
        Group& g = groups[t.key.substr(0, t.key.size() - r->suffix.size())];
        g.keys.push_back(t.key);
        if (r->part == LoraPart::Other) {
            g.others.insert(r->other);
            g.otherKeys.emplace(t.key, r->other);
        } else if (const auto [it, added] = g.parts.emplace(r->part, &t); !added)
            g.unused.insert(t.key);  // the same part under a second spelling: the first is read
    }
    LoraNetwork net;
    // "<stem>.weight" belongs to an IA3 module (A1111 network_ia3.py: weight + on_input); any other
    // key without a known suffix is unknown.
    for (const LoraTensorInfo* t : unsplit) {
        constexpr std::string_view kWeight = ".weight";
        if (t->key.ends_with(kWeight)) {
            const auto it = groups.find(t->key.substr(0, t->key.size() - kWeight.size()));
            if (it != groups.end() && it->second.others.count(LoraAlgorithm::IA3)) {
                it->second.keys.push_back(t->key);
                it->second.otherKeys.emplace(t->key, LoraAlgorithm::IA3);
                continue;
            }
        }
        net.unknownKeys.push_back(t->key);
    }
    for (auto& [stem, g] : groups) {
        std::sort(g.keys.begin(), g.keys.end());
        const std::optional<LoraAlgorithm> algorithm = algorithmOf(g);
        if (!algorithm) {
            net.unknownKeys.insert(net.unknownKeys.end(), g.keys.begin(), g.keys.end());
            continue;
        }
        LoraModule m;
        m.stem = stem;
        m.algorithm = *algorithm;
        for (const auto& [part, tensor] : g.parts) {
            if (usesPart(m.algorithm, part))
                m.parts[part] = tensor;
            else
                g.unused.insert(tensor->key);
        }
        for (const auto& [key, keyAlgorithm] : g.otherKeys)
            if (keyAlgorithm != m.algorithm) g.unused.insert(key);
        for (const std::string& k : g.keys) {
            if (g.unused.count(k))
                net.unknownKeys.push_back(k);
            else
                m.keys.push_back(k);
        }
        net.modules.push_back(std::move(m));
    }
    std::sort(net.unknownKeys.begin(), net.unknownKeys.end());
    return net;
}

}  // namespace tessera
