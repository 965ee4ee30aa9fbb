#include "app/cli/CliOptions.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/PathStatus.h"
#include "app/cli/PngIO.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/formats/PipelinePart.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/models/sd/SdModel.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/Infotext.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfigFields.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/Scheduler.h"

namespace tessera {

namespace {

struct OptionSpec {
    std::string field;  // RunConfig field name (CLI spelling), or "" for non-config options
    bool takesValue = true;
    std::function<void(CliOptions&, const std::string&)> apply;
};

// The run settings' options come from the field table (core/run/RunConfigFields.h); the rest are
// the CLI's own.
const std::map<std::string, OptionSpec>& optionTable() {
    static const std::map<std::string, OptionSpec> table = [] {
        std::map<std::string, OptionSpec> options;
        for (const RunConfigField& field : runConfigFields())
            if (!field.flag.empty())
                options[std::string(field.flag)] = {
                    std::string(field.name), !field.valueName.empty(),
                    [&field](CliOptions& o, const std::string& v) { field.parse(o.config, v); }};
        options["out"] = {"", true, [](CliOptions& o, const std::string& v) {
                              if (v.empty()) fail("out", "an output folder is needed");
                              checkPathText("out", v, "the output folder");
                              o.outDir = v;
                          }};
        options["batch-count"] = {"", true, [](CliOptions& o, const std::string& v) {
                                      o.batchCount = parseCount("batch-count", v, 1);
                                      if (o.batchCount > kMaxBatchCount)
                                          fail("batch-count", inQuotes(v) + " is not allowed; it must be 1 to " +
                                                                  std::to_string(kMaxBatchCount));
                                  }};
        options["preset"] = {"", true,
                             [](CliOptions& o, const std::string& v) { o.presetPath = v; }};  // read first: loadPreset
        options["params-from"] = {
            "", true, [](CliOptions& o, const std::string& v) { o.paramsFromPath = v; }};  // then loadParamsFrom
        options["help"] = {"", false, [](CliOptions& o, const std::string&) { o.help = true; }};
        return options;
    }();
    return table;
}

// A run settings file (preset, compare's A/B): read bounded (core/base/BoundedInput.h: regular
// files only, without blocking, size and nesting depth bounded) and parsed as a RunConfig.
// Errors name `field` for the file itself and the key for a bad setting, quoting the path short.
}  // namespace

nlohmann::json readRunSettingsFile(const std::string& path, const std::string& field) {
    try {
        nlohmann::json json = readBoundedJson(path, field);
        if (!json.is_object())
            fail(field, inQuotes(path) + " must hold a JSON object of run settings (or a run manifest)");
        return json;
    } catch (const InputFileError& e) {
        throw ValidationError(field, e.what());
    }
}

namespace {

void loadPreset(CliOptions& options) {
    const nlohmann::json json = readRunSettingsFile(options.presetPath, "preset");
    try {
        options.config = runSettingsFromJson(json, &options.presetTuningDigest);
    } catch (const ValidationError& e) {
        // Keep the field so the user sees which setting; say that it came from the preset.
        throw ValidationError(e.field(), std::string(e.what()) + " (in preset " + inQuotes(options.presetPath) + ")");
    } catch (const std::exception& e) {
        fail("preset", inQuotes(options.presetPath) + ": " + excerpt(e.what(), 300));
    }
    // A manifest gives every setting; a settings file those it names.
    const bool manifest = json.contains("config") && json.contains("schema_version");
    const nlohmann::json given = manifest ? toJson(options.config) : json;
    for (const auto& item : given.items()) options.fieldsGiven.insert(item.key());
}

// --params-from FILE.png: its "parameters" chunk (A1111, Tessera), else its "prompt" chunk
// (ComfyUI's API graph), applied onto the preset's settings (core/run/Infotext.h). Settings it cannot
// apply become notes; a file that is no readable PNG, or has neither chunk, is invalid input. Returns its
// "TI hashes" (name, hash), which checkParamsFromEmbeddings compares once every option is known.
std::vector<std::pair<std::string, std::string>> loadParamsFrom(CliOptions& options) {
    std::vector<std::pair<std::string, std::string>> textualInversionHashes;
    const std::string& path = options.paramsFromPath;
    checkPathText("params-from", path, "the PNG path");
    PngFile png;
    try {
        png = readPng(path);
    } catch (const PngError& e) {
        fail("params-from", excerpt(e.what(), 400));
    }
    const std::string parameters = png.text("parameters");
    const std::string comfyPrompt = png.text("prompt");
    const std::string& used = parameters.empty() ? comfyPrompt : parameters;
    if (used.empty())
        fail("params-from", inQuotes(path) +
                                " has no 'parameters' text chunk (A1111, Tessera) and no 'prompt' "
                                "chunk (ComfyUI): no settings to read");
    if (used.size() > input_limits::kJsonBytes)
        fail("params-from", inQuotes(path) + ": its '" + (parameters.empty() ? "prompt" : "parameters") +
                                "' chunk is " + std::to_string(used.size()) + " bytes; at most " +
                                std::to_string(input_limits::kJsonBytes) + " are read");
    ImportedSettings imported;
    try {
        if (parameters.empty()) {
            imported = applyComfyPrompt(comfyPrompt, options.config, "params-from");
        } else {
            const ParsedInfotext parsed = parseInfotext(parameters);
            imported = applyInfotext(parsed, options.config);
            if (std::find(imported.fields.begin(), imported.fields.end(), "vae") != imported.fields.end()) {
                options.paramsFromVae = options.config.vae;
                if (const InfotextParam* hash = parsed.find("VAE hash")) options.paramsFromVaeHash = hash->value;
            }
            // "Lora hashes" belong to the LoRAs the prompt's tags name, which the render finds and
            // compares them with (app/cli/LoraRun.h hashNotes): read here, not a setting left out.
            if (const InfotextParam* hashes = parsed.find("Lora hashes")) {
                options.paramsFromLoraHashes = parseLoraHashes(hashes->value);
                const std::string shown = "Lora hashes: ";
                std::erase_if(imported.unmapped,
                              [&shown](const UnmappedSetting& u) { return u.shown.rfind(shown, 0) == 0; });
            }
            // "TI hashes" name the embeddings the prompt uses, found by the run by their names.
            if (const InfotextParam* hashes = parsed.find("TI hashes")) {
                textualInversionHashes = parseTextualInversionHashes(hashes->value);
                const std::string shown = "TI hashes: ";
                std::erase_if(imported.unmapped,
                              [&shown](const UnmappedSetting& u) { return u.shown.rfind(shown, 0) == 0; });
            }
        }
    } catch (const InputFileError& e) {
        // "params-from: its ComfyUI prompt chunk: why" (already short and escaped) as "'path': its ...".
        const std::string what = e.what(), prefix = "params-from: ";
        fail("params-from", inQuotes(path) + ": " + (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what));
    }
    for (const std::string& field : imported.fields) options.fieldsGiven.insert(field);
    for (const UnmappedSetting& setting : imported.unmapped)
        options.paramsFromNotes.push_back("params-from: " + setting.message());
    return textualInversionHashes;
}

// --params-from's "TI hashes" against the embeddings this run finds (core/run/EmbeddingFile.h): a note
// for each one found nowhere (its name in the prompt is then read as words) or found with another
// hash (the first 12 hex digits of the file's SHA-256, as A1111 writes them).
void checkParamsFromEmbeddings(CliOptions& options, const std::vector<std::pair<std::string, std::string>>& hashes) {
    if (hashes.empty()) return;
    const char* models = std::getenv(kModelsFolderVariable);
    const std::vector<std::string> folders = embeddingFolders(options.config, models ? models : "");
    const std::vector<EmbeddingFileEntry> files = listEmbeddingFiles(folders);
    std::vector<std::string> checked;
    for (const auto& [name, hash] : hashes) {
        if (std::find(checked.begin(), checked.end(), name) != checked.end()) continue;  // SDXL writes each twice
        checked.push_back(name);
        const EmbeddingFileEntry* found = nullptr;
        for (const EmbeddingFileEntry& f : files)  // the last of a name is the one registered
            if (f.name == name) found = &f;
        if (!found) {
            std::string looked;
            for (const std::string& folder : folders) looked += (looked.empty() ? "" : ", ") + folder;
            options.paramsFromNotes.push_back("params-from: TI hashes name the embedding '" + excerpt(name, 80) +
                                              "' (" + excerpt(hash, 20) + "), found in no embeddings folder (" +
                                              (looked.empty() ? std::string("none known") : looked) +
                                              "): its name in the prompt is read as words; give --embeddings-dir");
            continue;
        }
        std::string sha;
        try {
            sha = readTextualInversion(found->path).shortHash();
        } catch (const InputFileError& e) {
            options.paramsFromNotes.push_back(std::string("params-from: TI hashes: ") + e.what());
            continue;
        }
        if (sha != hash)
            options.paramsFromNotes.push_back("params-from: TI hashes give the embedding '" + excerpt(name, 80) +
                                              "' the hash " + excerpt(hash, 20) + "; " + found->path + " has " + sha);
    }
}

}  // namespace

RunConfig runSettingsFromJson(const nlohmann::json& json, std::string* tuningDigest) {
    if (tuningDigest) tuningDigest->clear();
    if (!(json.is_object() && json.contains("schema_version") && json.contains("config")))
        return runConfigFromJson(json);
    const RunRecord record = runRecordFromManifest(json);
    if (tuningDigest) *tuningDigest = record.tuning.digest;
    return record.config;
}

std::string tuningMismatchNote(const std::string& runDigest, const std::string& manifestDigest) {
    if (manifestDigest.empty() || runDigest == manifestDigest) return {};
    return "tuning: this run's choices (digest " + (runDigest.empty() ? std::string("none") : runDigest) +
           ") differ from its manifest's (" + manifestDigest +
           "): another GPU, driver or cuDNN, or a tuning cache that is off, moved or rebuilt; the image may differ "
           "in the last bits";
}

std::string_view toString(CliCommand command) {
    switch (command) {
        case CliCommand::Help:
            return "help";
        case CliCommand::Version:
            return "--version";
        case CliCommand::Plan:
            return "plan";
        case CliCommand::Render:
            return "render";
        case CliCommand::Info:
            return "info";
    }
    return "help";
}

CliOptions parseCliOptions(const std::vector<std::string>& args) {
    CliOptions options;
    if (args.empty()) return options;  // Help
    const std::string& first = args.front();
    if (first == "--help" || first == "-h" || first == "help") {
        options.help = true;
        return options;
    }
    if (first == "--version" || first == "-V") {
        options.command = CliCommand::Version;
        return options;
    }
    if (first == "plan")
        options.command = CliCommand::Plan;
    else if (first == "render")
        options.command = CliCommand::Render;
    else if (first == "info")
        options.command = CliCommand::Info;
    else if (first.rfind('-', 0) == 0)
        fail("command", "expected a subcommand (plan, render, info) before " + inQuotes(first));
    else
        fail("command", inQuotes(first) + " is not one of plan, render, info");

    // First pass: collect (option, value) pairs so a preset can be applied before the
    // flags whatever their order on the line.
    std::vector<std::pair<std::string, std::string>> given;
    std::vector<std::string> positional;
    const auto& table = optionTable();
    for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "-h") {
            options.help = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(arg);
        if (!word) {
            positional.push_back(arg);
            continue;
        }
        const std::string& name = word->name;
        const auto spec = table.find(name);
        if (spec == table.end())
            fail("option", "unknown option '--" + excerpt(name) + "'; see 'tessera-cli " +
                               std::string(toString(options.command)) + " --help'");
        if (spec->second.takesValue)
            takeOptionValue(*word, args, i, spec->second.field.empty() ? name : spec->second.field);
        else if (word->inlineValue)
            fail("option", "option '--" + name + "' takes no value");
        given.emplace_back(name, word->value);
    }
    if (options.help) return options;

