// ConfigDiff: which settings two run configurations differ in, and whether they describe the
// same work. Shared by `tessera-cli compare` and the window's comparison, so that neither calls
// a time ratio a "speedup" when the runs made different images. Qt-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/RunConfig.h"

namespace tessera {

struct SettingDifference {
    std::string key;   // the RunConfig JSON key, nested keys joined by '.': "steps", "scheduler_options.eta"
    std::string a, b;  // the two values as JSON text (strings as short escaped excerpts)
    nlohmann::json valueA, valueB;  // the two values as they are in the configurations' JSON
    bool changesWork = false;       // a setting that changes what is computed, not how fast (see workKeys)
};

// Every setting of `a` whose value differs in `b`, in key order. The scheduler's noise schedule
// comes from the model; of scheduler_options only eta and timestep_spacing are the run's own.
std::vector<SettingDifference> configDifferences(const RunConfig& a, const RunConfig& b);

// The settings that change how much work a run does (model, size, steps, sampler, start image
// and strength, upscale, guidance): two runs that differ in one of them are not a speed
// comparison. Seed and prompt change the image, not the work; tiling, precision, backend,
// graphs and lanes are how the same work is done.
const std::vector<std::string>& workKeys();

// "steps 20 -> 10" for each difference, joined by ", "; only those that change the work when
// workOnly.
std::string describeDifferences(const std::vector<SettingDifference>& differences, bool workOnly = false);

}  // namespace tessera
