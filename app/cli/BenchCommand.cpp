#include "app/cli/BenchCommand.h"

#include "app/cli/CliOptions.h"
#include "app/cli/bench/JobBench.h"
#include "app/cli/bench/UpscaleBench.h"
#include "app/cli/bench/VaeBench.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

namespace {

// The Stable Diffusion shapes: the CUDA backend and the host memory for the random weights
// checked before any are drawn, then the jobs, or the UNet's forwards (or profiles).
int runSdBench(const BenchOptions& options, std::ostream& out, std::ostream& err) {
    checkCudaBench(options);
    if (isFluxBenchShape(options.shape))
        checkHostMemoryFor(options, fluxParameters(benchFluxShapeConfig(options.shape)));
    else
        checkSdHostMemory(options, benchSdShapeConfig(options.shape));
    return options.job ? runSdJobBench(options, out, err) : runSdUNetBench(options, out, err);
}

}  // namespace

int runBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    if (asksForVaeBench(args)) return runVaeBenchCommand(args, out, err);
    if (asksForUpscaleBench(args)) return runUpscaleBenchCommand(args, out, err);
    BenchOptions options;
    try {
        options = parseBenchOptions(args);
        if (options.help) {
            out << benchUsage();
            return kExitOk;
        }
        if (options.profile) checkCudaBench(options);  // before any weights are loaded or drawn
        if (isSdBenchShape(options.shape) || isFluxBenchShape(options.shape)) return runSdBench(options, out, err);
    } catch (...) {
        return benchInputFailure(err);
    }
    return runTiledRunBench(options, out, err);
}

}  // namespace tessera
