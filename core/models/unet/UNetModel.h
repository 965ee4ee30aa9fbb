// UNetModel: a diffusers UNet2DModel folder (config.json, scheduler_config.json,
// diffusion_pytorch_model.safetensors) loaded and bound to float32 host tensors by
// diffusers parameter name. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/unet/UNetConfig.h"
#include "core/run/RunConfig.h"

namespace tessera {

// A model folder's configuration, read without its weights.
struct ModelFolderConfig {
    std::string unetDir;  // the folder holding config.json and the weights: dir, or dir/unet
    UNetConfig config;
    SchedulerOptions scheduler;  // diffusers' defaults when there is no scheduler_config.json
    std::string schedulerClass = "DDPMScheduler";
    ModelLimits limits() const { return config.limits(scheduler.numTrainTimesteps); }
};

// The one reader of a model folder's config.json and scheduler_config.json (for a pipeline
// folder, unet/config.json and scheduler/scheduler_config.json), used by the loader and by
// every front end that needs a model's limits before loading it. Files go through
// BoundedInput (never blocks; size and depth bounded) and values are range-checked
// (UNetConfig.h) before anything is sized from them. Throws ModelError naming the file or
// folder and what is wrong: missing, a link loop, a path over 4096 characters, not a folder,
// a folder named config.json, invalid JSON, a bad value.
ModelFolderConfig readModelFolderConfig(const std::string& dir);

class UNetModel {
public:
    // Loads dir/config.json, dir/scheduler_config.json (optional: defaults) through
    // readModelFolderConfig and dir/diffusion_pytorch_model.safetensors (or its shards).
    // Validates every expected tensor's presence and shape against the config (first missing
    // or mis-shaped one named, with expected and found shapes), rejects NaN/Inf, maps legacy
    // attention names (query/key/value/proj_attn).
    static UNetModel load(const std::string& dir);
    // Builds a model from a config and tensors already in memory (tests, random-weight benchmarks).
    static UNetModel fromTensors(UNetConfig, std::map<std::string, HostTensor>, SchedulerOptions = {});
    // Random weights for a config (deterministic in `seed`; PyTorch-like default init scales).
    static UNetModel random(const UNetConfig&, std::uint64_t seed);

    const UNetConfig& config() const { return config_; }
    const SchedulerOptions& schedulerOptions() const { return scheduler_; }
    const std::string& schedulerClass() const { return schedulerClass_; }  // e.g. "DDPMScheduler"
    const std::string& directory() const { return dir_; }
    std::string name() const;  // folder name, or "random" / "in-memory"

    // Canonical diffusers names (to_q/to_k/to_v/to_out.0). Throws ModelError naming a missing one.
    const HostTensor& tensor(const std::string& name) const;
    bool has(const std::string& name) const { return weights_.tensors.count(name) != 0; }
    const std::map<std::string, HostTensor>& tensors() const { return weights_.tensors; }
    // Tensors present in the file that the config does not use (not fatal; load() logs one
    // spdlog warning with their count and the first few names).
    const std::vector<std::string>& extraTensors() const { return weights_.extra; }

    std::int64_t parameterCount() const;
    // Multiply-adds x2 for one UNet evaluation of a single tile of h x w (h, w multiples of
    // config().downsampleFactor()). Counted: every convolution (incl. 1x1 shortcuts and
    // resamplers), every linear layer (time MLP, per-resnet time projections, attention
    // q/k/v/out), and the two attention matmuls (QK^T and AV, 2*N*N*C each). Not counted:
    // bias adds, GroupNorm, activations, softmax, residual adds, upsampling copies.
    double flopsPerEvaluation(int h, int w) const;
    // Of the safetensors file (of the shards' bytes in index order when sharded); for in-memory
    // models of the names, shapes and float32 data; for random models of (config, seed).
    std::string weightsSha256() const;

    // The full list of (name, shape) the config requires, in a stable order.
    static std::vector<std::pair<std::string, std::vector<std::int64_t>>> expectedTensors(const UNetConfig&);

private:
    UNetConfig config_;
    SchedulerOptions scheduler_;
    std::string schedulerClass_ = "DDPMScheduler";
    std::string dir_;
    std::string origin_ = "in-memory";  // name() when there is no folder
    ModelWeights weights_;              // tensors by canonical name, extra names, sha256
};

}  // namespace tessera
