// The sampler names people see: A1111's "Sampler" and "Schedule type" for each scheduler Tessera
// runs, both ways. Qt-free.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/run/RunConfig.h"

namespace tessera {

// A1111's names for a sampler (modules/sd_samplers_kdiffusion.py), as its PNG infotext writes them
// ("Sampler", "Schedule type"): {"Euler a", "Automatic"}, {"Euler", "Karras" or "Automatic"},
// {"DPM++ 2M", "Karras" or "Uniform"} (Automatic would mean Karras there), {"DPM++ 2M SDE",
// "Karras" or "Uniform"} (Automatic would mean Exponential there), {"DDIM", "Automatic"}, and
// Tessera's own {"DDPM", "Automatic"}. Karras is options.karrasSigmas where the kind has it
// (samplerHasKarras).
struct SamplerDisplay {
    std::string sampler, scheduleType;
};
SamplerDisplay samplerDisplayName(SchedulerKind, const SchedulerOptions&);

// Whether Tessera runs the sampler with Karras sigmas (SchedulerOptions::karrasSigmas) as well as
// with its own schedule: Euler, DPM++ 2M, DPM++ 2M SDE.
bool samplerHasKarras(SchedulerKind);

// The reverse, for settings read back from an infotext: (kind, Karras) or nullopt for a
// sampler or schedule Tessera does not run. Names are matched ignoring case. `sampler` may be a
// pre-1.9 combined name ("DPM++ 2M Karras", "Euler a Uniform"): its schedule label wins over
// `scheduleType`. `scheduleType` "" (the key absent: a pre-1.9 infotext) means the sampler
// alone, i.e. no Karras; "Automatic" means the sampler's A1111 default (Karras for DPM++ 2M,
// Exponential for DPM++ 2M SDE: nullopt, Uniform otherwise); "Karras" and "Uniform" as named
// (Karras only where samplerHasKarras).
std::optional<std::pair<SchedulerKind, bool /*karras*/>> samplerFromDisplayName(std::string_view sampler,
                                                                                std::string_view scheduleType);

}  // namespace tessera
