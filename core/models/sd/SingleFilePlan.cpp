// Bindings of single-file checkpoints. The conversion runs the other way round from diffusers'
// (loaders/single_file_utils.py convert_ldm_*_checkpoint): for every tensor the model's graph
// declares (diffusers' name and shape) it names the tensor of the file that holds it. So every
// missing tensor is found before any data is read, and every tensor of the file is either used or
// listed as ignored.
#include "core/models/sd/SingleFilePlan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/sd/LdmNames.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/vae/VaeModel.h"

namespace tessera::single_file {

using Shape = std::vector<std::int64_t>;

namespace {

using input_limits::kNameChars;

// A text encoder's bindings: transformers' names under `prefix` (Clip) or OpenCLIP's.
SingleFilePlan textPlan(const char* what, const std::string& prefix, TextLayout kind, const ClipTextConfig& config) {
    const bool open = kind != TextLayout::Clip;
    SingleFilePlan plan{what, {}, {prefix + (open ? "transformer." : "encoder.")}, {}};
    if (kind == TextLayout::OpenClipH)
        plan.allowedUnused = prefix + "transformer.resblocks." + std::to_string(config.numHiddenLayers) + ".";
    for (auto& [name, shape] : ClipTextModel::expectedTensors(config)) {
        const LdmTensor held = open ? openClipTensor(name) : LdmTensor{name.substr(std::strlen(kClipTextPrefix))};
        Binding b{name, shape, joined(prefix, held.name), held.part, held.parts};
        b.transpose = held.transpose;
        plan.bindings.push_back(std::move(b));
    }
    return plan;
}

bool shapeFits(const Binding& b, Shape found) {
    if (b.squeeze)
        while (found.size() > b.shape.size() && found.back() == 1) found.pop_back();
    return found == storedShape(b);
}

std::string describeBinding(const SingleFilePlan& plan, const Binding& b) {
    return inQuotes(b.stored, kNameChars) + " (the " + plan.what + "'s " + inQuotes(b.name, kNameChars) + ")";
}

// [rows, columns] row-major -> [columns, rows].
std::vector<float> transposed(const std::vector<float>& data, std::size_t rows, std::size_t columns) {
    std::vector<float> out(data.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < columns; ++c) out[c * rows + r] = data[r * columns + c];
    return out;
}

}  // namespace

SingleFilePlan ldmVaePlan(const std::string& prefix, const VaeConfig& config) {
    SingleFilePlan plan{"VAE", {}, {prefix + "encoder.", prefix + "decoder."}, {}};
    for (auto& [name, shape] : VaeModel::expectedTensors(config)) {
        Binding b{name, shape, joined(prefix, vaeLdmName(name, config))};
        b.squeeze = name.find(".attentions.") != std::string::npos && shape.size() == 2;
        plan.bindings.push_back(std::move(b));
    }
    return plan;
}

std::vector<SingleFilePlan> makePlans(const Layout& layout, const Configs& c) {
    std::vector<SingleFilePlan> plans(3);
    plans[0] = {"UNet", {}, {kUNet}, {}};
    for (auto& [name, shape] : UNetCondModel::expectedTensors(c.unet))
        plans[0].bindings.push_back({name, shape, joined(kUNet, unetLdmName(name, c.unet))});
    plans[1] = ldmVaePlan(layout.vae, c.vae);
    plans[2] =
        textPlan("text encoder", layout.text, layout.openClip() ? TextLayout::OpenClipH : TextLayout::Clip, c.text);
    if (c.text2) plans.push_back(textPlan("second text encoder", layout.text2, TextLayout::OpenClipBigG, *c.text2));
    for (const SingleFilePlan& plan : plans)  // every name the models declare has an LDM counterpart
        for (const Binding& b : plan.bindings)
            if (b.stored.empty())
                throw std::logic_error(std::string("no LDM name for the ") + plan.what + "'s " + b.name);
    return plans;
}

Shape storedShape(const Binding& b) {
    Shape shape = b.shape;
    if (b.transpose) std::reverse(shape.begin(), shape.end());
    if (!shape.empty()) shape[0] *= b.parts;
    return shape;
}

SingleFileComponent checkPlan(const TensorFile& file, const SingleFilePlan& plan, const std::string& where) {
    SingleFileComponent part;
    std::set<std::string> seen;
    for (const Binding& b : plan.bindings) {
        const TensorFileEntry* info = file.find(b.stored);
        if (info == nullptr)
            throw ModelError(where + ": missing tensor " + describeBinding(plan, b) + ", expected shape " +
                             shapeToString(storedShape(b)));
        if (info->dtype != "F32" && info->dtype != "F16" && info->dtype != "BF16")
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + " has dtype " + info->dtype +
                             "; model weights must be F32, F16 or BF16");
        if (!shapeFits(b, info->shape))
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + ": expected " +
                             shapeToString(storedShape(b)) + ", found " + shapeToString(info->shape));
        std::int64_t numel = 1;
        for (const std::int64_t d : b.shape) numel *= d;
        part.parameters += numel;
        if (seen.insert(b.stored).second) ++part.storedDtypes[info->dtype];
    }
    part.tensors = seen.size();
    return part;
}

