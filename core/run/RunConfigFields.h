// RunConfigFields: every RunConfig setting described once: its name (as messages and
// ValidationError::field() spell it), JSON key, CLI flag, help text, default, UI label and
// simple validation limits. JSON IO (toJson / runConfigFromJson, core/run/RunConfig.h),
// the known-keys list, the CLI parser and usage text (app/CliOptions) and the range checks of
// validateAll are derived from this table. Qt-free.
//
// Checks that tie several fields together (width against tile and the model's factor, overlap
// against tile, steps against the model's training timesteps, the scheduler's options) stay in
// validateAll: a table row cannot say them.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/run/RunConfig.h"

namespace tessera {

// An integer setting's allowed range; validateAll's message is
// "<name>: <value> is not allowed; <what> must be <lo> to <hi>".
struct IntLimit {
    int lo, hi;
    std::string_view what;
};

// A text setting's limit; validateAll refuses longer text and NUL characters ("<what> may be at
// most N bytes long").
struct TextLimit {
    std::size_t maxBytes;
    std::string_view what;
};

struct RunConfigField {
    std::string_view name;       // "graph_warmup": in messages, ValidationError::field(), CliOptions::fieldsGiven
    std::string_view jsonKey;    // the top-level JSON key; "" where there is none (eta and timestep_spacing
                                 // live in scheduler_options, --sampler is a CLI spelling of scheduler)
    std::string_view flag;       // the CLI option without "--" ("graph-warmup"); "" where there is none
    std::string_view valueName;  // in the usage ("N", "PX"); "" for an option without a value
    std::string_view help;       // the usage text; "{default}" stands for the default; '\n' starts a new line
    std::string_view uiLabel;    // the window's label (ui/ConfigPanel); "" where the window has no field for it
    std::string_view example;    // a valid value other than the default, as typed on the CLI (tests, docs)
    std::function<nlohmann::json(const RunConfig&)> write;        // the value as JSON (null: none)
    std::function<void(RunConfig&, const nlohmann::json&)> read;  // throws ValidationError naming the key
    std::function<void(RunConfig&, const std::string&)> parse;    // CLI text; throws ValidationError naming the field
    std::optional<IntLimit> range;
    std::optional<TextLimit> text;
};

// Every setting, in the order of the usage text.
const std::vector<RunConfigField>& runConfigFields();

// The field with that name, JSON key or flag; nullptr when there is none.
const RunConfigField* findRunConfigField(std::string_view nameKeyOrFlag);

// The top-level JSON keys runConfigFromJson knows, in table order.
std::vector<std::string_view> runConfigJsonKeys();

// The whole numbers validate() can accept for an integer setting (by name, JSON key or flag)
// with no model at hand: width and height 1 to kMaxImageSidePx, steps 1 to `config`'s
// num_train_timesteps, tile 1 to kMaxTilePx, overlap (pixels) 0 to kMaxTilePx - 1, and the
// table's ranges (clip_skip, batch, lanes, ...); nullopt for a setting with none. Readers that
// cannot hold a value (beyond an int) name this range.
std::optional<IntLimit> intSettingRange(std::string_view field, const RunConfig& config);

// The default's text as the usage shows it ("256", "ddim", "0.5"); "" when there is none.
std::string defaultText(const RunConfigField& field);

// The usage lines of every field with a flag: "  --width PX             image width ... (default 256)\n".
std::string runConfigOptionsUsage();
// One usage entry: "--" flag and value name padded to column 25, help lines below indented to it.
std::string usageEntry(std::string_view flagAndValue, std::string_view help);

}  // namespace tessera
