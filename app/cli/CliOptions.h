// Command-line options of tessera-cli: a small hand-written parser (no dependency), kept
// apart from cli_main.cpp so tests can call it. Options are named after RunConfig's fields
// and mean the same in every subcommand. Qt-free, although it lives in the app layer.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/models/unet/UNetConfig.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/RunConfig.h"

namespace tessera {

enum class CliCommand { Help, Version, Plan, Render, Info };

struct CliOptions {
    CliCommand command = CliCommand::Help;
    bool help = false;         // --help / -h after a subcommand: print its usage
    RunConfig config;          // preset (if any) with the flags applied on top
    std::string presetPath;    // --preset, empty when none
    std::string outDir = ".";  // --out
    std::string infoDir;       // `info DIR` (also taken from --model)
    // --batch-count: images rendered one after another, seeds seed .. seed + batchCount - 1, each
    // its own output set and record (render only).
    int batchCount = 1;
    // RunConfig fields given on the command line or in the preset, by CLI name ("tile", "model").
    std::set<std::string> fieldsGiven;
    // The same for flags typed on the command line alone (not from a preset or --params-from).
    std::set<std::string> flagsGiven;
    // When the preset is a run manifest: the digest of the timed choices its run used ("" = none).
    std::string presetTuningDigest;
    // --params-from: a PNG whose generation settings (A1111/Tessera "parameters", or ComfyUI
    // "prompt") are applied after the preset and before the flags; empty when none.
    std::string paramsFromPath;
    // One line per setting of that PNG not applied, for stderr:
    // "params-from: 'Hires upscale: 2' is not supported; ignored".
    std::vector<std::string> paramsFromNotes;
    // The VAE that PNG names ("VAE", A1111's file name) and its "VAE hash" (10 hex), as read; ""
    // when it names none. The render looks the name up once --model is known.
    std::string paramsFromVae, paramsFromVaeHash;
    // That PNG's "Lora hashes" (name as its prompt's tag gave it, A1111's 12 hex digits), in order;
    // the render compares them with the files it finds (app/cli/LoraRun.h hashNotes).
    std::vector<std::pair<std::string, std::string>> paramsFromLoraHashes;
};

// Parses argv[1..] (without the program name). The first word is the subcommand
// (plan, render, info), or --version / --help. Throws ValidationError whose field() is the
// option's field name ("width", "overlap") for a bad value, "option" for an unknown or
// incomplete option, "command" for an unknown subcommand, "preset" for an unreadable preset,
// "params-from" for a --params-from file that is no readable PNG or holds no settings.
// Does not validate the resulting RunConfig as a whole (that needs the model's limits).
CliOptions parseCliOptions(const std::vector<std::string>& args);

// A file of run settings (a preset, or compare's A.json/B.json) as a JSON object, read through
// core/BoundedInput (regular files only, never blocking, size and nesting depth bounded).
// Throws ValidationError on `field` naming the file (a short excerpt of its path).
nlohmann::json readRunSettingsFile(const std::string& path, const std::string& field);

// The run settings of a settings file's JSON: a RunConfig object, or a run manifest
// (core/run/RunRecordIO.h) whose "config" is one; for a manifest `tuningDigest` (when given)
// receives its tuning.digest. ValidationError for a bad setting, std::runtime_error for a bad
// manifest.
RunConfig runSettingsFromJson(const nlohmann::json& json, std::string* tuningDigest = nullptr);

// What to tell the user when a run replayed from a manifest made other timed choices than the
// manifest records (the image may then differ in the last bits); "" when it did not, or when
// the manifest records none.
std::string tuningMismatchNote(const std::string& runDigest, const std::string& manifestDigest);

// The most images one render may make with --batch-count (A1111's batch count slider ends at 100).
inline constexpr int kMaxBatchCount = 100;

// tessera-cli's exit codes (README): 0 success, 1 a failure while running, 2 invalid input.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitInvalid = 2;

// A command-line word that is an option, "--name" or "--name=value", split: the name without
// the dashes, and the value after '=' (inlineValue true) if there is one. nullopt for any other
// word: a positional one, or "--" alone.
struct OptionWord {
    std::string name;
    std::string value;
    bool inlineValue = false;
};
std::optional<OptionWord> splitOptionWord(const std::string& arg);
// For an option that takes a value: keeps an inline one, else takes the next word of `args`
// (advancing i). At the end of the line throws ValidationError on `field`:
// "option '--name' needs a value".
void takeOptionValue(OptionWord& word, const std::vector<std::string>& args, std::size_t& i, const std::string& field);

// A whole number of at least `lo` given for option `field` (--repeats 5); throws ValidationError
// on `field` ("'x' is not a whole number", "... it must be at least 1").
int parseCount(const std::string& field, const std::string& text, int lo);

// Usage text for a subcommand (Help: the overview).
std::string cliUsage(CliCommand command);

// Whether `--name` (without the dashes) is one of the run options above and takes a value:
// true for "seed" or "model", false for a flag such as "preserve-color" or "help", nullopt
// for a name that is no run option. Lets other subcommands (compare) pass these options on.
std::optional<bool> cliOptionTakesValue(std::string_view name);

// The subcommand's name as typed ("plan", ...).
std::string_view toString(CliCommand command);

// Where a bundled resource (`relative` to resources/, e.g. "clip/bpe_simple_vocab_16e6.txt.gz")
// is looked for, in order: the source tree's resources (TESSERA_RESOURCE_DIR, development
// builds) and, for installs, <exeDir>/../share/tessera/<relative>.
std::vector<std::string> resourceCandidates(const std::string& executableDir, const std::string& relative);

// Where the default model is looked for, in order: the source tree's resources
// (TESSERA_RESOURCE_DIR, development builds) and, for installs, <exeDir>/../share/tessera.
std::vector<std::string> defaultModelCandidates(const std::string& executableDir);

// A run's model folder as an absolute path: `given` when it is a folder, else (empty) the
// first default candidate holding a config.json. Throws ValidationError on field "model"
// naming the folder, or every place looked in.
std::string resolveModelFolder(const std::string& given, const std::string& executableDir);

// The engine a run will use (app/cli/EngineFactory.h: auto = CUDA when built and a device is
// usable, else the CPU): CPU or CUDA. An explicit `cuda` that cannot be honoured is a
// ValidationError on field "backend" rather than the window's quiet fallback: a script asking
// for the GPU should not time the CPU. May probe for a CUDA device (not for `cpu`).
BackendKind checkRunBackend(BackendKind requested);

// The image-to-image strength of `config` is 0 to 1 whether or not the run starts from an image
// (validate() checks it only with one, as above 0): a value out of range is a mistake however
// it came (flag, preset, --params-from). Throws ValidationError on field "strength".
void checkStrengthRange(const RunConfig& config);

}  // namespace tessera
