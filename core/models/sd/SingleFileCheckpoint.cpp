// Single-file (LDM layout) Stable Diffusion checkpoints: shared/spec/sd-models.md §5, following
// diffusers' loaders/single_file_utils.py (infer_diffusers_model_type, convert_ldm_unet_checkpoint,
// convert_ldm_vae_checkpoint, convert_ldm_clip_checkpoint, convert_open_clip_checkpoint).
//
// The conversion runs the other way round from diffusers': for every tensor the model's graph
// declares (diffusers' name and shape) it names the tensor of the file that holds it. So every
// missing tensor is found before any data is read, and every tensor of the file is either used
// or listed as ignored.
#include "core/models/sd/SingleFileCheckpoint.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/base/BoundedInput.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/unet/UNetConfig.h"
#include "core/formats/Safetensors.h"
#include "core/base/Sha256.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/vae/VaeModel.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// ---------------------------------------------------------------------------
// The keys diffusers' infer_diffusers_model_type tests (CHECKPOINT_KEY_NAMES), and the prefixes.

constexpr const char* kUNet = "model.diffusion_model.";
constexpr const char* kConvInKey = "model.diffusion_model.input_blocks.0.0.weight";
constexpr const char* kV2Key = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight";
constexpr const char* kXlBaseKey = "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias";
constexpr const char* kXlRefinerKey = "conditioner.embedders.0.model.transformer.resblocks.9.mlp.c_proj.bias";
constexpr const char* kUpscaleKey = "model.diffusion_model.input_blocks.10.0.skip_connection.bias";
constexpr const char* kPlaygroundKey = "edm_mean";
constexpr const char* kControlNetKeys[] = {"control_model.time_embed.0.weight", "controlnet_cond_embedding.conv_in.weight"};
constexpr const char* kClip = "cond_stage_model.transformer.";
constexpr const char* kClipKey = "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight";
constexpr const char* kOpenClip = "cond_stage_model.model.";
constexpr const char* kOpenClipKey = "cond_stage_model.model.token_embedding.weight";
// SDXL base (SGM's GeneralConditioner): CLIP ViT-L in transformers' names, OpenCLIP bigG.
constexpr const char* kXlClip = "conditioner.embedders.0.transformer.";
constexpr const char* kXlOpenClip = "conditioner.embedders.1.model.";
constexpr const char* kXlAddEmbedding = "model.diffusion_model.label_emb.0.0.weight";
constexpr const char* kXlOpenClipKey = "conditioner.embedders.1.model.token_embedding.weight";
constexpr const char* kXlRefinerOpenClipKey = "conditioner.embedders.0.model.token_embedding.weight";
constexpr const char* kVaePrefixes[] = {"first_stage_model.", "vae."};  // diffusers' LDM_VAE_KEYS

// What the tensors cannot show, per family: the values of the configurations diffusers' single-file
// loader takes from the family's default pipeline (stable-diffusion-v1-5 / stable-diffusion-2-1;
// spec §1.1, §3.1, §4.1, §5.2).
struct FamilyDefaults {
    const char* label;
    int unetSampleSize;    // latent pixels: 512 / 8, 768 / 8, 1024 / 8
    int vaeSampleSize;
    double vaeScalingFactor;
    bool upcastAttention;
    const char* textActivation;
    int textProjectionDim;  // recorded only: CLIPTextModel has no projection
    PredictionType prediction;
    const char* predictionReason;
    const char* schedulerClass;
};

constexpr FamilyDefaults kSd1{"Stable Diffusion 1.x", 64, 512, 0.18215, false, "quick_gelu", 768, PredictionType::Epsilon,
                              "SD 1.x models predict noise (diffusers: stable-diffusion-v1-5's scheduler)",
                              "PNDMScheduler"};
constexpr FamilyDefaults kSd2{
    "Stable Diffusion 2.x", 96, 768, 0.18215, true, "gelu", 512, PredictionType::VPrediction,
    "the file cannot tell; diffusers reads SD 2.x single files with stable-diffusion-2-1's configuration "
    "(v-prediction, 768 px). A 2.x-base checkpoint predicts noise (epsilon): give its pipeline folder's "
    "configurations (the config folder) or set prediction_type",
    "DDIMScheduler"};

// SDXL base: the first text encoder's values (CLIP ViT-L); the second's are OpenCLIP bigG's,
// read from its tensors (projection included).
constexpr FamilyDefaults kSdxl{"Stable Diffusion XL", 128, 1024, 0.13025, false, "quick_gelu", 768,
                               PredictionType::Epsilon,
                               "SDXL base predicts noise (diffusers: stable-diffusion-xl-base-1.0's scheduler)",
                               "EulerDiscreteScheduler"};

const FamilyDefaults& defaultsOf(SdFamily family) {
    return family == SdFamily::SD2 ? kSd2 : family == SdFamily::SDXL ? kSdxl : kSd1;
}

// GroupNorm groups of every SD UNet and VAE; the width of SD's attention heads (SD 2.x UNet levels,
// both families' text encoders).
constexpr int kGroups = 32;
constexpr int kHeadWidth = 64;
// OpenCLIP ViT-H (SD 2.x): 24 blocks, of which diffusers keeps 23 (SD_2_TEXT_ENCODER_KEYS_TO_IGNORE).
constexpr int kVitHWidth = 1024;
constexpr int kVitHLayers = 23;

std::string quoted(const std::string& name) { return "'" + excerpt(name, 200) + "'"; }

bool startsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// ---------------------------------------------------------------------------
// Pickles: refused without being read.

bool hasPickleExtension(const std::string& path) {
    std::string ext = fs::path(path).extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return ext == ".ckpt" || ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".pkl" || ext == ".pickle";
}

[[noreturn]] void refusePickle(const std::string& where, const std::string& what) {
    throw ModelError(where + ": " + what +
                     ". Tessera never unpickles a file: unpickling runs whatever code the file contains. Convert "
                     "it to .safetensors where you trust it, e.g. with A1111's Checkpoint Merger (checkpoint "
                     "format: safetensors), with diffusers' scripts/convert_original_stable_diffusion_to_diffusers.py "
                     "(a pipeline folder, which Tessera reads too), or with torch.load(path, weights_only=True) "
                     "and safetensors.torch.save_file");
}

// Looks at the name and at most the first 4 bytes: a zip archive (torch.save since PyTorch 1.6)
// or a bare pickle stream (protocol 2-5 opcode), whatever the file is called.
void checkNotPickled(const std::string& path, const std::string& where) {
    if (hasPickleExtension(path)) refusePickle(where, "a pickled PyTorch checkpoint (by its extension); not read");
    std::string head;
    try {
        head = BoundedFile::open(path, "model", std::numeric_limits<std::size_t>::max()).readAt(0, 4);
    } catch (const InputFileError& e) {
        throw ModelError(withoutPrefix(e.what(), "model: "));
    }
    if (head.size() >= 4 && head.compare(0, 4, "PK\x03\x04") == 0)
        refusePickle(where, "a zip archive (a torch.save checkpoint under another name), not safetensors; not read");
    if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5)
        refusePickle(where, "a pickle stream (a torch.save checkpoint under another name), not safetensors; not read");
}

