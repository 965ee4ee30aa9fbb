// The SDXL pipeline fixture (tests/data/sdxlpipeline, tools/reference/make_sdxl_pipeline_fixtures.py)
// as the core and CUDA suites read it: its cases, their tensors and the run each case describes.
// Header-only; tests/CMakeLists.txt builds only tst_*.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/run/Engine.h"
#include "core/run/RunConfig.h"

namespace tessera::sdxl_fixture {

inline const std::string kDir = TESSERA_TEST_DATA "/sdxlpipeline";
inline const std::string kPipeline = kDir + "/pipeline";

inline bool present() { return std::filesystem::exists(kDir + "/cases.json"); }
inline nlohmann::json document() { return readBoundedJson(kDir + "/cases.json", "test"); }
inline std::string file(const std::string& name) { return kDir + "/" + name + ".safetensors"; }
inline std::vector<float> tensor(const std::string& name, const std::string& t) {
    return SafetensorsFile(file(name)).readFloat32(t);
}
// [1, C, h, w] from cases.json's shapes -> C x h x w.
inline ImageTensor image(const nlohmann::json& shape, std::vector<float> data) {
    return ImageTensor{shape.at(1).get<int>(), shape.at(2).get<int>(), shape.at(3).get<int>(), std::move(data)};
}
// Case `name`'s start noise (x_T = noise * init_noise_sigma).
inline ImageTensor startNoise(const nlohmann::json& c, const std::string& name) {
    return image(c.at("shapes").at("start_noise"), tensor(name, "start_noise"));
}

// The run diffusers made for case `c`: one tile over the whole image (the untiled pipeline),
// float32 on the CPU.
inline RunConfig runConfig(const nlohmann::json& c, const std::string& label) {
    RunConfig config;
    config.model = kPipeline;
    config.width = c.at("width");
    config.height = c.at("height");
    config.steps = c.at("steps");
    config.scheduler = parseScheduler(c.at("scheduler").get<std::string>());
    config.schedulerOptions.karrasSigmas = c.at("karras").get<bool>();
    config.schedulerOptions.timestepSpacing = parseTimestepSpacing(c.at("timestep_spacing").get<std::string>());
    config.prompt = c.at("prompt");
    config.negativePrompt = c.at("negative_prompt");
    config.cfgScale = c.at("cfg");
    config.tile = 128;  // covers the cases' 96 x 64 and 64 x 96
    config.overlapPx = 32;
    config.precision = Precision::FP32;
    config.backend = BackendKind::CPU;
    config.sdxlSizeConditioning = SdxlSizeConditioning::Image;
    config.previewEvery = 0;
    config.label = label;
    return config;
}

}  // namespace tessera::sdxl_fixture
