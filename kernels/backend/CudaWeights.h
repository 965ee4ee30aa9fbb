// The CUDA backend's weights on the host: float32 -> fp16 (core/formats/Safetensors.h floatToHalf) or
// bf16 (round to nearest even, as the device converts), conv weights repacked for cuDNN's NHWC
// filters, and the WeightBlob that packs every weight, bias and norm parameter at kAlign offsets for the one
// upload into the arena's weight region.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "kernels/backend/CudaMemoryPlan.h"
#include "kernels/device/DType.h"

namespace tessera {

// Round to nearest even; every NaN becomes the canonical quiet NaN 0x7FC0 (core's
// floatToBfloat16 keeps the payload: the weights' bits stay as they were).
std::uint16_t floatToBf16(float f);

// Conv weight [O, I, kh, kw] -> [opad][kh][kw][ipad] (float32, zero-padded channels).
std::vector<float> packConvWeight(const HostTensor& t, int ipad, int opad);

// Weights, biases and norms packed on the host, uploaded once into the arena.
class WeightBlob {
public:
    std::size_t add(const void* p, std::size_t n);
    std::size_t addFloats(const std::vector<float>& v) { return add(v.data(), v.size() * sizeof(float)); }
    std::size_t addTyped(const std::vector<float>& v, DType t);
    std::size_t size() const { return alignUp(bytes_.size()); }
    const unsigned char* data() const { return bytes_.data(); }

private:
    std::vector<unsigned char> bytes_;
};

}  // namespace tessera