// ---------------------------------------------------------------------------
// SHA-256 of the mapped file on its own thread, cancelled (and joined) when dropped. Hashed pages
// are released behind it, as the converter releases the tensors it has copied.

class FileHasher {
public:
    FileHasher(const SafetensorsFile& file, FileDigest digest) : file_(file) {
        if (digest == FileDigest::Compute) thread_ = std::thread([this] { run(file_.fileBytes()); });
    }
    ~FileHasher() {
        cancel_ = true;
        if (thread_.joinable()) thread_.join();
    }
    FileHasher(const FileHasher&) = delete;
    FileHasher& operator=(const FileHasher&) = delete;
    // The digest (lowercase hex); empty when not computed.
    std::string result() {
        if (thread_.joinable()) thread_.join();
        return digest_;
    }

private:
    void run(std::span<const std::byte> bytes) {
        constexpr std::size_t kChunk = std::size_t{16} << 20;
        Sha256 hash;
        for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
            if (cancel_) return;
            const auto chunk = bytes.subspan(at, std::min(kChunk, bytes.size() - at));
            hash.update(chunk.data(), chunk.size());
            file_.releasePages(chunk);
        }
        digest_ = hash.hexDigest();
    }
    const SafetensorsFile& file_;
    std::atomic<bool> cancel_{false};
    std::string digest_;
    std::thread thread_;
};

// ---------------------------------------------------------------------------
// Family (spec §5.2)

struct Layout {
    SdFamily family = SdFamily::SD1;
    std::string reason;
    std::string vae;    // "first_stage_model." (or "vae.")
    // SD1: "cond_stage_model.transformer." + "text_model." when the file has it; SD2: kOpenClip;
    // SDXL: kXlClip (+ "text_model.").
    std::string text;
    std::string text2;  // SDXL: kXlOpenClip; empty otherwise
    bool openClip() const { return family == SdFamily::SD2; }  // the first text encoder's layout
};

[[noreturn]] void refuseFamily(const std::string& where, const std::string& what, const char* key) {
    throw ModelError(where + ": " + what + " (it has " + quoted(key) +
                     "), which is not supported yet; Tessera runs Stable Diffusion 1.x, 2.x and SDXL base checkpoints");
}

// An example of the file's names for messages about what it is not.
std::string someNames(const SafetensorsFile& file) {
    std::string names;
    for (std::size_t i = 0; i < file.tensors().size() && i < 3; ++i)
        names += (i ? ", " : "") + quoted(file.tensors()[i].name);
    return names.empty() ? "no tensors" : names;
}

// The diffusers tests in their order, then Tessera's: the model must be an SD 1.x/2.x UNet in LDM
// names. diffusers falls back to "v1" for anything unmatched; Tessera names what it looked for.
SdFamily detectFamily(const SafetensorsFile& file, const std::string& where, std::string& reason) {
    const SafetensorsTensorInfo* convIn = file.find(kConvInKey);
    const SafetensorsTensorInfo* v2 = file.find(kV2Key);
    const bool v2Wide = v2 != nullptr && !v2->shape.empty() && v2->shape.back() == kVitHWidth;
    if (convIn != nullptr && convIn->shape.size() == 4 && convIn->shape[1] == 9)
        throw ModelError(where + ": an inpainting checkpoint (" + quoted(kConvInKey) +
                         " takes 9 input channels), which is not supported yet; Tessera runs text-to-image and "
                         "image-to-image Stable Diffusion 1.x and 2.x checkpoints (4 input channels)");
    if (v2Wide) {
        reason = std::string(quoted(kV2Key)) + " attends to 1024-wide text (OpenCLIP ViT-H), as diffusers tests";
        return SdFamily::SD2;
    }
    if (file.has(kPlaygroundKey)) refuseFamily(where, "a Playground v2.5 checkpoint (an SDXL-type model)", kPlaygroundKey);
    // diffusers tests SDXL by block 9 of an OpenCLIP encoder; a smaller (test) model is told by the
    // same encoder's token table.
    for (const char* key : {kXlBaseKey, kXlOpenClipKey})
        if (file.has(key)) {
            reason = std::string("it has ") + quoted(key) + ", the second (OpenCLIP bigG) text encoder of SDXL base" +
                     (key == kXlBaseKey ? ", as diffusers tests" : "");
            return SdFamily::SDXL;
        }
    for (const char* key : {kXlRefinerKey, kXlRefinerOpenClipKey})
        if (file.has(key))
            throw ModelError(where + ": an SDXL refiner checkpoint (it has " + quoted(key) +
                             ", OpenCLIP bigG as its only text encoder). SDXL refiners are not supported yet; Tessera "
                             "runs Stable Diffusion 1.x, 2.x and SDXL base checkpoints");
    if (file.has(kUpscaleKey)) refuseFamily(where, "a Stable Diffusion x4 upscaler checkpoint", kUpscaleKey);
    for (const char* key : kControlNetKeys)
        if (file.has(key)) refuseFamily(where, "a ControlNet checkpoint", key);
    if (convIn == nullptr) {
        const bool diffusersNames = file.has("conv_in.weight") || file.has("down_blocks.0.resnets.0.conv1.weight");
        throw ModelError(where + ": not a Stable Diffusion checkpoint in the original (LDM) layout: no " +
                         quoted(kConvInKey) + " (the UNet), nor SDXL's " + quoted(kXlBaseKey) + "; it holds " +
                         someNames(file) +
                         (diffusersNames ? ". These are diffusers names (a UNet2DModel or UNet2DConditionModel "
                                           "weights file): give the folder that holds it with its config.json"
                                         : ""));
    }
    if (convIn->shape.size() == 4 && convIn->shape[1] == 8)
        refuseFamily(where, "an InstructPix2Pix checkpoint (8 input channels)", kConvInKey);
    // diffusers would say "v1" here. A UNet narrower than SD 2.x's with SD 2.x's OpenCLIP text
    // encoder (test models) is SD 2.x by its layout; real checkpoints give the same answer.
    if (file.has(kOpenClipKey) && !file.has(kClipKey)) {
        reason = std::string("the text encoder is OpenCLIP (") + quoted(kOpenClipKey) + ") and " + quoted(kV2Key) +
                 (v2 ? " is narrower than 1024" : " is absent");
        return SdFamily::SD2;
    }
    reason = std::string("no SD 2.x / SDXL marker (") + quoted(kV2Key) + " " +
             (v2 ? "attends to " + std::to_string(v2->shape.back()) + "-wide text" : std::string("absent")) +
             "): diffusers' default, SD 1.x";
    return SdFamily::SD1;
}