    for (const auto& [name, value] : given)
        if (name == "preset") {
            checkPathText("preset", value, "the preset path");
            options.presetPath = value;
        }
    if (!options.presetPath.empty()) loadPreset(options);
    for (const auto& [name, value] : given)
        if (name == "params-from") options.paramsFromPath = value;
    std::vector<std::pair<std::string, std::string>> textualInversionHashes;
    if (!options.paramsFromPath.empty()) textualInversionHashes = loadParamsFrom(options);

    for (const auto& [name, value] : given) {
        const OptionSpec& spec = table.at(name);
        spec.apply(options, value);
        if (!spec.field.empty()) {
            options.fieldsGiven.insert(spec.field);
            options.flagsGiven.insert(spec.field);
        }
    }

    checkParamsFromEmbeddings(options, textualInversionHashes);

    if (options.command == CliCommand::Info) {
        if (positional.size() > 1)
            fail("option", "info takes one model folder or checkpoint, got " + inQuotes(positional[1]) + " as well");
        options.infoDir = positional.empty() ? options.config.model : positional.front();
        checkPathText("model", options.infoDir, "a model folder path");
    } else if (!positional.empty()) {
        fail("option", "unexpected argument " + inQuotes(positional.front()) + "; options start with --");
    }
    return options;
}

