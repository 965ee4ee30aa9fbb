#include "core/sampling/ControlNetRun.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/base/ValidationError.h"
#include "core/formats/A1111ModelHash.h"
#include "core/models/controlnet/ControlledUNetGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/run/ControlNetModelFile.h"
#include "core/sampling/ControlPreprocess.h"

namespace tessera {

namespace {

// What a controlled Denoiser keeps alive: the merged weights and the models they came from.
struct ControlledWeights {
    TensorMap tensors;
    std::shared_ptr<const void> unetOwner;
    std::vector<std::shared_ptr<const ControlNetModel>> nets;
};

std::string sizeText(int c, int h, int w) {
    return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

}  // namespace

std::vector<ControlNetRunUnit> loadControlNetUnits(
    const RunConfig& config, const std::vector<ImageTensor>& images,
    std::vector<std::pair<std::string, std::shared_ptr<const ControlNetModel>>>& cache) {
    const char* variable = std::getenv(kModelsFolderVariable);
    const std::vector<ModelFile> files = findControlNetFiles(
        config, modelsFolders(variable ? std::string_view(variable) : std::string_view(), config.model));
    std::vector<std::pair<std::string, std::shared_ptr<const ControlNetModel>>> kept;
    std::vector<ControlNetRunUnit> units;
    for (std::size_t i = 0; i < files.size(); ++i) {
        const ControlNetUnit& u = config.controlNets[i];
        if (u.preprocessor != "none" && u.preprocessor != "tile_resample" && !isColorFixPreprocessor(u.preprocessor))
            throw ValidationError("control_preprocessor",
                                  "control_preprocessor: ControlNet " + std::to_string(i) + ": '" + u.preprocessor +
                                      "' is not run by this version; give none, tile_resample[:RATE], "
                                      "tile_colorfix[:VARIATION] or tile_colorfix+sharp[:VARIATION[:SHARPNESS]], or "
                                      "a control image prepared beforehand");
        std::shared_ptr<const ControlNetModel> model;
        for (const auto& entry : cache)
            if (entry.first == files[i].path) model = entry.second;
        if (!model) model = std::make_shared<const ControlNetModel>(ControlNetModel::load(files[i].path));
        kept.emplace_back(files[i].path, model);
        ControlNetRunUnit unit;
        unit.model = model;
        if (!u.image.empty()) {
            if (i >= images.size() || images[i].data.empty())
                throw ValidationError("control_image", "control_image: '" + u.image +
                                                           "' was not loaded; the front end must decode it and "
                                                           "hand it to the engine with the run");
            unit.image = images[i];
        }
        unit.weight = static_cast<float>(u.weight);
        unit.start = u.start;
        unit.end = u.end;
        unit.mode = u.mode;
        unit.a1111Hash = a1111ModelHash(files[i].path);
        unit.preprocessor = u.preprocessor;
        unit.downSampling = u.downSampling;
        unit.colorfixVariation = static_cast<int>(u.colorfixVariation);  // the extension's int(threshold_a)
        unit.colorfixSharpness = u.colorfixSharpness;
        units.push_back(std::move(unit));
    }
    cache = std::move(kept);  // the models of this run only: others are released
    return units;
}

int colorFixCount(const std::vector<ControlNetRunUnit>& units) {
    int n = 0;
    for (const ControlNetRunUnit& u : units) n += u.colorFix() ? 1 : 0;
    return n;
}

ColorFixSettings colorFixSettings(const ControlNetRunUnit& unit) {
    ColorFixSettings s;
    s.radius = unit.colorfixVariation;
    s.weight = std::clamp(unit.weight, 0.0f, 1.0f);
    s.sharpness =
        unit.preprocessor == "tile_colorfix+sharp" ? static_cast<float>(unit.colorfixSharpness * 0.01) : -1.0f;
    return s;
}

void checkColorFixModel(const std::vector<std::string>& preprocessors, PredictionType prediction, bool hasVae) {
    for (std::size_t i = 0; i < preprocessors.size(); ++i) {
        if (!isColorFixPreprocessor(preprocessors[i])) continue;
        const std::string which =
            "control_preprocessor: ControlNet " + std::to_string(i) + ": " + preprocessors[i] + " ";
        if (prediction != PredictionType::Epsilon)
            throw ValidationError("control_preprocessor",
                                  which +
                                      "corrects the predicted noise and runs with epsilon-prediction models "
                                      "only; this model predicts " +
                                      std::string(prediction == PredictionType::VPrediction ? "v" : "the sample") +
                                      "; give none or tile_resample");
        if (!hasVae)
            throw ValidationError("control_preprocessor",
                                  which +
                                      "needs the model's VAE to encode the control image; this model has none; "
                                      "give none or tile_resample");
    }
}

std::vector<ImageTensor> colorFixImages(const std::vector<ControlNetRunUnit>& units,
                                        const std::vector<std::vector<float>>& hints, int imageHeight, int imageWidth) {
    std::vector<ImageTensor> images;
    const std::size_t plane = static_cast<std::size_t>(imageHeight) * imageWidth;
    for (std::size_t i = 0; i < units.size(); ++i) {
        if (!units[i].colorFix()) continue;
        const std::vector<float>& h = hints.at(i);
        if (h.size() < 3 * plane) throw std::logic_error("colorFixImages: a hint of fewer than 3 channels");
        ImageTensor image{3, imageHeight, imageWidth,
                          std::vector<float>(h.begin(), h.begin() + 3 * static_cast<std::ptrdiff_t>(plane))};
        for (float& v : image.data) v = v * 2.0f - 1.0f;
        images.push_back(std::move(image));
    }
    return images;
}

std::vector<float> residualScalesFor(const ControlNetRunUnit& unit) {
    if (unit.mode == ControlMode::Balanced) return {};
    return softInjectionScales(unit.model->config().downResiduals());
}

std::string controlledModelKey(const Denoiser& base, const UNetCondModel& unet,
                               const std::vector<ControlNetRunUnit>& units, std::uint64_t generation) {
    std::ostringstream k;
    k << std::hexfloat << generation << ' ' << static_cast<const void*>(&unet) << ' ' << base.owner.get() << ' '
      << base.contextTokens;
    for (const ControlNetRunUnit& u : units) {
        k << '|' << static_cast<const void*>(u.model.get());
        for (const float s : residualScalesFor(u)) k << ' ' << s;
        if (u.colorFix()) {
            const ColorFixSettings c = colorFixSettings(u);
            k << " colorfix " << c.radius << ' ' << c.weight << ' ' << c.sharpness;
        }
    }
    return k.str();
}

std::shared_ptr<const Denoiser> controlledDenoiser(const Denoiser& base, const UNetCondModel& unet, SdFamily family,
                                                   const std::vector<ControlNetRunUnit>& units, int* tileScale,
                                                   ControlledModelCache* cache, std::uint64_t generation) {
    std::string key;
    if (cache) {
        key = controlledModelKey(base, unet, units, generation);
        cache->hit = cache->made && cache->key == key;
        if (cache->hit) {
            auto d = std::make_shared<Denoiser>(base);  // this run's conditioning
            d->graph = cache->made->graph;
            d->weights = cache->made->weights;
            d->owner = cache->made->owner;
            if (tileScale) *tileScale = cache->tileScale;
            return d;
        }
        cache->made.reset();  // the old merged weights go before the new ones are made
    }
    std::vector<ControlledNet> nets;
    auto owned = std::make_shared<ControlledWeights>();
    std::vector<const TensorMap*> maps;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const ControlNetModel& model = *units[i].model;
        std::string netReason;
        const SdFamily netFamily = controlNetFamily(model.config(), &netReason);
        const std::string mismatch = controlNetUNetMismatch(model.config(), unet.config());
        const std::string name = model.source().path.empty() ? "in memory" : "'" + model.source().path + "'";
        const std::string netText(toString(netFamily)), checkpointText(toString(family));
        if (!mismatch.empty())
            throw ValidationError("controlnet", "controlnet: ControlNet " + std::to_string(i) + " (" + name +
                                                    ") is a " + netText + " ControlNet (" + netReason +
                                                    "); the checkpoint is " + checkpointText + ": " + mismatch +
                                                    "; give a " + checkpointText + " ControlNet");
        nets.push_back(ControlledNet{model.config(), residualScalesFor(units[i])});
        if (units[i].colorFix()) {
            if (unet.config().inChannels != unet.config().outChannels)
                throw ValidationError("control_preprocessor",
                                      "control_preprocessor: ControlNet " + std::to_string(i) + ": " +
                                          units[i].preprocessor + " needs a UNet that takes its latent alone; " +
                                          "this one takes " + std::to_string(unet.config().inChannels) +
                                          " channels (an inpainting model); give none or tile_resample");
            nets.back().colorFix = colorFixSettings(units[i]);
        }
        maps.push_back(&model.tensors());
        owned->nets.push_back(units[i].model);
    }
    owned->tensors = controlledUNetWeights(unet.tensors(), maps);
    if (colorFixCount(units) > 0) {
        const std::vector<float> table = colorFixDdpmTable();
        for (std::size_t i = 0; i < units.size(); ++i)
            if (units[i].colorFix())
                owned->tensors.emplace(colorFixTableParam(static_cast<int>(i)),
                                       HostTensor{{2, static_cast<std::int64_t>(table.size() / 2)}, table});
    }
    owned->unetOwner = base.owner;
    auto d = std::make_shared<Denoiser>(base);
    d->graph = std::make_shared<const ModelGraph>(
        controlledUNetExecutionGraph(unet.config(), nets, ControlledUNetOptions{base.contextTokens, false}));
    d->weights = &owned->tensors;
    d->owner = owned;
    if (tileScale) *tileScale = controlledTileScale(nets);
    if (cache) {
        cache->key = std::move(key);
        cache->made = d;
        cache->tileScale = controlledTileScale(nets);
    }
    return d;
}

std::vector<std::vector<float>> controlHints(const std::vector<ControlNetRunUnit>& units, const ImageTensor* start,
                                             int imageHeight, int imageWidth) {
    std::vector<std::vector<float>> hints;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const ControlNetRunUnit& u = units[i];
        const int channels = u.model->config().conditioningChannels;
        const std::string which = "control_image: ControlNet " + std::to_string(i);
        if (u.image.data.empty()) {
            if (!start || start->data.empty())
                throw ValidationError("control_image", which +
                                                           " has no control image and the run no start image; give "
                                                           "--control-image FILE (or an --init image to use)");
            if (start->channels != channels || start->height != imageHeight || start->width != imageWidth)
                throw ValidationError("control_image", which + ": the start image is " +
                                                           sizeText(start->channels, start->height, start->width) +
                                                           "; the ControlNet takes " +
                                                           sizeText(channels, imageHeight, imageWidth));
            std::vector<float> hint(start->data);
            for (float& v : hint) v = (v + 1.0f) * 0.5f;
            if (u.preprocessor == "tile_resample")
                hint = tileResampleHint(hint, channels, imageHeight, imageWidth, u.downSampling,
                                        ControlResizeMode::JustResize);
            hints.push_back(std::move(hint));
            continue;
        }
        if (u.image.channels != channels || u.image.height != imageHeight || u.image.width != imageWidth ||
            u.image.data.size() != static_cast<std::size_t>(channels) * imageHeight * imageWidth)
            throw ValidationError("control_image", which + ": the control image is " + std::to_string(u.image.width) +
                                                       "x" + std::to_string(u.image.height) + " pixels with " +
                                                       std::to_string(u.image.channels) +
                                                       " channels; the run's image is " + std::to_string(imageWidth) +
                                                       "x" + std::to_string(imageHeight) +
                                                       " and the ControlNet takes " + std::to_string(channels) +
                                                       " channels: resize the control image to " +
                                                       std::to_string(imageWidth) + "x" + std::to_string(imageHeight));
        hints.push_back(u.preprocessor == "tile_resample"
                            ? tileResampleHint(u.image.data, channels, imageHeight, imageWidth, u.downSampling,
                                               ControlResizeMode::CropAndResize)
                            : u.image.data);
    }
    return hints;
}