Layout detectLayout(const SafetensorsFile& file, const std::string& where) {
    Layout layout;
    layout.family = detectFamily(file, where, layout.reason);
    for (const char* prefix : kVaePrefixes)
        if (file.has(std::string(prefix) + "encoder.conv_in.weight")) layout.vae = prefix;
    if (layout.vae.empty())
        throw ModelError(where + ": no VAE: looked for " + quoted("first_stage_model.encoder.conv_in.weight") + " (or " +
                         quoted("vae.encoder.conv_in.weight") + "); Tessera needs the UNet, the VAE and the text "
                         "encoder in one file");
    if (layout.family == SdFamily::SD2) {
        if (!file.has(kOpenClipKey))
            throw ModelError(where + ": no text encoder: an SD 2.x checkpoint holds OpenCLIP ViT-H under " +
                             quoted(kOpenClip) + "; looked for " + quoted(kOpenClipKey));
        layout.text = kOpenClip;
        return layout;
    }
    const bool xl = layout.family == SdFamily::SDXL;
    const std::string clip = xl ? kXlClip : kClip;
    const std::string position = std::string(kClipTextPrefix) + "embeddings.position_embedding.weight";
    if (file.has(clip + position)) {
        layout.text = clip + kClipTextPrefix;
    } else if (file.has(clip + position.substr(std::strlen(kClipTextPrefix)))) {
        layout.text = clip;  // transformers' flattened names (spec §3.5)
    } else {
        throw ModelError(where + ": no text encoder: " +
                         (xl ? "an SDXL checkpoint holds CLIP ViT-L under " : "an SD 1.x checkpoint holds CLIP ViT-L under ") +
                         quoted(clip) + "; looked for " + quoted(clip + position) +
                         (xl || file.has(kOpenClipKey) ? "" : std::string(" (SD 2.x: ") + quoted(kOpenClipKey) + ")"));
    }
    if (xl) layout.text2 = kXlOpenClip;
    return layout;
}

// ---------------------------------------------------------------------------
// Configurations from the tensors and the family (what diffusers' hub configs hold for the family,
// with every size read from the file: the same values for real checkpoints).

const Shape& shapeIn(const SafetensorsFile& file, const std::string& name, const std::string& where, const char* what) {
    const SafetensorsTensorInfo* info = file.find(name);
    if (info == nullptr) throw ModelError(where + ": missing tensor " + quoted(name) + " (" + what + ")");
    return info->shape;
}

std::int64_t dim(const Shape& shape, std::size_t axis, const std::string& name, const std::string& where) {
    if (shape.size() <= axis)
        throw ModelError(where + ": tensor " + quoted(name) + " has shape " + shapeToString(shape) + "; expected " +
                         std::to_string(axis + 1) + " or more dimensions");
    return shape[axis];
}

