#include "core/models/upscale/UpscaleConfig.h"

#include <algorithm>

namespace tessera {

const char* toString(UpscaleArchitecture a) {
    switch (a) {
        case UpscaleArchitecture::Esrgan:
            return "ESRGAN";
        case UpscaleArchitecture::Compact:
            return "Compact";
        case UpscaleArchitecture::Span:
            return "SPAN";
    }
    return "?";
}

const char* toString(EsrganLayout l) {
    switch (l) {
        case EsrganLayout::Original:
            return "original";
        case EsrganLayout::BasicSr:
            return "BasicSR";
        case EsrganLayout::Kair:
            return "KAIR";
    }
    return "?";
}

int SizeRequirements::padded(int length) const {
    // spandrel rounds the minimum up to a multiple first (SizeRequirements.__post_init__).
    const int m = std::max(multipleOf, 1);
    const int least = (std::max(minimum, 0) + m - 1) / m * m;
    const int l = std::max(length, least);
    return (l + m - 1) / m * m;
}

std::string UpscaleConfig::describe() const {
    std::string s;
    switch (architecture) {
        case UpscaleArchitecture::Esrgan:
            s = std::string(plus ? "ESRGAN+ " : "ESRGAN ") + std::to_string(scale) + "x, " + std::to_string(features) +
                " features, " + std::to_string(blocks) + " blocks";
            if (unshuffle > 1) s += ", pixel-unshuffle " + std::to_string(unshuffle);
            break;
        case UpscaleArchitecture::Compact:
            s = "Real-ESRGAN Compact " + std::to_string(scale) + "x, " + std::to_string(features) + " features, " +
                std::to_string(blocks) + " convolutions";
            break;
        case UpscaleArchitecture::Span:
            s = "SPAN " + std::to_string(scale) + "x, " + std::to_string(features) + " features";
            if (!norm) s += ", no input normalisation";
            break;
    }
    if (inChannels != 3 || outChannels != 3)
        s += ", " + std::to_string(inChannels) + " -> " + std::to_string(outChannels) + " channels";
    return s;
}

SizeRequirements UpscaleConfig::sizeRequirements() const {
    SizeRequirements r;
    if (architecture == UpscaleArchitecture::Esrgan) {
        r.minimum = 2;
        r.multipleOf = unshuffle > 1 ? 4 : 1;
    }
    return r;
}

}  // namespace tessera
