// VaeModel: diffusers AutoencoderKL weights bound by name, and
// whole-image decode / encode through the graphs of core/models/vae/VaeGraph.h.
#include "core/models/vae/VaeModel.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "core/formats/Safetensors.h"
#include "core/graph/Backend.h"
#include "core/models/vae/VaeGraph.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Image sides Tessera decodes or encodes in one piece: 16384 px is 4x SDXL's largest trained
// size on each side; larger images go through the tiled path.
constexpr std::int64_t kMaxImageSide = 16384;
constexpr std::int64_t kMaxBatch = 4096;

// `t` must be [B, channels, h, w] with h, w multiples of `multiple` and h * scale, w * scale
// within kMaxImageSide, and hold numel() values. `what` names it in messages.
void checkInput(const HostTensor& t, const char* what, std::int64_t channels, std::int64_t multiple,
                std::int64_t scale) {
    const std::string name(what);
    if (t.shape.size() != 4)
        throw std::invalid_argument(name + ": shape " + shapeToString(t.shape) + "; expected [batch, " +
                                    std::to_string(channels) + ", height, width]");
    const std::int64_t b = t.shape[0], c = t.shape[1], h = t.shape[2], w = t.shape[3];
    if (b < 1 || b > kMaxBatch)
        throw std::invalid_argument(name + ": batch " + std::to_string(b) + "; expected 1 to " +
                                    std::to_string(kMaxBatch));
    if (c != channels)
        throw std::invalid_argument(name + ": " + std::to_string(c) + " channels; this VAE takes " +
                                    std::to_string(channels));
    const std::int64_t maxSide = kMaxImageSide / scale / multiple * multiple;
    for (const std::int64_t side : {h, w})
        if (side < multiple || side > maxSide || side % multiple != 0)
            throw std::invalid_argument(
                name + ": " + std::to_string(h) + " x " + std::to_string(w) + "; each side must be " +
                (multiple > 1 ? "a multiple of " + std::to_string(multiple) + " (the VAE's scale factor) " : "") +
                "from " + std::to_string(multiple) + " to " + std::to_string(maxSide) + " (images up to " +
                std::to_string(kMaxImageSide) + " px)");
    if (static_cast<std::int64_t>(t.data.size()) != t.numel())
        throw std::invalid_argument(name + ": " + std::to_string(t.data.size()) + " values for shape " +
                                    shapeToString(t.shape));
}

// Prepares `backend` for `graph` at image size H x W and runs it on `input` (the graph's one
// input); returns its one output.
HostTensor runWhole(Backend& backend, const ModelGraph& graph, const VaeModel& model, const HostTensor& input,
                    int imageH, int imageW) {
    const int batch = static_cast<int>(input.shape[0]);
    backend.prepareGraph(graph, model.tensors(), batch, imageH, imageW);
    HostTensor out;
    out.shape = graph.shape(graph.outputs().front(), batch, imageH, imageW);
    out.data.resize(static_cast<std::size_t>(out.numel()));
    backend.run({input.data.data()}, batch, {out.data.data()});
    return out;
}

// Channels [first, first + count) of [B, C, h, w].
HostTensor channelSlice(const HostTensor& t, std::int64_t first, std::int64_t count) {
    HostTensor out;
    out.shape = {t.shape[0], count, t.shape[2], t.shape[3]};
    out.data.resize(static_cast<std::size_t>(out.numel()));
    const std::int64_t plane = t.shape[2] * t.shape[3], channels = t.shape[1];
    for (std::int64_t b = 0; b < t.shape[0]; ++b) {
        const auto from = t.data.begin() + (b * channels + first) * plane;
        std::copy(from, from + count * plane, out.data.begin() + b * count * plane);
    }
    return out;
}

HostTensor momentsHalf(const HostTensor& moments, bool logvar) {
    if (moments.shape.size() != 4 || moments.shape[1] < 2 || moments.shape[1] % 2 != 0 ||
        static_cast<std::int64_t>(moments.data.size()) != moments.numel())
        throw std::invalid_argument("moments: shape " + shapeToString(moments.shape) +
                                    "; expected [batch, 2 * latent_channels, height, width] with its values");
    const std::int64_t half = moments.shape[1] / 2;
    return channelSlice(moments, logvar ? half : 0, half);
}

// f(value, mean, std) over every element of [B, C, h, w], with the channel's statistics
// (0 and 1 when the config has none).
template <class F>
HostTensor perChannel(const VaeConfig& c, HostTensor t, F f) {
    if (t.shape.size() != 4 || t.shape[1] != c.latentChannels || static_cast<std::int64_t>(t.data.size()) != t.numel())
        throw std::invalid_argument("latents: shape " + shapeToString(t.shape) + "; expected [batch, " +
                                    std::to_string(c.latentChannels) + ", height, width] with its values");
    const std::int64_t plane = t.shape[2] * t.shape[3];
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const auto ch = static_cast<std::size_t>(i / plane % c.latentChannels);
        float& v = t.data[static_cast<std::size_t>(i)];
        v = f(v, c.latentsMean ? (*c.latentsMean)[ch] : 0.0f, c.latentsStd ? (*c.latentsStd)[ch] : 1.0f);
    }
    return t;
}

}  // namespace

