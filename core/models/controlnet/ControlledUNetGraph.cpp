// The UNet graph and the ControlNets' graphs spliced op by op into one: each source graph's ops are
// copied with their values remapped (and, for a ControlNet, names prefixed), so the UNet's part is
// the UNet's own graph and fuses as it does alone.
#include "core/models/controlnet/ControlledUNetGraph.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/models/controlnet/ControlNetGraph.h"
#include "core/models/sd/UNetCondGraph.h"

namespace tessera {

namespace {

constexpr const char* kScaleInput = "conditioning_scale.";
constexpr int kColorFixTableSize = 1000;  // SD's DDPM timesteps (the extension's register_schedule)

// Copies ops of `src` into `dst`. `values` maps src value ids to dst ids (-1: not yet there; a
// graph input must be mapped before an op reads it); parameters and names get `prefix`.
class GraphSplice {
public:
    GraphSplice(ModelGraph& dst, const ModelGraph& src, std::string prefix)
        : dst_(dst), src_(src), prefix_(std::move(prefix)), values_(src.values().size(), -1) {}

    void map(int srcValue, int dstValue) { values_.at(static_cast<std::size_t>(srcValue)) = dstValue; }
    int operator[](int srcValue) const {
        const int v = values_.at(static_cast<std::size_t>(srcValue));
        if (v < 0) throw std::logic_error("controlled UNet graph: '" + src_.value(srcValue).name + "' read before set");
        return v;
    }
    // Ops [from, to) of the source.
    void copy(std::size_t from, std::size_t to) {
        for (std::size_t i = from; i < to; ++i) copyOp(src_.ops()[i]);
    }
    // One op, reading `input2` instead of its own second operand when that is given.
    void copyOp(GraphOp op, int input2 = -1, int input = -1) {
        const int out = op.output;
        op.name = prefix_ + op.name;
        op.input = input >= 0 ? input : (*this)[op.input];
        if (input2 >= 0)
            op.input2 = input2;
        else if (op.input2 >= 0)
            op.input2 = (*this)[op.input2];
        for (int* fused : {&op.preAdd, &op.scaleShift, &op.residual})
            if (*fused >= 0) *fused = (*this)[*fused];
        for (int& p : op.params) p = dst_.addParam(prefix_ + src_.param(p).name, src_.param(p).shape);
        map(out, dst_.addOp(std::move(op), prefix_ + src_.value(out).name));
    }

private:
    ModelGraph& dst_;
    const ModelGraph& src_;
    std::string prefix_;
    std::vector<int> values_;
};

// An input of `src` as an input of `dst`, renamed; feature maps and tile-following tokens scaled.
int addScaledInput(ModelGraph& dst, GraphValue v, int divisorScale, const std::string& name) {
    v.name = name;
    if (v.kind != ValueKind::Vector && !(v.kind == ValueKind::Tokens && v.tokens > 0)) v.divisor *= divisorScale;
    return dst.addInputValue(v);
}

int inputNamed(const ModelGraph& g, const std::string& name) {
    for (const int v : g.inputs())
        if (g.value(v).name == name) return v;
    return -1;
}

// The UNet's up-block concatenations: each reads the up path (input) and a skip (input2), the last
// skip first.
std::vector<std::size_t> concatOps(const ModelGraph& unet) {
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < unet.ops().size(); ++i)
        if (unet.ops()[i].kind == OpKind::Concat) at.push_back(i);
    if (at.empty()) throw std::logic_error("controlled UNet graph: the UNet has no skip concatenations");
    return at;
}

// The per-skip additions before each concatenation: `added(k)` is the value to add to skip k
// (k = skips - 1 - the concatenation's ordinal), `mid` to the up path's first input.
// Returns the UNet's outputs (unmarked).
template <class Added>
std::vector<int> copyUpPath(ModelGraph& g, GraphSplice& unet, const ModelGraph& src,
                            const std::vector<std::size_t>& concats, int mid, const Added& added) {
    const int skips = static_cast<int>(concats.size());
    std::size_t next = concats.front();
    for (int j = 0; j < skips; ++j) {
        const std::size_t at = concats[static_cast<std::size_t>(j)];
        unet.copy(next, at);
        const GraphOp& cat = src.ops()[at];
        int input = -1;
        if (j == 0)
            input = g.addOp(newOp(OpKind::Add, cat.name + ".mid_residual", unet[cat.input], mid),
                            src.value(cat.input).name + ".controlled");
        const int k = skips - 1 - j;
        const int skip = g.addOp(newOp(OpKind::Add, cat.name + ".skip_residual", unet[cat.input2], added(k)),
                                 src.value(cat.input2).name + ".controlled");
        unet.copyOp(cat, skip, input);
        next = at + 1;
    }
    unet.copy(next, src.ops().size());
    std::vector<int> outputs;
    for (const int v : src.outputs()) outputs.push_back(unet[v]);
    return outputs;
}

// The colour fixes after the UNet's output `eps` (its inputs declared in the nets' order).
int addColorFixes(ModelGraph& g, const ModelGraph& src, const GraphSplice& unet, const std::vector<ControlledNet>& nets,
                  const std::vector<int>& latents, const std::vector<int>& marks, int eps) {
    std::size_t j = 0;
    for (std::size_t i = 0; i < nets.size(); ++i) {
        if (!nets[i].colorFix) continue;
        const ColorFixSettings& c = *nets[i].colorFix;
        const int index = static_cast<int>(i);
        GraphOp op = newOp(OpKind::ColorFix, "colorfix." + std::to_string(i), eps, unet[inputNamed(src, "sample")]);
        op.hintLatent = latents[j];
        op.condMark = marks[j];
        op.timesteps = unet[inputNamed(src, "timestep")];
        op.radius = c.radius;
        op.scale = c.weight;
        op.sharpness = c.sharpness;
        op.params = {g.addParam(colorFixTableParam(index), {2, kColorFixTableSize})};
        eps = g.addOp(std::move(op));
        ++j;
    }
    return eps;
}

void checkNets(const UNetCondConfig& unet, const std::vector<ControlledNet>& nets) {
    for (std::size_t i = 0; i < nets.size(); ++i) {
        const std::string why = controlNetUNetMismatch(nets[i].config, unet);
        if (!why.empty()) throw std::invalid_argument("ControlNet " + std::to_string(i) + ": " + why);
    }
}

}  // namespace

