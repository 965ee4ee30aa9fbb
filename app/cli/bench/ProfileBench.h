// `tessera-cli bench --profile`: where one UNet forward's GPU time goes, per precision x tile
// batch (app/cli/ForwardProfile.h printForwardProfile: per-op times from event-record nodes in
// one captured forward, grouped by kind, and the forward timed eagerly and as a CUDA graph).
// CUDA only. Qt-free.
#pragma once

#include <ostream>
#include <string>

#include "app/cli/bench/BenchOptions.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"

namespace tessera {

// The profile of `graph` with `weights` over tiles of tileH x tileW (the graph's own units) for
// every precision x batch of `options`; `factor` doubles the forward batch where guidance
// evaluates both halves at once. Returns 0, or 1 when a profile failed (said on `err`).
int runProfiles(const BenchOptions& options, const std::string& name, const ModelGraph& graph, const TensorMap& weights,
                int tileH, int tileW, int factor, std::ostream& out, std::ostream& err);

}  // namespace tessera
