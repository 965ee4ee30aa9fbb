#include "kernels/CudaWeights.h"

#include <cstring>

namespace tessera {

std::uint16_t floatToBf16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    x += 0x7FFFu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(x >> 16);
}

std::uint16_t floatToHalf(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7FFFFFFFu;
    if (x >= 0x7F800000u) return static_cast<std::uint16_t>(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u));
    if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);   // rounds to infinity
    if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);            // <= 2^-25: rounds to zero
    const int e = static_cast<int>(x >> 23);
    if (e < 113) {  // half subnormal
        const std::uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
        const int shift = 126 - e;
        std::uint32_t h = m >> shift;
        const std::uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
        return static_cast<std::uint16_t>(sign | h);
    }
    const std::uint32_t mant = x & 0x7FFFFFu;
    std::uint32_t h = (static_cast<std::uint32_t>(e - 112) << 10) | (mant >> 13);
    const std::uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
}

std::uint32_t halfBits(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13);
    if (e == 0) {
        if (m == 0) return sign;
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; --e; }
        m &= 0x3FFu;
        return sign | (e << 23) | (m << 13);
    }
    return sign | ((e + 112) << 23) | (m << 13);
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
