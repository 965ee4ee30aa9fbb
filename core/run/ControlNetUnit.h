// ControlNetUnit: one ControlNet of a run as the user sets it (A1111's ControlNet extension calls
// it a unit: model, image, weight, guidance start/end, control mode, preprocessor). Qt-free.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

// A1111's control modes (sd-webui-controlnet scripts/enums.py ControlMode, scripts/hook.py):
// Balanced scales every residual by the weight; Prompt ("My prompt is more important") also by
// 0.825^(12 - i) for residual i (soft injection); ControlNet ("ControlNet is more important")
// scales as Prompt and gives the unconditional half no control (cfg injection).
enum class ControlMode { Balanced, Prompt, ControlNet };

const char* toString(ControlMode);                                     // "balanced", "prompt", "controlnet"
const char* a1111Name(ControlMode);                                    // "Balanced", "My prompt is more important", ...
std::optional<ControlMode> controlModeFromString(const std::string&);  // either spelling

// A1111's soft-injection weights for a ControlNet of `downResiduals` down residuals: residual k
// (k = 0 .. downResiduals, the last the mid one) gets 0.825^(12 - k); SD 1.x/2.x (12 down
// residuals): 0.0994 .. 0.8250, mid 1; SDXL (9) takes the same list's first 10 entries, so its
// mid residual gets 0.825^3.
std::vector<float> softInjectionScales(int downResiduals);

// Whether the ControlNet acts at executed step i of `executed` (diffusers
// pipeline_controlnet_img2img.py controlnet_keep: off when i / executed < start or
// (i + 1) / executed > end).
bool controlActive(int i, int executed, double start, double end);

struct ControlNetUnit {
    std::string model;  // a ControlNet file or folder, or a name under the models folder's ControlNet/
    std::string image;  // the control image file; "init" or empty: the run's start image
    double weight = 1.0;
    double start = 0.0, end = 1.0;  // fractions of the executed steps
    ControlMode mode = ControlMode::Balanced;
    std::string preprocessor = "none";  // none, tile_resample, tile_colorfix, tile_colorfix+sharp
    double downSampling = 1.0;          // tile_resample's down sampling rate
    // tile_colorfix's "Variation" (the blur radius in latent pixels, a whole number of 3 to 32; the
    // extension's default 8) and tile_colorfix+sharp's "Sharpness" (0 to 2, default 1)
    // (sd-webui-controlnet scripts/preprocessor/legacy/preprocessor_compiled.py).
    double colorfixVariation = 8.0;
    double colorfixSharpness = 1.0;
    bool operator==(const ControlNetUnit&) const = default;
};

// The most ControlNets a run's settings name (A1111's default unit count is 3).
inline constexpr std::size_t kMaxControlNets = 16;
// The preprocessors a unit may name (sd-webui-controlnet's tile family and none).
inline constexpr const char* kControlPreprocessors[] = {"none", "tile_resample", "tile_colorfix",
                                                        "tile_colorfix+sharp"};
// Whether a preprocessor is tile_colorfix or tile_colorfix+sharp (a correction after the UNet).
inline bool isColorFixPreprocessor(const std::string& p) { return p == "tile_colorfix" || p == "tile_colorfix+sharp"; }
// The extension's slider ranges.
inline constexpr double kColorFixVariationMin = 3.0, kColorFixVariationMax = 32.0;
inline constexpr double kColorFixSharpnessMax = 2.0;

}  // namespace tessera