// The largest N with some tensor named prefix + N + "." (-1 when none).
int highestIndex(const SafetensorsFile& file, const std::string& prefix) {
    int highest = -1;
    for (const auto& info : file.tensors()) {
        if (!startsWith(info.name, prefix)) continue;
        const std::size_t dot = info.name.find('.', prefix.size());
        const std::string digits = info.name.substr(prefix.size(), dot - prefix.size());
        if (dot == std::string::npos || digits.empty() || digits.size() > 6 ||
            !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        highest = std::max(highest, std::stoi(digits));
    }
    return highest;
}

// SDXL's text-time embedding (spec §5.3: num_classes "sequential" with a 2048-wide context):
// add_embedding (label_emb.0) takes adm_in_channels = the pooled text (`pooledWidth`, the second
// text encoder's projection) and six size ids, whose sinusoid width follows (256 in SDXL base).
void addTextTime(nlohmann::json& j, const SafetensorsFile& file, int pooledWidth, const std::string& where) {
    const std::int64_t adm = dim(shapeIn(file, kXlAddEmbedding, where, "the UNet's add_embedding"), 1, kXlAddEmbedding, where);
    constexpr int kIds = 6;
    if (adm <= pooledWidth || (adm - pooledWidth) % kIds != 0)
        throw ModelError(where + ": tensor " + quoted(kXlAddEmbedding) + " takes " + std::to_string(adm) +
                         " values; SDXL base's add_embedding takes the " + std::to_string(pooledWidth) +
                         " pooled text values and 6 size ids of equal width (2816 = 1280 + 6 x 256); a refiner takes "
                         "5 ids (not supported yet)");
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = (adm - pooledWidth) / kIds;
    j["projection_class_embeddings_input_dim"] = adm;
}

nlohmann::json derivedUNetJson(const SafetensorsFile& file, SdFamily family, int pooledWidth, const std::string& where) {
    const std::string p = kUNet;
    auto shape = [&](const std::string& name, const char* what) -> const Shape& {
        return shapeIn(file, p + name, where, what);
    };
    const Shape& convIn = shape("input_blocks.0.0.weight", "the UNet's conv_in");
    const Shape& timeIn = shape("time_embed.0.weight", "the UNet's time embedding");
    const int inputs = highestIndex(file, p + "input_blocks.") + 1;
    const int outputs = highestIndex(file, p + "output_blocks.") + 1;
    // Level 0 ends with the first downsampler, input block layers_per_block + 1.
    int perLevel = inputs;
    for (int i = 1; i < inputs; ++i)
        if (file.has(p + "input_blocks." + std::to_string(i) + ".0.op.weight")) {
            perLevel = i;
            break;
        }
    if (perLevel < 2 || inputs % perLevel != 0 || outputs != inputs)
        throw ModelError(where + ": the UNet's " + std::to_string(inputs) + " input blocks and " +
                         std::to_string(outputs) + " output blocks do not form levels of layers_per_block resnets "
                         "and a downsampler (input_blocks.<k>.0.op)");
    const int levels = inputs / perLevel;
    nlohmann::json channels = nlohmann::json::array(), down = nlohmann::json::array(), up = nlohmann::json::array(),
                   heads = nlohmann::json::array(), depths = nlohmann::json::array();
    for (int b = 0; b < levels; ++b) {
        const std::string first = "input_blocks." + std::to_string(1 + b * perLevel);
        const std::int64_t width = dim(shape(first + ".0.out_layers.3.weight", "a UNet resnet's conv2"), 0, first, where);
        const bool attention = file.has(p + first + ".1.norm.weight");
        channels.push_back(width);
        down.push_back(attention ? "CrossAttnDownBlock2D" : "DownBlock2D");
        up.push_back(file.has(p + "output_blocks." + std::to_string(b * perLevel) + ".1.norm.weight") ? "CrossAttnUpBlock2D"
                                                                                                       : "UpBlock2D");
        heads.push_back(family != SdFamily::SD1 ? width / kHeadWidth : 8);
        depths.push_back(attention ? highestIndex(file, p + first + ".1.transformer_blocks.") + 1 : 1);
    }
    const std::string midAttention = "middle_block.1.";
    const Shape& toK = shape(midAttention + "transformer_blocks.0.attn2.to_k.weight", "the mid block's cross-attention");
    const Shape& projIn = shape(midAttention + "proj_in.weight", "the mid block's proj_in");
    const FamilyDefaults& d = defaultsOf(family);
    nlohmann::json j = {{"_class_name", "UNet2DConditionModel"},
                        {"sample_size", d.unetSampleSize},
                        {"in_channels", dim(convIn, 1, p + "input_blocks.0.0.weight", where)},
                        {"out_channels", dim(shape("out.2.weight", "the UNet's conv_out"), 0, p + "out.2.weight", where)},
                        {"block_out_channels", channels},
                        {"down_block_types", down},
                        {"up_block_types", up},
                        {"layers_per_block", perLevel - 1},
                        {"norm_num_groups", kGroups},
                        {"cross_attention_dim", dim(toK, 1, p + midAttention + "attn2.to_k.weight", where)},
                        {"attention_head_dim", family != SdFamily::SD1 ? heads : nlohmann::json(8)},
                        {"transformer_layers_per_block", depths},
                        {"use_linear_projection", projIn.size() == 2},
                        {"upcast_attention", d.upcastAttention}};
    if (dim(timeIn, 0, p + "time_embed.0.weight", where) != 4 * dim(convIn, 0, kConvInKey, where))
        j["time_embedding_dim"] = timeIn[0];
    if (family == SdFamily::SDXL) addTextTime(j, file, pooledWidth, where);
    return j;
}

nlohmann::json derivedVaeJson(const SafetensorsFile& file, SdFamily family, const std::string& v, const std::string& where) {
    auto shape = [&](const std::string& name, const char* what) -> const Shape& {
        return shapeIn(file, v + name, where, what);
    };
    const int levels = highestIndex(file, v + "encoder.down.") + 1;
    const int layers = highestIndex(file, v + "encoder.down.0.block.") + 1;
    if (levels < 1 || layers < 1)
        throw ModelError(where + ": missing tensor " + quoted(v + "encoder.down.0.block.0.conv2.weight") +
                         " (the VAE encoder's first resnet)");
    nlohmann::json channels = nlohmann::json::array();
    for (int i = 0; i < levels; ++i) {
        const std::string name = "encoder.down." + std::to_string(i) + ".block.0.conv2.weight";
        channels.push_back(dim(shape(name, "a VAE encoder resnet's conv2"), 0, v + name, where));
    }
    return {{"_class_name", "AutoencoderKL"},
            {"in_channels", dim(shape("encoder.conv_in.weight", "the VAE's conv_in"), 1, v + "encoder.conv_in.weight", where)},
            {"out_channels", dim(shape("decoder.conv_out.weight", "the VAE's conv_out"), 0, v + "decoder.conv_out.weight", where)},
            {"block_out_channels", channels},
            {"down_block_types", std::vector<std::string>(static_cast<std::size_t>(levels), "DownEncoderBlock2D")},
            {"up_block_types", std::vector<std::string>(static_cast<std::size_t>(levels), "UpDecoderBlock2D")},
            {"layers_per_block", layers},
            {"latent_channels", dim(shape("decoder.conv_in.weight", "the VAE decoder's conv_in"), 1, v + "decoder.conv_in.weight", where)},
            {"norm_num_groups", kGroups},
            {"sample_size", defaultsOf(family).vaeSampleSize},
            {"scaling_factor", defaultsOf(family).vaeScalingFactor},  // LDM_VAE_DEFAULT_SCALING_FACTOR; SDXL's VAE
            {"use_quant_conv", file.has(v + "quant_conv.weight")},
            {"use_post_quant_conv", file.has(v + "post_quant_conv.weight")},
            {"mid_block_add_attention", file.has(v + "encoder.mid.attn_1.q.weight")}};
}

// The text encoders' layouts in a checkpoint.
enum class TextLayout {
    Clip,        // transformers' CLIPTextModel names (SD 1.x, SDXL's first)
    OpenClipH,   // OpenCLIP, its last block dropped (SD 2.x conditions on the penultimate)
    OpenClipBigG // OpenCLIP with text_projection, every block (SDXL's second)
};

nlohmann::json derivedTextJson(const SafetensorsFile& file, const std::string& t, TextLayout kind, SdFamily family,
                               const std::string& where) {
    const bool open = kind != TextLayout::Clip;
    const std::string tokens = t + (open ? "token_embedding.weight" : "embeddings.token_embedding.weight");
    const std::string positions = t + (open ? "positional_embedding" : "embeddings.position_embedding.weight");
    const std::string fc1 = t + (open ? "transformer.resblocks.0.mlp.c_fc.weight" : "encoder.layers.0.mlp.fc1.weight");
    const Shape& token = shapeIn(file, tokens, where, "the text encoder's token embedding");
    const std::int64_t width = dim(token, 1, tokens, where);
    int layers = highestIndex(file, t + (open ? "transformer.resblocks." : "encoder.layers.")) + 1;
    // SD 2.x conditions on OpenCLIP's penultimate block: diffusers' ViT-H config has 23 of its 24
    // layers; a narrower (test) model drops its last block the same way.
    if (kind == TextLayout::OpenClipH) layers = width == kVitHWidth ? kVitHLayers : layers - 1;
    const FamilyDefaults& d = defaultsOf(family);
    const bool projected = kind == TextLayout::OpenClipBigG;
    const std::string projection = t + "text_projection";  // [width, projection_dim], used as x @ W
    return {{"architectures", {projected ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
            {"model_type", "clip_text_model"},
            {"vocab_size", dim(token, 0, tokens, where)},
            {"hidden_size", width},
            {"intermediate_size", dim(shapeIn(file, fc1, where, "the text encoder's first MLP"), 0, fc1, where)},
            {"num_hidden_layers", layers},
            {"num_attention_heads", width / kHeadWidth},
            {"max_position_embeddings", dim(shapeIn(file, positions, where, "the text encoder's positions"), 0, positions, where)},
            {"hidden_act", projected ? "gelu" : d.textActivation},
            {"layer_norm_eps", 1e-5},
            {"projection_dim", projected ? dim(shapeIn(file, projection, where, "the text encoder's projection"), 1,
                                               projection, where)
                                         : d.textProjectionDim},
            // The hub configs' legacy ids (transformers pools at the argmax of the ids: spec §3.3).
            {"bos_token_id", 0},
            {"eos_token_id", 2},
            {"pad_token_id", 1}};
}

struct Configs {
    UNetCondConfig unet;
    VaeConfig vae;
    ClipTextConfig text;
    std::optional<ClipTextConfig> text2;  // SDXL's second text encoder
    std::string source;
    PredictionType prediction = PredictionType::Epsilon;
    std::string predictionReason;
};

// Parses a derived configuration; its rejection means the family's fixed values (GroupNorm
// groups, heads) do not fit this file's sizes.
template <typename Config, typename Parse>
Config parseDerived(const nlohmann::json& json, Parse parse, const char* what, const Layout& layout, const std::string& where) {
    try {
        return parse(json);
    } catch (const std::runtime_error& e) {
        throw ModelError(where + ": the " + what + " configuration of a " + defaultsOf(layout.family).label +
                         " checkpoint (GroupNorm groups 32, " +
                         (layout.family != SdFamily::SD1 ? "64-wide attention heads" : "8 UNet attention heads") +
                         ", sizes from the tensors) does not fit this file: " + withoutPrefix(e.what(), "config.json: ") +
                         ". Give this model as a diffusers pipeline folder, or its configurations as the config folder");
    }
}

Configs derivedConfigs(const SafetensorsFile& file, const Layout& layout, const std::string& where) {
    Configs c;
    const auto parseText = [&](const std::string& prefix, TextLayout kind, const char* what) {
        return parseDerived<ClipTextConfig>(derivedTextJson(file, prefix, kind, layout.family, where),
                                            [](const nlohmann::json& j) { return clipTextConfigFromJson(j); }, what,
                                            layout, where);
    };
    c.text = parseText(layout.text, layout.openClip() ? TextLayout::OpenClipH : TextLayout::Clip, "text encoder");
    if (!layout.text2.empty()) c.text2 = parseText(layout.text2, TextLayout::OpenClipBigG, "second text encoder");
    c.unet = parseDerived<UNetCondConfig>(derivedUNetJson(file, layout.family, c.text2 ? c.text2->projectionDim : 0, where),
                                          [](const nlohmann::json& j) { return unetCondConfigFromJson(j); }, "UNet",
                                          layout, where);
    c.vae = parseDerived<VaeConfig>(derivedVaeJson(file, layout.family, layout.vae, where),
                                    [](const nlohmann::json& j) { return vaeConfigFromJson(j); }, "VAE", layout, where);
    const FamilyDefaults& d = defaultsOf(layout.family);
    c.source = std::string("sizes from the tensors, the rest as diffusers' ") + d.label + " configuration";
    c.prediction = d.prediction;
    c.predictionReason = d.predictionReason;
    return c;
}

// diffusers' from_single_file(config=FOLDER): the folder's component configurations.
Configs folderConfigs(const std::string& folder, const Layout& layout) {
    checkModelFolder(folder);
    const fs::path root(folder);
    Configs c;
    const fs::path unetConfig = root / "unet" / "config.json";
    const nlohmann::json unetJson = readModelJson(unetConfig);
    try {
        c.unet = unetCondConfigFromJson(unetJson);
    } catch (const std::runtime_error& e) {
        throw ModelError(shownPath(unetConfig) + ": " + withoutPrefix(e.what(), "config.json: "));
    }
    c.vae = readVaeConfig((root / "vae").string());
    c.text = readClipTextConfig(root / "text_encoder");
    if (!layout.text2.empty()) c.text2 = readClipTextConfig(root / "text_encoder_2");
    c.source = "the config folder " + shownPath(folder);
    const FamilyDefaults& d = defaultsOf(layout.family);
    c.prediction = d.prediction;
    c.predictionReason = d.predictionReason;
    const fs::path scheduler = root / "scheduler" / "scheduler_config.json";
    if (folderEntryPresent(scheduler)) {
        const nlohmann::json json = readModelJson(scheduler);
        if (json.is_object() && json.contains("prediction_type")) {
            try {
                c.prediction = parsePredictionType(json["prediction_type"].is_string()
                                                       ? json["prediction_type"].get<std::string>()
                                                       : excerptJson(json["prediction_type"]));
            } catch (const ValidationError& e) {
                throw ModelError(shownPath(scheduler) + ": " + e.what());
            }
            c.predictionReason = "prediction_type of " + shownPath(scheduler);
        }
    }
    return c;
}

// ---------------------------------------------------------------------------
// Names: diffusers (the model's) -> LDM (the file's), spec §5.4-§5.6.

using Renames = std::vector<std::pair<std::string_view, std::string_view>>;

// `rest` with the first matching prefix replaced; empty when none matches.
std::string renamed(std::string_view rest, const Renames& table) {
    for (const auto& [from, to] : table)
        if (startsWith(rest, from)) return std::string(to) + std::string(rest.substr(from.size()));
    return {};
}

// "<kind>.<index>.<rest>" ("resnets.0.conv1.weight") and "<head><block>.<kind>.<index>.<rest>"
// ("down_blocks.1.resnets.0.conv1.weight"); nullopt for another shape of name.
struct BlockName {
    int block = 0;
    std::string kind;
    int index = 0;
    std::string rest;
};

// The decimal number ending at the next dot from `at` (moved past the dot); nullopt if none.
std::optional<int> numberAt(std::string_view text, std::size_t& at) {
    const std::size_t dot = text.find('.', at);
    if (dot == std::string_view::npos || dot == at || dot - at > 6) return std::nullopt;
    int value = 0;
    for (std::size_t i = at; i < dot; ++i) {
        if (text[i] < '0' || text[i] > '9') return std::nullopt;
        value = value * 10 + (text[i] - '0');
    }
    at = dot + 1;
    return value;
}

std::optional<BlockName> parseKindIndex(std::string_view text) {
    const std::size_t dot = text.find('.');
    if (dot == std::string_view::npos) return std::nullopt;
    std::size_t at = dot + 1;
    const std::optional<int> index = numberAt(text, at);
    if (!index) return std::nullopt;
    return BlockName{0, std::string(text.substr(0, dot)), *index, std::string(text.substr(at))};
}

std::optional<BlockName> parseBlockName(std::string_view name, std::string_view head) {
    if (!startsWith(name, head)) return std::nullopt;
    std::size_t at = head.size();
    const std::optional<int> block = numberAt(name, at);
    if (!block) return std::nullopt;
    std::optional<BlockName> parsed = parseKindIndex(name.substr(at));
    if (parsed) parsed->block = *block;
    return parsed;
}

// `head` + `piece`, or empty when the piece is (a name with no counterpart).
std::string joined(const std::string& head, const std::string& piece) { return piece.empty() ? piece : head + piece; }

const Renames kUNetFixed{{"time_embedding.linear_1.", "time_embed.0."}, {"time_embedding.linear_2.", "time_embed.2."},
                         {"conv_in.", "input_blocks.0.0."},             {"conv_norm_out.", "out.0."},
                         {"conv_out.", "out.2."},
                         // SDXL's text-time embedding (SGM: label_emb = Sequential(Sequential(Linear, SiLU, Linear)))
                         {"add_embedding.linear_1.", "label_emb.0.0."}, {"add_embedding.linear_2.", "label_emb.0.2."}};
const Renames kUNetResnet{{"norm1.", "in_layers.0."},          {"conv1.", "in_layers.2."},
                          {"time_emb_proj.", "emb_layers.1."}, {"norm2.", "out_layers.0."},
                          {"conv2.", "out_layers.3."},         {"conv_shortcut.", "skip_connection."}};

// convert_ldm_unet_checkpoint read backwards: block b's slot l is input_blocks.(1 + b(n+1) + l) /
// output_blocks.(b(n+1) + l); a level's downsampler fills slot n, an up block's upsampler sits
// after its resnet (.1) or, with attention, after that (.2).
std::string unetLdmName(const std::string& name, const UNetCondConfig& c) {
    const int n = c.layersPerBlock, slots = n + 1;
    std::string fixed = renamed(name, kUNetFixed);
    if (!fixed.empty()) return fixed;
    if (const auto d = parseBlockName(name, "down_blocks.")) {
        const std::string block = "input_blocks." + std::to_string(1 + d->block * slots + d->index);
        if (d->kind == "resnets") return joined(block + ".0.", renamed(d->rest, kUNetResnet));
        if (d->kind == "attentions") return block + ".1." + d->rest;
        if (d->kind == "downsamplers" && startsWith(d->rest, "conv."))
            return "input_blocks." + std::to_string((d->block + 1) * slots) + ".0.op." + d->rest.substr(5);
    }
    if (const auto m = startsWith(name, "mid_block.") ? parseKindIndex(name.substr(10)) : std::nullopt) {
        if (m->kind == "resnets")
            return joined("middle_block." + std::to_string(2 * m->index) + ".", renamed(m->rest, kUNetResnet));
        if (m->kind == "attentions") return "middle_block.1." + m->rest;
    }
    if (const auto u = parseBlockName(name, "up_blocks.")) {
        const std::string block = "output_blocks." + std::to_string(u->block * slots + u->index);
        if (u->kind == "resnets") return joined(block + ".0.", renamed(u->rest, kUNetResnet));
        if (u->kind == "attentions") return block + ".1." + u->rest;
        if (u->kind == "upsamplers") {
            const bool attention = c.upBlocks.at(static_cast<std::size_t>(u->block)) == CondUpBlock::CrossAttnUp;
            return "output_blocks." + std::to_string(u->block * slots + n) + (attention ? ".2." : ".1.") + u->rest;
        }
    }
    return {};
}

const Renames kVaeAttention{{"group_norm.", "norm."}, {"to_q.", "q."}, {"to_k.", "k."}, {"to_v.", "v."}, {"to_out.0.", "proj_out."}};

std::string vaeResnetRest(const std::string& rest) {
    return startsWith(rest, "conv_shortcut.") ? "nin_shortcut." + rest.substr(14) : rest;
}

// convert_ldm_vae_checkpoint read backwards; LDM numbers the decoder's levels by resolution
// (up.0 is the last to run), diffusers by execution order.
std::string vaeLdmName(const std::string& name, const VaeConfig& c) {
    const std::size_t dot = name.find('.');
    const std::string side = name.substr(0, dot), rest = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (side == "quant_conv" || side == "post_quant_conv") return name;
    if (startsWith(rest, "conv_in.") || startsWith(rest, "conv_out.")) return name;
    if (startsWith(rest, "conv_norm_out.")) return side + ".norm_out." + rest.substr(14);
    if (const auto m = startsWith(rest, "mid_block.") ? parseKindIndex(rest.substr(10)) : std::nullopt) {
        if (m->kind == "resnets") return side + ".mid.block_" + std::to_string(m->index + 1) + "." + vaeResnetRest(m->rest);
        if (m->kind == "attentions" && m->index == 0) return joined(side + ".mid.attn_1.", renamed(m->rest, kVaeAttention));
    }
    if (const auto d = parseBlockName(rest, "down_blocks.")) {
        const std::string level = side + ".down." + std::to_string(d->block);
        if (d->kind == "resnets") return level + ".block." + std::to_string(d->index) + "." + vaeResnetRest(d->rest);
        if (d->kind == "downsamplers") return level + ".downsample." + d->rest;
    }
    if (const auto u = parseBlockName(rest, "up_blocks.")) {
        const std::string level = side + ".up." + std::to_string(c.levels() - 1 - u->block);
        if (u->kind == "resnets") return level + ".block." + std::to_string(u->index) + "." + vaeResnetRest(u->rest);
        if (u->kind == "upsamplers") return level + ".upsample." + u->rest;
    }
    return {};
}

const Renames kOpenClipFixed{{"embeddings.token_embedding.weight", "token_embedding.weight"},
                             {"embeddings.position_embedding.weight", "positional_embedding"},
                             {"final_layer_norm.", "ln_final."}};
const Renames kOpenClipLayer{{"layer_norm1.", "ln_1."},     {"layer_norm2.", "ln_2."},
                             {"mlp.fc1.", "mlp.c_fc."},     {"mlp.fc2.", "mlp.c_proj."},
                             {"self_attn.out_proj.", "attn.out_proj."}};

// ---------------------------------------------------------------------------
// Bindings: which tensor of the file each model tensor comes from.

struct Binding {
    std::string name;         // the model's (diffusers) name
    Shape shape;              // the model's shape
    std::string stored;       // the file's name
    int part = 0, parts = 1;  // row block `part` of `parts` (OpenCLIP's fused q/k/v in_proj)
    bool squeeze = false;     // the file may add trailing 1-sized axes (LDM's 1x1-conv VAE attention)
    bool transpose = false;   // stored as the transpose of a 2-D model tensor (OpenCLIP's text_projection)
};

struct Plan {
    const char* what;  // "UNet", "VAE", "text encoder"
    std::vector<Binding> bindings;
    std::vector<std::string> structural;  // prefixes whose unused tensors mean a configuration mismatch
    std::string allowedUnused;            // ... except this one (SD 2.x's dropped OpenCLIP block)
};

// The OpenCLIP tensor (and q/k/v part) that holds a CLIPTextModel(WithProjection) tensor; empty
// name when none. text_projection is used as x @ W in OpenCLIP: the transpose of the Linear weight.
Binding openClipBinding(const std::string& name) {
    Binding b;
    if (name == kClipTextProjection) {
        b.stored = "text_projection";
        b.transpose = true;
        return b;
    }
    const std::string local = name.substr(std::strlen(kClipTextPrefix));
    b.stored = renamed(local, kOpenClipFixed);
    if (!b.stored.empty()) return b;
    const std::string head = "encoder.layers.";
    std::size_t at = head.size();
    const std::optional<int> layer = startsWith(local, head) ? numberAt(local, at) : std::nullopt;
    if (!layer) return b;
    const std::string block = "transformer.resblocks." + std::to_string(*layer) + ".";
    const std::string rest = local.substr(at);
    for (const char* qkv : {"q", "k", "v"})
        for (const char* part : {"weight", "bias"})
            if (rest == std::string("self_attn.") + qkv + "_proj." + part) {
                b.stored = block + "attn.in_proj_" + part;
                b.part = static_cast<int>(std::string("qkv").find(*qkv));
                b.parts = 3;
                return b;
            }
    const std::string other = renamed(rest, kOpenClipLayer);
    b.stored = joined(block, other);
    return b;
}

// A text encoder's bindings: transformers' names under `prefix` (Clip) or OpenCLIP's.
Plan textPlan(const char* what, const std::string& prefix, TextLayout kind, const ClipTextConfig& config) {
    const bool open = kind != TextLayout::Clip;
    Plan plan{what, {}, {prefix + (open ? "transformer." : "encoder.")}, {}};
    if (kind == TextLayout::OpenClipH)
        plan.allowedUnused = prefix + "transformer.resblocks." + std::to_string(config.numHiddenLayers) + ".";
    for (auto& [name, shape] : ClipTextModel::expectedTensors(config)) {
        Binding b = open ? openClipBinding(name) : Binding{{}, {}, name.substr(std::strlen(kClipTextPrefix))};
        b.name = name;
        b.shape = shape;
        b.stored = joined(prefix, b.stored);
        plan.bindings.push_back(std::move(b));
    }
    return plan;
}

std::vector<Plan> makePlans(const Layout& layout, const Configs& c) {
    std::vector<Plan> plans(3);
    plans[0] = {"UNet", {}, {kUNet}, {}};
    for (auto& [name, shape] : UNetCondModel::expectedTensors(c.unet))
        plans[0].bindings.push_back({name, shape, joined(kUNet, unetLdmName(name, c.unet))});
    plans[1] = {"VAE", {}, {layout.vae + "encoder.", layout.vae + "decoder."}, {}};
    for (auto& [name, shape] : VaeModel::expectedTensors(c.vae)) {
        Binding b{name, shape, joined(layout.vae, vaeLdmName(name, c.vae))};
        b.squeeze = name.find(".attentions.") != std::string::npos && shape.size() == 2;
        plans[1].bindings.push_back(std::move(b));
    }
    plans[2] = textPlan("text encoder", layout.text, layout.openClip() ? TextLayout::OpenClipH : TextLayout::Clip, c.text);
    if (c.text2) plans.push_back(textPlan("second text encoder", layout.text2, TextLayout::OpenClipBigG, *c.text2));
    for (const Plan& plan : plans)  // every name the models declare has an LDM counterpart
        for (const Binding& b : plan.bindings)
            if (b.stored.empty()) throw std::logic_error(std::string("no LDM name for the ") + plan.what + "'s " + b.name);
    return plans;
}

Shape storedShape(const Binding& b) {
    Shape shape = b.shape;
    if (b.transpose) std::reverse(shape.begin(), shape.end());
    if (!shape.empty()) shape[0] *= b.parts;
    return shape;
}

bool shapeFits(const Binding& b, Shape found) {
    if (b.squeeze)
        while (found.size() > b.shape.size() && found.back() == 1) found.pop_back();
    return found == storedShape(b);
}

std::string describeBinding(const Plan& plan, const Binding& b) {
    return quoted(b.stored) + " (the " + plan.what + "'s " + quoted(b.name) + ")";
}

// Presence, dtype and shape of every bound tensor; the counts and dtypes of the component.
SingleFileComponent checkPlan(const SafetensorsFile& file, const Plan& plan, const std::string& where) {
    SingleFileComponent part;
    std::set<std::string> seen;
    for (const Binding& b : plan.bindings) {
        const SafetensorsTensorInfo* info = file.find(b.stored);
        if (info == nullptr)
            throw ModelError(where + ": missing tensor " + describeBinding(plan, b) + ", expected shape " +
                             shapeToString(storedShape(b)));
        if (info->dtype != SafetensorsDtype::F32 && info->dtype != SafetensorsDtype::F16 &&
            info->dtype != SafetensorsDtype::BF16)
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + " has dtype " +
                             std::string(toString(info->dtype)) + "; model weights must be F32, F16 or BF16");
        if (!shapeFits(b, info->shape))
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + ": expected " +
                             shapeToString(storedShape(b)) + ", found " + shapeToString(info->shape));
        std::int64_t numel = 1;
        for (const std::int64_t d : b.shape) numel *= d;
        part.parameters += numel;
        if (seen.insert(b.stored).second) ++part.storedDtypes[std::string(toString(info->dtype))];
    }
    part.tensors = seen.size();
    return part;
}

// Every tensor of the file no model reads: an error inside a model's structure (its configuration
// does not describe this file), otherwise ignored (EMA copies, schedule buffers, position_ids, ...).
std::vector<std::string> unusedTensors(const SafetensorsFile& file, const std::vector<Plan>& plans, const std::string& where) {
    std::set<std::string> used;
    for (const Plan& plan : plans)
        for (const Binding& b : plan.bindings) used.insert(b.stored);
    std::vector<std::string> ignored;
    for (const auto& info : file.tensors()) {
        if (used.count(info.name) != 0) continue;
        for (const Plan& plan : plans) {
            const bool inside = std::any_of(plan.structural.begin(), plan.structural.end(),
                                            [&](const std::string& p) { return startsWith(info.name, p); });
            if (inside && (plan.allowedUnused.empty() || !startsWith(info.name, plan.allowedUnused)))
                throw ModelError(where + ": tensor " + quoted(info.name) + " " + shapeToString(info.shape) +
                                 " belongs to no part of the " + plan.what +
                                 " its configuration describes; the configuration does not fit this file");
        }
        ignored.push_back(info.name);
    }
    std::sort(ignored.begin(), ignored.end());
    return ignored;
}

// [rows, columns] row-major -> [columns, rows].
std::vector<float> transposed(const std::vector<float>& data, std::size_t rows, std::size_t columns) {
    std::vector<float> out(data.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < columns; ++c) out[c * rows + r] = data[r * columns + c];
    return out;
}

// Reads, upcasts and checks every bound tensor, in the file's order (one sequential pass over the
// disk), releasing each tensor's pages once copied (the resident set holds the copies, not also
// the file).
// The stored bytes of the tensors a plan reads (a fused tensor once).
std::uint64_t planBytes(const SafetensorsFile& file, const Plan& plan) {
    std::set<std::string> seen;
    std::uint64_t bytes = 0;
    for (const Binding& b : plan.bindings)
        if (seen.insert(b.stored).second) bytes += file.find(b.stored)->byteSize();
    return bytes;
}

std::map<std::string, HostTensor> readPlan(const SafetensorsFile& file, const Plan& plan, const std::string& where,
                                           LoadMeter& meter) {
    meter.beginPhase(std::string("reading the ") + plan.what, planBytes(file, plan));
    std::vector<const Binding*> order;
    for (const Binding& b : plan.bindings) order.push_back(&b);
    std::stable_sort(order.begin(), order.end(), [&](const Binding* x, const Binding* y) {
        const std::uint64_t a = file.find(x->stored)->begin, b = file.find(y->stored)->begin;
        return a != b ? a < b : x->part < y->part;
    });
    std::map<std::string, HostTensor> tensors;
    for (const Binding* bound : order) {
        const Binding& b = *bound;
        const SafetensorsTensorInfo& info = *file.find(b.stored);
        HostTensor t;
        t.shape = b.shape;
        const auto count = static_cast<std::size_t>(t.numel());
        try {
            t.data = file.readFloat32(info, count * static_cast<std::size_t>(b.part), count);
        } catch (const SafetensorsError& e) {
            throw ModelError(e.what());
        }
        const auto bad = std::find_if(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); });
        if (bad != t.data.end())
            throw ModelError(where + ": tensor " + describeBinding(plan, b) + " holds a non-finite value (" +
                             (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " +
                             std::to_string(static_cast<std::size_t>(bad - t.data.begin()) +
                                            count * static_cast<std::size_t>(b.part)));
        if (b.transpose) t.data = transposed(t.data, static_cast<std::size_t>(b.shape[1]), static_cast<std::size_t>(b.shape[0]));
        if (b.part + 1 == b.parts) {
            file.releasePages(info);
            meter.advance(info.byteSize());
        }
        tensors.emplace(b.name, std::move(t));
    }
    meter.endPhase();
    return tensors;
}