VaeConfig readVaeConfig(const std::string& dir, std::string* vaeDir) {
    const std::string folder = componentFolder(dir, "vae", "a VAE folder");
    const fs::path configPath = fs::path(folder) / "config.json";
    const std::string shown = shownPath(configPath);
    const nlohmann::json json = readModelJson(configPath);
    const auto className = json.is_object() ? json.find("_class_name") : json.end();
    if (className != json.end() && className->is_string() && className->get<std::string>() != "AutoencoderKL")
        throw ModelError(shown + ": _class_name is " + inQuotes(className->get<std::string>()) +
                         "; a VAE folder holds an AutoencoderKL");
    if (vaeDir != nullptr) *vaeDir = folder;
    try {
        return vaeConfigFromJson(json);
    } catch (const std::exception& e) {
        throw ModelError(shown + ": " + withoutPrefix(e.what(), "config.json: "));
    }
}

TensorList VaeModel::expectedTensors(const VaeConfig& config) {
    try {
        return vaeParameterList(config);
    } catch (const std::invalid_argument& e) {  // a config the graphs cannot be built from: invalid input
        throw ModelError(std::string("config.json: ") + e.what());
    }
}

VaeModel VaeModel::load(const std::string& dir, LoadMeter* meter) {
    VaeModel model;
    std::string folder;
    model.config_ = readVaeConfig(dir, &folder);
    model.dir_ = dir;
    model.weights_ = ModelWeights::load(folder, expectedTensors(model.config_), LegacyAttentionNames::Accepted, meter);
    return model;
}

VaeModel VaeModel::fromTensors(VaeConfig config, std::map<std::string, HostTensor> tensors, WeightsDigest digest) {
    VaeModel model;
    model.config_ = std::move(config);
    model.weights_ = ModelWeights::fromTensors(std::move(tensors), expectedTensors(model.config_),
                                               LegacyAttentionNames::Accepted, digest);
    return model;
}

std::int64_t VaeModel::parameterCount() const {
    return buildVaeEncoderGraph(config_).parameterCount() + buildVaeDecoderGraph(config_).parameterCount();
}

double VaeModel::decoderFlops(int imageH, int imageW) const {
    const ModelGraph g = buildVaeDecoderGraph(config_);
    g.checkTileSize(imageH, imageW);
    return g.flops(imageH, imageW);
}

double VaeModel::encoderFlops(int imageH, int imageW) const {
    const ModelGraph g = buildVaeEncoderGraph(config_);
    g.checkTileSize(imageH, imageW);
    return g.flops(imageH, imageW);
}

HostTensor VaeModel::decode(Backend& backend, const HostTensor& latent) const {
    const int f = config_.scaleFactor();
    checkInput(latent, "latent", config_.latentChannels, 1, f);
    return runWhole(backend, vaeDecoderExecutionGraph(config_), *this, latent, static_cast<int>(latent.shape[2]) * f,
                    static_cast<int>(latent.shape[3]) * f);
}

HostTensor VaeModel::encode(Backend& backend, const HostTensor& image) const {
    checkInput(image, "image", config_.inChannels, config_.scaleFactor(), 1);
    return runWhole(backend, vaeEncoderExecutionGraph(config_), *this, image, static_cast<int>(image.shape[2]),
                    static_cast<int>(image.shape[3]));
}

HostTensor posteriorMean(const HostTensor& moments) { return momentsHalf(moments, false); }

HostTensor posteriorLogvar(const HostTensor& moments) {
    HostTensor logvar = momentsHalf(moments, true);
    for (float& v : logvar.data) v = std::clamp(v, -30.0f, 20.0f);
    return logvar;
}

HostTensor scaleLatents(const VaeConfig& c, HostTensor z) {
    const float sf = c.scalingFactor;
    if (c.latentsMean && c.latentsStd)
        return perChannel(c, std::move(z), [sf](float v, float mean, float std) { return (v - mean) * sf / std; });
    return perChannel(c, std::move(z), [sf](float v, float, float) { return sf * v; });
}

HostTensor unscaleLatents(const VaeConfig& c, HostTensor latents) {
    const float sf = c.scalingFactor;
    if (c.latentsMean && c.latentsStd)
        return perChannel(c, std::move(latents), [sf](float v, float mean, float std) { return v * std / sf + mean; });
    return perChannel(c, std::move(latents), [sf](float v, float, float) { return v / sf; });
}

}  // namespace tessera