std::vector<PassControl> passControls(const ModelGraph& graph, const std::vector<ControlNetRunUnit>& units,
                                      const std::vector<std::vector<float>>& hints, int height, int width, int steps,
                                      int startStep) {
    const auto colorFixes = static_cast<std::size_t>(colorFixCount(units));
    if (hints.size() != units.size() + colorFixes)
        throw std::logic_error("passControls: one hint per unit, then one latent per colour fix");
    std::vector<PassControl> controls;
    const int executed = steps - startStep;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const ControlNetRunUnit& u = units[i];
        const ControlNetConfig& c = u.model->config();
        PassControl p;
        p.hint = &hints[i];
        p.channels = c.conditioningChannels;
        p.factor = c.hintFactor();
        if (hints[i].size() != static_cast<std::size_t>(p.channels) * height * p.factor * width * p.factor)
            throw ValidationError("control_image", "control_image: ControlNet " + std::to_string(i) +
                                                       "'s hint does not cover the canvas");
        const std::string prefix = controlNetParamName(static_cast<int>(i), "conditioning_scale.");
        for (const int v : graph.inputs())
            if (graph.value(v).name.starts_with(prefix)) p.scaleWidths.push_back(graph.value(v).channels / 2);
        if (p.scaleWidths.empty()) throw std::logic_error("passControls: the graph has no scale inputs for a unit");
        for (int k = 0; k < steps; ++k) {
            const bool on = k >= startStep && controlActive(k - startStep, executed, u.start, u.end);
            const float s = on ? u.weight : 0.0f;
            p.condScale.push_back(s);
            p.uncondScale.push_back(u.mode == ControlMode::ControlNet ? 0.0f : s);
        }
        controls.push_back(std::move(p));
    }
    std::size_t j = units.size();
    for (std::size_t i = 0; i < units.size(); ++i) {
        if (!units[i].colorFix()) continue;
        PassControl p;
        p.hint = &hints[j++];
        p.factor = 1;
        p.channels = static_cast<int>(p.hint->size() / (static_cast<std::size_t>(height) * width));
        if (p.hint->size() != static_cast<std::size_t>(p.channels) * height * width || p.channels < 1)
            throw ValidationError("control_image", "control_image: ControlNet " + std::to_string(i) +
                                                       "'s colour-fix latent does not cover the canvas");
        const std::string name = colorFixMarkInput(static_cast<int>(i));
        for (const int v : graph.inputs())
            if (graph.value(v).name == name) p.scaleWidths.push_back(graph.value(v).channels / 2);
        if (p.scaleWidths.size() != 1) throw std::logic_error("passControls: the graph has no colour-fix mark input");
        p.condScale.assign(static_cast<std::size_t>(steps), 1.0f);
        p.uncondScale.assign(static_cast<std::size_t>(steps), 0.0f);
        controls.push_back(std::move(p));
    }
    return controls;
}

}  // namespace tessera