SafetensorsFile openCheckpoint(const std::string& path, const std::string& where) {
    checkPathText("model", path, "a model folder or checkpoint file");
    checkNotPickled(path, where);
    try {
        return SafetensorsFile(path);
    } catch (const SafetensorsError& e) {
        throw ModelError(std::string(e.what()) + " (not a readable safetensors checkpoint)");
    }
}

// The header pass shared by inspect and load.
struct Inspected {
    Layout layout;
    Configs configs;
    std::vector<Plan> plans;
    SingleFileCheckpointInfo info;
};

Inspected inspectOpen(const SafetensorsFile& file, const std::string& path, const SingleFileOptions& options) {
    const std::string where = shownPath(path);
    Inspected r;
    r.layout = detectLayout(file, where);
    r.configs = options.configFolder.empty() ? derivedConfigs(file, r.layout, where)
                                             : folderConfigs(options.configFolder, r.layout);
    if (r.configs.text2)
        checkSdxlComponents(r.configs.unet, r.configs.text, *r.configs.text2, where);
    else if (r.configs.unet.crossAttentionDim != r.configs.text.hiddenSize)
        throw ModelError(where + ": the UNet attends to " + std::to_string(r.configs.unet.crossAttentionDim) +
                         "-wide text but the text encoder is " + std::to_string(r.configs.text.hiddenSize) +
                         " wide; the file's models do not belong together");
    if (r.configs.unet.inChannels != r.configs.vae.latentChannels)
        throw ModelError(where + ": the UNet takes " + std::to_string(r.configs.unet.inChannels) +
                         " channels but the VAE's latents have " + std::to_string(r.configs.vae.latentChannels));
    try {
        r.plans = makePlans(r.layout, r.configs);
    } catch (const ModelError& e) {  // a configuration the graphs cannot be built from
        throw ModelError(where + ": " + withoutPrefix(e.what(), "config.json: "));
    }
    SingleFileCheckpointInfo& info = r.info;
    info.path = path;
    info.fileBytes = file.fileBytes().size();
    info.family = r.layout.family;
    info.familyReason = r.layout.reason;
    info.unet = r.configs.unet;
    info.vae = r.configs.vae;
    info.textEncoder = r.configs.text;
    info.textEncoder2 = r.configs.text2;
    info.configSource = r.configs.source;
    info.prediction = r.configs.prediction;
    info.predictionReason = r.configs.predictionReason;
    info.schedulerClass = defaultsOf(r.layout.family).schedulerClass;
    info.unetPart = checkPlan(file, r.plans[0], where);
    info.vaePart = checkPlan(file, r.plans[1], where);
    info.textEncoderPart = checkPlan(file, r.plans[2], where);
    if (r.plans.size() > 3) info.textEncoder2Part = checkPlan(file, r.plans[3], where);
    info.ignored = unusedTensors(file, r.plans, where);
    return r;
}

