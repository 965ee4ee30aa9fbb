#include "app/cli/CliText.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "app/cli/UpscaleCommand.h"
#include "core/base/BoundedInput.h"
#include "core/run/RunConfig.h"
#include "core/run/RunConfigFields.h"
#include "core/run/UpscaleModelFile.h"

namespace tessera {

void fail(const std::string& field, const std::string& message) {
    throw ValidationError(field, field + ": " + message);
}

double median(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string fixed(double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string significant(double value, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    return text;
}

std::string csvField(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) {
        if (c == '"') quoted += '"';
        quoted += c == '\n' ? ' ' : c;
    }
    return quoted + "\"";
}

std::string executableDir() {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : self.parent_path().string();
}

std::string upscaleUsage() {
    // A run setting's help as the run options' usage gives it.
    const auto flag = [](const char* name) {
        const RunConfigField& field = *findRunConfigField(name);
        std::string help(field.help);
        if (const auto at = help.find("{default}"); at != std::string::npos)
            help.replace(at, std::string_view("{default}").size(), defaultText(field));
        return help;
    };
    return "Usage: tessera-cli upscale --upscale-model FILE|NAME --init IMAGE [options]\n"
           "Runs an upscale model alone over an image (no diffusion model needed) and writes\n"
           "<out>/<run-id>.png, with its A1111 parameters (Postprocess upscale by, Postprocess upscaler)\n"
           "and the manifest as text chunks, and <run-id>.json (the manifest). The model runs in tiles,\n"
           "feathered where they overlap, within a memory budget (4 GiB, or half of what the host has\n"
           "when that is less; a smaller tile where one does not fit). Everything is checked before\n"
           "any work; a refusal names the option (exit 2).\n\n"
           "Models: ESRGAN (every layout, ESRGAN+, Real-ESRGAN x2plus/x1), Real-ESRGAN Compact and SPAN, as\n"
           ".safetensors files or PyTorch checkpoints (.pth, .pt: read as data, never executed). A NAME is\n"
           "looked up as NAME.safetensors, NAME.pth or NAME.pt in ESRGAN/ (A1111) then upscale_models/\n"
           "(ComfyUI) of the models folder named by $" +
           std::string(kModelsFolderVariable) +
           ".\n\n"
           "Options:\n" +
           usageEntry("--upscale-model FILE|NAME", "the upscale model (required)") +
           usageEntry("--init FILE", "the image, PNG or JPEG (required)") +
           usageEntry("--upscale X",
                      "the output is the image times X (default: the model's scale); a\n"
                      "smaller X shrinks the model's output to it (area average), a larger\n"
                      "one is refused") +
           usageEntry("--out DIR", "output folder (default .)") +
           usageEntry("--tile PX", "tile side in input pixels, " + std::to_string(kUpscaleTileMin) + " to " +
                                       std::to_string(kUpscaleTileMax) + " (default " +
                                       std::to_string(kUpscaleTileDefault) + ")") +
           usageEntry("--tile-overlap PX", "tile overlap in input pixels, 0 to half the tile (default " +
                                               std::to_string(kUpscaleOverlapDefault) + ")") +
           usageEntry("--backend NAME", flag("backend") + "; the model runs on the CPU engine") +
           usageEntry("--threads N", flag("threads")) + usageEntry("--label TEXT", flag("label")) +
           usageEntry("--help, -h", "this text") +
           "\nExit status: 0 success, 2 invalid input (the message names the option), 1 failure while running.\n";
}

}  // namespace tessera
