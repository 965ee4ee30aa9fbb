// ControlNetRun: what the one tiled loop (core/sampling/TiledLoop.h) needs to run Stable Diffusion
// with ControlNets: the controlled tile function (the UNet and every ControlNet as one graph,
// core/models/controlnet/ControlledUNetGraph.h) and, per pass, each ControlNet's hint canvas and
// its per-step, per-branch scale (TiledPass::controls), which a device crops and fills per tile
// batch. Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/controlnet/ControlledUNetGraph.h"
#include "core/run/ControlNetUnit.h"
#include "core/run/Engine.h"
#include "core/run/RunConfig.h"
#include "core/sampling/Denoiser.h"
#include "core/sampling/TileDevice.h"

namespace tessera {

// One ControlNet of a run, loaded: the model, its control image and the unit's settings.
struct ControlNetRunUnit {
    std::shared_ptr<const ControlNetModel> model;
    // channels x H x W of the run's image (image pixels), values in [0, 1] (A1111: uint8 / 255);
    // empty: the run's start image (model space [-1, 1], mapped to [0, 1]).
    ImageTensor image;
    float weight = 1.0f;
    // Fractions of the executed steps, as double: the keep table's comparisons (i / n < start) must
    // see 0.2 as diffusers' Python float does, not as the float 0.2f above it.
    double start = 0.0, end = 1.0;
    ControlMode mode = ControlMode::Balanced;
    // A1111's model hash of the file (core/formats/A1111ModelHash.h), for the record; "" in memory.
    std::string a1111Hash;
    // "none" or "tile_resample" at `downSampling` (core/sampling/ControlPreprocess.h), applied to the
    // hint canvas once per run; "tile_colorfix" / "tile_colorfix+sharp": the hint as it is, and the
    // UNet's output corrected towards the hint's VAE latent (OpKind::ColorFix) with the blur
    // radius colorfixVariation and, for +sharp, the detail weight colorfixSharpness * 0.01.
    std::string preprocessor = "none";
    double downSampling = 1.0;
    int colorfixVariation = 8;
    double colorfixSharpness = 1.0;
    bool colorFix() const { return isColorFixPreprocessor(preprocessor); }
};

// How many units colour-fix.
int colorFixCount(const std::vector<ControlNetRunUnit>& units);
// A colour-fixing unit's graph settings (the weight clamped to [0, 1] as the extension's hook does).
ColorFixSettings colorFixSettings(const ControlNetRunUnit& unit);
// Refuses colour fixes where the extension has none, before any work: ValidationError
// ("control_preprocessor") naming what is allowed when a unit's preprocessor (preprocessors[i])
// colour-fixes and the model predicts anything but the noise (the correction is written for
// epsilon prediction) or has no VAE.
void checkColorFixModel(const std::vector<std::string>& preprocessors, PredictionType prediction, bool hasVae);
// The image each colour-fixing unit's latent is encoded from, in model space [-1, 1] (the
// extension's call_vae_using_process: hint * 2 - 1, its first three channels): hints[i] of the
// colour-fixing units, in order.
std::vector<ImageTensor> colorFixImages(const std::vector<ControlNetRunUnit>& units,
                                        const std::vector<std::vector<float>>& hints, int imageHeight, int imageWidth);

// Loads config.controlNets (core/run/ControlNetModelFile.h lookup; models kept in `cache` by
// path across runs) with their images: images[i] where the front end decoded unit i's file
// (channels x height x width in [0, 1]), none for a unit that takes the start image.
// ValidationError("controlnet") for a unit without a model or one not found, ModelError for a
// file that is no ControlNet Tessera runs, ValidationError("control_image") for a unit naming a
// file the front end did not decode.
std::vector<ControlNetRunUnit> loadControlNetUnits(
    const RunConfig& config, const std::vector<ImageTensor>& images,
    std::vector<std::pair<std::string, std::shared_ptr<const ControlNetModel>>>& cache);

// The constant per-residual factors of a unit's mode (empty for Balanced: 1).
std::vector<float> residualScalesFor(const ControlNetRunUnit& unit);

// The tile function of a controlled run: `base`'s conditioning (text rows, SDXL vectors) over the
// controlled graph of `unet` and the units' ControlNets, binding a merged copy of the weights
// (owned by the result). Its graph's tile is the latent tile times *tileScale.
// ValidationError("controlnet") when a ControlNet does not fit the UNet (naming both families).
// The last controlled UNet's graph and merged weights, kept across runs (controlledDenoiser):
// a run with the same model generation, UNet, ControlNets and graph settings binds them again, so
// that a device keeps its prepared plan and uploaded weights instead of merging, uploading and
// planning some gigabytes per run.
struct ControlledModelCache {
    std::string key;
    std::shared_ptr<const Denoiser> made;  // graph, weights and owner of the last one made
    int tileScale = 1;
    bool hit = false;  // the last call found its model here
};

// What a controlled model depends on besides its weights' values (which `generation`, the
// caller's count of model changes, covers): ControlledModelCache::key.
std::string controlledModelKey(const Denoiser& base, const UNetCondModel& unet,
                               const std::vector<ControlNetRunUnit>& units, std::uint64_t generation);

// With `cache`: its model when `generation` (the caller's count of model changes), the UNet, the
// ControlNets, their modes and colour-fix settings and the context length are the last call's;
// else a new one, kept there.
std::shared_ptr<const Denoiser> controlledDenoiser(const Denoiser& base, const UNetCondModel& unet, SdFamily family,
                                                   const std::vector<ControlNetRunUnit>& units, int* tileScale,
                                                   ControlledModelCache* cache = nullptr, std::uint64_t generation = 0);

// The pass's control inputs: per unit the hint canvas (`hints[i]`, kept alive by the caller:
// channels x height*f x width*f of the latent canvas height x width), the FiLM widths of its graph
// inputs (in `graph`'s order) and its scale per step index k of `steps` (0 before startStep, the
// keep table over the executed steps after it) and branch (the unconditional one 0 in ControlNet
// mode). Then per colour-fixing unit (in order) its hint's latent: hints[units.size() + j] for the
// j-th (latent channels x height x width, factor 1), with the row mark as a FiLM of width 1 (scale
// 1 on the conditional branch, 0 on the unconditional one, every step: the extension's hook
// corrects every UNet call, whatever the unit's start and end). ValidationError("control_image")
// for a hint of another size than the run's image.
std::vector<PassControl> passControls(const ModelGraph& graph, const std::vector<ControlNetRunUnit>& units,
                                      const std::vector<std::vector<float>>& hints, int height, int width, int steps,
                                      int startStep);

// The units' hint canvases in [0, 1]: each unit's image, or `start` (model space, [-1, 1]) where
// it has none, through the unit's preprocessor (tile_resample: back to the size as the extension
// does, "Crop and Resize" for a unit's own image, "Just Resize" for the start image as A1111's
// image-to-image gives it); ValidationError("control_image") when neither is there or a size
// differs from channels x imageHeight x imageWidth.
std::vector<std::vector<float>> controlHints(const std::vector<ControlNetRunUnit>& units, const ImageTensor* start,
                                             int imageHeight, int imageWidth);

}  // namespace tessera
