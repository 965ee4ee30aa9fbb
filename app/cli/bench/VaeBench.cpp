#include "app/cli/bench/VaeBench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/bench/BenchTable.h"
#include "core/base/BoundedInput.h"
#include "core/models/vae/TiledVae.h"
#include "core/models/vae/VaeConfig.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/engine/CudaVaeDevice.h")
#define TESSERA_VAE_BENCH_CUDA 1
#include "kernels/engine/CudaVaeDevice.h"
#include "kernels/engine/DeviceClock.h"
#include "kernels/engine/DeviceMemoryProbe.h"
#else
#define TESSERA_VAE_BENCH_CUDA 0
#endif

namespace tessera {

namespace {

int parsePositive(const std::string& field, const std::string& text, int lo = 1) { return parseCount(field, text, lo); }

struct VaeBenchOptions {
    int size = 2048;
    VaeTiling tiling = VaeTiling::Auto;
    bool encode = false;
    Precision precision = Precision::FP16;
    int warmup = 1, repeats = 5;
    std::optional<std::uint64_t> budgetBytes;  // --budget-mib: caps the device's VAE budget
    std::string csvPath, tuningCache;
    std::uint64_t seed = 0;
    bool help = false;
};

std::string vaeBenchUsage() {
    return "Usage: tessera-cli bench --shape vae [--size 512|1024|2048|4096] [--tiling auto|on|off] [--encode] "
           "[options]\n"
           "Times the Stable Diffusion VAE (AutoencoderKL of SD 1.x/2.x/XL: 83.7 M parameters, random weights)\n"
           "decoding a size x size image (or, with --encode, encoding one) on the CUDA backend, as a render\n"
           "job runs it (vae_tiling, the device's memory budget): --warmup untimed passes (the first one\n"
           "prepares: lowering, cuDNN plans from the tuning cache or timed), then --repeats timed ones\n"
           "(CUDA events around each pass on the backend's stream, host copies included); the median,\n"
           "min and max, the first pass's wall time, the peak device memory in use (cudaMemGetInfo sampled\n"
           "every 2 ms), the budget, the untiled estimate and the choice.\n\n"
           "  --size PX              512, 1024, 2048 or 4096 (default 2048)\n"
           "  --tiling MODE          auto, on or off (default auto, as vae_tiling)\n"
           "  --encode               time the encoder instead of the decoder\n"
           "  --precision P          fp16, bf16 or fp32 (default fp16)\n"
           "  --warmup N             untimed passes first (default 1, at least 1)\n"
           "  --repeats N            timed passes (default 5)\n"
           "  --budget-mib N         cap the device's VAE memory budget (forces tiling under auto)\n"
           "  --seed N               the weights' and the input's seed (default 0)\n"
           "  --csv FILE             write the row as CSV (columns as bench/pytorch/torch_sd_tiled.py --vae-only)\n"
           "  --tuning-cache FILE|off  as render (default: the user's cache file)\n";
}

VaeBenchOptions parseVaeBenchOptions(const std::vector<std::string>& args) {
    VaeBenchOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            o.help = true;
            continue;
        }
        if (arg == "--encode") {
            o.encode = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(arg);
        if (!word) fail("option", inQuotes(arg) + " is not an option; see tessera-cli bench --shape vae --help");
        takeOptionValue(*word, args, i, word->name);
        const std::string& name = word->name;
        const std::string& value = word->value;
        if (name == "shape") {
            if (value != "vae") fail("shape", inQuotes(value) + " is not vae");
        } else if (name == "size") {
            o.size = parsePositive("size", value);
            if (o.size != 512 && o.size != 1024 && o.size != 2048 && o.size != 4096)
                fail("size", inQuotes(value) + " is not allowed; use 512, 1024, 2048 or 4096");
        } else if (name == "tiling") {
            o.tiling = parseVaeTiling(value, "tiling");
        } else if (name == "precision") {
            o.precision = parsePrecision(value, "precision");
        } else if (name == "warmup") {
            o.warmup = parsePositive("warmup", value);
        } else if (name == "repeats") {
            o.repeats = parsePositive("repeats", value);
        } else if (name == "budget-mib") {
            o.budgetBytes = static_cast<std::uint64_t>(parsePositive("budget-mib", value)) << 20;
        } else if (name == "seed") {
            o.seed = static_cast<std::uint64_t>(parsePositive("seed", value, 0));
        } else if (name == "csv") {
            o.csvPath = value;
        } else if (name == "tuning-cache") {
            o.tuningCache = value;
        } else {
            fail("option", inQuotes(arg) + " is not an option of bench --shape vae (see --help)");
        }
    }
    return o;
}

// The SD VAE (diffusers' AutoencoderKL of SD 1.x/2.x/XL) with weights uniform in +-1/sqrt(fan_in),
// norms 1 +- 0.1 and +- 0.1, from `seed`.
[[maybe_unused]] VaeModel randomSdVae(std::uint64_t seed) {
    const VaeConfig config = vaeConfigFromJson(nlohmann::json::parse(R"({
      "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "norm_num_groups": 32, "latent_channels": 4,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})"));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::map<std::string, HostTensor> tensors;
    for (const auto& [name, shape] : VaeModel::expectedTensors(config)) {
        HostTensor t{shape, std::vector<float>(static_cast<std::size_t>(HostTensor{shape, {}}.numel()))};
        const bool norm = shape.size() == 1 && name.find("norm") != std::string::npos;
        const bool gamma = norm && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        const double fanIn = shape.size() > 1 ? static_cast<double>(t.numel()) / static_cast<double>(shape[0]) : 1.0;
        for (float& v : t.data)
            v = gamma ? 1.0f + 0.1f * u(rng) : (norm ? 0.1f : static_cast<float>(1.0 / std::sqrt(fanIn))) * u(rng);
        tensors[name] = std::move(t);
    }
    return VaeModel::fromTensors(config, std::move(tensors));
}

[[maybe_unused]] std::string vaeBenchCsvHeader() {
    return "engine,shape,size,pass,mode,precision,median_ms,min_ms,max_ms,repeats,first_s,peak_used_mib,budget_mib,"
           "untiled_mib,largest_tensor,choice,device";
}

#if TESSERA_VAE_BENCH_CUDA
// The input of a pass: N(0,1) latents for the decoder, an image of N(0, 0.25) clamped to [-1, 1]
// for the encoder.
HostTensor randomVaeInput(const VaeBenchOptions& o) {
    std::mt19937_64 rng(o.seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int side = o.encode ? o.size : o.size / 8, channels = o.encode ? 3 : 4;
    HostTensor input{{1, channels, side, side}, std::vector<float>(static_cast<std::size_t>(channels) * side * side)};
    for (float& v : input.data) v = o.encode ? std::clamp(0.5f * normal(rng), -1.0f, 1.0f) : normal(rng);
    return input;
}

// What the passes took: the first one's wall time (it prepares), each timed one's device ms on
// the backend's stream, and the most device memory in use while they ran.
struct VaeTimings {
    double firstS = 0, peakMiB = 0;
    std::vector<double> ms;
};

VaeTimings timePasses(const VaeBenchOptions& o, const CudaVaeDevice& device, const std::function<void()>& pass) {
    VaeTimings t;
    const DeviceMemoryProbe memory(0);
    const auto start = std::chrono::steady_clock::now();
    pass();
    t.firstS = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int i = 1; i < o.warmup; ++i) pass();
    DeviceClock clock(device);
    for (int r = 0; r < o.repeats; ++r) {
        clock.start();
        pass();
        t.ms.push_back(clock.stopMs());
    }
    t.peakMiB = memory.peakMiB();
    return t;
}

int runVaeBench(const VaeBenchOptions& o, std::ostream& out, std::ostream& err) {
    if (checkRunBackend(BackendKind::Auto) != BackendKind::CUDA) {
        const DeviceReport report = probeDevices();
        fail("backend", "bench --shape vae times the CUDA backend and found none (" +
                            (report.cudaBuilt ? report.cudaReason : std::string("this build has no CUDA backend")) +
                            ")");
    }
    if (!o.csvPath.empty()) checkBenchCsv(o.csvPath, 1);  // before the passes: writable, with room (exit 2)
    const VaeModel vae = randomSdVae(o.seed);
    CudaVaeDevice device(0);
    device.setMemoryLimit(o.budgetBytes);
    RunConfig config;
    config.precision = o.precision;
    config.tuningCache = o.tuningCache;
    Backend& backend = device.backend(config);
    const HostTensor input = randomVaeInput(o);
    const ModelGraph primitive = o.encode ? buildVaeEncoderGraph(vae.config()) : buildVaeDecoderGraph(vae.config());
    const std::optional<VaeMemoryBudget> budget = device.memoryBudget(config);
    const VaePassPlan plan = planVaePass(o.tiling, primitive, o.size, o.size, budget);
    VaePassRecord pass;
    const VaeTimings t =
        timePasses(o, device, [&] { runVaePass(backend, vae, input, !o.encode, o.tiling, budget, pass); });
    const std::string choice = describeVaePass(pass);

    const double med = median(t.ms);
    const auto [lo, hi] = std::minmax_element(t.ms.begin(), t.ms.end());
    const std::string row =
        std::string("tessera-vae,sd,") + std::to_string(o.size) + "," + (o.encode ? "encode" : "decode") + "," +
        std::string(toString(o.tiling)) + "," + std::string(toString(o.precision)) + "," + fixed(med, 2) + "," +
        fixed(*lo, 2) + "," + fixed(*hi, 2) + "," + std::to_string(o.repeats) + "," + fixed(t.firstS, 3) + "," +
        fixed(t.peakMiB, 0) + "," + fixed(budget ? static_cast<double>(budget->bytes) / (1 << 20) : -1, 0) + "," +
        fixed(static_cast<double>(plan.untiledBytes) / (1 << 20), 0) + "," + std::to_string(plan.untiledLargest) + "," +
        csvField(choice) + "," + csvField(backend.info().device);
    out << vaeBenchCsvHeader() << "\n" << row << "\n";
    out << (o.encode ? "encode " : "decode ") << o.size << "x" << o.size << " " << toString(o.precision) << ": median "
        << fixed(med, 1) << " ms (min " << fixed(*lo, 1) << ", max " << fixed(*hi, 1) << ", " << o.repeats
        << " passes), first pass " << fixed(t.firstS, 2) << " s, peak " << fixed(t.peakMiB, 0) << " MiB in use\n  "
        << choice << "\n";
    if (!o.csvPath.empty()) {
        // All or nothing, as the other benches' CSV (core/run/OutputSet.h): never a half-written file.
        try {
            writeTextFileAtomically(o.csvPath, vaeBenchCsvHeader() + "\n" + row + "\n");
        } catch (const std::exception& e) {
            err << "bench: " << e.what() << "\n";
            return kExitFailure;
        }
    }
    return kExitOk;
}
#else
int runVaeBench(const VaeBenchOptions&, std::ostream&, std::ostream&) {
    fail("backend", "bench --shape vae times the CUDA backend, and this build has none");
}
#endif

}  // namespace

bool asksForVaeBench(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--shape" && args[i + 1] == "vae") return true;
    return false;
}

int runVaeBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    try {
        const VaeBenchOptions o = parseVaeBenchOptions(args);
        if (o.help) {
            out << vaeBenchUsage();
            return kExitOk;
        }
        return runVaeBench(o, out, err);
    } catch (const ValidationError& e) {
        err << "bench: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const std::exception& e) {
        err << "bench: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace tessera
