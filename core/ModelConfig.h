// UNet2DModel configuration, read from a diffusers config.json with the library's
// defaults for missing keys (shared/spec/unet2d.md §1). Qt-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/RunConfig.h"

namespace tessera {

enum class DownBlockType { Down, AttnDown };
enum class UpBlockType { Up, AttnUp };
enum class TimeScaleShift { Default, ScaleShift };

struct ModelConfig {
    int sampleSize = 0;                 // 0 = not given
    int inChannels = 3;
    int outChannels = 3;
    bool centerInputSample = false;
    std::optional<int> timeEmbeddingDim;  // null -> 4*C0
    int freqShift = 0;
    bool flipSinToCos = true;
    std::vector<DownBlockType> downBlocks{DownBlockType::Down, DownBlockType::AttnDown,
                                          DownBlockType::AttnDown, DownBlockType::AttnDown};
    std::vector<UpBlockType> upBlocks{UpBlockType::AttnUp, UpBlockType::AttnUp,
                                      UpBlockType::AttnUp, UpBlockType::Up};
    std::vector<int> blockOutChannels{224, 448, 672, 896};
    bool hasMidBlock = true;
    int layersPerBlock = 2;
    float midBlockScaleFactor = 1.0f;
    int downsamplePadding = 1;
    std::optional<int> attentionHeadDim = 8;  // null -> one head of width C
    int normNumGroups = 32;
    std::optional<int> attnNormNumGroups;
    float normEps = 1e-5f;
    TimeScaleShift resnetTimeScaleShift = TimeScaleShift::Default;
    bool addAttention = true;

    int levels() const { return static_cast<int>(blockOutChannels.size()); }
    int downsampleFactor() const { return 1 << (levels() - 1); }
    int timeEmbedDim() const { return timeEmbeddingDim.value_or(4 * blockOutChannels.at(0)); }
    // Heads of an attention layer with C channels.
    int headsFor(int channels) const { return attentionHeadDim ? channels / *attentionHeadDim : 1; }
    ModelLimits limits(int numTrainTimesteps = 1000) const {
        return ModelLimits{downsampleFactor(), numTrainTimesteps, inChannels};
    }
};

// Parses config.json text. Unsupported values (time_embedding_type other than
// "positional", class embeddings, unknown block types, act_fn other than silu,
// downsample_type/upsample_type "resnet") throw std::runtime_error naming the key.
ModelConfig modelConfigFromJson(const nlohmann::json&);
nlohmann::json toJson(const ModelConfig&);

// Reads a diffusers scheduler_config.json into SchedulerOptions (unknown keys ignored,
// missing keys keep diffusers' defaults). Also returns the class name
// ("DDPMScheduler", ...) through `className` when non-null.
SchedulerOptions schedulerOptionsFromJson(const nlohmann::json&, std::string* className = nullptr);

}  // namespace tessera
