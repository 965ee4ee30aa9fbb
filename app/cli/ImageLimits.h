// The largest image file Tessera reads: the start-image reader (InitImage.h) and the PNG reader
// (PngIO.h) refuse beyond these before decoding. Qt-free.
#pragma once

#include <cstdint>

namespace tessera {

// The largest start image: 150 megapixels (a 14000 x 10700 photograph) decodes to 450 MB of
// RGB; a file of more than 1 GiB is no photograph.
inline constexpr long long kMaxInitImagePixels = 150LL * 1000 * 1000;
inline constexpr std::uint64_t kMaxInitFileBytes = std::uint64_t{1} << 30;

}  // namespace tessera