std::string controlNetParamName(int index, const std::string& name) {
    return "controlnet." + std::to_string(index) + "." + name;
}

std::string controlNetHintInput(int index) { return controlNetParamName(index, "controlnet_cond"); }

std::string colorFixLatentInput(int index) { return "colorfix." + std::to_string(index) + ".latent"; }
std::string colorFixMarkInput(int index) { return "colorfix." + std::to_string(index) + ".cond_mark"; }
std::string colorFixTableParam(int index) { return "colorfix." + std::to_string(index) + ".ddpm_table"; }

std::vector<float> colorFixDdpmTable() {
    // torch.linspace(float64) computes the second half from the end (start + step * i below
    // steps / 2, end - step * (steps - 1 - i) from there): the same here, for the same betas.
    constexpr int T = kColorFixTableSize;
    const double start = std::sqrt(0.00085), end = std::sqrt(0.012), step = (end - start) / (T - 1);
    std::vector<float> table(2 * static_cast<std::size_t>(T));
    double cumprod = 1.0;
    for (int i = 0; i < T; ++i) {
        const double root = i < T / 2 ? start + step * i : end - step * (T - 1 - i);
        const double beta = root * root;
        cumprod *= 1.0 - beta;
        table[static_cast<std::size_t>(i)] = static_cast<float>(std::sqrt(1.0 / cumprod));
        table[static_cast<std::size_t>(T + i)] = static_cast<float>(std::sqrt(1.0 / cumprod - 1.0));
    }
    return table;
}