std::optional<bool> cliOptionTakesValue(std::string_view name) {
    const auto& table = optionTable();
    const auto spec = table.find(std::string(name));
    if (spec == table.end()) return std::nullopt;
    return spec->second.takesValue;
}

std::vector<std::string> resourceCandidates(const std::string& executableDir, const std::string& relative) {
    std::vector<std::string> candidates;
#ifdef TESSERA_RESOURCE_DIR
    candidates.push_back(std::string(TESSERA_RESOURCE_DIR) + "/" + relative);
#endif
    if (!executableDir.empty())
        candidates.push_back(
            (std::filesystem::path(executableDir) / ".." / "share" / "tessera" / relative).lexically_normal().string());
    return candidates;
}

std::vector<std::string> defaultModelCandidates(const std::string& executableDir) {
    return resourceCandidates(executableDir, "models/default");
}

std::string resolveModelFolder(const std::string& given, const std::string& executableDir) {
    namespace fs = std::filesystem;
    if (!given.empty()) {
        checkPathText("model", given, "a model folder path");
        if (given.rfind(kRandomModelPrefix, 0) == 0) return given;  // random weights (benchmarks)
        std::error_code ec;
        const fs::path dir = fs::absolute(given, ec);
        if (ec)
            throw ValidationError("model", "model: " + inQuotes(given) + " cannot be resolved (" + ec.message() + ")");
        // Nothing there, a symbolic-link loop or a link to nothing is said as such, not as "not a
        // folder" or "does not exist" (app/cli/PathStatus.h).
        const PathStatus status = pathStatus(dir);
        if (!status.there()) throw ValidationError("model", "model: " + shownPath(given) + " " + status.problem);
        // A Stable Diffusion checkpoint file (loadSdModel reads or refuses it, naming why).
        if (status.kind != PathStatus::Kind::Folder && isSdModelPath(dir.string()))
            return dir.lexically_normal().string();
        if (status.kind != PathStatus::Kind::Folder)
            throw ValidationError("model", "model: " + inQuotes(given) + " is not a folder");
        if (!isSdModelPath(dir.string()))
            if (const std::optional<PipelinePart> part = pipelinePartOf(dir))
                throw ValidationError("model",
                                      "model: " + describePipelinePart(dir.lexically_normal(), *part, "--model"));
        return dir.lexically_normal().string();
    }
    const auto candidates = defaultModelCandidates(executableDir);
    for (const auto& candidate : candidates)
        if (pathStatus(fs::path(candidate) / "config.json").kind == PathStatus::Kind::File)
            return fs::absolute(candidate).string();
    std::string looked;
    for (const auto& candidate : candidates) looked += "\n  " + candidate;
    throw ValidationError("model",
                          "model: no default model is installed (looked in:" + looked +
                              ")\nPoint --model at a Stable Diffusion pipeline folder (with model_index.json), a "
                              ".safetensors checkpoint or a diffusers UNet2DModel folder (with config.json).");
}

