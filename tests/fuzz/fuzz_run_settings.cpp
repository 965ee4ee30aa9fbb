// Fuzz target: run settings as a preset or a compare A/B file holds them. The input goes the
// way the front ends read such a file: bounded JSON parsing (core/BoundedInput), then
// runConfigFromJson, then validateAll and parametersLine. Input may only be rejected with
// InputFileError or ValidationError, each with a readable message; settings that validate
// must be written (toJson) and read back unchanged.
#include "tests/fuzz/FuzzSupport.h"

#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    RunConfig config;
    try {
        config = runConfigFromJson(parseBoundedJson(fuzz::asText(data, size), "preset", "the fuzz input"));
    } catch (const InputFileError& e) {
        fuzz::checkRejection(e);
        return 0;
    } catch (const ValidationError& e) {
        fuzz::checkRejection(e);
        return 0;
    }
    const std::vector<ValidationError> problems = validateAll(config);
    for (const ValidationError& problem : problems) fuzz::checkRejection(problem);
    (void)parametersLine(config);
    if (problems.empty())
        fuzz::checkRoundTrip(toJson(config), runConfigFromJson,
                             static_cast<nlohmann::json (*)(const RunConfig&)>(toJson), "run settings");
    return 0;
}