int controlledTileScale(const std::vector<ControlledNet>& nets) {
    if (nets.empty()) throw std::invalid_argument("controlled UNet: no ControlNet");
    const int f = nets.front().config.hintFactor();
    for (std::size_t i = 1; i < nets.size(); ++i)
        if (nets[i].config.hintFactor() != f)
            throw std::invalid_argument(
                "ControlNet " + std::to_string(i) + ": its hint is " + std::to_string(nets[i].config.hintFactor()) +
                " times the latent, ControlNet 0's " + std::to_string(f) + " times; ControlNets of one run must agree");
    return f;
}

ModelGraph buildControlledUNetGraph(const UNetCondConfig& unetConfig, const std::vector<ControlledNet>& nets,
                                    const ControlledUNetOptions& options) {
    checkNets(unetConfig, nets);
    const int f = controlledTileScale(nets);
    const ModelGraph src = buildUNet2DConditionGraph(unetConfig, options.contextTokens);
    ModelGraph g;
    GraphSplice unet(g, src, "");
    for (const int v : src.inputs()) unet.map(v, addScaledInput(g, src.value(v), f, src.value(v).name));

    // Every ControlNet's graphs and inputs first (the inputs in order), its ops copied later.
    std::vector<ModelGraph> hints, trunks;
    std::vector<GraphSplice> hintSplices, trunkSplices;
    hints.reserve(nets.size());
    trunks.reserve(nets.size());
    hintSplices.reserve(nets.size());
    trunkSplices.reserve(nets.size());
    for (std::size_t i = 0; i < nets.size(); ++i) {
        const int index = static_cast<int>(i);
        const std::string prefix = controlNetParamName(index, "");
        hints.push_back(buildControlNetHintGraph(nets[i].config));
        trunks.push_back(buildControlNetGraph(nets[i].config, {options.contextTokens, nets[i].residualScales}));
        GraphSplice& hint = hintSplices.emplace_back(g, hints.back(), prefix);
        GraphSplice& trunk = trunkSplices.emplace_back(g, trunks.back(), prefix);
        const ModelGraph& h = hints.back();
        const ModelGraph& t = trunks.back();
        hint.map(h.inputs().front(), addScaledInput(g, h.value(h.inputs().front()), 1, controlNetHintInput(index)));
        for (const int v : t.inputs()) {
            const std::string& name = t.value(v).name;
            if (name.starts_with(kScaleInput)) {
                trunk.map(v, addScaledInput(g, t.value(v), 1, prefix + name));
            } else if (name == "controlnet_cond_embedding") {
                continue;  // the hint graph's output, mapped once it is copied
            } else {
                const int u = inputNamed(src, name);
                if (u < 0) throw std::logic_error("controlled UNet graph: the UNet has no input '" + name + "'");
                trunk.map(v, unet[u]);
            }
        }
    }
    // The colour fixes' inputs, after every ControlNet's.
    std::vector<int> colorLatents, colorMarks;
    const int sample = unet[inputNamed(src, "sample")];
    for (std::size_t i = 0; i < nets.size(); ++i) {
        if (!nets[i].colorFix) continue;
        if (unetConfig.inChannels != unetConfig.outChannels)
            throw std::invalid_argument("ControlNet " + std::to_string(i) +
                                        ": tile_colorfix needs a UNet whose input is its latent (" +
                                        std::to_string(unetConfig.inChannels) + " input channels, " +
                                        std::to_string(unetConfig.outChannels) + " output channels)");
        GraphValue latent = g.value(sample);
        latent.name = colorFixLatentInput(static_cast<int>(i));
        colorLatents.push_back(g.addInputValue(latent));
        colorMarks.push_back(g.addInput(colorFixMarkInput(static_cast<int>(i)), ValueKind::Vector, 2));
    }

    // The UNet's down path and mid block, then the ControlNets (the residuals are added only
    // once the down path no longer reads the skips), then the up path reading skip + residuals.
    const std::vector<std::size_t> concats = concatOps(src);
    unet.copy(0, concats.front());
    std::vector<std::vector<int>> residuals;  // per ControlNet, down residuals then the mid one
    for (std::size_t i = 0; i < nets.size(); ++i) {
        const ModelGraph& h = hints[i];
        const ModelGraph& t = trunks[i];
        hintSplices[i].copy(0, h.ops().size());
        trunkSplices[i].map(inputNamed(t, "controlnet_cond_embedding"), hintSplices[i][h.outputs().front()]);
        trunkSplices[i].copy(0, t.ops().size());
        std::vector<int>& r = residuals.emplace_back();
        for (const int v : t.outputs()) r.push_back(trunkSplices[i][v]);
        if (r.size() != concats.size() + 1)
            throw std::invalid_argument("ControlNet " + std::to_string(i) + ": " + std::to_string(r.size() - 1) +
                                        " down residuals; the UNet has " + std::to_string(concats.size()) + " skips");
    }
    // Summed over the ControlNets first (MultiControlNetModel), then added.
    auto summed = [&](std::size_t k, const std::string& name) {
        int sum = residuals.front()[k];
        for (std::size_t i = 1; i < nets.size(); ++i)
            sum = g.addOp(newOp(OpKind::Add, name + ".sum" + std::to_string(i), sum, residuals[i][k]));
        return sum;
    };
    const std::size_t N = concats.size();
    const int mid = summed(N, "controlnet.mid_block_res_sample");
    std::vector<int> down(N);
    for (std::size_t k = 0; k < N; ++k) down[k] = summed(k, "controlnet.down_block_res_samples." + std::to_string(k));
    std::vector<int> outputs =
        copyUpPath(g, unet, src, concats, mid, [&](int k) { return down.at(static_cast<std::size_t>(k)); });
    outputs.front() = addColorFixes(g, src, unet, nets, colorLatents, colorMarks, outputs.front());
    for (const int v : outputs) g.markOutput(v);
    if (options.exposeResiduals)
        for (const std::vector<int>& r : residuals)
            for (const int v : r) g.markOutput(v);
    return g;
}

