// Infotext: the generation settings A1111 (AUTOMATIC1111's stable-diffusion-webui) writes into a
// PNG's "parameters" text chunk, both ways, and ComfyUI's "prompt" chunk read back (A1111's
// modules/processing.py, infotext_utils.py, sd_models.py; ComfyUI's nodes.py). Writing follows
// A1111's create_infotext, so A1111's PNG Info and every tool that reads A1111 PNGs read Tessera's;
// reading follows its parse_generation_parameters, so an A1111 (or ComfyUI, or Tessera) PNG can
// start a run with the same settings. Qt-free; every function is pure and thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

// ---------------------------------------------------------------------------
// Writing

// What the infotext needs that RunConfig does not hold.
struct InfotextExtras {
    std::string modelName;  // "Model": the file or folder name without extension; "" = not written
    std::string modelHash;  // "Model hash": 10 lowercase hex (A1111's short SHA-256); "" = not written
    // "VAE hash" and "VAE" (A1111 processing.py create_infotext: sd_vae.get_loaded_vae_hash, the
    // file's SHA-256 cut to 10 hex, and get_loaded_vae_name, its name with the extension) of a
    // separate VAE; "" = not written.
    std::string vaeHash;
    std::string vaeName;
    // "Lora hashes" (A1111 extensions-builtin/Lora/extra_networks_lora.py: "name: 0123456789ab, ..."
    // of the LoRAs merged, by the name the prompt gave each); "" = not written.
    std::string loraHashes;
    // "TI hashes" (A1111 modules/sd_hijack_clip.py forward: "name: 0123456789ab, ..." of the
    // textual-inversion embeddings the text encoders used, core/text/EmbeddingDatabase.h
    // addTextualInversionHashes); "" = not written.
    std::string textualInversionHashes;
    // A1111's model hash of each ControlNet's file (config.controlNets' order; RunRecord::
    // controlNetHashes), for its "ControlNet <i>" entry's "Model: name [hash]", as sd-webui-controlnet
    // names its models; missing or empty: the name alone.
    std::vector<std::string> controlNetHashes;
    // A text-conditioned model: the prompt lines, "CFG scale" and "Clip skip" (when > 1) are
    // written. An unconditional model has none of them.
    bool stableDiffusion = false;
    // A FLUX.1-dev run: "Distilled CFG Scale" (its embedded guidance, as Forge writes it) follows
    // "CFG scale".
    bool fluxDev = false;
    // The upscale model ran alone (tessera-cli upscale): the infotext is what A1111's extras tab
    // writes for an upscale (scripts/postprocessing_upscale.py), "Postprocess upscale by: <upscale>,
    // Postprocess upscaler: <name>", then Version; nothing of sampling.
    bool upscaleOnly = false;
};

// Extras known from the configuration alone: the model's folder name ("default" for none), no
// hash; the separate VAE's name (core/run/VaeFile.h vaeName), no hash; Stable Diffusion when the
// run has a prompt or a negative prompt (an unconditional model refuses both).
InfotextExtras infotextExtras(const RunConfig& config);
// Extras of a finished run: its model name and the first 10 hex digits of its weights' SHA-256,
// the LoRAs it merged (record.loras: loraHashesValue),
// the separate VAE's name and hash where one ran (record.vaeFile), and Stable Diffusion as
// infotextExtras(config) decides it (the record does not name the model family yet); upscaleOnly
// when its upscale model's pass was the whole run.
InfotextExtras infotextExtras(const RunRecord& record);

// The A1111 infotext of a run, as valid UTF-8:
//   <prompt>                                  (Stable Diffusion only; may hold newlines; with a
//                                             tag for each of config.loras: promptWithLoraTags)
//   Negative prompt: <negative>               (only when not empty)
//   Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1, Size: 512x512,
//   Model hash: 0123456789, Model: name, VAE hash: 0123456789, VAE: vae.safetensors,
//   Denoising strength: 0.5, Clip skip: 2, Tile: 64, ..., Version: tessera-<version>
// Keys in A1111's order (Steps, Sampler, Schedule type, CFG scale, Seed, Size, Model hash, Model,
// VAE hash and VAE (with a separate VAE), Denoising strength (with an init image), Clip skip (> 1)), then Tessera's own as A1111's
// extra_generation_params (Lora hashes (extras.loraHashes, where LoRAs were merged), TI hashes
// (extras.textualInversionHashes, where embeddings were used), Tile, Overlap
// (pixels), Window, Fusion, Batch, Graphs, Precision,
// Backend, Upscale (when not 1), SD upscale upscaler (with an upscale model: its name as A1111's
// img2img "SD upscale" script writes the upscaler it ran first, scripts/sd_upscale.py; A1111 writes
// no hash of it), Preserve color (when on), VAE tiling (when not auto), Eta DDIM (DDIM with eta not 0,
// A1111's key for it)), then Version. The noise, where not Tessera's default: Variation seed (when
// it or its strength is not 0), Variation seed strength, Seed resize from (after VAE), ENSD (after
// Clip skip; A1111 writes these with a variation strength or an ancestral sampler only) and RNG
// (CPU, GPU or NV: A1111 leaves out its default GPU, Tessera names every torch source). A value holding ',', '\n' or ':' is written as a JSON string
// literal (A1111's quote); the whole text is stripped of surrounding white space. With
// extras.upscaleOnly: the extras tab's keys only (InfotextExtras).
std::string infotext(const RunConfig& config, const InfotextExtras& extras);

