// UNetSharedKeys: the config.json keys that UNet2DModel and UNet2DConditionModel share (diffusers
// models/unets/unet_2d.py and unet_2d_condition.py, __init__), read the same way into UNetConfig
// (core/models/unet/UNetConfig.cpp) and UNetCondConfig (core/models/sd/UNetCondConfig.cpp). Each
// family gives its own ranges and reasons, so a rejection names what its published models use.
// Qt-free.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/formats/ConfigJson.h"
#include "core/models/unet/UNetConfig.h"

namespace tessera {

struct UNetSharedKeys {
    config_json::IntRange sampleChannels;     // in_channels, out_channels
    config_json::IntRange blockChannels;      // each block_out_channels entry
    config_json::IntRange freqShift;          // freq_shift
    config_json::IntRange downsamplePadding;  // downsample_padding
    config_json::LevelLimit levels;           // block_out_channels' length
    const char* midBlockType;                 // the one mid_block_type the family builds (or null: none)
    const char* midBlockScaleWhy;             // mid_block_scale_factor, in [0.01, 100]
    const char* normEpsWhy;                   // norm_eps, in [1e-12, 1]
    config_json::IntRange timeEmbeddingDim{1, unet_config_bounds::kMaxTimeEmbeddingDim,
                                           "4 x block_out_channels[0] by default"};

    // Reads `key` into `c` (a UNetConfig or a UNetCondConfig) when it is one of these keys;
    // false for any other key. Rejections are config_json::reject's.
    template <typename Config>
    bool read(Config& c, const std::string& key, const nlohmann::json& value) const {
        using namespace config_json;
        if (key == "in_channels")
            c.inChannels = readInt(value, key, sampleChannels);
        else if (key == "out_channels")
            c.outChannels = readInt(value, key, sampleChannels);
        else if (key == "center_input_sample")
            c.centerInputSample = readBool(value, key);
        else if (key == "flip_sin_to_cos")
            c.flipSinToCos = readBool(value, key);
        else if (key == "freq_shift")
            c.freqShift = readInt(value, key, freqShift);
        else if (key == "time_embedding_dim")
            c.timeEmbeddingDim = readOptionalInt(value, key, timeEmbeddingDim);
        else if (key == "mid_block_type") {
            if (value.is_null())
                c.hasMidBlock = false;
            else if (readString(value, key) == midBlockType)
                c.hasMidBlock = true;
            else
                reject(key, value, std::string("only \"") + midBlockType + "\" or null is supported");
        } else if (key == "block_out_channels")
            c.blockOutChannels = readChannelList(value, key, levels, blockChannels);
        else if (key == "downsample_padding")
            c.downsamplePadding = readInt(value, key, downsamplePadding);
        else if (key == "mid_block_scale_factor")
            c.midBlockScaleFactor = static_cast<float>(readNumber(value, key, 0.01, 100.0, midBlockScaleWhy));
        else if (key == "norm_eps")
            c.normEps = static_cast<float>(readNumber(value, key, 1e-12, 1.0, normEpsWhy));
        else
            return false;
        return true;
    }
};

}  // namespace tessera
