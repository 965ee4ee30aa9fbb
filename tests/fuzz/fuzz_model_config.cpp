// Fuzz target: a diffusers model folder's config.json, a CLIP text encoder's config.json and
// scheduler_config.json. Each input is read as all three, the way the model loaders read them:
// bounded JSON parsing, then unetConfigFromJson / clipTextConfigFromJson /
// schedulerOptionsFromJson. Input may only be rejected with a
// std::runtime_error naming the key, with a readable message. An accepted model config must
// give well-defined derived sizes (no overflow) and survive toJson and back unchanged.
#include "tests/fuzz/FuzzSupport.h"

#include <spdlog/spdlog.h>

#include "core/formats/SchedulerConfig.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/unet/UNetConfig.h"
#include "core/text/ClipTokenizer.h"

using namespace tessera;

namespace {

void checkModelConfig(const nlohmann::json& json) {
    UNetConfig config;
    try {
        config = unetConfigFromJson(json);
    } catch (const std::runtime_error& e) {
        fuzz::checkRejection(e);
        return;
    }
    // What the loader and graph builder derive from an accepted config.
    (void)config.limits();
    (void)config.timeEmbedDim();
    for (const int channels : config.blockOutChannels) (void)config.headsFor(channels);
    fuzz::checkRoundTrip(toJson(config), unetConfigFromJson, static_cast<nlohmann::json (*)(const UNetConfig&)>(toJson),
                         "model config.json");
}

// An accepted text encoder config frames a whole prompt (77 positions), splits its width evenly
// over its heads and pools at an id of its vocabulary.
void checkClipTextConfig(const nlohmann::json& json) {
    ClipTextConfig config;
    try {
        config = clipTextConfigFromJson(json);
    } catch (const std::runtime_error& e) {
        fuzz::checkRejection(e);
        return;
    }
    if (config.maxPositionEmbeddings < clip_limits::kContextLength)
        fuzz::violation("text encoder config.json accepted with fewer positions than a framed prompt's 77");
    if (config.hiddenSize % config.numAttentionHeads != 0 || config.eosTokenId >= config.vocabSize)
        fuzz::violation("text encoder config.json accepted with heads or eos_token_id that do not fit");
    fuzz::checkRoundTrip(toJson(config), clipTextConfigFromJson,
                         static_cast<nlohmann::json (*)(const ClipTextConfig&)>(toJson), "text encoder config.json");
}

void checkSchedulerConfig(const nlohmann::json& json) {
    try {
        std::string className;
        (void)schedulerOptionsFromJson(json, &className);
    } catch (const std::runtime_error& e) {
        fuzz::checkRejection(e);
    }
}

}  // namespace

// Unknown keys are logged as warnings (diffusers does the same); not per input here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::err);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    nlohmann::json json;
    try {
        json = parseBoundedJson(fuzz::asText(data, size), "model", "the fuzz input");
    } catch (const InputFileError& e) {
        fuzz::checkRejection(e);
        return 0;
    }
    checkModelConfig(json);
    checkClipTextConfig(json);
    checkSchedulerConfig(json);
    return 0;
}