// A1111's "Lora hashes" value of `loras`: "name: hash, name2: hash2", each name (as the prompt gave
// it) with ':' and ',' removed, a repeated name in its first place with its last hash (a Python
// dict), entries without a name or hash left out (extensions-builtin/Lora/extra_networks_lora.py
// ExtraNetworkLora.activate); "" for none.
std::string loraHashesValue(const std::vector<LoraRecord>& loras);
// The "Lora hashes" value read back as A1111 reads it when an infotext is pasted
// (extensions-builtin/Lora/scripts/lora_script.py infotext_pasted: split at ',', each item at its
// first ':', both sides stripped): (name, hash) in order; items without ':' are left out.
std::vector<std::pair<std::string, std::string>> parseLoraHashes(std::string_view value);

// The infotext of a run known only by its configuration (no model hash): what a preset or a
// plan writes; a finished run writes infotext(record.config, infotextExtras(record)).
std::string parametersLine(const RunConfig& config);

// How each RunConfig setting (core/run/RunConfigFields.h, by field name) stands in the infotext:
// the key that carries it, or why it is not written. The infotext keeps its own list rather
// than a column of the field table because its keys, their order and their conditions are
// A1111's fixed external format (create_infotext), and several settings share one key (width
// and height in "Size", scheduler and its options in "Sampler"/"Schedule type"). Every field of
// the table has exactly one entry here (tst_infotext checks it), so a new setting needs a
// decision: an infotext key, or a reason it is left out.
struct InfotextCoverage {
    std::string_view field;       // RunConfigField::name
    std::string_view key;         // the infotext key ("Size", "Tile"); "" when not written
    std::string_view notWritten;  // why it is left out; "" when written
};
const std::vector<InfotextCoverage>& infotextCoverage();

// The "RNG" value of a noise source as A1111 writes its randn_source setting: "CPU", "GPU", "NV";
// "Tessera" for Tessera's own noise (never written: an infotext whose Version is Tessera's and that
// has no RNG key was drawn with it; any other without one, with A1111's default GPU).
std::string infotextRngName(RngSource source);

// Python's json.dumps(text, ensure_ascii=False) when `text` holds ',', '\n' or ':', else `text`.
std::string quoteInfotextValue(std::string_view text);

// ---------------------------------------------------------------------------
// Reading

struct InfotextParam {
    std::string key;
    std::string value;
    bool defaulted = false;  // not in the text: a default A1111's parser adds ("Clip skip" "1", ...)
};

// What parse_generation_parameters returns: the prompt, the negative prompt and the parameters
// by key, in the order of first appearance (a key given twice keeps its first place and its last
// value, as a Python dict). A value of the form WxH (ASCII or Unicode digits) is split into
// "<Key>-1" (W) and "<Key>-2" (H); a quoted value is JSON-decoded (kept as written when that
// fails); a key with an empty value is dropped (A1111's parser raises and skips it). Then the
// defaults A1111 adds for absent keys: Clip skip 1, Hires resize-1/-2 0, Hires sampler, Hires
// checkpoint, Hires prompt, Hires negative prompt, Mask mode, Masked content, Inpaint area,
// Masked area padding, RNG GPU, Schedule type Automatic, Schedule max/min sigma 0, Schedule rho 0,
// VAE Encoder/Decoder Full, FP8 weight Disable (its version-dependent back-compatibility flags and
// style extraction, which depend on A1111's settings, are not applied).
struct ParsedInfotext {
    std::string prompt;
    std::string negativePrompt;
    std::vector<InfotextParam> params;
    // The value of `key`, or nullptr.
    const InfotextParam* find(std::string_view key) const;
};

// Never throws for any input; linear in the text's length (a 1 MB line of 10,000 keys is
// parsed in milliseconds). Text that is not valid UTF-8 is read with U+FFFD for bad bytes.
// Python's str.strip/isspace white space and \w word characters are used, as A1111's regex.
ParsedInfotext parseInfotext(std::string_view text);

