#include "core/models/flux/FluxTextFiles.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "core/formats/Safetensors.h"
#include "core/models/sd/SdModel.h"  // bundledTokenizer: FLUX.1's CLIP-L tokenizer is SD 1.x's
#include "core/models/t5/T5Model.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Where a CLIP file keeps transformers' "text_model." names: bare (transformers >= 5.6), under
// it, or under ComfyUI's all-in-one prefix.
const std::vector<std::string>& clipPrefixes() {
    static const std::vector<std::string> p{"text_model.", "", "text_encoders.clip_l.transformer.text_model."};
    return p;
}

std::string clipPrefixOf(const SafetensorsFile& file) {
    for (const std::string& p : clipPrefixes())
        if (file.has(p + "final_layer_norm.weight") && file.has(p + "embeddings.token_embedding.weight")) return p;
    return "none";
}

bool isT5(const SafetensorsFile& file) {
    for (const char* p : {"", "text_encoders.t5xxl.transformer."})
        if (file.has(std::string(p) + "encoder.final_layer_norm.weight")) return true;
    return false;
}

}  // namespace

TextEncoderFileKind textEncoderFileKind(const std::string& path) {
    const SafetensorsFile file(path);
    if (clipPrefixOf(file) != "none") return TextEncoderFileKind::ClipL;
    if (isT5(file)) return TextEncoderFileKind::T5;
    throw ModelError(path +
                     ": neither a CLIP-L nor a T5 text encoder (no final_layer_norm.weight under text_model. "
                     "or encoder.)");
}

std::shared_ptr<const ClipTextModel> loadClipTextFile(const std::string& path, LoadMeter* meter) {
    const SafetensorsFile file(path);
    const std::string prefix = clipPrefixOf(file);
    if (prefix == "none") throw ModelError(path + ": not a CLIP text encoder (no text_model.final_layer_norm.weight)");
    auto shapeOf = [&](const std::string& name, std::size_t rank) {
        const SafetensorsTensorInfo* t = file.find(prefix + name);
        if (!t || t->shape.size() != rank)
            throw ModelError(path + ": tensor '" + prefix + name + "' is missing or not of rank " +
                             std::to_string(rank));
        return t->shape;
    };
    ClipTextConfig c;  // CLIP-L's (openai/clip-vit-large-patch14 config.json) where shapes do not say
    c.hiddenSize = static_cast<int>(shapeOf("final_layer_norm.weight", 1)[0]);
    c.vocabSize = static_cast<int>(shapeOf("embeddings.token_embedding.weight", 2)[0]);
    c.maxPositionEmbeddings = static_cast<int>(shapeOf("embeddings.position_embedding.weight", 2)[0]);
    c.intermediateSize = static_cast<int>(shapeOf("encoder.layers.0.mlp.fc1.weight", 2)[0]);
    int layers = 0;
    const std::string layerPrefix = prefix + "encoder.layers.";
    for (const SafetensorsTensorInfo& t : file.tensors()) {
        if (t.name.rfind(layerPrefix, 0) != 0) continue;
        const std::string rest = t.name.substr(layerPrefix.size());
        const std::string index = rest.substr(0, rest.find('.'));
        if (!index.empty() && index.size() <= 4 && std::all_of(index.begin(), index.end(), ::isdigit))
            layers = std::max(layers, std::stoi(index) + 1);
    }
    c.numHiddenLayers = layers;
    c.numAttentionHeads = std::max(1, c.hiddenSize / 64);
    c.projectionDim = c.hiddenSize;
    c.hiddenAct = ClipActivation::QuickGelu;
    c.eosTokenId = 2;  // CLIP-L's config: pooled at the first largest id (the EOS, 49407)
    std::map<std::string, HostTensor> tensors;
    for (const auto& [name, shape] : ClipTextModel::expectedTensors(c)) {
        const std::string stored = prefix + name.substr(std::string(kClipTextPrefix).size());
        const SafetensorsTensorInfo* t = file.find(stored);
        if (!t) throw ModelError(path + ": no tensor '" + stored + "' (a CLIP text encoder of its shapes has one)");
        HostTensor h;
        h.shape = t->shape;
        h.data = file.readFloat32(*t);
        if (meter != nullptr) meter->advance(h.data.size() * sizeof(float));
        tensors.emplace(name, std::move(h));
    }
    try {
        return std::make_shared<const ClipTextModel>(ClipTextModel::fromTensors(c, std::move(tensors)));
    } catch (const ModelError& e) {
        throw ModelError(path + ": " + e.what());
    }
}

std::string t5TokenizerBeside(const std::string& t5File) {
    const fs::path p(t5File);
    const fs::path beside = p.parent_path() / "spiece.model";
    const fs::path named = p.parent_path() / (p.stem().string() + ".spiece.model");
    std::error_code ec;
    if (fs::is_regular_file(beside, ec)) return beside.string();
    if (fs::is_regular_file(named, ec)) return named.string();
    throw ModelError(t5File + ": no T5 tokenizer beside it (looked for " + beside.string() + " and " + named.string() +
                     "); put T5 v1.1's SentencePiece model there (spiece.model of google/t5-v1_1-xxl; diffusers' "
                     "FLUX.1 folders keep it in tokenizer_2/)");
}

std::shared_ptr<const FluxModel> loadFluxFromFiles(const std::string& transformer, const std::string& vae,
                                                   const std::vector<std::string>& textEncoders,
                                                   const FluxFilesOptions& options) {
    FluxFiles files;
    files.transformer = transformer;
    files.vae = vae;
    std::shared_ptr<const ClipTextModel> clip;
    std::shared_ptr<const T5Model> t5;
    std::shared_ptr<const T5Tokenizer> t5Tokenizer;
    std::string clipFile, t5File;
    for (const std::string& path : textEncoders) {
        const TextEncoderFileKind kind = textEncoderFileKind(path);
        std::string& slot = kind == TextEncoderFileKind::ClipL ? clipFile : t5File;
        if (!slot.empty())
            throw ModelError(path + ": a second " + (kind == TextEncoderFileKind::ClipL ? "CLIP" : "T5") +
                             " text encoder beside " + slot + "; give one CLIP-L file and one T5 file");
        slot = path;
    }
    files.clip = clipFile;
    files.t5 = t5File;
    // Everything a file name can tell checked before the transformer's gigabytes are read.
    if (clipFile.empty() != t5File.empty())
        throw ModelError(transformer + (clipFile.empty() ? ": no CLIP-L text encoder file (clip_l.safetensors) beside "
                                                           "the T5 file; give both with --text-encoder"
                                                         : ": no T5 text encoder file (t5xxl_fp16.safetensors) beside "
                                                           "the CLIP-L file; give both with --text-encoder"));
    const std::string spiece = t5File.empty() ? std::string() : t5TokenizerBeside(t5File);
    const FluxFilesModel loaded = loadFluxFiles(files, options);
    auto model = std::make_shared<FluxModel>(*loaded.model);
    if (!clipFile.empty()) clip = loadClipTextFile(clipFile);
    if (!t5File.empty()) {
        t5 = std::make_shared<const T5Model>(T5Model::loadSingleFile(t5File));
        t5Tokenizer = std::make_shared<const T5Tokenizer>(spiece);
    }
    setFluxTextEncoders(*model, clip, clip ? bundledTokenizer(SdFamily::SD1) : nullptr, t5, t5Tokenizer, transformer);
    return model;
}

}  // namespace tessera
