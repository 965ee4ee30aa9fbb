#include "app/cli/bench/ProfileBench.h"

#include <stdexcept>

#include "app/cli/CliOptions.h"
#include "app/cli/ForwardProfile.h"

namespace tessera {

int runProfiles(const BenchOptions& o, const std::string& name, const ModelGraph& graph, const TensorMap& weights,
                int tileH, int tileW, int factor, std::ostream& out, std::ostream& err) {
    bool anyFailed = false;
    for (Precision p : o.precisions)
        for (int batch : o.batches) {
            try {
#if TESSERA_FORWARD_PROFILE_CUDA
                printForwardProfile(
                    out, graph, weights,
                    {name, p, batch * factor, tileH, tileW, o.warmupSteps, o.repeats, o.seed, o.tuningCache});
#else
                (void)graph, (void)weights, (void)tileH, (void)tileW, (void)factor, (void)out;
                throw std::runtime_error("this build has no CUDA backend");
#endif
            } catch (const std::exception& e) {
                anyFailed = true;
                err << "bench: profile " << name << " " << toString(p) << " batch " << batch << " failed: " << e.what()
                    << "\n";
            }
        }
    return anyFailed ? kExitFailure : kExitOk;
}

}  // namespace tessera
