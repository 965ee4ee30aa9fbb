#include "app/cli/RunMemoryCheck.h"

#include <filesystem>
#include <system_error>

#include "core/base/HostMemory.h"
#include "core/formats/ModelWeights.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// A pipeline folder's configurations, as loadSdModel reads them (config.json files only).
SdModelConfigs folderConfigs(const fs::path& root) {
    SdModelConfigs c;
    c.unet = unetCondConfigFromJson(readModelJson(root / "unet" / "config.json"));
    c.vae = vaeConfigFromJson(readModelJson(root / "vae" / "config.json"));
    c.textEncoder = readClipTextConfig(root / "text_encoder");
    c.family = familyOfTextEncoder(c.textEncoder);
    std::error_code ec;
    if (fs::is_directory(root / "text_encoder_2", ec)) {
        c.textEncoder2 = readClipTextConfig(root / "text_encoder_2");
        c.family = SdFamily::SDXL;
    }
    return c;
}

}  // namespace

std::optional<SdModelConfigs> readSdModelConfigs(const std::string& path) {
    try {
        if (path.rfind(kRandomModelPrefix, 0) == 0) return randomSdModelConfigs(path);
        std::error_code ec;
        if (fs::is_directory(path, ec)) return folderConfigs(path);
        if (ec) return std::nullopt;
        SingleFileOptions options;
        options.digest = FileDigest::Skip;
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
        SdModelConfigs c;
        c.family = info.family;
        c.unet = info.unet;
        c.vae = info.vae;
        c.textEncoder = info.textEncoder;
        c.textEncoder2 = info.textEncoder2;
        return c;
    } catch (const std::exception&) {
        return std::nullopt;  // the load says what is wrong, with its own checks first
    }
}

HostMemoryEstimate estimateRunMemory(const RunConfig& config, const RunModelShape& model, BackendKind backend,
                                     const std::optional<StartImageSize>& startImage) {
    if (model.stableDiffusion)
        return estimateSdHostMemory(config, model.sdModel ? &*model.sdModel : nullptr, backend, startImage);
    return estimateHostMemory(config, model.pixel, backend, startImage);
}

void checkRunMemory(const RunConfig& config, const RunModelShape& model, BackendKind backend,
                    const std::optional<StartImageSize>& startImage) {
    const std::optional<HostMemory> available = availableHostMemory();
    if (!available) return;
    if (model.stableDiffusion)
        checkSdHostMemory(config, model.sdModel ? &*model.sdModel : nullptr, backend, startImage, *available);
    else
        checkHostMemory(config, model.pixel, backend, startImage, *available);
}

}  // namespace tessera
