#include "core/run/RunRecord.h"

#include <array>
#include <utility>

namespace tessera {

namespace {

// One table, read both ways, so the names cannot drift apart.
constexpr std::array<std::pair<RunStatus, std::string_view>, 3> kStatusNames{
    {{RunStatus::Finished, "finished"}, {RunStatus::Cancelled, "cancelled"}, {RunStatus::Failed, "failed"}}};

}  // namespace

std::string_view toString(RunStatus status) {
    for (const auto& [s, name] : kStatusNames)
        if (s == status) return name;
    return "unknown";
}

std::optional<RunStatus> parseRunStatus(std::string_view text) {
    for (const auto& [s, name] : kStatusNames)
        if (name == text) return s;
    return std::nullopt;
}

std::optional<GraphMode> effectiveGraphMode(const GraphStats& stats) {
    for (const GraphMode mode : {GraphMode::Off, GraphMode::Tile, GraphMode::Step})
        if (toString(mode) == stats.mode) return mode;
    return std::nullopt;
}

}  // namespace tessera
