// Fuzz target: a PNG's generation settings as `tessera-cli --params-from` reads them: A1111's
// infotext ("parameters": parseInfotext, then applyInfotext onto a RunConfig) and, for input
// starting with '{', ComfyUI's "prompt" graph (applyComfyPrompt). Only applyComfyPrompt may
// reject, and only with InputFileError and a readable message; every setting listed as not
// applied must be readable the same way. Settings read from an infotext that validate must be
// written again (infotext) and read back with every mapped field unchanged.
#include "tests/fuzz/FuzzSupport.h"

#include <stdexcept>

#include "core/run/Infotext.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::asText(data, size);
    RunConfig config;
    ImportedSettings imported;
    const bool comfy = !text.empty() && text.front() == '{';
    if (comfy) {
        try {
            imported = applyComfyPrompt(text, config, "params-from");
        } catch (const InputFileError& e) {
            fuzz::checkRejection(e);
            return 0;
        }
    } else {
        imported = applyInfotext(parseInfotext(text), config);
    }
    for (const UnmappedSetting& setting : imported.unmapped)
        fuzz::checkRejection(std::runtime_error(setting.message()));

    InfotextExtras extras;
    extras.stableDiffusion = true;
    extras.modelName = "model, name: \"x\"";
    const std::string written = infotext(config, extras);
    if (!isValidUtf8(written)) fuzz::violation("infotext wrote invalid UTF-8: " + excerpt(written, 300));
    if (comfy || !validateAll(config).empty()) return 0;
    RunConfig back;
    applyInfotext(parseInfotext(written), back);
    const std::vector<std::string> differ = mappedFieldDifferences(config, back);
    if (!differ.empty())
        fuzz::violation("'" + differ.front() + "' changed on the way back\nwritten: " + excerpt(written, 600));
    return 0;
}
