#include "kernels/backend/CudaWeights.h"

#include <cstring>

#include "core/formats/Safetensors.h"

namespace tessera {

std::uint16_t floatToBf16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    x += 0x7FFFu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(x >> 16);
}

std::vector<float> packConvWeight(const HostTensor& t, int ipad, int opad) {
    const int o = static_cast<int>(t.shape.at(0)), i = static_cast<int>(t.shape.at(1));
    const int kh = static_cast<int>(t.shape.at(2)), kw = static_cast<int>(t.shape.at(3));
    std::vector<float> out(static_cast<std::size_t>(opad) * kh * kw * ipad, 0.0f);
    for (int a = 0; a < o; ++a)
        for (int b = 0; b < i; ++b)
            for (int y = 0; y < kh; ++y)
                for (int x = 0; x < kw; ++x)
                    out[((static_cast<std::size_t>(a) * kh + y) * kw + x) * ipad + b] =
                        t.data[((static_cast<std::size_t>(a) * i + b) * kh + y) * kw + x];
    return out;
}

std::size_t WeightBlob::add(const void* p, std::size_t n) {
    const std::size_t off = alignUp(bytes_.size());
    bytes_.resize(off + n);
    std::memcpy(bytes_.data() + off, p, n);
    return off;
}

std::size_t WeightBlob::addTyped(const std::vector<float>& v, DType t) {
    if (t == DType::F32) return addFloats(v);
    std::vector<std::uint16_t> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = t == DType::F16 ? floatToHalf(v[i]) : floatToBf16(v[i]);
    return add(h.data(), h.size() * 2);
}

}  // namespace tessera
