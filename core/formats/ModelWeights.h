// ModelWeights: the named float32 tensors of one diffusers model folder (UNet2DModel,
// UNet2DConditionModel, AutoencoderKL, ...), bound against the list of (name, shape) that the
// model's graph declares. The one loader of diffusers weight files
// (diffusion_pytorch_model.safetensors or its shards; F32, F16 and BF16 read as float32), the
// random initialisation of a tensor list, and the helpers every model-folder reader uses
// (folder checks, pipeline subfolders, bounded JSON reads). Qt-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/LoadProgress.h"

namespace tessera {

struct HostTensor {
    std::vector<std::int64_t> shape;  // PyTorch layout: conv [O,I,kh,kw], linear [out,in], norm [C]
    std::vector<float> data;          // row-major float32 (F16/BF16 files are upcast)
    std::int64_t numel() const;
};

// Thrown for a model folder/file that cannot be used: invalid input of the "model" setting
// (front ends exit with "invalid input"). what() names the file and, where it applies, the
// tensor ("down_blocks.1.attentions.0.to_q.weight: expected [256, 256], found [256, 128]").
class ModelError : public InputFileError {
public:
    explicit ModelError(const std::string& message) : InputFileError("model", message) {}
};

// What fromTensors records as sha256: a digest of the names, shapes and values (equal weights,
// equal digests), or nothing, for a caller that fingerprints the source itself (a single-file
// checkpoint hashes its file: hashing gigabytes of floats again would double a load's time).
enum class WeightsDigest { Compute, Skip };

// (name, shape) of every tensor a model needs, e.g. ModelGraph::parameterList().
using TensorList = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

// Whether diffusers <= 0.15 attention names (query/key/value/proj_attn) stand in for
// to_q/to_k/to_v/to_out.0 of an "attentions." module: UNet2DModel and AutoencoderKL files may
// have them; UNet2DConditionModel's transformer blocks never did.
enum class LegacyAttentionNames { Accepted, NotAccepted };

// Where a folder keeps its weights and what other name a tensor may be stored under.
struct WeightFileLayout {
    // <stem>.safetensors, or the shards <stem>.safetensors.index.json lists (and, for diffusers'
    // stem, the fp16 variants); `pickle` is refused. diffusers: diffusion_pytorch_model;
    // transformers: model.
    std::string stem = "diffusion_pytorch_model";
    std::string pickle = "diffusion_pytorch_model.bin";  // transformers: pytorch_model.bin
    // The other name of a canonical one (empty: none). Unset: diffusers' legacy attention
    // names (query/key/value/proj_attn) where `legacyNames` accepts them.
    std::function<std::string(const std::string&)> alias;
    LegacyAttentionNames legacyNames = LegacyAttentionNames::Accepted;
};

// transformers' weight files (model.safetensors, its shards and fp16 variants; pytorch_model.bin
// refused), as the text encoders' folders keep them.
WeightFileLayout transformersWeightFiles();

struct ModelWeights {
    std::map<std::string, HostTensor> tensors;  // by canonical name
    std::vector<std::string> extra;             // names present in the source that `expected` lacks
    std::string sha256;  // of the file (of the shards' bytes in name order); in memory: of names, shapes, data

    // Reads folder/diffusion_pytorch_model.safetensors (or the shards its .index.json lists;
    // when neither is there, the fp16 variant diffusion_pytorch_model.fp16.safetensors or the
    // shards of diffusion_pytorch_model.safetensors.index.fp16.json / .fp16.index.json).
    // Every expected tensor must be present (canonical or, where `legacyNames` accepts them,
    // legacy attention name) with the expected shape, checked for all before any data is read,
    // and hold only finite values. ModelError names the file and the tensor (declared names
    // whole, with expected and found shapes). Extra tensors are logged once.
    // `meter` (optional) advances by each tensor's stored bytes as it is read.
    static ModelWeights load(const std::string& folder, const TensorList& expected, LegacyAttentionNames legacyNames,
                             LoadMeter* meter = nullptr);
    // The same with another file stem or name alias (transformers' model.safetensors, CLIP's
    // optional "text_model." prefix).
    static ModelWeights load(const std::string& folder, const TensorList& expected, const WeightFileLayout& layout,
                             LoadMeter* meter = nullptr);
    // One safetensors file by its path (a single-file text encoder), with the layout's alias
    // (its stem and pickle name do not apply); checked and hashed as load().
    static ModelWeights loadFile(const std::string& path, const TensorList& expected, const WeightFileLayout& layout,
                                 LoadMeter* meter = nullptr);
    // The bytes of tensor data in the weight files load() would read (every tensor, used or
    // not; headers not counted), from their headers alone: a load's total for its progress.
    // ModelError as load() for a file that is missing or not valid safetensors.
    static std::uint64_t storedBytes(const std::string& folder, const WeightFileLayout& layout = {});
    // The same checks on tensors already in memory (tests, converters).
    static ModelWeights fromTensors(std::map<std::string, HostTensor> tensors, const TensorList& expected,
                                    LegacyAttentionNames legacyNames, WeightsDigest digest = WeightsDigest::Compute);
};

// PyTorch-like default-init values for `expected` (deterministic in `seed`, each tensor keyed
// by its name, so adding a layer does not change the others): conv/linear U(+-1/sqrt(fan_in)),
// norms 1 (weights) / 0 (biases) +- 0.05. `meter` (optional) advances by each tensor's float32 bytes.
std::map<std::string, HostTensor> randomTensors(const TensorList& expected, std::uint64_t seed,
                                                LoadMeter* meter = nullptr);
// The float32 bytes of `expected`: what randomTensors draws.
std::uint64_t float32Bytes(const TensorList& expected);

// Helpers of the model-folder readers. Paths in messages are short escaped excerpts.

// `dir` must name an existing folder by a path of bounded length; ModelError says why not.
void checkModelFolder(const std::string& dir);
// The folder holding a model component's config.json and weights: `dir` itself, or
// dir/<component> ("unet", "vae") for a diffusers pipeline folder. checkModelFolder(dir) first;
// ModelError "<config.json path>: not found; <what> holds config.json and ..." when neither has
// one (`what`: "a model folder", "a VAE folder").
std::string componentFolder(const std::string& dir, const char* component, const char* what);
// An entry of that name exists (a dangling link counts, so that reading it reports why).
bool folderEntryPresent(const std::filesystem::path& path);
// A JSON file through BoundedInput; errors as ModelError naming the file.
nlohmann::json readModelJson(const std::filesystem::path& path);
// `message` without a leading `prefix` (config readers prefix "config.json: "; the loader
// names the full path instead).
std::string withoutPrefix(const std::string& message, std::string_view prefix);

}  // namespace tessera
