// diffusers' scheduler_config.json, read into the run's SchedulerOptions. Qt-free.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/run/RunConfig.h"

namespace tessera {

// Reads a diffusers scheduler_config.json into SchedulerOptions (unknown keys ignored,
// missing keys keep diffusers' defaults). Also returns the class name
// ("DDPMScheduler", ...) through `className` when non-null.
SchedulerOptions schedulerOptionsFromJson(const nlohmann::json&, std::string* className = nullptr);

}  // namespace tessera
