#include "core/run/ControlNetUnit.h"

#include <cmath>

namespace tessera {

const char* toString(ControlMode mode) {
    switch (mode) {
        case ControlMode::Balanced:
            return "balanced";
        case ControlMode::Prompt:
            return "prompt";
        case ControlMode::ControlNet:
            return "controlnet";
    }
    return "balanced";
}

const char* a1111Name(ControlMode mode) {
    switch (mode) {
        case ControlMode::Balanced:
            return "Balanced";
        case ControlMode::Prompt:
            return "My prompt is more important";
        case ControlMode::ControlNet:
            return "ControlNet is more important";
    }
    return "Balanced";
}

std::optional<ControlMode> controlModeFromString(const std::string& s) {
    for (const ControlMode m : {ControlMode::Balanced, ControlMode::Prompt, ControlMode::ControlNet})
        if (s == toString(m) || s == a1111Name(m)) return m;
    return std::nullopt;
}

std::vector<float> softInjectionScales(int downResiduals) {
    std::vector<float> scales;
    for (int k = 0; k <= downResiduals; ++k) scales.push_back(static_cast<float>(std::pow(0.825, 12 - k)));
    return scales;
}

bool controlActive(int i, int executed, double start, double end) {
    const double n = executed;
    return !(i / n < start || (i + 1) / n > end);
}

}  // namespace tessera
