// ControlNetModel: a ControlNet's configuration and float32 weights under diffusers' names, loaded
// from what users have: a diffusers folder (config.json + diffusion_pytorch_model.safetensors, or
// a pipeline folder holding controlnet/), or one file in the original names (ControlNet 1.0/1.1's
// control_model.* .pth files, extracted files without the prefix) or in diffusers' names, as
// .safetensors or a pickled PyTorch checkpoint read as data by the restricted reader (nothing in
// the file is run; core/formats/TensorFile.h). A single file's configuration comes from its
// tensors' shapes (ControlNetFileLayout.h) or from a given config.json. The graphs
// (ControlNetGraph.h) bind tensors() by name. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/ModelWeights.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetFileLayout.h"
#include "core/models/sd/SingleFileCheckpoint.h"

namespace tessera {

struct ControlNetLoadOptions {
    // A folder holding the ControlNet's config.json, used for a single file instead of the sizes its
    // tensors give (diffusers' from_single_file(config=...)): for files whose GroupNorm groups or
    // heads are not their family's. Empty: from the tensors. Ignored for folders.
    std::string configFolder;
    // Single files: SHA-256 of the whole file as weightsSha256() (A1111 records a ControlNet by its
    // file's hash); Skip leaves it empty. Folders: ModelWeights' digest of the weight files.
    FileDigest digest = FileDigest::Compute;
};

// Where a model came from, for the record and for messages.
struct ControlNetSource {
    std::string path;  // the folder (its controlnet/ for a pipeline folder) or the file; empty in memory
    bool singleFile = false;
    ControlNetFileLayout layout;  // single files: names and prefix
    std::string reader;           // single files: TensorFile::description()
    std::string configSource;     // "config.json", "sizes from the tensors", "the config folder ..."
    SdFamily family = SdFamily::SD1;
    std::string familyReason;
    std::vector<std::string> ignored;  // tensors of the file no part reads (a 1.0 file's whole SD model)
};

class ControlNetModel {
public:
    // A folder (a ControlNet folder or a pipeline folder with controlnet/) or a single file, by what
    // `path` is. Every tensor the graphs declare is found and shape-checked before any data is read
    // and must hold finite values. Throws ModelError naming the file and, for a tensor, its name in
    // the file and in the model with the expected and found shape; for a file that is not a
    // ControlNet Tessera runs, what it is (Control-LoRA, difference, union, SD3 / FLUX, a whole SD
    // checkpoint). `meter` (optional) counts the tensors read.
    static ControlNetModel load(const std::string& path, const ControlNetLoadOptions& options = {},
                                LoadMeter* meter = nullptr);
    // Tensors in memory under diffusers' names as a file holds them, checked and ordered as load() does.
    static ControlNetModel fromTensors(ControlNetConfig config, std::map<std::string, HostTensor> tensors,
                                       WeightsDigest digest = WeightsDigest::Compute);
    // Random weights (randomTensors; deterministic in `seed`).
    static ControlNetModel random(const ControlNetConfig& config, std::uint64_t seed);

    // (name, shape) of every tensor: the hint graph's, then the trunk's. ModelError
    // "config.json: <key>: ..." for a config the graphs cannot be built from.
    static TensorList expectedTensors(const ControlNetConfig& config);

    const ControlNetConfig& config() const { return config_; }
    // By diffusers' name, what the graphs bind. A "bgr" model's
    // controlnet_cond_embedding.conv_in.weight holds its input channels reversed, so that the hint
    // graph takes RGB hints (ControlNetModel.forward reverses the hint instead: the same convolution).
    const std::map<std::string, HostTensor>& tensors() const { return weights_.tensors; }
    const ControlNetSource& source() const { return source_; }
    // Tensors of a folder's weight files the graphs do not declare (encoder_hid_proj, ...).
    const std::vector<std::string>& extraTensors() const { return weights_.extra; }
    const std::string& weightsSha256() const { return weights_.sha256; }
    std::int64_t parameterCount() const;

private:
    static ControlNetModel loadFolder(const std::string& path, LoadMeter* meter);
    static ControlNetModel loadSingleFile(const std::string& path, const ControlNetLoadOptions& options,
                                          LoadMeter* meter);
    // The hint encoder's input channels reversed for a "bgr" model.
    void orderHintChannels();

    ControlNetConfig config_;
    ModelWeights weights_;
    ControlNetSource source_;
};

}  // namespace tessera
