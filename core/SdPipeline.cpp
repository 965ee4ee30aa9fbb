#include "core/SdPipeline.h"

#include <array>
#include <stdexcept>

#include "core/Backend.h"
#include "core/ClipTextModel.h"
#include "core/FormatNumber.h"
#include "core/UNetCondConfig.h"
#include "core/VaeModel.h"

namespace tessera {

namespace {

void requireMultiple(const std::string& field, int value, int factor, const std::string& what) {
    if (value % factor == 0) return;
    const int below = value / factor * factor, above = below + factor;
    throw ValidationError(field, field + ": " + std::to_string(value) + " is not a multiple of " +
                                     std::to_string(factor) + "; " + what + " of a Stable Diffusion run must be (its " +
                                     "VAE works in " + std::to_string(factor) + "-pixel cells): use " +
                                     (below > 0 ? std::to_string(below) + " or " : std::string()) +
                                     std::to_string(above));
}

HostTensor toHost(const ImageTensor& image) {
    HostTensor t;
    t.shape = {1, image.channels, image.height, image.width};
    t.data = image.data;
    return t;
}

ImageTensor fromHost(const HostTensor& t) {
    if (t.shape.size() != 4 || t.shape[0] != 1) throw std::logic_error("SdPipeline: expected one NCHW image");
    return ImageTensor{static_cast<int>(t.shape[1]), static_cast<int>(t.shape[2]), static_cast<int>(t.shape[3]),
                       t.data};
}

}  // namespace

RunConfig checkSdRun(const RunConfig& config, const SdModel& model) {
    const int f = model.vaeScale();
    ModelLimits limits = model.unet->config().limits(model.scheduler.numTrainTimesteps);
    limits.downsampleFactor *= f;
    limits.inChannels = 3;
    validate(config, limits);
    requireMultiple("width", config.width, f, "the width");
    requireMultiple("height", config.height, f, "the height");
    requireMultiple("overlap", config.overlapPixels(), f, "the tile overlap");
    RunConfig canvas = config;
    canvas.width = config.width / f;
    canvas.height = config.height / f;
    canvas.tile = config.tile / f;
    canvas.overlapPx = config.overlapPixels() / f;
    canvas.overlapFraction.reset();
    return canvas;
}

SdConditioning encodeSdPrompts(const SdModel& model, const RunConfig& config) {
    PromptConditioningOptions options;
    options.clipSkip = config.clipSkip;
    const bool guided = config.cfgScale != 1.0;
    PromptConditioning cond = encodePrompt(*model.textEncoder, *model.tokenizer, config.prompt, options);
    PromptConditioning uncond;
    if (guided) {
        options.minChunks = cond.chunks;
        uncond = encodePrompt(*model.textEncoder, *model.tokenizer, config.negativePrompt, options);
        if (uncond.chunks > cond.chunks) {
            options.minChunks = uncond.chunks;
            cond = encodePrompt(*model.textEncoder, *model.tokenizer, config.prompt, options);
        }
    }
    SdConditioning out;
    out.tokens = cond.chunks * clip_limits::kContextLength;
    out.channels = cond.channels;
    if (out.tokens > unet_cond_bounds::kMaxContextTokens)
        throw ValidationError("prompt", "prompt: " + std::to_string(cond.chunks) +
                                            " chunks of 75 tokens; at most " +
                                            std::to_string(unet_cond_bounds::kMaxContextTokens /
                                                           clip_limits::kContextLength) +
                                            " fit the UNet's context: shorten the prompt or the negative prompt");
    out.cond = std::move(cond.values);
    out.uncond = std::move(uncond.values);
    out.messages.push_back("text: " + std::to_string(cond.chunks) + " chunk(s) of 75 tokens, " +
                           std::string(toString(model.family)) + " text encoder, clip skip " +
                           std::to_string(config.clipSkip) +
                           (guided ? ", guidance " + formatNumber(config.cfgScale) + " (conditional and unconditional)"
                                   : ", no guidance (cfg 1: conditional only)"));
    return out;
}

ImageTensor decodeLatents(const SdModel& model, Backend& backend, const ImageTensor& latents,
                          const VaePassOptions& options, std::string* description) {
    const HostTensor z = unscaleLatents(model.vae->config(), toHost(latents));
    return fromHost(runVaePass(backend, *model.vae, z, true, options.tiling, options.budget, description));
}

ImageTensor encodeImage(const SdModel& model, Backend& backend, const ImageTensor& image, const VaePassOptions& options,
                        std::string* description) {
    const HostTensor moments =
        runVaePass(backend, *model.vae, toHost(image), false, options.tiling, options.budget, description);
    return fromHost(scaleLatents(model.vae->config(), posteriorMean(moments)));
}

ImageTensor latentPreview(const SdModel& model, const ImageTensor& latents) {
    // A1111 modules/sd_samplers_common.py, "Approx cheap" (SD 1.x and 2.x latents): rgb = latent @ M.
    static constexpr std::array<std::array<float, 3>, 4> kCoefficients{{{0.298f, 0.207f, 0.208f},
                                                                        {0.187f, 0.286f, 0.173f},
                                                                        {-0.158f, 0.189f, 0.264f},
                                                                        {-0.184f, -0.271f, -0.473f}}};
    const std::size_t plane = static_cast<std::size_t>(latents.height) * latents.width;
    ImageTensor rgb{3, latents.height, latents.width, std::vector<float>(3 * plane, 0.0f)};
    const int channels = std::min(latents.channels, 4);
    for (int c = 0; c < channels; ++c)
        for (int o = 0; o < 3; ++o) {
            const float k = kCoefficients[static_cast<std::size_t>(c)][static_cast<std::size_t>(o)];
            for (std::size_t p = 0; p < plane; ++p) rgb.data[o * plane + p] += k * latents.data[c * plane + p];
        }
    return upsampleNearest(rgb, model.vaeScale());
}

ImageTensor upsampleNearest(const ImageTensor& image, int factor) {
    ImageTensor out{image.channels, image.height * factor, image.width * factor, {}};
    out.data.resize(static_cast<std::size_t>(out.channels) * out.height * out.width);
    for (int c = 0; c < image.channels; ++c)
        for (int y = 0; y < out.height; ++y) {
            const float* src = image.data.data() + (static_cast<std::size_t>(c) * image.height + y / factor) * image.width;
            float* dst = out.data.data() + (static_cast<std::size_t>(c) * out.height + y) * out.width;
            for (int x = 0; x < out.width; ++x) dst[x] = src[x / factor];
        }
    return out;
}

}  // namespace tessera