std::vector<std::string> unusedTensors(const TensorFile& file, const std::vector<SingleFilePlan>& plans,
                                       const std::string& where) {
    std::set<std::string> used;
    for (const SingleFilePlan& plan : plans)
        for (const Binding& b : plan.bindings) used.insert(b.stored);
    std::vector<std::string> ignored;
    for (const auto& info : file.tensors()) {
        if (used.count(info.name) != 0) continue;
        for (const SingleFilePlan& plan : plans) {
            const bool inside = std::any_of(plan.structural.begin(), plan.structural.end(),
                                            [&](const std::string& p) { return info.name.starts_with(p); });
            if (inside && (plan.allowedUnused.empty() || !info.name.starts_with(plan.allowedUnused)))
                throw ModelError(where + ": tensor " + inQuotes(info.name, kNameChars) + " " +
                                 shapeToString(info.shape) + " belongs to no part of the " + plan.what +
                                 " its configuration describes; the configuration does not fit this file");
        }
        ignored.push_back(info.name);
    }
    std::sort(ignored.begin(), ignored.end());
    return ignored;
}

std::uint64_t planBytes(const TensorFile& file, const SingleFilePlan& plan) {
    std::set<std::string> seen;
    std::uint64_t bytes = 0;
    for (const Binding& b : plan.bindings)
        if (seen.insert(b.stored).second) bytes += file.find(b.stored)->bytes;
    return bytes;
}

std::map<std::string, HostTensor> readPlan(const TensorFile& file, const SingleFilePlan& plan, const std::string& where,
                                           LoadMeter& meter) {
    meter.beginPhase(std::string("reading the ") + plan.what, planBytes(file, plan));
    std::vector<const Binding*> order;
    for (const Binding& b : plan.bindings) order.push_back(&b);
    std::stable_sort(order.begin(), order.end(), [&](const Binding* x, const Binding* y) {
        const std::uint64_t a = file.find(x->stored)->position, b = file.find(y->stored)->position;
        return a != b ? a < b : x->part < y->part;
    });
    std::map<std::string, HostTensor> tensors;
    for (const Binding* bound : order) {
        const Binding& b = *bound;
        const TensorFileEntry& info = *file.find(b.stored);
        HostTensor t;
        t.shape = b.shape;
        const auto count = static_cast<std::size_t>(t.numel());
        try {
            t.data = file.readFloat32(info, count * static_cast<std::size_t>(b.part), count);
        } catch (const TensorFileError& e) {
            throw ModelError(e.what());
        }
        const auto bad = std::find_if(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); });
        if (bad != t.data.end())
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + " holds a non-finite value (" +
                             (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " +
                             std::to_string(static_cast<std::size_t>(bad - t.data.begin()) +
                                            count * static_cast<std::size_t>(b.part)));
        if (b.transpose)
            t.data = transposed(t.data, static_cast<std::size_t>(b.shape[1]), static_cast<std::size_t>(b.shape[0]));
        if (b.part + 1 == b.parts) meter.advance(info.bytes);
        tensors.emplace(b.name, std::move(t));
    }
    meter.endPhase();
    return tensors;
}

}  // namespace tessera::single_file