ModelGraph controlledUNetExecutionGraph(const UNetCondConfig& unet, const std::vector<ControlledNet>& nets,
                                        const ControlledUNetOptions& options) {
    return fuseForExecution(buildControlledUNetGraph(unet, nets, options));
}

ModelGraph buildUNetWithResidualInputs(const UNetCondConfig& unetConfig, int contextTokens) {
    const ModelGraph src = buildUNet2DConditionGraph(unetConfig, contextTokens);
    ModelGraph g;
    GraphSplice unet(g, src, "");
    for (const int v : src.inputs()) unet.map(v, g.addInputValue(src.value(v)));
    const std::vector<std::size_t> concats = concatOps(src);
    const std::size_t N = concats.size();
    std::vector<int> down(N);
    for (std::size_t j = 0; j < N; ++j) {  // skip k is read by concatenation N - 1 - k
        const GraphValue& skip = src.value(src.ops()[concats[N - 1 - j]].input2);
        down[j] = addScaledInput(g, skip, 1, "down_block_additional_residuals." + std::to_string(j));
    }
    const int mid = addScaledInput(g, src.value(src.ops()[concats.front()].input), 1, "mid_block_additional_residual");
    unet.copy(0, concats.front());
    for (const int v :
         copyUpPath(g, unet, src, concats, mid, [&](int k) { return down.at(static_cast<std::size_t>(k)); }))
        g.markOutput(v);
    return g;
}

TensorMap controlledUNetWeights(const TensorMap& unet, const std::vector<const TensorMap*>& nets) {
    TensorMap all = unet;
    for (std::size_t i = 0; i < nets.size(); ++i)
        for (const auto& [name, tensor] : *nets[i]) all.emplace(controlNetParamName(static_cast<int>(i), name), tensor);
    return all;
}

}  // namespace tessera
