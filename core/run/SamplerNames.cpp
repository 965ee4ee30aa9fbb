#include "core/run/SamplerNames.h"

#include <stdexcept>

namespace tessera {

// A1111's sampler names (modules/sd_samplers_kdiffusion.py, modules/sd_schedulers.py).

namespace {

// A1111's "Automatic" schedule of a sampler (its sd_samplers_kdiffusion.py 'scheduler' option).
enum class AutomaticSchedule {
    Uniform,
    Karras,
    Unsupported,  // one Tessera does not run (DPM++ 2M SDE's exponential)
};

struct DisplayNameEntry {
    SchedulerKind kind;
    std::string_view name;
    bool hasKarras;  // Tessera runs this sampler with Karras sigmas too
    AutomaticSchedule automatic;
};
constexpr DisplayNameEntry kDisplayNames[] = {
    {SchedulerKind::EulerAncestral, "Euler a", false, AutomaticSchedule::Uniform},
    {SchedulerKind::Euler, "Euler", true, AutomaticSchedule::Uniform},
    {SchedulerKind::DPMPP2M, "DPM++ 2M", true, AutomaticSchedule::Karras},
    {SchedulerKind::DPMPP2MSDE, "DPM++ 2M SDE", true, AutomaticSchedule::Unsupported},
    {SchedulerKind::LMS, "LMS", true, AutomaticSchedule::Uniform},
    {SchedulerKind::Heun, "Heun", true, AutomaticSchedule::Uniform},
    {SchedulerKind::DPM2, "DPM2", true, AutomaticSchedule::Uniform},
    {SchedulerKind::DPMPPSDE, "DPM++ SDE", true, AutomaticSchedule::Karras},
    {SchedulerKind::UniPC, "UniPC", true, AutomaticSchedule::Uniform},
    {SchedulerKind::DDIM, "DDIM", false, AutomaticSchedule::Uniform},
    {SchedulerKind::DDPM, "DDPM", false, AutomaticSchedule::Uniform},
};

bool equalIgnoringCase(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
        if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
}

const DisplayNameEntry* findSampler(std::string_view name) {
    for (const DisplayNameEntry& e : kDisplayNames)
        if (equalIgnoringCase(e.name, name)) return &e;
    return nullptr;
}

// A1111's schedule labels (sd_schedulers.py); Tessera runs Automatic, Uniform and Karras.
constexpr std::string_view kScheduleLabels[] = {"Automatic",       "Uniform",     "Karras",     "Exponential",
                                                "Polyexponential", "SGM Uniform", "KL Optimal", "Align Your Steps",
                                                "Simple",          "Normal",      "DDIM",       "Beta"};

}  // namespace

bool samplerHasKarras(SchedulerKind kind) {
    for (const DisplayNameEntry& e : kDisplayNames)
        if (e.kind == kind) return e.hasKarras;
    return false;
}

SamplerDisplay samplerDisplayName(SchedulerKind kind, const SchedulerOptions& options) {
    for (const DisplayNameEntry& e : kDisplayNames) {
        if (e.kind != kind) continue;
        const bool karras = e.hasKarras && options.karrasSigmas;
        const std::string schedule =
            karras ? "Karras" : (e.automatic == AutomaticSchedule::Uniform ? "Automatic" : "Uniform");
        return SamplerDisplay{std::string(e.name), schedule};
    }
    throw std::invalid_argument("samplerDisplayName: unknown SchedulerKind value");
}

std::optional<std::pair<SchedulerKind, bool>> samplerFromDisplayName(std::string_view sampler,
                                                                     std::string_view scheduleType) {
    const DisplayNameEntry* entry = findSampler(sampler);
    if (!entry) {  // a pre-1.9 combined name: "<sampler> <schedule label>"
        for (const std::string_view label : kScheduleLabels) {
            if (sampler.size() <= label.size() + 1) continue;
            const std::string_view tail = sampler.substr(sampler.size() - label.size());
            if (sampler[sampler.size() - label.size() - 1] != ' ' || !equalIgnoringCase(tail, label)) continue;
            if (const DisplayNameEntry* base = findSampler(sampler.substr(0, sampler.size() - label.size() - 1))) {
                entry = base;  // e.g. "Euler SGM Uniform": not "Euler SGM" + "Uniform"
                scheduleType = label;
                break;
            }
        }
        if (!entry) return std::nullopt;
    }
    bool karras = false;
    if (scheduleType.empty() || equalIgnoringCase(scheduleType, "Uniform"))
        karras = false;
    else if (equalIgnoringCase(scheduleType, "Automatic") && entry->automatic != AutomaticSchedule::Unsupported)
        karras = entry->automatic == AutomaticSchedule::Karras;
    else if (equalIgnoringCase(scheduleType, "Karras") && entry->hasKarras)
        karras = true;
    else
        return std::nullopt;
    return std::make_pair(entry->kind, karras);
}

}  // namespace tessera
