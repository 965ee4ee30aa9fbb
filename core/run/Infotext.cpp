// Infotext: A1111's "parameters" text both ways, and ComfyUI's "prompt" graph read back.
#include "core/run/Infotext.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/base/UnicodeText.h"
#include "core/run/ControlNetInfotext.h"
#include "core/run/LoraModelFile.h"
#include "core/run/ModelName.h"
#include "core/run/RunConfigFields.h"
#include "core/run/SamplerNames.h"
#include "core/run/UpscaleModelFile.h"
#include "core/run/VaeFile.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

using unicode::isPythonSpace;
using unicode::isPythonWordChar;

// ---------------------------------------------------------------------------
// Python's str.strip() and friends on code points.

std::u32string_view pyStrip(std::u32string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e && isPythonSpace(s[b])) ++b;
    while (e > b && isPythonSpace(s[e - 1])) --e;
    return s.substr(b, e - b);
}

std::string pyStrip(std::string_view utf8) { return unicode::encodeUtf8(pyStrip(unicode::decodeUtf8(utf8))); }

bool startsWith(std::u32string_view s, std::u32string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string utf8(std::u32string_view s) { return unicode::encodeUtf8(s); }

}  // namespace

// ---------------------------------------------------------------------------
// Writing

namespace {

// The model as named in the infotext: its folder (or file) name without the path, so a PNG does
// not carry the user's directory layout, and without a ".safetensors"/".ckpt" extension (A1111).
std::string modelNameOf(const std::string& model) {
    if (model.empty()) return "default";
    std::string trimmed = model;
    while (trimmed.size() > 1 && (trimmed.back() == '/' || trimmed.back() == '\\')) trimmed.pop_back();
    const auto slash = trimmed.find_last_of("/\\");
    std::string name = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
    for (std::string_view extension : {".safetensors", ".ckpt"})
        if (name.size() > extension.size() &&
            name.compare(name.size() - extension.size(), extension.size(), extension.data(), extension.size()) == 0)
            return name.substr(0, name.size() - extension.size());
    return name;
}

bool isLowerHex(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

InfotextExtras infotextExtras(const RunConfig& config) {
    InfotextExtras extras;
    extras.modelName = modelNameOf(config.model);
    extras.vaeName = vaeName(config.vae);
    extras.stableDiffusion = !config.prompt.empty() || !config.negativePrompt.empty() || isSdModelPath(config.model);
    return extras;
}

InfotextExtras infotextExtras(const RunRecord& record) {
    InfotextExtras extras = infotextExtras(record.config);
    if (!record.modelName.empty()) extras.modelName = record.modelName;
    if (record.modelHash.size() >= 10 && isLowerHex(record.modelHash))
        extras.modelHash = record.modelHash.substr(0, 10);
    if (record.vaeFile) {
        extras.vaeName = record.vaeFile->name;
        if (record.vaeFile->sha256.size() >= 10 && isLowerHex(record.vaeFile->sha256))
            extras.vaeHash = record.vaeFile->sha256.substr(0, 10);
    }
    extras.upscaleOnly = record.upscaleModel && record.upscaleModel->alone;
    extras.loraHashes = loraHashesValue(record.loras);
    extras.controlNetHashes = record.controlNetHashes;
    if (record.textEncode) extras.textualInversionHashes = record.textEncode->textualInversionHashes;
    return extras;
}

std::string loraHashesValue(const std::vector<LoraRecord>& loras) {
    std::vector<std::pair<std::string, std::string>> entries;
    for (const LoraRecord& lora : loras) {
        std::string name;
        for (const char c : lora.name)
            if (c != ':' && c != ',') name += c;
        if (name.empty() || lora.shortHash.empty()) continue;
        const auto same =
            std::find_if(entries.begin(), entries.end(), [&name](const auto& e) { return e.first == name; });
        if (same != entries.end())
            same->second = lora.shortHash;
        else
            entries.emplace_back(std::move(name), lora.shortHash);
    }
    std::string value;
    for (const auto& [name, hash] : entries) value += (value.empty() ? "" : ", ") + name + ": " + hash;
    return value;
}

std::vector<std::pair<std::string, std::string>> parseLoraHashes(std::string_view value) {
    std::vector<std::pair<std::string, std::string>> hashes;
    std::size_t start = 0;
    while (start <= value.size()) {
        const std::size_t comma = std::min(value.find(',', start), value.size());
        const std::string_view item = value.substr(start, comma - start);
        if (const auto colon = item.find(':'); colon != std::string_view::npos)
            hashes.emplace_back(pyStrip(item.substr(0, colon)), pyStrip(item.substr(colon + 1)));
        start = comma + 1;
    }
    return hashes;
}

const std::vector<InfotextCoverage>& infotextCoverage() {
    // In the order of infotext() below; then the settings it leaves out.
    static const std::vector<InfotextCoverage> coverage{
        {"prompt", "Prompt", ""},  // the first lines, not a key
        {"negative_prompt", "Negative prompt", ""},
        {"steps", "Steps", ""},
        {"scheduler", "Sampler", ""},
        {"cfg", "CFG scale", ""},
        {"guidance", "Distilled CFG Scale", ""},
        {"seed", "Seed", ""},
        {"width", "Size", ""},
        {"height", "Size", ""},
        {"model", "Model", ""},
        {"lora", "Prompt", ""},  // a tag each, appended to the prompt (promptWithLoraTags)
        // One "ControlNet <i>" entry per unit (core/run/ControlNetInfotext.h), as sd-webui-controlnet writes it.
        {"controlnet", "ControlNet 0", ""},
        {"control_weight", "ControlNet 0", ""},
        {"control_start", "ControlNet 0", ""},
        {"control_end", "ControlNet 0", ""},
        {"control_mode", "ControlNet 0", ""},
        {"control_preprocessor", "ControlNet 0", ""},
        // control_image: the unit it belongs to; its path is not written (nor by the extension).
        {"control_image", "ControlNet 0", ""},
        {"vae", "VAE", ""},
        {"strength", "Denoising strength", ""},
        {"clip_skip", "Clip skip", ""},
        {"tile", "Tile", ""},
        {"overlap", "Overlap", ""},
        {"window", "Window", ""},
        {"fusion", "Fusion", ""},
        {"tile_shift", "Tile shift", ""},
        {"batch", "Batch", ""},
        {"graphs", "Graphs", ""},
        {"precision", "Precision", ""},
        {"backend", "Backend", ""},
        {"upscale", "Upscale", ""},
        {"upscale_model", "SD upscale upscaler", ""},
        {"preserve_color", "Preserve color", ""},
        {"sdxl_size_conditioning", "SDXL size conditioning", ""},
        {"vae_tiling", "VAE tiling", ""},
        {"eta", "Eta DDIM", ""},
        {"noise_source", "RNG", ""},
        {"variation_seed", "Variation seed", ""},
        {"variation_strength", "Variation seed strength", ""},
        {"seed_resize_from", "Seed resize from", ""},
        {"eta_noise_seed_delta", "ENSD", ""},
        {"timestep_spacing", "", "A1111 has no key for it (its samplers fix the spacing); the manifest keeps it"},
        {"scheduler_options", "",
         "diffusers' scheduler settings: A1111 has no keys for them beyond Schedule type "
         "and Eta DDIM; the manifest keeps them"},
        {"init", "", "a path on this machine; Denoising strength says the run started from an image"},
        {"graph_warmup", "", "CUDA graph bookkeeping; the image does not depend on it"},
        {"graph_cache", "", "CUDA graph bookkeeping; the image does not depend on it"},
        {"lanes", "", "how many tile batches run at once; the image does not depend on it"},
        {"threads", "", "CPU threads; the image does not depend on them"},
        {"preview_every", "", "how often the window shows a preview; the image does not depend on it"},
        {"label", "", "the run's name in the history, not a generation setting"},
        {"tuning_cache", "", "a path on this machine; the manifest records the tuning digest"},
        {"embeddings_dir", "", "a path on this machine; the prompt names the embeddings and \"TI hashes\" their files"},
        {"text_encoder", "", "files on this machine; the model's name and hash identify the run's weights"},
    };
    return coverage;
}

std::string infotextRngName(RngSource source) {
    switch (source) {
        case RngSource::CPU:
            return "CPU";
        case RngSource::GPU:
            return "GPU";
        case RngSource::NV:
            return "NV";
        case RngSource::ComfyUI:
            return "ComfyUI";
        case RngSource::Tessera:
            break;
    }
    return "Tessera";
}

std::string quoteInfotextValue(std::string_view text) {
    if (text.find_first_of(",\n:") == std::string_view::npos) return std::string(text);
    // nlohmann's escaping is Python's json.dumps(ensure_ascii=False): \" \\ \b \f \n \r \t, other
    // controls as \u00xx, everything else (non-ASCII too) as it is.
    return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

std::string joinParams(const std::vector<std::pair<std::string, std::string>>& params) {
    std::string line;
    for (const auto& [key, value] : params) {
        if (!line.empty()) line += ", ";
        line += key == value ? key : key + ": " + quoteInfotextValue(value);
    }
    return line;
}

}  // namespace

std::string infotext(const RunConfig& c, const InfotextExtras& x) {
    std::vector<std::pair<std::string, std::string>> params;
    const auto add = [&](std::string key, std::string value) { params.emplace_back(std::move(key), std::move(value)); };
    if (x.upscaleOnly) {
        // A1111's extras tab (scripts/postprocessing_upscale.py ScriptPostprocessingUpscale.upscale).
        add("Postprocess upscale by", formatNumber(c.upscale));
        add("Postprocess upscaler", upscalerName(c.upscaleModel));
        add("Version", std::string("tessera-") + TESSERA_VERSION);
        return pyStrip(toValidUtf8(joinParams(params)));
    }
    add("Steps", std::to_string(c.steps));
    const auto sampler = samplerDisplayName(c.scheduler, c.schedulerOptions);
    add("Sampler", sampler.sampler);
    if (!sampler.scheduleType.empty()) add("Schedule type", sampler.scheduleType);
    if (x.stableDiffusion) add("CFG scale", formatNumber(c.cfgScale));
    if (x.fluxDev) add("Distilled CFG Scale", formatNumber(c.guidance));
    add("Seed", std::to_string(c.seed));
    add("Size", std::to_string(c.width) + "x" + std::to_string(c.height));
    if (!x.modelHash.empty()) add("Model hash", x.modelHash);
    if (!x.modelName.empty()) add("Model", x.modelName);
    if (!x.vaeHash.empty()) add("VAE hash", x.vaeHash);
    if (!x.vaeName.empty()) add("VAE", x.vaeName);
    // A1111 writes the variation seed with a strength only; Tessera whenever it is set.
    if (c.variationSeed != 0 || c.variationStrength != 0.0) add("Variation seed", std::to_string(c.variationSeed));
    if (c.variationStrength != 0.0) add("Variation seed strength", formatNumber(c.variationStrength));
    if (c.seedResizeFromWidth > 0 || c.seedResizeFromHeight > 0)
        add("Seed resize from", std::to_string(c.seedResizeFromWidth) + "x" + std::to_string(c.seedResizeFromHeight));
    if (!c.initImage.empty()) add("Denoising strength", formatNumber(c.strength));
    if (x.stableDiffusion && c.clipSkip > 1) add("Clip skip", std::to_string(c.clipSkip));
    // A1111 writes ENSD for samplers with eta noise only; Tessera whenever it is set.
    if (c.etaNoiseSeedDelta != 0) add("ENSD", std::to_string(c.etaNoiseSeedDelta));
    // A1111 leaves out "RNG" for its default GPU source; Tessera writes it for every torch source,
    // so that a Tessera infotext without it means Tessera's own noise (infotextNoiseSource).
    if (c.noiseSource != RngSource::Tessera) add("RNG", infotextRngName(c.noiseSource));
    if (!x.loraHashes.empty()) add("Lora hashes", x.loraHashes);
    if (!x.textualInversionHashes.empty()) add("TI hashes", x.textualInversionHashes);
    for (std::size_t i = 0; i < c.controlNets.size(); ++i)
        add(controlNetInfotextKey(i),
            controlNetInfotextValue(c.controlNets[i], i < x.controlNetHashes.size() ? x.controlNetHashes[i] : ""));
    // Tessera's own, as A1111's extra_generation_params.
    add("Tile", std::to_string(c.tile));
    add("Overlap", std::to_string(c.overlapPixels()));
    add("Window", std::string(toString(c.window)));
    add("Fusion", std::string(toString(c.fusion)));
    if (c.tileShift != TileShift::Off) add("Tile shift", std::string(toString(c.tileShift)));
    add("Batch", c.tileBatch > 0 ? std::to_string(c.tileBatch) : std::string("auto"));  // a record's: what ran
    add("Graphs", std::string(toString(c.graphs)));
    add("Precision", std::string(toString(c.precision)));
    add("Backend", std::string(toString(c.backend)));
    if (c.upscale != 1.0) add("Upscale", formatNumber(c.upscale));
    if (!c.upscaleModel.empty()) add("SD upscale upscaler", upscalerName(c.upscaleModel));
    if (c.preserveColor) add("Preserve color", "True");
    if (c.sdxlSizeConditioning != SdxlSizeConditioning::Image)
        add("SDXL size conditioning", std::string(toString(c.sdxlSizeConditioning)));
    if (c.vaeTiling != VaeTiling::Auto) add("VAE tiling", std::string(toString(c.vaeTiling)));
    if (c.scheduler == SchedulerKind::DDIM && c.schedulerOptions.eta != 0.0f)
        add("Eta DDIM", formatNumber(c.schedulerOptions.eta));
    add("Version", std::string("tessera-") + TESSERA_VERSION);

    const std::string line = joinParams(params);
    std::string text;
    if (x.stableDiffusion) {
        text = promptWithLoraTags(c);
        if (!c.negativePrompt.empty()) text += "\nNegative prompt: " + c.negativePrompt;
    }
    text += "\n" + line;
    return pyStrip(toValidUtf8(text));
}

// ---------------------------------------------------------------------------
// Reading: parse_generation_parameters

namespace {

// One match of A1111's re_param, \s*(\w[\w \-/]+):\s*("(?:\\.|[^\\"])+"|[^,]*)(?:,|$), over `s`
// from `pos`, as Python's re finds it: the key and value groups and where the match ends.
struct ParamMatch {
    std::u32string_view key, value;
    std::size_t end = 0;
};

bool isKeyChar(char32_t c) { return isPythonWordChar(c) || c == U' ' || c == U'-' || c == U'/'; }

// The quoted alternative "(?:\\.|[^\\"])+" at s[v] followed by ',' or the end: its end (after
// the closing quote), or 0 when it does not match there. Inside, a backslash always takes the
// next character and a quote always closes, so there is no other way to match.
std::size_t quotedEnd(std::u32string_view s, std::size_t v) {
    const std::size_t n = s.size();
    std::size_t q = v + 1;
    while (q < n && s[q] != U'"') {
        if (s[q] == U'\\') {
            if (q + 1 >= n || s[q + 1] == U'\n') return 0;
            q += 2;
        } else {
            ++q;
        }
    }
    if (q >= n || q == v + 1) return 0;  // no closing quote, or nothing inside ('+')
    if (q + 1 < n && s[q + 1] != U',') return 0;
    return q + 1;
}

// The next match at or after `pos`, or nullopt. Linear overall: a start that fails because the
// key run [\w \-/]+ from position p ends at e without a ':' fails for every start up to e too
// (each reaches the same run end, or skips white space to a start at or beyond e), so the search
// goes on from e rather than p + 1. Python's re retries each start and is quadratic here.
std::optional<ParamMatch> nextParam(std::u32string_view s, std::size_t pos) {
    const std::size_t n = s.size();
    while (pos < n) {
        std::size_t p = pos;
        while (p < n && isPythonSpace(s[p])) ++p;
        if (p >= n) return std::nullopt;
        if (!isPythonWordChar(s[p])) {
            pos = p + 1;
            continue;
        }
        std::size_t e = p + 1;
        while (e < n && isKeyChar(s[e])) ++e;
        if (e - p < 2 || e >= n || s[e] != U':') {
            pos = std::max(e, pos + 1);
            continue;
        }
        ParamMatch match;
        match.key = s.substr(p, e - p);
        std::size_t v = e + 1;
        while (v < n && isPythonSpace(s[v])) ++v;
        if (const std::size_t q = v < n && s[v] == U'"' ? quotedEnd(s, v) : 0; q != 0) {
            match.value = s.substr(v, q - v);
            match.end = q < n ? q + 1 : q;
            return match;
        }
        std::size_t c = v;
        while (c < n && s[c] != U',') ++c;
        match.value = s.substr(v, c - v);
        match.end = c < n ? c + 1 : c;
        return match;
    }
    return std::nullopt;
}

std::vector<ParamMatch> findParams(std::u32string_view line) {
    std::vector<ParamMatch> matches;
    std::size_t pos = 0;
    while (auto match = nextParam(line, pos)) {
        pos = match->end;
        matches.push_back(*match);
    }
    return matches;
}

// unquote: a value in double quotes is JSON-decoded, or kept as written when that fails.
std::string unquote(std::u32string_view value) {
    std::string text = utf8(value);
    if (value.size() < 2 || value.front() != U'"' || value.back() != U'"') return text;
    const nlohmann::json decoded = nlohmann::json::parse(text, nullptr, false);
    return decoded.is_string() ? decoded.get<std::string>() : text;
}

// re_imagesize ^(\d+)x(\d+)$ (Python's \d: any decimal digit; $ also before a final newline).
std::optional<std::pair<std::string, std::string>> imageSize(const std::string& value) {
    std::u32string_view s;
    const std::u32string decoded = unicode::decodeUtf8(value);
    s = decoded;
    if (!s.empty() && s.back() == U'\n') s.remove_suffix(1);
    const auto digits = [&](std::size_t from) {
        std::size_t i = from;
        while (i < s.size() && unicode::decimalValue(s[i]) >= 0) ++i;
        return i;
    };
    const std::size_t x = digits(0);
    if (x == 0 || x >= s.size() || s[x] != U'x') return std::nullopt;
    const std::size_t end = digits(x + 1);
    if (end == x + 1 || end != s.size()) return std::nullopt;
    return std::pair{utf8(s.substr(0, x)), utf8(s.substr(x + 1, end - x - 1))};
}

// The defaults parse_generation_parameters adds for absent keys.
constexpr std::array<std::pair<std::string_view, std::string_view>, 19> kA1111Defaults{{
    {"Clip skip", "1"},
    {"Hires resize-1", "0"},
    {"Hires resize-2", "0"},
    {"Hires sampler", "Use same sampler"},
    {"Hires checkpoint", "Use same checkpoint"},
    {"Hires prompt", ""},
    {"Hires negative prompt", ""},
    {"Mask mode", "Inpaint masked"},
    {"Masked content", "original"},
    {"Inpaint area", "Whole picture"},
    {"Masked area padding", "32"},
    {"RNG", "GPU"},
    {"Schedule type", "Automatic"},
    {"Schedule max sigma", "0"},
    {"Schedule min sigma", "0"},
    {"Schedule rho", "0"},
    {"VAE Encoder", "Full"},
    {"VAE Decoder", "Full"},
    {"FP8 weight", "Disable"},
}};

class ParamTable {
public:
    explicit ParamTable(std::vector<InfotextParam>& params) : params_(params) {}
    void set(std::string key, std::string value, bool defaulted = false) {
        const auto [at, inserted] = index_.try_emplace(key, params_.size());
        if (inserted)
            params_.push_back(InfotextParam{std::move(key), std::move(value), defaulted});
        else
            params_[at->second].value = std::move(value);
    }
    bool has(const std::string& key) const { return index_.count(key) != 0; }

private:
    std::vector<InfotextParam>& params_;
    std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace

const InfotextParam* ParsedInfotext::find(std::string_view key) const {
    for (const InfotextParam& p : params)
        if (p.key == key) return &p;
    return nullptr;
}

ParsedInfotext parseInfotext(std::string_view text) {
    ParsedInfotext parsed;
    const std::u32string decoded = unicode::decodeUtf8(text);
    const std::u32string_view all = pyStrip(decoded);
    std::vector<std::u32string_view> lines;
    for (std::size_t start = 0;;) {
        const std::size_t nl = all.find(U'\n', start);
        lines.push_back(all.substr(start, nl == std::u32string_view::npos ? std::u32string_view::npos : nl - start));
        if (nl == std::u32string_view::npos) break;
        start = nl + 1;
    }
    std::u32string_view last = lines.back();
    lines.pop_back();
    std::vector<ParamMatch> matches = findParams(last);
    if (matches.size() < 3) {
        lines.push_back(last);
        matches.clear();
    }

    static constexpr std::u32string_view kNegative = U"Negative prompt:";
    bool negative = false;
    std::u32string prompt, negativePrompt;
    for (std::u32string_view line : lines) {
        line = pyStrip(line);
        if (startsWith(line, kNegative)) {
            negative = true;
            line = pyStrip(line.substr(kNegative.size()));
        }
        std::u32string& target = negative ? negativePrompt : prompt;
        if (!target.empty()) target += U'\n';
        target += line;
    }
    parsed.prompt = utf8(prompt);
    parsed.negativePrompt = utf8(negativePrompt);

    ParamTable table(parsed.params);
    for (const ParamMatch& match : matches) {
        if (match.value.empty()) continue;  // A1111: v[0] raises on an empty value; the key is skipped
        const std::string key = utf8(match.key);
        std::string value = unquote(match.value);
        if (const auto size = imageSize(value)) {
            table.set(key + "-1", size->first);
            table.set(key + "-2", size->second);
        } else {
            table.set(key, std::move(value));
        }
    }
    for (const auto& [key, value] : kA1111Defaults)
        if (!table.has(std::string(key))) table.set(std::string(key), std::string(value), true);
    return parsed;
}

// ---------------------------------------------------------------------------
// Mapping onto a RunConfig

std::string UnmappedSetting::message() const { return "'" + shown + "' " + reason; }

namespace {

constexpr std::string_view kNotSupported = "is not supported; ignored";
constexpr std::string_view kModelNotApplied = "is not applied: Tessera picks the model by its path";

std::string shownSetting(std::string_view key, std::string_view value) {
    return excerpt(key, 40) + ": " + excerpt(value, 80);
}

std::string_view trimAscii(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Python's int() of the text (white space around, an optional sign, Unicode decimal digits too)
// as a sign and a magnitude (`beyond64` when it needs more than 64 bits: still a whole number, out
// of every range); nullopt when it is no whole number.
struct WholeText {
    bool minus = false;
    std::uint64_t magnitude = 0;
    bool beyond64 = false;
};

std::optional<WholeText> signedWhole(std::string_view text) {
    const std::u32string decoded = unicode::decodeUtf8(text);
    std::u32string_view s = pyStrip(decoded);
    WholeText whole;
    if (!s.empty() && (s.front() == U'+' || s.front() == U'-')) {
        whole.minus = s.front() == U'-';
        s.remove_prefix(1);
    }
    if (s.empty()) return std::nullopt;
    for (char32_t c : s) {
        const int digit = unicode::decimalValue(c);
        if (digit < 0) return std::nullopt;
        if (whole.magnitude > (std::numeric_limits<std::uint64_t>::max() - static_cast<unsigned>(digit)) / 10)
            whole.beyond64 = true;
        else
            whole.magnitude = whole.magnitude * 10 + static_cast<unsigned>(digit);
    }
    return whole;
}

// One rule for every number a PNG gives that its setting cannot take: it is not applied, and the
// note says the range (validate() would refuse it; a value too large for the setting's type
// could not even reach it).
std::string outOfRange(const std::string& allowed) { return "is out of range, allowed " + allowed + "; ignored"; }

std::string wholeRange(long long lo, long long hi) { return std::to_string(lo) + " to " + std::to_string(hi); }

// A whole number in [lo, hi] into `out`: "" when applied, else why not.
std::string readWholeIn(std::string_view text, long long lo, long long hi, long long& out) {
    const auto whole = signedWhole(text);
    if (!whole) return "is not a whole number; ignored";
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<long long>::max());
    if (whole->beyond64 || whole->magnitude > kMax + (whole->minus ? 1 : 0)) return outOfRange(wholeRange(lo, hi));
    const long long value =
        whole->minus ? static_cast<long long>(0 - whole->magnitude) : static_cast<long long>(whole->magnitude);
    if (value < lo || value > hi) return outOfRange(wholeRange(lo, hi));
    out = value;
    return {};
}

// A seed: any uint64 ("-0" too, as Python's int()).
std::string readSeed(std::string_view text, std::uint64_t& out) {
    const auto whole = signedWhole(text);
    if (!whole) return "is not a whole number; ignored";
    if (whole->beyond64 || (whole->minus && whole->magnitude != 0))
        return outOfRange("0 to " + std::to_string(std::numeric_limits<std::uint64_t>::max()));
    out = whole->magnitude;
    return {};
}

// Whether a decimal that no double holds is tiny (1e-400, 0.000...1: read as 0) rather than
// huge (1e400, 400 digits).
bool underflows(std::string_view s) {
    const auto e = s.find_first_of("eE");
    if (e != std::string_view::npos) return e + 1 < s.size() && s[e + 1] == '-';
    if (!s.empty() && (s.front() == '+' || s.front() == '-')) s.remove_prefix(1);
    while (!s.empty() && s.front() == '0') s.remove_prefix(1);
    return s.empty() || s.front() == '.';
}

// A finite number (nullopt otherwise); `tooLarge` for a number no double holds (1e400, inf),
// which is out of every range rather than no number.
std::optional<double> realNumber(std::string_view text, bool& tooLarge) {
    const std::string_view s = trimAscii(text);
    double value = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    tooLarge = false;
    if (s.empty() || ptr != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
        return std::nullopt;
    if (ec == std::errc::result_out_of_range) {
        if (underflows(s)) return 0.0;
        tooLarge = true;
        return std::nullopt;
    }
    if (std::isinf(value)) tooLarge = true;
    if (!std::isfinite(value)) return std::nullopt;
    return value;
}

// One key of the text onto the config: "" when applied, else why not.
using KeyReader = std::string (*)(std::string_view value, RunConfig& config);

// An int setting from the text: the range intSettingRange gives it for `config`.
std::string readInt(std::string_view value, int& out, std::string_view field, const RunConfig& config) {
    const std::optional<IntLimit> range = intSettingRange(field, config);
    long long n = 0;
    std::string why = readWholeIn(value, range ? range->lo : std::numeric_limits<int>::min(),
                                  range ? range->hi : std::numeric_limits<int>::max(), n);
    if (why.empty()) out = static_cast<int>(n);
    return why;
}

// The ranges validate() gives the real-valued settings an infotext carries.
struct RealRange {
    double lo, hi;
    bool aboveLo;  // lo itself is not allowed
};
constexpr RealRange kCfgRange{0.0, kMaxCfgScale, false};
constexpr RealRange kStrengthRange{0.0, 1.0, true};
constexpr RealRange kUpscaleRange{1.0, kMaxUpscale, false};
constexpr RealRange kEtaRange{0.0, 1.0, false};
constexpr RealRange kVariationStrengthRange{0.0, 1.0, false};

std::string readReal(std::string_view value, double& out, const RealRange& range) {
    const std::string allowed =
        (range.aboveLo ? "above " + formatNumber(range.lo) + " up to " : formatNumber(range.lo) + " to ") +
        formatNumber(range.hi);
    bool tooLarge = false;
    const auto x = realNumber(value, tooLarge);
    if (tooLarge) return outOfRange(allowed);
    if (!x) return "is not a number; ignored";
    if (*x < range.lo || *x > range.hi || (range.aboveLo && *x == range.lo)) return outOfRange(allowed);
    out = *x;
    return {};
}

template <typename E>
std::string readName(std::string_view value, E& out, E (*parse)(std::string_view, std::string_view)) {
    try {
        out = parse(trimAscii(value), "");
        return {};
    } catch (const ValidationError& e) {
        // "...: 'x' is not one of a, b or c": keep what is allowed.
        const std::string what = e.what();
        const auto at = what.find("is not one of");
        return (at == std::string::npos ? std::string("is not allowed") : what.substr(at)) + "; ignored";
    }
}

// A1111's built-in Real-ESRGAN upscalers by the name its infotext gives them, with the file each
// downloads (A1111 modules/realesrgan_model.py get_realesrgan_models): looked up as that file.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kRealEsrganUpscalers{{
    {"R-ESRGAN General 4xV3", "realesr-general-x4v3"},
    {"R-ESRGAN General WDN 4xV3", "realesr-general-wdn-x4v3"},
    {"R-ESRGAN AnimeVideo", "realesr-animevideov3"},
    {"R-ESRGAN 4x+", "RealESRGAN_x4plus"},
    {"R-ESRGAN 4x+ Anime6B", "RealESRGAN_x4plus_anime_6B"},
    {"R-ESRGAN 2x+", "RealESRGAN_x2plus"},
}};

// An upscaler as A1111 names it onto upscale_model: a model's name (its file's name without the
// extension), "None" for none. A resize filter is not a model, and a value that is no plain name
// (a path, a hidden file) is not taken from a file that came from elsewhere.
std::string readUpscaler(std::string_view value, RunConfig& config) {
    const std::string_view name = trimAscii(value);
    if (name == "None") {
        config.upscaleModel.clear();
        return {};
    }
    if (name == "Lanczos" || name == "Nearest")
        return "is a resize filter, not an upscale model (Tessera resizes with Catmull-Rom and area averaging); "
               "ignored";
    if (name.empty() || name.front() == '.' || name.find_first_of("/\\") != std::string_view::npos ||
        name.size() > input_limits::kNameChars)
        return "is not an upscale model's name; ignored";
    const auto builtIn = std::find_if(kRealEsrganUpscalers.begin(), kRealEsrganUpscalers.end(),
                                      [name](const auto& entry) { return entry.first == name; });
    config.upscaleModel = std::string(builtIn != kRealEsrganUpscalers.end() ? builtIn->second : name);
    return {};
}

// A VAE as A1111 names it onto vae (modules/shared_options.py: the "sd_vae" setting's infotext
// key is "VAE"; its value the file's name in models/VAE): "None" (the checkpoint's own) and
// "Automatic" clear it. A value that is no plain name (a path, a hidden file) is not taken from a
// file that came from elsewhere.
std::string readVae(std::string_view value, RunConfig& config) {
    const std::string_view name = trimAscii(value);
    if (name == "None" || name == "Automatic") {
        config.vae.clear();
        return {};
    }
    if (name.empty() || name.front() == '.' || name.find_first_of("/\\") != std::string_view::npos ||
        name.size() > input_limits::kNameChars)
        return "is not a VAE's name; ignored";
    config.vae = std::string(name);
    return {};
}

// One side of "Seed resize from: WxH" (A1111 writes it only when both are above 0).
std::string readSeedResizeSide(std::string_view value, int& out) {
    long long side = 0;
    std::string why = readWholeIn(value, 1, kMaxImageSidePx, side);
    if (why.empty()) out = static_cast<int>(side);
    return why;
}

struct KeyRule {
    std::string_view key;
    std::string_view field;  // the RunConfig field, by CLI name
    KeyReader read;
};

// clang-format off
const std::array<KeyRule, 33> kKeyRules{{
    {"Steps", "steps", [](std::string_view v, RunConfig& c) { return readInt(v, c.steps, "steps", c); }},
    {"CFG scale", "cfg", [](std::string_view v, RunConfig& c) { return readReal(v, c.cfgScale, kCfgRange); }},
    {"Distilled CFG Scale", "guidance",
     [](std::string_view v, RunConfig& c) { return readReal(v, c.guidance, kCfgRange); }},
    {"Seed", "seed", [](std::string_view v, RunConfig& c) { return readSeed(v, c.seed); }},
    {"Size-1", "width", [](std::string_view v, RunConfig& c) { return readInt(v, c.width, "width", c); }},
    {"Size-2", "height", [](std::string_view v, RunConfig& c) { return readInt(v, c.height, "height", c); }},
    {"Clip skip", "clip_skip", [](std::string_view v, RunConfig& c) { return readInt(v, c.clipSkip, "clip_skip", c); }},
    {"Denoising strength", "strength", [](std::string_view v, RunConfig& c) {
        return readReal(v, c.strength, kStrengthRange);
    }},
    {"Tile", "tile", [](std::string_view v, RunConfig& c) { return readInt(v, c.tile, "tile", c); }},
    {"Overlap", "overlap", [](std::string_view v, RunConfig& c) {
        std::string why = readInt(v, c.overlapPx, "overlap", c);
        if (why.empty()) c.overlapFraction.reset();
        return why;
    }},
    {"Window", "window", [](std::string_view v, RunConfig& c) { return readName(v, c.window, parseBlendWindow); }},
    {"Fusion", "fusion", [](std::string_view v, RunConfig& c) { return readName(v, c.fusion, parseFusionRule); }},
    {"Tile shift", "tile_shift",
     [](std::string_view v, RunConfig& c) { return readName(v, c.tileShift, parseTileShift); }},
    {"Batch", "batch", [](std::string_view v, RunConfig& c) {
        if (trimAscii(v) == "auto") {
            c.tileBatch = 0;
            return std::string();
        }
        return readInt(v, c.tileBatch, "batch", c);
    }},
    {"Graphs", "graphs", [](std::string_view v, RunConfig& c) { return readName(v, c.graphs, parseGraphMode); }},
    {"Precision", "precision", [](std::string_view v, RunConfig& c) { return readName(v, c.precision, parsePrecision); }},
    {"Backend", "backend", [](std::string_view v, RunConfig& c) { return readName(v, c.backend, parseBackend); }},
    {"Upscale", "upscale", [](std::string_view v, RunConfig& c) { return readReal(v, c.upscale, kUpscaleRange); }},
    {"SD upscale upscaler", "upscale_model", readUpscaler},
    {"Ultimate SD upscale upscaler", "upscale_model", readUpscaler},
    {"Postprocess upscaler", "upscale_model", readUpscaler},
    {"VAE", "vae", readVae},
    {"Postprocess upscale by", "upscale", [](std::string_view v, RunConfig& c) {
        return readReal(v, c.upscale, kUpscaleRange);
    }},
    {"VAE tiling", "vae_tiling", [](std::string_view v, RunConfig& c) { return readName(v, c.vaeTiling, parseVaeTiling); }},
    {"Preserve color", "preserve_color", [](std::string_view v, RunConfig& c) -> std::string {
        const std::string_view s = trimAscii(v);
        if (s != "True" && s != "False") return "is not True or False; ignored";
        c.preserveColor = s == "True";
        return {};
    }},
    {"SDXL size conditioning", "sdxl_size_conditioning", [](std::string_view v, RunConfig& c) {
        return readName(v, c.sdxlSizeConditioning, parseSdxlSizeConditioning);
    }},
    {"Eta DDIM", "eta", [](std::string_view v, RunConfig& c) -> std::string {
        double eta = 0;
        std::string why = readReal(v, eta, kEtaRange);
        if (why.empty()) c.schedulerOptions.eta = static_cast<float>(eta);
        return why;
    }},
    {"Variation seed", "variation_seed", [](std::string_view v, RunConfig& c) { return readSeed(v, c.variationSeed); }},
    {"Variation seed strength", "variation_strength", [](std::string_view v, RunConfig& c) {
        return readReal(v, c.variationStrength, kVariationStrengthRange);
    }},
    {"Seed resize from-1", "seed_resize_from", [](std::string_view v, RunConfig& c) {
        return readSeedResizeSide(v, c.seedResizeFromWidth);
    }},
    {"Seed resize from-2", "seed_resize_from", [](std::string_view v, RunConfig& c) {
        return readSeedResizeSide(v, c.seedResizeFromHeight);
    }},
    {"ENSD", "eta_noise_seed_delta", [](std::string_view v, RunConfig& c) {
        long long ensd = 0;
        std::string why = readWholeIn(v, std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max(),
                                      ensd);
        if (why.empty()) c.etaNoiseSeedDelta = ensd;
        return why;
    }},
    {"Version", "", [](std::string_view, RunConfig&) { return std::string(); }},  // not a setting
}};
// clang-format on

class Importer {
public:
    Importer(RunConfig& config, ImportedSettings& result) : config_(config), result_(result) {}

    void applied(std::string_view field) {
        if (!field.empty() && std::find(result_.fields.begin(), result_.fields.end(), field) == result_.fields.end())
            result_.fields.emplace_back(field);
    }
    void unmapped(std::string shown, std::string_view reason) {
        result_.unmapped.push_back(UnmappedSetting{std::move(shown), std::string(reason)});
    }
    RunConfig& config() { return config_; }

private:
    RunConfig& config_;
    ImportedSettings& result_;
};

// "RNG": A1111's randn_source (CPU, GPU, NV; "Tessera" and "ComfyUI" are read too). Absent (A1111's parser adds
// GPU, marked defaulted): Tessera's noise where the Version is Tessera's, whose infotexts name
// every other source; else A1111's default GPU (an A1111 PNG without RNG).
void applyRng(const InfotextParam& rng, const ParsedInfotext& parsed, Importer& importer) {
    RunConfig& config = importer.config();
    if (rng.defaulted) {
        const InfotextParam* version = parsed.find("Version");
        const bool tessera = version && !version->defaulted && version->value.rfind("tessera-", 0) == 0;
        config.noiseSource = tessera ? RngSource::Tessera : RngSource::GPU;
        importer.applied("noise_source");
        return;
    }
    const std::string why = readName(rng.value, config.noiseSource, parseRngSource);
    if (why.empty())
        importer.applied("noise_source");
    else
        importer.unmapped(shownSetting(rng.key, rng.value), why);
}

bool isHiresKey(const std::string& key) { return key.rfind("Hires ", 0) == 0 || key.rfind("First pass size", 0) == 0; }

// Sampler and Schedule type together. Returns the scheduler kind applied, if any.
std::optional<SchedulerKind> applySampler(const ParsedInfotext& parsed, Importer& importer) {
    const InfotextParam* sampler = parsed.find("Sampler");
    const InfotextParam* schedule = parsed.find("Schedule type");
    if (!sampler) {
        if (schedule && !schedule->defaulted)
            importer.unmapped(shownSetting(schedule->key, schedule->value), kNotSupported);
        return std::nullopt;
    }
    // An absent key (A1111's parser fills in "Automatic") is a pre-1.9 infotext: the sampler alone,
    // which then meant no Karras ("DPM++ 2M Karras" was a sampler of its own).
    const std::string scheduleType = schedule && !schedule->defaulted ? schedule->value : std::string();
    const auto mapped = samplerFromDisplayName(trimAscii(sampler->value), trimAscii(scheduleType));
    if (!mapped) {
        std::string shown = shownSetting(sampler->key, sampler->value);
        if (schedule && !schedule->defaulted) shown += ", " + shownSetting(schedule->key, schedule->value);
        importer.unmapped(shown, kNotSupported);
        return std::nullopt;
    }
    RunConfig& config = importer.config();
    config.scheduler = mapped->first;
    importer.applied("scheduler");
    if (samplerHasKarras(mapped->first)) {
        config.schedulerOptions.karrasSigmas = mapped->second;
        importer.applied("use_karras_sigmas");
    }
    return mapped->first;
}

// A1111's "Eta" is the ancestral samplers' eta (1 = Euler a's own); Tessera's earlier
// parameters line wrote DDIM's eta under it.
void applyEta(const InfotextParam& eta, std::optional<SchedulerKind> scheduler, Importer& importer) {
    double value = 0;
    const std::string why = readReal(eta.value, value, kEtaRange);
    if (!why.empty()) {
        importer.unmapped(shownSetting(eta.key, eta.value), why);
    } else if (scheduler == SchedulerKind::DDIM) {
        importer.config().schedulerOptions.eta = static_cast<float>(value);
        importer.applied("eta");
    } else if (!(scheduler == SchedulerKind::EulerAncestral && value == 1.0)) {
        importer.unmapped(shownSetting(eta.key, eta.value), kNotSupported);
    }
}

}  // namespace

ImportedSettings applyInfotext(const ParsedInfotext& parsed, RunConfig& config) {
    ImportedSettings result;
    Importer importer(config, result);
    config.prompt = parsed.prompt;
    config.negativePrompt = parsed.negativePrompt;
    // The prompt carries the LoRAs, as tags (promptWithLoraTags wrote those of config.loras).
    config.loras.clear();
    importer.applied("prompt");
    importer.applied("negative_prompt");
    const std::optional<SchedulerKind> scheduler = applySampler(parsed, importer);
    const bool hires = std::any_of(parsed.params.begin(), parsed.params.end(),
                                   [](const InfotextParam& p) { return !p.defaulted && isHiresKey(p.key); });

    for (std::size_t i = 0; i < parsed.params.size(); ++i) {
        const InfotextParam& param = parsed.params[i];
        if (param.key == "Sampler" || param.key == "Schedule type") continue;
        // A WxH value split in two is shown once, as written.
        std::string shown = shownSetting(param.key, param.value);
        const bool firstOfPair = param.key.size() > 2 && param.key.compare(param.key.size() - 2, 2, "-1") == 0 &&
                                 i + 1 < parsed.params.size() &&
                                 parsed.params[i + 1].key == param.key.substr(0, param.key.size() - 2) + "-2";
        if (firstOfPair)
            shown =
                shownSetting(param.key.substr(0, param.key.size() - 2), param.value + "x" + parsed.params[i + 1].value);
        const auto rule =
            std::find_if(kKeyRules.begin(), kKeyRules.end(), [&](const KeyRule& r) { return r.key == param.key; });
        if (const std::optional<std::size_t> unit = controlNetInfotextIndex(param.key)) {
            std::string why;
            const std::optional<ControlNetUnit> read = controlNetFromInfotext(param.value, &why);
            if (!read) {
                importer.unmapped(shown, "is not a ControlNet unit Tessera reads (" + why + "); ignored");
                continue;
            }
            if (config.controlNets.size() <= *unit) config.controlNets.resize(*unit + 1);
            config.controlNets[*unit] = *read;
            importer.applied("controlnet");
        } else if (param.key == "RNG") {
            applyRng(param, parsed, importer);
        } else if (param.key == "Eta") {
            applyEta(param, scheduler, importer);
        } else if (param.key == "Model hash" || param.key == "Model") {
            importer.unmapped(shown, kModelNotApplied);
        } else if (param.key == "VAE hash") {
            // Beside "VAE" it belongs to the file the name finds, which the front end hashes.
            if (!parsed.find("VAE")) importer.unmapped(shown, "is not applied: Tessera picks the VAE by its name");
        } else if (param.key == "Denoising strength" && hires) {
            importer.unmapped(shown, "belongs to the hires fix, which is not supported; ignored");
        } else if (rule != kKeyRules.end()) {
            const std::string why = rule->read(param.value, config);
            if (why.empty())
                importer.applied(rule->field);
            else
                importer.unmapped(shown, why);
        } else if (!param.defaulted) {
            const bool secondOfPair = param.key.size() > 2 && param.key.compare(param.key.size() - 2, 2, "-2") == 0 &&
                                      i > 0 &&
                                      parsed.params[i - 1].key == param.key.substr(0, param.key.size() - 2) + "-1";
            if (!secondOfPair) importer.unmapped(shown, kNotSupported);
        }
    }
    return result;
}

std::vector<std::string> mappedFieldDifferences(const RunConfig& a, const RunConfig& b) {
    std::vector<std::string> differ;
    const auto check = [&](bool same, const char* field) {
        if (!same) differ.emplace_back(field);
    };
    const bool karras = samplerHasKarras(a.scheduler);
    check(promptWithLoraTags(a) == promptWithLoraTags(b), "prompt");  // the LoRAs are tags there
    check(a.negativePrompt == b.negativePrompt, "negative_prompt");
    check(a.steps == b.steps, "steps");
    check(a.scheduler == b.scheduler, "scheduler");
    check(!karras || a.schedulerOptions.karrasSigmas == b.schedulerOptions.karrasSigmas, "use_karras_sigmas");
    check(a.cfgScale == b.cfgScale, "cfg");
    check(a.guidance == b.guidance, "guidance");
    check(a.seed == b.seed, "seed");
    check(a.width == b.width, "width");
    check(a.height == b.height, "height");
    check(a.clipSkip == b.clipSkip, "clip_skip");
    check(a.initImage.empty() || a.strength == b.strength, "strength");
    check(a.tile == b.tile, "tile");
    check(a.overlapPixels() == b.overlapPixels(), "overlap");
    check(a.window == b.window, "window");
    check(a.fusion == b.fusion, "fusion");
    check(a.tileShift == b.tileShift, "tile_shift");
    check(a.tileBatch == b.tileBatch, "batch");
    check(a.graphs == b.graphs, "graphs");
    check(a.precision == b.precision, "precision");
    check(a.backend == b.backend, "backend");
    check(a.upscale == b.upscale, "upscale");
    check(upscalerName(a.upscaleModel) == upscalerName(b.upscaleModel), "upscale_model");
    check(vaeName(a.vae) == vaeName(b.vae), "vae");
    check(a.preserveColor == b.preserveColor, "preserve_color");
    check(a.sdxlSizeConditioning == b.sdxlSizeConditioning, "sdxl_size_conditioning");
    check(a.vaeTiling == b.vaeTiling, "vae_tiling");
    check(a.scheduler != SchedulerKind::DDIM || a.schedulerOptions.eta == b.schedulerOptions.eta, "eta");
    check(a.noiseSource == b.noiseSource, "noise_source");
    check(a.variationSeed == b.variationSeed, "variation_seed");
    check(a.variationStrength == b.variationStrength, "variation_strength");
    check(a.seedResizeFromWidth == b.seedResizeFromWidth && a.seedResizeFromHeight == b.seedResizeFromHeight,
          "seed_resize_from");
    check(a.etaNoiseSeedDelta == b.etaNoiseSeedDelta, "eta_noise_seed_delta");
    // ControlNets: all but the image (the entry names none) and the model's folder (its name stays).
    const auto unitsRead = [](const RunConfig& c) {
        std::vector<ControlNetUnit> units = c.controlNets;
        for (ControlNetUnit& u : units) {
            u.image.clear();
            u.model = controlNetInfotextModel(u.model, "");
            if (u.preprocessor != "tile_resample") u.downSampling = 1.0;
        }
        return units;
    };
    check(unitsRead(a) == unitsRead(b), "controlnet");
    return differ;
}

// ---------------------------------------------------------------------------
// ComfyUI's "prompt" graph (ComfyUI nodes.py SaveImage.save_images)

namespace {

// Most links followed from the sampler to a text encoder or a checkpoint: real graphs pass a
// handful of nodes (ControlNet, area, LoRA); the bound keeps a cyclic graph from looping.
constexpr int kMaxComfyHops = 32;

using Json = nlohmann::json;

// Node ids in ComfyUI's order: numbers by value ("3" before "10"), then other ids as text.
bool comfyIdLess(const std::string& a, const std::string& b) {
    const auto numeric = [](const std::string& s) {
        return !s.empty() && s.size() < 19 &&
               std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    const bool na = numeric(a), nb = numeric(b);
    if (na != nb) return na;
    if (na && a.size() != b.size()) return a.size() < b.size();
    return a < b;
}

class ComfyGraph {
public:
    explicit ComfyGraph(const Json& graph) : graph_(graph) {}

    const Json* node(const std::string& id) const {
        const auto it = graph_.find(id);
        return it != graph_.end() && it->is_object() ? &*it : nullptr;
    }
    static std::string classOf(const Json& node) {
        const auto it = node.find("class_type");
        return it != node.end() && it->is_string() ? it->get<std::string>() : std::string("?");
    }
    static const Json* input(const Json& node, const char* name) {
        const auto inputs = node.find("inputs");
        if (inputs == node.end() || !inputs->is_object()) return nullptr;
        const auto it = inputs->find(name);
        return it == inputs->end() ? nullptr : &*it;
    }
    // A link input is [node id, output index]; the node it names, with its id.
    std::optional<std::pair<std::string, const Json*>> linked(const Json& node, const char* name) const {
        const Json* value = input(node, name);
        if (!value || !value->is_array() || value->size() != 2) return std::nullopt;
        const Json& id = (*value)[0];
        const std::string key = id.is_string()           ? id.get<std::string>()
                                : id.is_number_integer() ? id.dump()
                                                         : std::string();
        const Json* target = key.empty() ? nullptr : this->node(key);
        if (!target) return std::nullopt;
        return std::pair{key, target};
    }
    std::vector<std::string> samplerIds() const {
        std::vector<std::string> ids;
        for (const auto& [id, node] : graph_.items())
            if (node.is_object() && (classOf(node) == "KSampler" || classOf(node) == "KSamplerAdvanced"))
                ids.push_back(id);
        std::sort(ids.begin(), ids.end(), comfyIdLess);
        return ids;
    }

private:
    const Json& graph_;
};

std::string nodeName(const std::string& id, const Json& node) {
    return "node " + excerpt(id, 20) + " (" + excerpt(ComfyGraph::classOf(node), 40) + ")";
}

std::string jsonShown(const Json& value) { return excerptJson(value, 80); }

// A whole number in a JSON value (an integral float too).
std::optional<long double> jsonWhole(const Json& value) {
    if (value.is_number_unsigned()) return static_cast<long double>(value.get<std::uint64_t>());
    if (value.is_number_integer()) return static_cast<long double>(value.get<std::int64_t>());
    if (value.is_number_float() && std::isfinite(value.get<double>()) &&
        value.get<double>() == std::floor(value.get<double>()))
        return value.get<double>();
    return std::nullopt;
}

// The same within [lo, hi].
std::optional<long double> jsonWhole(const Json& value, long double lo, long double hi) {
    const auto x = jsonWhole(value);
    if (!x || *x < lo || *x > hi) return std::nullopt;
    return x;
}

// A whole bound of a range as text (the seed's reaches 2^64 - 1).
std::string wholeText(long double x) {
    return x < 0 ? std::to_string(static_cast<long long>(x)) : std::to_string(static_cast<unsigned long long>(x));
}

struct ComfyReader {
    const ComfyGraph& graph;
    Importer& importer;

    void unmapped(const std::string& shown, std::string_view reason) { importer.unmapped(shown, reason); }

    // Whether `id` was seen on this walk already (a cycle); records it.
    static bool visited(std::vector<std::string>& seen, const std::string& id) {
        if (std::find(seen.begin(), seen.end(), id) != seen.end()) return true;
        seen.push_back(id);
        return false;
    }

    // An input that must be a literal value: a link (to a primitive or another node) is not read.
    const Json* literal(const Json& node, const char* name) {
        const Json* value = ComfyGraph::input(node, name);
        if (value && value->is_array()) {
            unmapped(std::string(name) + ": " + jsonShown(*value),
                     "is a link to another node, which is not supported; ignored");
            return nullptr;
        }
        return value;
    }

    template <typename Set>
    void whole(const Json& node, const char* name, std::string_view field, long double lo, long double hi, Set set) {
        const Json* value = literal(node, name);
        if (!value) return;
        const auto x = jsonWhole(*value);
        if (!x) {
            unmapped(std::string(name) + ": " + jsonShown(*value), "is not a whole number; ignored");
        } else if (*x < lo || *x > hi) {
            unmapped(std::string(name) + ": " + jsonShown(*value), outOfRange(wholeText(lo) + " to " + wholeText(hi)));
        } else {
            set(*x);
            importer.applied(field);
        }
    }

    // The text of the CLIPTextEncode behind a sampler's conditioning input, through nodes that
    // take one "conditioning" (ControlNet, area, timestep range: each reported, not applied).
    void text(const Json& sampler, const char* name, std::string& out, std::string_view field) {
        auto at = graph.linked(sampler, name);
        std::vector<std::string> seen;
        for (int hop = 0; at && hop < kMaxComfyHops && !visited(seen, at->first); ++hop) {
            const Json& node = *at->second;
            if (ComfyGraph::classOf(node) == "CLIPTextEncode") {
                const Json* value = literal(node, "text");
                if (value && value->is_string()) {
                    out = value->get<std::string>();
                    importer.applied(field);
                    if (std::string(name) == "positive") clipSkip(node);
                } else if (value) {
                    unmapped(std::string(name) + " text: " + jsonShown(*value), "is not text; ignored");
                }
                return;
            }
            const auto next = graph.linked(node, "conditioning");
            if (!next) break;
            unmapped(std::string(name) + " through " + nodeName(at->first, node), kNotSupported);
            at = next;
        }
        const Json* value = ComfyGraph::input(sampler, name);
        unmapped(std::string(name) + ": " +
                     (at      ? nodeName(at->first, *at->second)
                      : value ? jsonShown(*value)
                              : "none"),
                 "is not a CLIPTextEncode node, which is not supported; ignored");
    }

    // CLIPSetLastLayer's stop_at_clip_layer -k is A1111's clip skip k.
    void clipSkip(const Json& encoder) {
        const auto at = graph.linked(encoder, "clip");
        if (!at || ComfyGraph::classOf(*at->second) != "CLIPSetLastLayer") return;
        whole(*at->second, "stop_at_clip_layer", "clip_skip", -kMaxClipSkip, -1,
              [&](long double x) { importer.config().clipSkip = static_cast<int>(-x); });
    }

    void size(const Json& sampler) {
        const auto at = graph.linked(sampler, "latent_image");
        if (!at || ComfyGraph::classOf(*at->second) != "EmptyLatentImage") {
            unmapped("latent_image: " + (at ? nodeName(at->first, *at->second) : std::string("none")),
                     "is not an EmptyLatentImage (image-to-image from a ComfyUI graph is not supported); ignored");
            return;
        }
        RunConfig& c = importer.config();
        whole(*at->second, "width", "width", 1, kMaxImageSidePx, [&](long double x) { c.width = static_cast<int>(x); });
        whole(*at->second, "height", "height", 1, kMaxImageSidePx,
              [&](long double x) { c.height = static_cast<int>(x); });
    }

    void checkpoint(const Json& sampler) {
        auto at = graph.linked(sampler, "model");
        std::vector<std::string> seen;
        for (int hop = 0; at && hop < kMaxComfyHops && !visited(seen, at->first); ++hop) {
            const Json& node = *at->second;
            if (const Json* name = ComfyGraph::input(node, "ckpt_name"); name && name->is_string()) {
                unmapped("ckpt_name: " + excerpt(name->get<std::string>(), 80), kModelNotApplied);
                return;
            }
            unmapped("model through " + nodeName(at->first, node), kNotSupported);
            at = graph.linked(node, "model");
        }
    }

    void sampler(const Json& node) {
        const Json* name = literal(node, "sampler_name");
        const Json* schedule = literal(node, "scheduler");
        if (!name || !schedule) return;
        const std::string shown = "sampler_name: " + jsonShown(*name) + ", scheduler: " + jsonShown(*schedule);
        // ComfyUI's names (comfy/samplers.py KSAMPLER_NAMES, SCHEDULER_NAMES) that Tessera runs.
        static const std::array<std::tuple<std::string_view, std::string_view, SchedulerKind, bool>, 20> kComfy{{
            {"euler", "normal", SchedulerKind::Euler, false},
            {"euler", "karras", SchedulerKind::Euler, true},
            {"euler_ancestral", "normal", SchedulerKind::EulerAncestral, false},
            {"dpmpp_2m", "normal", SchedulerKind::DPMPP2M, false},
            {"dpmpp_2m", "karras", SchedulerKind::DPMPP2M, true},
            {"dpmpp_2m_sde", "normal", SchedulerKind::DPMPP2MSDE, false},
            {"dpmpp_2m_sde", "karras", SchedulerKind::DPMPP2MSDE, true},
            {"lms", "normal", SchedulerKind::LMS, false},
            {"lms", "karras", SchedulerKind::LMS, true},
            {"heun", "normal", SchedulerKind::Heun, false},
            {"heun", "karras", SchedulerKind::Heun, true},
            {"dpm_2", "normal", SchedulerKind::DPM2, false},
            {"dpm_2", "karras", SchedulerKind::DPM2, true},
            {"dpmpp_sde", "normal", SchedulerKind::DPMPPSDE, false},
            {"dpmpp_sde", "karras", SchedulerKind::DPMPPSDE, true},
            {"uni_pc_bh2", "normal", SchedulerKind::UniPC, false},  // its uni_pc is bh1, which Tessera does not run
            {"uni_pc_bh2", "karras", SchedulerKind::UniPC, true},
            {"ddim", "normal", SchedulerKind::DDIM, false},
            {"ddim", "ddim_uniform", SchedulerKind::DDIM, false},
            {"ddpm", "normal", SchedulerKind::DDPM, false},
        }};
        for (const auto& [sampler, scheduler, kind, karras] : kComfy)
            if (name->is_string() && schedule->is_string() && *name == sampler && *schedule == scheduler) {
                importer.config().scheduler = kind;
                importer.applied("scheduler");
                if (samplerHasKarras(kind)) {
                    importer.config().schedulerOptions.karrasSigmas = karras;
                    importer.applied("use_karras_sigmas");
                }
                return;
            }
        unmapped(shown, kNotSupported);
    }

    // KSampler's denoise below 1, KSamplerAdvanced's partial step range or disabled noise.
    void partialSampling(const Json& node, bool advanced) {
        const auto check = [&](const char* name, auto ok) {
            const Json* value = ComfyGraph::input(node, name);
            if (value && !ok(*value)) unmapped(std::string(name) + ": " + jsonShown(*value), kNotSupported);
        };
        check("denoise", [](const Json& v) { return v.is_number() && v.get<double>() == 1.0; });
        if (!advanced) return;
        check("add_noise", [](const Json& v) { return v == "enable"; });
        check("start_at_step", [](const Json& v) { return jsonWhole(v, 0, 0).has_value(); });
        const Json* steps = ComfyGraph::input(node, "steps");
        check("end_at_step", [&](const Json& v) {
            const auto end = jsonWhole(v, 0, 1e18);
            const auto total = steps ? jsonWhole(*steps, 0, 1e18) : std::nullopt;
            return end && (!total || *end >= *total);
        });
    }
};

}  // namespace

ImportedSettings applyComfyPrompt(std::string_view json, RunConfig& config, std::string_view field) {
    const Json graph = parseBoundedJson(json, field, "its ComfyUI prompt chunk");
    if (!graph.is_object())
        throw InputFileError(std::string(field), std::string(field) + ": its ComfyUI prompt chunk is " +
                                                     excerptJson(graph) + ", not a JSON object of nodes");
    ImportedSettings result;
    Importer importer(config, result);
    const ComfyGraph nodes(graph);
    const std::vector<std::string> samplers = nodes.samplerIds();
    if (samplers.empty()) {
        importer.unmapped("prompt: " + excerptJson(graph, 80),
                          "has no KSampler or KSamplerAdvanced node; nothing applied");
        return result;
    }
    // The base pass: the first sampler starting from an empty latent (a hires pass starts from
    // the base pass's latent).
    std::string chosen = samplers.front();
    for (const std::string& id : samplers) {
        const auto latent = nodes.linked(*nodes.node(id), "latent_image");
        if (latent && ComfyGraph::classOf(*latent->second) == "EmptyLatentImage") {
            chosen = id;
            break;
        }
    }
    const Json& sampler = *nodes.node(chosen);
    const bool advanced = ComfyGraph::classOf(sampler) == "KSamplerAdvanced";
    ComfyReader reader{nodes, importer};
    // ComfyUI's noise: the start from torch's CPU generator (comfy/sample.py prepare_noise), the
    // ancestral steps' from the device's (comfy/k_diffusion/sampling.py default_noise_sampler).
    config.noiseSource = RngSource::ComfyUI;
    importer.applied("noise_source");
    RunConfig& c = config;
    reader.whole(sampler, advanced ? "noise_seed" : "seed", "seed", 0,
                 static_cast<long double>(std::numeric_limits<std::uint64_t>::max()),
                 [&](long double x) { c.seed = static_cast<std::uint64_t>(x); });
    reader.whole(sampler, "steps", "steps", 1, std::max(1, c.schedulerOptions.numTrainTimesteps),
                 [&](long double x) { c.steps = static_cast<int>(x); });
    if (const Json* cfg = reader.literal(sampler, "cfg")) {
        if (!cfg->is_number() || !std::isfinite(cfg->get<double>())) {
            reader.unmapped("cfg: " + jsonShown(*cfg), "is not a number; ignored");
        } else if (cfg->get<double>() < kCfgRange.lo || cfg->get<double>() > kCfgRange.hi) {
            reader.unmapped("cfg: " + jsonShown(*cfg),
                            outOfRange(formatNumber(kCfgRange.lo) + " to " + formatNumber(kCfgRange.hi)));
        } else {
            c.cfgScale = cfg->get<double>();
            importer.applied("cfg");
        }
    }
    reader.sampler(sampler);
    reader.text(sampler, "positive", c.prompt, "prompt");
    reader.text(sampler, "negative", c.negativePrompt, "negative_prompt");
    reader.size(sampler);
    reader.partialSampling(sampler, advanced);
    reader.checkpoint(sampler);
    for (const std::string& id : samplers)
        if (id != chosen) reader.unmapped("a second sampler, " + nodeName(id, *nodes.node(id)), kNotSupported);
    return result;
}

std::string parametersLine(const RunConfig& c) { return infotext(c, infotextExtras(c)); }

}  // namespace tessera
