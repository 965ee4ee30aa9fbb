#include "core/run/ControlNetInfotext.h"

#include <charconv>
#include <filesystem>
#include <vector>

#include "core/base/FormatNumber.h"

namespace tessera {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool readNumber(std::string_view s, double& out) {
    s = trim(s);
    const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string controlNetInfotextKey(std::size_t index) { return "ControlNet " + std::to_string(index); }

std::optional<std::size_t> controlNetInfotextIndex(std::string_view key) {
    constexpr std::string_view prefix = "ControlNet ";
    if (!key.starts_with(prefix)) return std::nullopt;
    key.remove_prefix(prefix.size());
    std::size_t n = 0;
    const auto r = std::from_chars(key.data(), key.data() + key.size(), n);
    if (r.ec != std::errc() || r.ptr != key.data() + key.size() || key.empty() || n >= kMaxControlNets)
        return std::nullopt;
    return n;
}

std::string controlNetInfotextModel(const std::string& model, const std::string& hash) {
    if (model.empty()) return "None";  // the extension's name for a unit without a model
    std::filesystem::path p(model);
    if (p.filename().empty()) p = p.parent_path();
    std::string name = p.has_extension() ? p.stem().string() : p.filename().string();
    if (hash.size() >= 8) name += " [" + hash.substr(0, 8) + "]";
    return name;
}

std::string controlNetInfotextValue(const ControlNetUnit& u, const std::string& hash) {
    double thresholdA = 0.5, thresholdB = 0.5;  // the extension's defaults for modules without sliders
    if (u.preprocessor == "tile_resample") thresholdA = u.downSampling;
    if (isColorFixPreprocessor(u.preprocessor)) thresholdA = u.colorfixVariation;
    if (u.preprocessor == "tile_colorfix+sharp") thresholdB = u.colorfixSharpness;
    return "Module: " + u.preprocessor + ", Model: " + controlNetInfotextModel(u.model, hash) +
           ", Weight: " + formatNumber(u.weight) +
           // A unit's own image is cropped and resized, the start image stretched (A1111's image-to-image
           // resize mode 0), as the extension resizes them (ControlPreprocess.h detectmapResize).
           ", Resize Mode: " + (u.image.empty() ? "Just Resize" : "Crop and Resize") +
           ", Processor Res: 512, Threshold A: " + formatNumber(thresholdA) +
           ", Threshold B: " + formatNumber(thresholdB) + ", Guidance Start: " + formatNumber(u.start) +
           ", Guidance End: " + formatNumber(u.end) + ", Pixel Perfect: False, Control Mode: " + a1111Name(u.mode);
}

std::optional<ControlNetUnit> controlNetFromInfotext(std::string_view value, std::string* why) {
    ControlNetUnit u;
    bool model = false;
    const auto fail = [why](std::string text) -> std::optional<ControlNetUnit> {
        if (why) *why = std::move(text);
        return std::nullopt;
    };
    double thresholdA = 1.0;
    std::optional<double> thresholdB;
    while (!value.empty()) {
        const std::size_t comma = value.find(',');
        const std::string_view item = value.substr(0, comma);
        value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
        const std::size_t colon = item.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string_view key = trim(item.substr(0, colon)), v = trim(item.substr(colon + 1));
        double number = 0;
        const auto numeric = [&](double& out) {
            if (!readNumber(v, number)) return false;
            out = number;
            return true;
        };
        if (key == "Module") {
            u.preprocessor = std::string(v);
        } else if (key == "Model") {
            std::string_view name = v;
            const std::size_t bracket = name.rfind(" [");
            if (bracket != std::string_view::npos && name.ends_with("]")) name = name.substr(0, bracket);
            u.model = std::string(name);
            model = !u.model.empty() && u.model != "None";
        } else if (key == "Weight") {
            if (!numeric(u.weight)) return fail("its Weight is not a number");
        } else if (key == "Guidance Start") {
            if (!numeric(u.start)) return fail("its Guidance Start is not a number");
        } else if (key == "Guidance End") {
            if (!numeric(u.end)) return fail("its Guidance End is not a number");
        } else if (key == "Threshold A") {
            if (!numeric(thresholdA)) return fail("its Threshold A is not a number");
        } else if (key == "Threshold B") {
            double b = 0;
            if (!numeric(b)) return fail("its Threshold B is not a number");
            thresholdB = b;
        } else if (key == "Control Mode") {
            const std::optional<ControlMode> mode = controlModeFromString(std::string(v));
            if (!mode) return fail("its Control Mode '" + std::string(v) + "' is not one Tessera has");
            u.mode = *mode;
        }
    }
    if (!model) return fail("it names no model");
    if (u.preprocessor == "tile_resample") u.downSampling = thresholdA;
    if (isColorFixPreprocessor(u.preprocessor)) u.colorfixVariation = thresholdA;
    if (u.preprocessor == "tile_colorfix+sharp" && thresholdB) u.colorfixSharpness = *thresholdB;
    return u;
}

}  // namespace tessera
