#include "core/formats/ScaledFp8.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"

namespace tessera {

namespace {

using input_limits::kNameChars;

constexpr const char* kMarker = "scaled_fp8";
constexpr std::string_view kScaleWeight = ".scale_weight";
constexpr std::string_view kScaleInput = ".scale_input";

bool isFloatDtype(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

std::string plural(std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

bool isFp8Dtype(const std::string& dtype) { return dtype == "F8_E4M3" || dtype == "F8_E5M2"; }

ScaledFp8::ScaledFp8(const TensorFile& file, std::string prefix, std::string where)
    : file_(file), prefix_(std::move(prefix)), where_(std::move(where)) {
    for (const std::string& name : {prefix_ + kMarker, std::string(kMarker)})
        if (const TensorFileEntry* m = file_.find(name); m != nullptr && marker_.empty()) {
            marker_ = name;
            markerDtype_ = m->dtype;
        }
    for (const TensorFileEntry& entry : file_.tensors()) {
        const std::string& name = entry.name;
        if (!name.starts_with(prefix_)) continue;
        const bool weight = name.ends_with(kScaleWeight), input = name.ends_with(kScaleInput);
        if (!weight && !input) continue;
        const std::string at = where_ + ": tensor " + inQuotes(name, kNameChars);
        if (entry.numel() != 1)
            throw ModelError(at + " has shape " + shapeToString(entry.shape) +
                             "; a scaled-fp8 scale is one value (ComfyUI's scaled fp8 files hold a scalar per Linear)");
        if (!isFloatDtype(entry.dtype))
            throw ModelError(at + " has dtype " + entry.dtype + "; a scaled-fp8 scale is F32, F16 or BF16");
        scaleTensors_.push_back(name);
        if (input) {
            ++scaleInputs_;  // only ComfyUI's fp8 matrix products use it
            continue;
        }
        float value = 0.0f;
        try {
            value = file_.readFloat32(entry).at(0);
        } catch (const TensorFileError& e) {
            throw ModelError(e.what());
        }
        if (!std::isfinite(value))
            throw ModelError(at + " holds " + (std::isnan(value) ? "NaN" : "Inf") + "; a weight scale must be finite");
        scales_[name.substr(0, name.size() - kScaleWeight.size()) + ".weight"] = value;
    }
    std::sort(scaleTensors_.begin(), scaleTensors_.end());
}

bool ScaledFp8::isScaleTensor(const std::string& storedName) const {
    return storedName == marker_ || std::binary_search(scaleTensors_.begin(), scaleTensors_.end(), storedName);
}

float ScaledFp8::scaleOf(const std::string& storedName) const {
    const auto it = scales_.find(storedName);
    return it == scales_.end() ? 1.0f : it->second;
}

std::vector<float> ScaledFp8::read(const TensorFileEntry& entry, const std::string& name,
                                   WeightsReading& reading) const {
    std::vector<float> values;
    try {
        values = file_.readFloat32(entry);
    } catch (const TensorFileError& e) {
        throw ModelError(e.what());
    }
    ++reading.storedDtypes[entry.dtype];
    if (isFp8Dtype(entry.dtype)) reading.fp8.push_back(name);
    if (const auto it = scales_.find(entry.name); it != scales_.end()) {
        // float32 products, as ComfyUI's convert_weight computes weight * scale_weight in the
        // compute dtype: the fp8 value has 4 significant bits, so this rounds at most once.
        const float scale = it->second;
        for (float& v : values) v *= scale;
        reading.scaled.push_back(name);
    }
    return values;
}

void ScaledFp8::describeLayout(WeightsReading& reading) const {
    reading.scaledFp8 = marked();
    reading.markerDtype = markerDtype_;
    reading.scaleInputsIgnored = scaleInputs_;
}

std::string WeightsReading::describe() const {
    std::size_t total = 0;
    std::string dtypes;
    for (const auto& [dtype, n] : storedDtypes) {
        total += n;
        dtypes += (dtypes.empty() ? "" : ", ") + std::to_string(n) + " " + dtype;
    }
    std::string text = plural(total, "tensor", "tensors") + (dtypes.empty() ? "" : ": " + dtypes);
    if (!fp8.empty() || !scaled.empty()) {
        text += "; " + plural(fp8.size(), "fp8 tensor", "fp8 tensors");
        if (!scaled.empty())
            text += ", " + std::to_string(scaled.size()) + " multiplied by their scale_weight";
        else
            text += " upcast as stored";
    }
    if (scaledFp8) text += " (ComfyUI scaled fp8, marker " + markerDtype + ")";
    if (scaleInputsIgnored > 0) text += "; " + plural(scaleInputsIgnored, "scale_input", "scale_inputs") + " ignored";
    return text;
}

}  // namespace tessera
