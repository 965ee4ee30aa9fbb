// For the single-file checkpoint suites (tests/core/tst_singlefile, tests/app/tst_cli): checkpoints
// written for a test. Header-only; tests/CMakeLists.txt builds only tst_*.cpp.
#pragma once

#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeConfig.h"

namespace single_file_test {

using namespace tessera;
using TensorBytes = std::map<std::string, SafetensorsTensorData>;

// A checkpoint of `tensors` holding `value` everywhere (F16), with `extra` tensors added.
inline void writeFilled(const std::string& path, const TensorList& tensors, float value, TensorBytes extra = {}) {
    for (const auto& [name, shape] : tensors) {
        std::int64_t n = 1;
        for (const auto d : shape) n *= d;
        extra[name] = {SafetensorsDtype::F16, shape,
                       encodeFloats(SafetensorsDtype::F16, std::vector<float>(static_cast<std::size_t>(n), value))};
    }
    writeSafetensors(path, extra);
}

// A checkpoint whose data is never read: the header of `tensors` (F16), then a sparse hole.
inline void writeHeaderOnly(const std::string& path, const TensorList& tensors) {
    nlohmann::json header = nlohmann::json::object();
    std::uint64_t offset = 0;
    for (const auto& [name, shape] : tensors) {
        std::uint64_t bytes = 2;
        for (const auto d : shape) bytes *= static_cast<std::uint64_t>(d);
        header[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    {
        std::ofstream out(path, std::ios::binary);
        const std::uint64_t length = text.size();
        out.write(reinterpret_cast<const char*>(&length), 8);
        out << text;
    }
    std::filesystem::resize_file(path, 8 + text.size() + offset);
}

// SD 2.x files keep OpenCLIP's last block and its projection, which diffusers drops.
inline TensorList withDroppedOpenClipParts(TensorList tensors, int layers, std::int64_t width) {
    const std::string last = "cond_stage_model.model.transformer.resblocks." + std::to_string(layers - 1) + ".";
    const std::string next = "cond_stage_model.model.transformer.resblocks." + std::to_string(layers) + ".";
    TensorList added;
    for (const auto& [name, shape] : tensors)
        if (name.rfind(last, 0) == 0) added.emplace_back(next + name.substr(last.size()), shape);
    tensors.insert(tensors.end(), added.begin(), added.end());
    tensors.emplace_back("cond_stage_model.model.text_projection", std::vector<std::int64_t>{width, width});
    return tensors;
}

// The smallest models that fit a family's fixed values (GroupNorm 32, SD1's 8 UNet heads,
// 64-wide heads elsewhere): the derived configurations, no config folder.
struct SmallModel {
    UNetCondConfig unet;
    VaeConfig vae;
    ClipTextConfig text;
};

inline SmallModel smallModel(SdFamily family) {
    const bool sd2 = family == SdFamily::SD2;
    const int c0 = sd2 ? 64 : 32, width = 64;
    SmallModel m;
    nlohmann::json unet = {{"block_out_channels", {c0, 2 * c0}},
                           {"layers_per_block", 1},
                           {"down_block_types", {"CrossAttnDownBlock2D", "DownBlock2D"}},
                           {"up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D"}},
                           {"cross_attention_dim", width},
                           {"sample_size", sd2 ? 96 : 64}};
    if (sd2)
        unet.update({{"attention_head_dim", {c0 / 64, 2 * c0 / 64}},
                     {"use_linear_projection", true},
                     {"upcast_attention", true}});
    else
        unet["attention_head_dim"] = 8;
    m.unet = unetCondConfigFromJson(unet);
    m.vae = vaeConfigFromJson({{"block_out_channels", {32, 64}},
                               {"layers_per_block", 1},
                               {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
                               {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
                               {"sample_size", sd2 ? 768 : 512}});
    m.text = clipTextConfigFromJson({{"hidden_size", width},
                                     {"intermediate_size", 4 * width},
                                     {"num_hidden_layers", 2},
                                     {"num_attention_heads", 1},
                                     {"vocab_size", 100},
                                     {"hidden_act", sd2 ? "gelu" : "quick_gelu"},
                                     {"bos_token_id", 0},
                                     {"eos_token_id", 2}});
    return m;
}

inline std::string writeSmall(const QTemporaryDir& dir, SdFamily family, float value = 0.25f) {
    const SmallModel m = smallModel(family);
    TensorList tensors = singleFileTensors(family, m.unet, m.vae, m.text);
    if (family == SdFamily::SD2) tensors = withDroppedOpenClipParts(tensors, 2, 64);
    const std::string path =
        dir.filePath(family == SdFamily::SD2 ? "small2.safetensors" : "small1.safetensors").toStdString();
    writeFilled(path, tensors, value);
    return path;
}

}  // namespace single_file_test
