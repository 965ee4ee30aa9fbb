// VaeModel: a diffusers AutoencoderKL folder (config.json + diffusion_pytorch_model.safetensors,
// or a pipeline folder holding vae/) loaded and bound to float32 host tensors by diffusers
// parameter name, and its whole-image decode / encode on a Backend. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera {

class Backend;  // core/graph/Backend.h

// Reads a VAE folder's config.json: `dir` is the vae/ folder itself, or a pipeline folder
// holding vae/config.json. Through BoundedInput; ModelError names the file and what is wrong
// (missing, not a folder, invalid JSON, _class_name other than AutoencoderKL, a bad value).
// `vaeDir` (when non-null) receives the folder that holds config.json and the weights.
VaeConfig readVaeConfig(const std::string& dir, std::string* vaeDir = nullptr);

class VaeModel {
public:
    // readVaeConfig, then ModelWeights::load against vaeParameterList(config): every tensor
    // present and shaped as the graphs declare (the legacy mid-block attention names
    // query/key/value/proj_attn are accepted), finite, F16/BF16 upcast. ModelError names the
    // file and the tensor.
    // `meter` (optional) counts the tensors read (core/base/LoadProgress.h).
    static VaeModel load(const std::string& dir, LoadMeter* meter = nullptr);
    // The same checks on tensors already in memory; `digest` as in ModelWeights::fromTensors.
    static VaeModel fromTensors(VaeConfig config, std::map<std::string, HostTensor> tensors,
                                WeightsDigest digest = WeightsDigest::Compute);

    const VaeConfig& config() const { return config_; }
    const std::string& directory() const { return dir_; }  // empty for in-memory models
    const std::map<std::string, HostTensor>& tensors() const { return weights_.tensors; }
    const std::vector<std::string>& extraTensors() const { return weights_.extra; }
    const std::string& weightsSha256() const { return weights_.sha256; }

    // Every tensor the config needs: vaeParameterList(config), config errors as ModelError.
    static TensorList expectedTensors(const VaeConfig&);
    std::int64_t parameterCount() const;
    // Multiply-adds x2 of one decode / encode of a single image of imageH x imageW pixels
    // (convolutions incl. 1x1 shortcuts and quant convs, the attention projections and its
    // two matrix products). Sides: positive multiples of config().scaleFactor().
    double decoderFlops(int imageH, int imageW) const;
    double encoderFlops(int imageH, int imageW) const;

    // The decoder over a whole latent [B, latent_channels, h, w] (already divided by
    // scaling_factor): image [B, out_channels, h * f, w * f], f = config().scaleFactor(),
    // about [-1, 1] (not clamped). Prepares `backend` for this shape (re-prepared per call).
    // Throws std::invalid_argument naming "latent" and what is allowed for a bad shape.
    HostTensor decode(Backend& backend, const HostTensor& latent) const;
    // The encoder (+ quant_conv) over a whole image [B, in_channels, H, W] in [-1, 1], H and W
    // multiples of f: the moments [B, 2 * latent_channels, H / f, W / f] (mean, then logvar
    // before its clamp). Throws std::invalid_argument naming "image" for a bad shape.
    HostTensor encode(Backend& backend, const HostTensor& image) const;

private:
    VaeConfig config_;
    std::string dir_;
    ModelWeights weights_;  // tensors by canonical name, extra names, sha256
};

// diffusers' DiagonalGaussianDistribution (models/autoencoders/vae.py) of encoder moments
// [B, 2C, h, w]: the mean (channels 0 .. C-1), which img2img uses when it does not sample, and
// the log-variance (channels C .. 2C-1) clamped to [-30, 20]. Throws std::invalid_argument for
// moments of odd channel count.
HostTensor posteriorMean(const HostTensor& moments);
HostTensor posteriorLogvar(const HostTensor& moments);

// The pipelines' latent scaling (StableDiffusionPipeline, StableDiffusionXLPipeline), per element
// in float32 and in diffusers' order of operations, on [B, latent_channels, h, w]:
//   scaleLatents (after encode):    z * scaling_factor, or (z - mean) * scaling_factor / std
//   unscaleLatents (before decode): latents / scaling_factor, or latents * std / scaling_factor + mean
// with mean/std the config's latents_mean/latents_std per channel, used only when both are set
// (as the SDXL pipelines do; SD 1.x/2.x files have neither). shift_factor is not used (SD
// pipelines ignore it). Throws std::invalid_argument for a tensor of another channel count.
HostTensor scaleLatents(const VaeConfig&, HostTensor z);
HostTensor unscaleLatents(const VaeConfig&, HostTensor latents);

}  // namespace tessera