double peakResidentMiB() {
    rusage usage{};
    return getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<double>(usage.ru_maxrss) / 1024.0 : 0.0;
}

}  // namespace

std::string describeDtypes(const std::map<std::string, std::size_t>& counts) {
    std::vector<std::pair<std::string, std::size_t>> sorted(counts.begin(), counts.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (sorted.size() == 1) return sorted.front().first;
    std::string text;
    for (const auto& [dtype, count] : sorted)
        text += (text.empty() ? "" : ", ") + dtype + " (" + std::to_string(count) + (text.empty() ? " tensors)" : ")");
    return text.empty() ? "none" : text;
}

std::string describeIgnored(const std::vector<std::string>& names, std::size_t maxGroups) {
    std::map<std::string, std::size_t> groups;
    for (const std::string& name : names) ++groups[name.substr(0, name.find('.'))];
    std::vector<std::pair<std::string, std::size_t>> sorted(groups.begin(), groups.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string text;
    for (std::size_t i = 0; i < sorted.size() && i < maxGroups; ++i)
        text += (i ? ", " : "") + excerpt(sorted[i].first, 40) + " (" + std::to_string(sorted[i].second) + ")";
    if (sorted.size() > maxGroups) text += ", ... (" + std::to_string(sorted.size() - maxGroups) + " more groups)";
    return text;
}

SingleFileCheckpointInfo inspectSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options) {
    const SafetensorsFile file = openCheckpoint(path, shownPath(path));
    Inspected r = inspectOpen(file, path, options);
    r.info.sha256 = FileHasher(file, options.digest).result();
    return std::move(r.info);
}

SdModel loadSingleFileCheckpoint(const std::string& path, const SingleFileOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    const std::string where = shownPath(path);
    const SafetensorsFile file = openCheckpoint(path, where);
    Inspected r = inspectOpen(file, path, options);
    FileHasher hasher(file, options.digest);  // runs while the tensors are converted
    std::uint64_t total = 0;
    for (const Plan& plan : r.plans) total += planBytes(file, plan);
    LoadMeter meter(options.progress, total);

    SdModel model;
    model.family = r.layout.family;
    model.unet = std::make_shared<const UNetCondModel>(
        UNetCondModel::fromTensors(r.configs.unet, readPlan(file, r.plans[0], where, meter), WeightsDigest::Skip));
    model.vae = std::make_shared<const VaeModel>(
        VaeModel::fromTensors(r.configs.vae, readPlan(file, r.plans[1], where, meter), WeightsDigest::Skip));
    model.textEncoder = std::make_shared<const ClipTextModel>(
        ClipTextModel::fromTensors(r.configs.text, readPlan(file, r.plans[2], where, meter), WeightsDigest::Skip));
    if (r.configs.text2)
        model.textEncoder2 = std::make_shared<const ClipTextModel>(ClipTextModel::fromTensors(
            *r.configs.text2, readPlan(file, r.plans[3], where, meter), WeightsDigest::Skip));
    meter.finish(options.digest == FileDigest::Compute ? "hashing the file" : "");
    model.scheduler = sdSchedulerDefaults(r.configs.prediction);
    model.schedulerClass = r.info.schedulerClass;
    model.source = path;
    model.name = fs::path(path).stem().string();
    model.sha256 = hasher.result();
    if (!r.info.ignored.empty())
        spdlog::info("{}: {} tensor{} not used by the models: {}", where, r.info.ignored.size(),
                     r.info.ignored.size() == 1 ? " is" : "s are", describeIgnored(r.info.ignored));
    spdlog::info("{}: {}, {} prediction ({})", where, defaultsOf(model.family).label,
                 toString(r.configs.prediction), r.configs.predictionReason);
    model.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model.hostPeakMiB = peakResidentMiB();
    return model;
}

TensorList singleFileTensors(SdFamily family, const UNetCondConfig& unet, const VaeConfig& vae,
                             const ClipTextConfig& textEncoder, const std::optional<ClipTextConfig>& textEncoder2) {
    Layout layout;
    layout.family = family;
    layout.vae = kVaePrefixes[0];
    layout.text = family == SdFamily::SD2    ? std::string(kOpenClip)
                  : family == SdFamily::SDXL ? std::string(kXlClip) + kClipTextPrefix
                                             : std::string(kClip) + kClipTextPrefix;
    if (family == SdFamily::SDXL) {
        if (!textEncoder2) throw std::invalid_argument("singleFileTensors: an SDXL checkpoint has a second text encoder");
        layout.text2 = kXlOpenClip;
    }
    Configs configs;
    configs.unet = unet;
    configs.vae = vae;
    configs.text = textEncoder;
    if (family == SdFamily::SDXL) configs.text2 = textEncoder2;
    TensorList list;
    std::set<std::string> seen;
    for (const Plan& plan : makePlans(layout, configs))
        for (const Binding& b : plan.bindings) {
            Shape shape = storedShape(b);
            if (b.squeeze) shape.insert(shape.end(), {1, 1});
            if (seen.insert(b.stored).second) list.emplace_back(b.stored, std::move(shape));
        }
    return list;
}

}  // namespace tessera