void checkStrengthRange(const RunConfig& config) {
    if (!(config.strength >= 0.0 && config.strength <= 1.0))
        fail("strength", formatNumber(config.strength) +
                             " is not allowed; the strength must be 0 to 1 (above 0 with an init image)");
}

BackendKind checkRunBackend(BackendKind requested) {
    if (requested == BackendKind::CPU) return requested;
    if (requested == BackendKind::CUDA && !cudaBackendBuilt()) fail("backend", "cuda: this build has no CUDA backend");
    const DeviceReport report = probeDevices();
    if (requested == BackendKind::CUDA && !report.cudaAvailable) fail("backend", "cuda: " + report.cudaReason);
    return effectiveBackend(requested, report);
}

std::string cliUsage(CliCommand command) {
    static const std::string kRunOptions =
        "Run options (the same in every subcommand; a preset is applied first, flags override it):\n" +
        usageEntry("--preset FILE",
                   "JSON file of run settings (e.g. resources/presets/quick-cpu.json), or a\n"
                   "render's <run-id>.json manifest to run it again") +
        runConfigOptionsUsage() +
        usageEntry("--params-from FILE.png",
                   "the settings an A1111, ComfyUI or Tessera PNG was made with (prompt,\n"
                   "steps, sampler, CFG, seed, size, clip skip, ...), applied after --preset\n"
                   "and before the flags; each setting it cannot apply is named on stderr") +
        usageEntry("--out DIR", "output folder (render; default .)") +
        usageEntry("--batch-count N",
                   "render N images, seeds seed .. seed + N - 1, each its own output set\n"
                   "(render; 1 to " +
                       std::to_string(kMaxBatchCount) + ", default 1)") +
        usageEntry("--help, -h", "this text");
    std::string text;
    switch (command) {
        case CliCommand::Help:
        case CliCommand::Version:
            return "Usage: tessera-cli <command> [options]\n"
                   "Tiled high-resolution diffusion, headless.\n\n"
                   "Commands:\n"
                   "  plan      print the tile grid, tile count, redundancy and work per step\n"
                   "  render    run a generation and write <out>/<run-id>.png, .csv and .json\n"
                   "  info PATH describe a model folder or SD checkpoint (config, scheduler, tensors, ...)\n\n"
                   "  --version print the version\n"
                   "  --help    this text; 'tessera-cli <command> --help' for a command's options\n\n"
                   "Exit status: 0 success, 2 invalid input (the message names the field), 1 failure while running.\n";
        case CliCommand::Plan:
            text =
                "Usage: tessera-cli plan [options]\n"
                "Prints the tile grid (columns x rows, tile size, stride, overlap), the tile count,\n"
                "redundancy, UNet evaluations per step and in total, and, when --model is given, FLOPs per\n"
                "step and the host memory a render would need on the cpu and cuda engines.\n\n";
            break;
        case CliCommand::Render:
            text =
                "Usage: tessera-cli render [options]\n"
                "Runs a generation and writes <out>/<run-id>.png (with 'parameters' and 'tessera-manifest'\n"
                "text chunks), <run-id>.csv (timings) and <run-id>.json (manifest). Everything is checked\n"
                "before any work: the settings, the start image's header (--init) and the host memory the\n"
                "run needs against what is available; a refusal names the setting to lower (exit 2).\n"
                "LoRAs, as A1111 takes them: <lora:NAME:W> (or <lora:NAME:TE:UNET>, <lyco:...>) in --prompt,\n"
                "and --lora FILE[:W]; each is found, hashed and checked against the model before any work\n"
                "(a LoRA for another family is refused), merged into the model's weights once it is loaded,\n"
                "and named in the manifest and the PNG's parameters (\"Lora hashes\").\n\n";
            break;
        case CliCommand::Info:
            text =
                "Usage: tessera-cli info PATH [--tile PX] [options]\n"
                "Prints a model folder's configuration, scheduler, tensor and parameter counts and the\n"
                "FLOPs of one UNet evaluation at the tile size (--tile, default 64). PATH may also be given as "
                "--model.\n"
                "For a Stable Diffusion pipeline folder or .safetensors checkpoint: the family, parameters and\n"
                "stored precision of the UNet, VAE and text encoder, the prediction type, A1111's model hash\n"
                "and the tensors no model uses (a checkpoint's header is read and the file hashed).\n\n";
            break;
    }
    return text + kRunOptions;
}

std::optional<OptionWord> splitOptionWord(const std::string& arg) {
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) return std::nullopt;
    OptionWord word{arg.substr(2), "", false};
    if (const auto eq = word.name.find('='); eq != std::string::npos) {
        word.value = word.name.substr(eq + 1);
        word.name.resize(eq);
        word.inlineValue = true;
    }
    return word;
}

void takeOptionValue(OptionWord& word, const std::vector<std::string>& args, std::size_t& i, const std::string& field) {
    if (word.inlineValue) return;
    if (i + 1 >= args.size()) fail(field, "option '--" + word.name + "' needs a value");
    word.value = args[++i];
}

int parseCount(const std::string& field, const std::string& text, int lo) {
    int value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end) fail(field, inQuotes(text) + " is not a whole number");
    if (value < lo) fail(field, inQuotes(text) + " is not allowed; it must be at least " + std::to_string(lo));
    return value;
}

}  // namespace tessera
