#include "core/models/sd/SdPipeline.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/graph/Backend.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/clip/TextualInversionEncoding.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/ModelFileLookup.h"
#include "core/text/ExtraNetworks.h"

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

void checkSdCells(const RunConfig& config, int vaeScale) {
    requireMultiple("width", config.width, vaeScale, "the width");
    requireMultiple("height", config.height, vaeScale, "the height");
    requireMultiple("overlap", config.overlapPixels(), vaeScale, "the tile overlap");
}

RunConfig checkSdRun(const RunConfig& config, const SdModel& model) {
    const int f = model.vaeScale();
    ModelLimits limits = model.unet->config().limits(model.scheduler.numTrainTimesteps);
    limits.downsampleFactor *= f;
    limits.inChannels = 3;
    validate(config, limits);
    checkSdCells(config, f);
    RunConfig canvas = config;
    canvas.width = config.width / f;
    canvas.height = config.height / f;
    canvas.tile = config.tile / f;
    canvas.overlapPx = config.overlapPixels() / f;
    canvas.overlapFraction.reset();
    return canvas;
}

namespace {

std::string guidanceText(const RunConfig& config) {
    return config.cfgScale != 1.0 ? ", guidance " + formatNumber(config.cfgScale) + " (conditional and unconditional)"
                                  : ", no guidance (cfg 1: conditional only)";
}

// The UNet's context holds at most unet_cond_bounds::kMaxContextTokens tokens.
void checkContext(int chunks) {
    if (chunks * clip_limits::kContextLength <= unet_cond_bounds::kMaxContextTokens) return;
    throw ValidationError("prompt",
                          "prompt: " + std::to_string(chunks) + " chunks of 75 tokens; at most " +
                              std::to_string(unet_cond_bounds::kMaxContextTokens / clip_limits::kContextLength) +
                              " fit the UNet's context: shorten the prompt or the negative prompt");
}

// The textual-inversion embeddings the run's texts may name: one database per text encoder's
// tokenizer, empty when no embeddings folder holds a file (core/run/EmbeddingFile.h; the models
// folders come from $TESSERA_MODELS and the model's path, as every models-folder lookup).
std::vector<EmbeddingDatabase> runEmbeddings(const SdModel& model, const RunConfig& config) {
    const char* variable = std::getenv(kModelsFolderVariable);
    const std::vector<EmbeddingFileEntry> files =
        listEmbeddingFiles(embeddingFolders(config, variable ? variable : ""));
    if (files.empty()) return {};
    std::vector<const ClipTokenizer*> tokenizers{model.tokenizer.get()};
    if (model.tokenizer2) tokenizers.push_back(model.tokenizer2.get());
    return loadPromptEmbeddings(tokenizers, files, {config.prompt, config.negativePrompt});
}

// The names and files of the embeddings a conditioning used, for its messages.
void describeEmbeddings(SdConditioning& out, const std::vector<const TextualInversion*>& used) {
    if (used.empty()) return;
    std::string names;
    for (const TextualInversion* e : used)
        names += (names.empty() ? "" : ", ") + e->name + " (" + std::to_string(e->vectors) + " vector(s), " +
                 e->shortHash() + ")";
    out.messages.push_back("text: textual-inversion embeddings " + excerpt(names, 400));
}

SdConditioning encodeSd12Prompts(const SdModel& model, Backend& textBackend, const RunConfig& config,
                                 const std::vector<EmbeddingDatabase>& embeddings) {
    PromptConditioningOptions options;
    options.clipSkip = config.clipSkip;
    if (!embeddings.empty()) options.chunking.embeddings = &embeddings.front();
    const bool guided = config.cfgScale != 1.0;
    // The prompt and the negative prompt as two encodePrompt calls with their chunk counts
    // equalised would give them, in one encoder batch.
    std::vector<std::string> texts{config.prompt};
    if (guided) texts.push_back(config.negativePrompt);
    EmbeddedPromptConditioning encoded =
        encodeEachPromptWithEmbeddings(*model.textEncoder, textBackend, *model.tokenizer, texts, options, "");
    std::vector<PromptConditioning>& each = encoded.texts;
    PromptConditioning& cond = each.front();
    SdConditioning out;
    // A1111 encodes the negative prompt first; each encode puts its names before the earlier ones.
    if (guided) out.textualInversionHashes = addTextualInversionHashes("", encoded.used.back());
    out.textualInversionHashes = addTextualInversionHashes(out.textualInversionHashes, encoded.used.front());
    std::vector<const TextualInversion*> used = encoded.used.front();
    if (guided)
        for (const TextualInversion* e : encoded.used.back())
            if (std::find(used.begin(), used.end(), e) == used.end()) used.push_back(e);
    out.tokens = cond.chunks * clip_limits::kContextLength;
    out.channels = cond.channels;
    checkContext(cond.chunks);
    out.cond = std::move(cond.values);
    if (guided) out.uncond = std::move(each.back().values);
    out.messages.push_back("text: " + std::to_string(cond.chunks) + " chunk(s) of 75 tokens, " +
                           std::string(toString(model.family)) + " text encoder, clip skip " +
                           std::to_string(config.clipSkip) + guidanceText(config));
    describeEmbeddings(out, used);
    return out;
}

// The texts through both SDXL encoders, `chunks` chunks each, one batch per encoder: per text
// and token row the first encoder's values then the second's; the pooled text of the second.
// `used` (when embeddings are given) receives, per text, the embeddings each encoder used: the
// first encoder's list, then the second's.
std::vector<std::pair<std::vector<float>, std::vector<float>>> encodeSdxlTexts(
    const SdModel& model, Backend& textBackend, const std::vector<std::string>& texts, int chunks,
    const std::vector<EmbeddingDatabase>& embeddings,
    std::vector<std::pair<std::vector<const TextualInversion*>, std::vector<const TextualInversion*>>>& used) {
    PromptConditioningOptions options;
    options.layer = PromptLayer::Penultimate;
    options.minChunks = chunks;
    if (!embeddings.empty()) options.chunking.embeddings = &embeddings.front();
    EmbeddedPromptConditioning encodedFirst =
        encodeEachPromptWithEmbeddings(*model.textEncoder, textBackend, *model.tokenizer, texts, options, "clip_l");
    if (!embeddings.empty()) options.chunking.embeddings = &embeddings.back();
    EmbeddedPromptConditioning encodedSecond =
        encodeEachPromptWithEmbeddings(*model.textEncoder2, textBackend, *model.tokenizer2, texts, options, "clip_g");
    for (std::size_t t = 0; t < texts.size(); ++t) used.emplace_back(encodedFirst.used[t], encodedSecond.used[t]);
    const std::vector<PromptConditioning>& first = encodedFirst.texts;
    std::vector<PromptConditioning>& second = encodedSecond.texts;
    const std::size_t rows = static_cast<std::size_t>(chunks) * clip_limits::kContextLength;
    std::vector<std::pair<std::vector<float>, std::vector<float>>> out;
    for (std::size_t t = 0; t < texts.size(); ++t) {
        const PromptConditioning& a = first[t];
        PromptConditioning& b = second[t];
        const std::size_t ca = static_cast<std::size_t>(a.channels), cb = static_cast<std::size_t>(b.channels);
        std::vector<float> joined(rows * (ca + cb));
        for (std::size_t r = 0; r < rows; ++r) {
            std::copy_n(a.values.begin() + static_cast<std::ptrdiff_t>(r * ca), ca,
                        joined.begin() + static_cast<std::ptrdiff_t>(r * (ca + cb)));
            std::copy_n(b.values.begin() + static_cast<std::ptrdiff_t>(r * cb), cb,
                        joined.begin() + static_cast<std::ptrdiff_t>(r * (ca + cb) + ca));
        }
        out.emplace_back(std::move(joined), std::move(b.pooled));
    }
    return out;
}

SdConditioning encodeSdxlPrompts(const SdModel& model, Backend& textBackend, const RunConfig& config,
                                 const std::vector<EmbeddingDatabase>& embeddings) {
    if (!model.textEncoder2 || !model.tokenizer2)
        throw std::logic_error("encodeSdPrompts: an SDXL model without its second text encoder or tokenizer");
    const bool guided = config.cfgScale != 1.0;
    const bool zeros = guided && config.negativePrompt.empty() && model.forceZerosForEmptyPrompt;
    // Every text and encoder gets as many chunks as the longest needs (the encoders' tokenizers
    // may differ: a folder's second one reads "!" as its pad token).
    int chunks = 1;
    std::vector<const std::string*> texts{&config.prompt};
    if (guided && !zeros) texts.push_back(&config.negativePrompt);
    for (const std::string* text : texts)
        for (std::size_t e = 0; e < 2; ++e) {
            PromptChunkOptions chunking;
            if (!embeddings.empty()) chunking.embeddings = &embeddings[e];
            const ClipTokenizer& tokenizer = e == 0 ? *model.tokenizer : *model.tokenizer2;
            chunks = std::max(chunks, static_cast<int>(chunkPrompt(tokenizer, *text, chunking).chunks.size()));
        }
    checkContext(chunks);
    SdConditioning out;
    out.tokens = chunks * clip_limits::kContextLength;
    out.channels = model.textEncoder->config().hiddenSize + model.textEncoder2->config().hiddenSize;
    std::vector<std::string> encoded{config.prompt};
    if (guided && !zeros) encoded.push_back(config.negativePrompt);
    std::vector<std::pair<std::vector<const TextualInversion*>, std::vector<const TextualInversion*>>> used;
    auto joined = encodeSdxlTexts(model, textBackend, encoded, chunks, embeddings, used);
    // A1111 encodes the negative prompt first, through both encoders, each encode putting its
    // names before the earlier ones (so a name used by both encoders appears twice).
    std::vector<const TextualInversion*> names;
    for (std::size_t t = used.size(); t-- > 0;)
        for (const auto* list : {&used[t].first, &used[t].second}) {
            out.textualInversionHashes = addTextualInversionHashes(out.textualInversionHashes, *list);
            for (const TextualInversion* e : *list)
                if (std::find(names.begin(), names.end(), e) == names.end()) names.push_back(e);
        }
    std::tie(out.cond, out.pooledCond) = std::move(joined.front());
    if (zeros) {
        out.uncond.assign(out.cond.size(), 0.0f);
        out.pooledUncond.assign(out.pooledCond.size(), 0.0f);
    } else if (guided) {
        std::tie(out.uncond, out.pooledUncond) = std::move(joined.back());
    }
    out.messages.push_back(
        "text: " + std::to_string(chunks) + " chunk(s) of 75 tokens, sdxl text encoders (penultimate layers, " +
        std::to_string(model.textEncoder->config().hiddenSize) + " + " +
        std::to_string(model.textEncoder2->config().hiddenSize) + " wide; pooled text of the first chunk)" +
        guidanceText(config) + (zeros ? "; empty negative prompt: zeros (force_zeros_for_empty_prompt)" : ""));
    if (config.clipSkip != 1)
        out.messages.push_back("text: clip skip " + std::to_string(config.clipSkip) +
                               " not applied: SDXL conditions on both encoders' penultimate layers (A1111 ignores "
                               "Clip skip for SDXL)");
    describeEmbeddings(out, names);
    return out;
}

}  // namespace

