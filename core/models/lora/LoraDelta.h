// LoraDelta: what one LoRA / LyCORIS module adds to its target weight, and adding it. Every factor is
// read as float32, the delta is computed in double (products of the factors, Tucker contractions,
// Kronecker products, DoRA norms), and the sum W + multiplier * scale * delta is rounded once to the
// model's float32: the exact result of the upstream formulas, as ComfyUI / Forge compute in float32
// and round once (A1111 computes in the UI's half precision). The formulas:
//   LoRA   up @ down, reshaped to W (a 3x3 down is LoCon; lora_mid the Tucker core: A1111
//          extensions-builtin/Lora/lyco_helpers.py rebuild_conventional / rebuild_cp_decomposition);
//          scale alpha / rank (kohya-ss sd-scripts networks/lora.py LoRAModule), 1 without alpha;
//          A1111's DyLoRA `dyn` keeps the first dyn ranks with the full rank's scale
//   LoHa   (w1a @ w1b) * (w2a @ w2b), Tucker with hada_t1/t2 (A1111 network_hada.py, lyco_helpers.py
//          make_weight_cp); scale alpha / rows of w1b
//   LoKr   kron(w1, w2), each full, factored or (w2) Tucker (A1111 network_lokr.py make_kron); scale
//          alpha / rank of the factored w2 (else of w1) only when a factor is factored, else 1
//          (ComfyUI comfy/weight_adapter/lokr.py calculate_weight)
//   full   diff (+ diff_b into the bias), norm: w_norm (+ b_norm); scale 1
//   A `scale` tensor replaces alpha / rank (A1111 network.py NetworkModule.calc_scale).
// DoRA (dora_scale; PEFT's lora_magnitude_vector) per DoraConvention. Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/formats/ModelWeights.h"
#include "core/models/lora/LoraFile.h"
#include "core/models/lora/LoraNetwork.h"

namespace tessera {

// How a LyCORIS / kohya `dora_scale` magnitude is applied; three programs disagree. V = W + scale * delta.
enum class DoraConvention {
    // The trainer's own (KohakuBlueleaf/LyCORIS lycoris/modules/locon.py apply_weight_decompose):
    // norm of V along the axis dora_scale spans ([out, 1, ...]: per output row; [1, in, ...]: per
    // input channel) + float32 eps; k = m / norm; a multiplier != 1 gives k = mult (k - 1) + 1;
    // W' = V k. At multiplier 1 this is PEFT's DoRA merge.
    LyCORIS,
    // A1111 extensions-builtin/Lora/network.py apply_weight_decompose + finalize_updown: norm of V
    // per input channel always (no eps), W' = W + mult (V m / norm - W), m broadcast by its shape.
    A1111,
    // ComfyUI comfy/weight_adapter/base.py weight_decompose (and Forge): output axis: norm of W (before
    // the delta) per row; input axis: norm of V per input channel; + float32 eps; calc = V m / norm;
    // W' = calc at strength 1, else W + strength (calc - W).
    ComfyUI,
};
std::string_view toString(DoraConvention);  // "lycoris", "a1111", "comfyui"
// Throws ValidationError("lora dora") naming the accepted values.
DoraConvention parseDoraConvention(std::string_view text);

// The delta's rows (the output dimension) and element count, from the module's factor shapes alone;
// nullopt with `why` ("lora_down [4, 16] does not follow lora_up [32, 8]") for factors that do not
// fit together. A module merges into a weight of the same rows and element count (A1111 reshapes a
// delta of equal numel: a 1x1-conv LoRA onto a Linear and back).
struct LoraDeltaShape {
    std::int64_t rows = 0;
    std::int64_t numel = 0;
};
std::optional<LoraDeltaShape> loraDeltaShape(const LoraModule& module, std::string& why);

struct LoraModuleMerge {
    double multiplier = 1.0;
    std::optional<std::int64_t> dyn;  // LoRA modules only (A1111's dyn_dim)
    DoraConvention dora = DoraConvention::LyCORIS;
};

// weight (and `bias`, for diff_b / b_norm; may be null when the module has none) += the module's
// delta times multiplier and scale, in place. Throws LoraFileError for a read that fails, and
// LoraFileError naming the module for factors that do not fit `weight` (or the bias) or a
// dora_scale that fits neither axis.
void mergeLoraModule(const LoraModule& module, const LoraFile& file, const LoraModuleMerge& how, HostTensor& weight,
                     HostTensor* bias);

}  // namespace tessera