// A setting found in a PNG that is not applied to the run.
struct UnmappedSetting {
    std::string shown;   // as written, "Hires upscale: 2" (long values shortened and escaped)
    std::string reason;  // "is not supported; ignored"
    // "'Hires upscale: 2' is not supported; ignored"
    std::string message() const;
};

// What reading a PNG's settings changed and what it left alone.
struct ImportedSettings {
    // RunConfig fields set, by CLI name ("steps", "scheduler", ...; "use_karras_sigmas" for
    // scheduler_options.use_karras_sigmas).
    std::vector<std::string> fields;
    std::vector<UnmappedSetting> unmapped;  // one per setting not applied, in the order found
};

// Applies what maps onto `config`: the prompt and negative prompt (always, as A1111 pastes them;
// config.loras emptied: the prompt's <lora:...> tags carry the LoRAs, "Lora hashes" is listed),
// Steps, Sampler with Schedule type (Euler a, Euler, DPM++ 2M (Karras or not), DDIM, DDPM; the
// pre-1.9 combined names "DPM++ 2M Karras"; no Schedule type key = pre-1.9 = no Karras), CFG scale, Seed, Size, Clip skip, Denoising strength
// (unless it belongs to a hires fix), and Tessera's own keys (Tile, Overlap, Window, Fusion,
// Batch, Graphs, Precision, Backend, Upscale, Preserve color, VAE tiling, Eta DDIM or Eta), and the
// upscaler: "SD upscale upscaler", "Ultimate SD upscale upscaler" (the Ultimate SD Upscale extension)
// and "Postprocess upscaler" set upscale_model to the name ("None" clears it; A1111's resize filters
// Lanczos and Nearest, and a value that is no plain name, are listed), "Postprocess upscale by" sets
// upscale; "VAE" sets vae to the name A1111 wrote (a file's name with its extension, looked up in
// the models folders' VAE/; "None" and "Automatic" clear it; a value that is no plain name is
// listed), and "VAE hash" beside it is left for the front end to compare with the file it finds
// (alone it is listed). Model hash and
// Model are reported, not applied (the model is chosen by path); Version is ignored; every other
// key, and a value that cannot be read ("Steps: many"), is listed in `unmapped`. A number outside
// the range its setting allows (core/run/RunConfigFields.h intSettingRange; the cfg, strength,
// upscale and eta ranges of validate()) is listed too, never applied, whatever its size: "'Steps:
// 2147483648' is out of range, allowed 1 to 1000; ignored". Never throws.
// The noise: "RNG" sets noise_source (CPU, GPU, NV; absent: tessera where Version is Tessera's,
// else A1111's default gpu), "Variation seed", "Variation seed strength", "Seed resize from" and
// "ENSD" set A1111's seed settings.
ImportedSettings applyInfotext(const ParsedInfotext& parsed, RunConfig& config);

// The fields that infotext writes and applyInfotext reads back whose values differ between `a`
// and `b`, by CLI name: the prompt (with the tags of loras: promptWithLoraTags) and negative prompt, steps, scheduler (and
// use_karras_sigmas for Euler and DPM++ 2M), cfg, seed, width, height, clip_skip, strength (when
// `a` has an init image), tile, overlap (in pixels), window, fusion, batch, graphs, precision,
// backend, upscale, upscale_model (by A1111's name for it: upscalerName), vae (by its name: vaeName),
// preserve_color, vae_tiling, eta
// (DDIM), noise_source, variation_seed, variation_strength, seed_resize_from, eta_noise_seed_delta. Empty when a PNG written from `a` reads back as `a`.
std::vector<std::string> mappedFieldDifferences(const RunConfig& a, const RunConfig& b);

// ComfyUI's "prompt" chunk (its API graph: node id -> {"class_type", "inputs"}), parsed through
// core/BoundedInput (depth bounded). The sampler node is the first KSampler or KSamplerAdvanced
// (by node id) whose latent comes from an EmptyLatentImage, else the first sampler; from it:
// seed (noise_seed), steps, cfg, sampler_name + scheduler (euler, euler_ancestral, dpmpp_2m with
// normal or karras, ddim with normal or ddim_uniform, ddpm with normal), the positive and negative
// CLIPTextEncode texts (through conditioning-only nodes) and their CLIPSetLastLayer (clip skip),
// and the EmptyLatentImage size; noise_source becomes cpu (ComfyUI's start noise is torch's CPU
// generator's). What cannot be mapped (other samplers or schedulers, a second
// sampler, denoise below 1, an image-to-image latent, linked values, the checkpoint name, a number
// outside its setting's range as for applyInfotext) is listed in `unmapped`. Throws InputFileError on `field` when `json` is not a JSON object of
// nodes; never for an odd graph.
ImportedSettings applyComfyPrompt(std::string_view json, RunConfig& config, std::string_view field);

}  // namespace tessera
