// Where one UNet forward's GPU time goes: `tessera-cli bench --profile`
// (app/cli/bench/ProfileBench.h). The CUDA backend times every op with event-record nodes inside
// one captured forward; the ops are grouped here by kind. Qt-free; the grouping is plain C++ so
// it is tested without a GPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/backend/CudaBackend.h")
#define TESSERA_FORWARD_PROFILE_CUDA 1
#include "kernels/backend/CudaBackend.h"
#else
#define TESSERA_FORWARD_PROFILE_CUDA 0
#endif

#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/run/RunConfig.h"

namespace tessera {

// One op's GPU time, named as the graph names it ("down_blocks.1.attentions.0.to_q.matmul").
struct OpTiming {
    std::string name;
    double ms = 0;
};

// An op's kind: the last dot-separated part of its name, except that an op of an SD
// transformer block is "transformer." + its part after the block's index ("transformer.attn1",
// "transformer.ff.net.0"), and every other op of an attention block (a name with "attentions"
// or "attn") is "attention", or "attention.group_norm" for its group norm.
std::string opKind(const std::string& opName);

struct OpKindTime {
    std::string kind;
    double ms = 0;
    int ops = 0;
};
// The ops summed per kind, the largest time first (ties: by kind name).
std::vector<OpKindTime> opTimesByKind(const std::vector<OpTiming>& ops);

// The profile as printed: the total, one line per kind (ops, ms, share of the total) and the
// `top` slowest ops. gflop: one forward of the whole batch.
void printOpProfile(std::ostream& out, const std::string& title, const std::vector<OpTiming>& ops, double gflop,
                    std::size_t top = 25);

#if TESSERA_FORWARD_PROFILE_CUDA
// One forward of `batch` through the host path with N(0,1) inputs (seeded; every "timestep"
// input 500), so the timed device-side forwards that follow read real numbers, not zeros.
void runForwardOnRandomInputs(CudaBackend& gpu, const ModelGraph& graph, int batch, int tileH, int tileW,
                              std::uint64_t seed);

struct ForwardProfileSettings {
    std::string name;  // the model's shape or folder name, for the titles
    Precision precision = Precision::FP16;
    int batch = 1;                 // tiles (forward batch) of the prepared plan
    int tileH = 0, tileW = 0;      // in the graph's own units (latents for Stable Diffusion)
    int warmup = 3, repeats = 20;  // untimed and timed forwards per mode
    std::uint64_t seed = 0;
    std::string tuningCache;  // RunConfig::tuningCache ("" = the default file, "off", a path)
};
// Prepares `graph` on a new CudaBackend, prints its plan summary and the per-op profile, then
// the forward timed eagerly and as one captured graph (median and minimum GPU ms, host enqueue
// ms, tiles/s, TFLOP/s) and the arena (weights, planned and unshared activations, workspace).
void printForwardProfile(std::ostream& out, const ModelGraph& graph, const TensorMap& weights,
                         const ForwardProfileSettings& settings);
#endif

}  // namespace tessera
