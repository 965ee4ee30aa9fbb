// Helpers of the CUDA suites that run single graphs against the CPU reference (tst_cudasd,
// tst_flashattention): the device check, a scoped environment variable (the backend reads its
// settings when it is made), normal inputs and one prepared run. Header-only; not a suite.
#pragma once

#include <QtTest/QtTest>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "kernels/backend/CudaBackend.h"

// Skips the test where no CUDA device is present.
#define REQUIRE_DEVICE()                                             \
    do {                                                             \
        std::string why;                                             \
        if (!tessera::cudaDeviceAvailable(&why)) QSKIP(why.c_str()); \
    } while (0)

namespace tessera::testing {

// Sets (or with an empty value, unsets) an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const QByteArray& value)
        : name_(name), old_(qgetenv(name)), had_(qEnvironmentVariableIsSet(name)) {
        if (value.isEmpty())
            qunsetenv(name);
        else
            qputenv(name, value);
    }
    ~ScopedEnv() {
        if (had_)
            qputenv(name_, old_);
        else
            qunsetenv(name_);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    QByteArray old_;
    bool had_;
};

// N(0, stddev^2) values for every input of `g` at `batch` tiles of `tile` x `tile`, input k
// from seed + k.
inline std::vector<std::vector<float>> normalInputs(const ModelGraph& g, int batch, int tile, unsigned seed,
                                                    float stddev = 1.0f) {
    std::vector<std::vector<float>> in;
    for (int v : g.inputs()) {
        std::mt19937 rng(seed++);
        std::normal_distribution<float> normal(0.0f, stddev);
        in.emplace_back(static_cast<std::size_t>(g.elements(v, batch, tile, tile)));
        for (float& x : in.back()) x = normal(rng);
    }
    return in;
}

inline std::vector<const float*> pointers(const std::vector<std::vector<float>>& v) {
    std::vector<const float*> p;
    for (const auto& x : v) p.push_back(x.data());
    return p;
}

// Every output of `g` for `batch` tiles of `tile`, NaN-poisoned first (so an unwritten one
// shows), run at `runBatch` (default: the prepared batch) of the prepared `batch`.
inline std::vector<std::vector<float>> runGraph(Backend& b, const ModelGraph& g, const TensorMap& w, int batch,
                                                int tile, const std::vector<std::vector<float>>& in, int runBatch = 0) {
    b.prepareGraph(g, w, batch, tile, tile);
    if (runBatch < 1) runBatch = batch;
    std::vector<std::vector<float>> out;
    std::vector<float*> outs;
    for (int v : g.outputs())
        out.emplace_back(static_cast<std::size_t>(g.elements(v, runBatch, tile, tile)),
                         std::numeric_limits<float>::quiet_NaN());
    for (auto& o : out) outs.push_back(o.data());
    b.run(pointers(in), runBatch, outs);
    return out;
}

}  // namespace tessera::testing
