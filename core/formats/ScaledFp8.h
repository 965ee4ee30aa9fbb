// ScaledFp8: how one model's tensors in a weights file are read to float32 when some of them are
// 8-bit floats. Two kinds of fp8 files exist:
//  - plain casts (Kijai's flux-fp8, "flux1-dev-fp8.safetensors"): an F8_E4M3 or F8_E5M2 weight is
//    its value, upcast exactly;
//  - ComfyUI's "scaled fp8": a marker tensor "scaled_fp8" beside the model's tensors (its dtype says
//    which fp8 it is; an F32 marker means float8_e4m3fn: comfy/model_detection.py), and per Linear a
//    float32 scalar "<module>.scale_weight" that the weight is multiplied by (comfy/ops.py
//    scaled_fp8_ops: convert_weight returns weight * scale_weight; a missing one is 1), optionally
//    "<module>.scale_input", which only ComfyUI's fp8 matrix products use and is ignored here.
// The scales are checked before any tensor data is read; what was read how is recorded for the run
// record. Qt-free.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/formats/TensorFile.h"

namespace tessera {

// How a model's tensors were read, for the run record and messages.
struct WeightsReading {
    std::map<std::string, std::size_t> storedDtypes;  // dtype -> tensors read ("BF16" -> 120)
    bool scaledFp8 = false;                           // the file carries ComfyUI's scaled_fp8 marker
    std::string markerDtype;                          // the marker's dtype ("F8_E4M3"; "F32" means e4m3fn)
    std::vector<std::string> fp8;                     // tensors stored as 8-bit floats (the model's names)
    std::vector<std::string> scaled;                  // tensors multiplied by their scale_weight
    std::size_t scaleInputsIgnored = 0;               // scale_input tensors (ComfyUI's fp8 matmul only)

    // "342 tensors: 190 BF16, 152 F8_E4M3; 152 fp8 tensors, 152 multiplied by their scale_weight
    // (ComfyUI scaled fp8, marker F8_E4M3); 152 scale_inputs ignored", or "...; 152 fp8 tensors upcast
    // as stored".
    std::string describe() const;
};

class ScaledFp8 {
public:
    // The scaled-fp8 layout of the model under `prefix` ("model.diffusion_model." or "") in `file`
    // (which must outlive it): the marker (prefix + "scaled_fp8", or "scaled_fp8" at the root) and
    // every "<module>.scale_weight" / "<module>.scale_input" under the prefix, each checked to hold
    // one finite value of F32, F16 or BF16 (its data is read: a few bytes each).
    // ModelError naming `where` and the tensor otherwise.
    ScaledFp8(const TensorFile& file, std::string prefix, std::string where);

    bool marked() const { return !marker_.empty(); }
    // The marker, the scales: tensors that carry no model parameter.
    bool isScaleTensor(const std::string& storedName) const;
    // The scale_weight of the weight stored as `storedName` ("<module>.weight"), or 1 when it has none.
    float scaleOf(const std::string& storedName) const;

    // `entry` (the model's tensor `name`) as float32: fp8 upcast exactly, then multiplied in float32
    // by its module's scale_weight when the file has one; recorded in `reading`. TensorFileError
    // (as ModelError naming `where`) for a dtype that cannot be read as float32.
    std::vector<float> read(const TensorFileEntry& entry, const std::string& name, WeightsReading& reading) const;
    // What the layout itself contributes to a record: the marker and the ignored scale_input count.
    void describeLayout(WeightsReading& reading) const;

private:
    const TensorFile& file_;
    std::string prefix_, where_;
    std::string marker_, markerDtype_;
    std::map<std::string, float> scales_;  // by the weight's stored name
    std::vector<std::string> scaleTensors_;
    std::size_t scaleInputs_ = 0;
};

// "F8_E4M3" or "F8_E5M2".
bool isFp8Dtype(const std::string& dtype);

}  // namespace tessera