SdConditioning encodeSdPrompts(const SdModel& model, Backend& textBackend, const RunConfig& config) {
    // A1111 takes the extra-network tags out of the prompt before it parses emphasis, and leaves the
    // negative prompt as written (modules/processing.py parse_extra_network_prompts,
    // modules/extra_networks.py parse_prompts): the text encoders never see them.
    const ExtraNetworkPrompt tagged = parseExtraNetworks(config.prompt);
    RunConfig text = config;
    text.prompt = tagged.prompt;
    const std::vector<EmbeddingDatabase> embeddings = runEmbeddings(model, text);
    SdConditioning out = model.family == SdFamily::SDXL ? encodeSdxlPrompts(model, textBackend, text, embeddings)
                                                        : encodeSd12Prompts(model, textBackend, text, embeddings);
    if (tagged.tags.empty()) return out;
    std::string names;
    for (const ExtraNetworkTag& tag : tagged.tags)
        names += (names.empty() ? "<" : ", <") + tag.kind + ":" + (tag.items.empty() ? "" : tag.items.front()) + ">";
    out.messages.push_back("text: " + std::to_string(tagged.tags.size()) + " extra-network tag(s) taken out of the " +
                           "prompt before tokenizing, as A1111 does (" + excerpt(names, 200) + ")");
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

namespace {

// rgb = bias + latent @ factors, per latent pixel, on the latents as the UNet sees them (scaled).
struct LatentRgbMap {
    std::array<std::array<float, 3>, 4> factors;  // row c: latent channel c's R, G, B
    std::array<float, 3> bias;
};

// SD 1.x and 2.x: A1111's "Approx cheap" (modules/sd_samplers_common.py), no bias.
constexpr LatentRgbMap kSdLatentRgb{
    {{{0.298f, 0.207f, 0.208f}, {0.187f, 0.286f, 0.173f}, {-0.158f, 0.189f, 0.264f}, {-0.184f, -0.271f, -0.473f}}},
    {0.0f, 0.0f, 0.0f}};
// SDXL's VAE has its own latent space (and scaling factor 0.13025): ComfyUI's SDXL latent format,
// comfy/latent_formats.py, class SDXL, latent_rgb_factors and latent_rgb_factors_bias (the map its
// Latent2RGB previewer applies to the scaled latents).
constexpr LatentRgbMap kSdxlLatentRgb{{{{0.3651f, 0.4232f, 0.4341f},
                                        {-0.2533f, -0.0042f, 0.1068f},
                                        {0.1076f, 0.1111f, -0.0362f},
                                        {-0.3165f, -0.2492f, -0.2188f}}},
                                      {0.1084f, -0.0175f, -0.0011f}};

}  // namespace

ImageTensor latentPreview(const SdModel& model, const ImageTensor& latents) {
    const LatentRgbMap& map = model.family == SdFamily::SDXL ? kSdxlLatentRgb : kSdLatentRgb;
    const std::size_t plane = static_cast<std::size_t>(latents.height) * latents.width;
    ImageTensor rgb{3, latents.height, latents.width, std::vector<float>(3 * plane)};
    for (std::size_t o = 0; o < 3; ++o)
        std::fill_n(rgb.data.begin() + static_cast<std::ptrdiff_t>(o * plane), plane, map.bias[o]);
    const int channels = std::min(latents.channels, 4);
    for (int c = 0; c < channels; ++c)
        for (std::size_t o = 0; o < 3; ++o) {
            const float k = map.factors[static_cast<std::size_t>(c)][o];
            for (std::size_t p = 0; p < plane; ++p) rgb.data[o * plane + p] += k * latents.data[c * plane + p];
        }
    return upsampleNearest(rgb, model.vaeScale());
}

ImageTensor upsampleNearest(const ImageTensor& image, int factor) {
    ImageTensor out{image.channels, image.height * factor, image.width * factor, {}};
    out.data.resize(static_cast<std::size_t>(out.channels) * out.height * out.width);
    for (int c = 0; c < image.channels; ++c)
        for (int y = 0; y < out.height; ++y) {
            const float* src =
                image.data.data() + (static_cast<std::size_t>(c) * image.height + y / factor) * image.width;
            float* dst = out.data.data() + (static_cast<std::size_t>(c) * out.height + y) * out.width;
            for (int x = 0; x < out.width; ++x) dst[x] = src[x / factor];
        }
    return out;
}

}  // namespace tessera
