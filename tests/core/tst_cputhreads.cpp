// CpuBackend's threads: images bit-identical for any thread count, and where the time goes.
#include <QtTest>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>

#include "core/CpuBackend.h"
#include "core/ModelGraph.h"
#include "core/UNetModel.h"

using namespace tessera;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

int envInt(const char* name, int fallback) {
    return qEnvironmentVariableIsSet(name) ? qEnvironmentVariableIntValue(name) : fallback;
}

}  // namespace

class TestCpuThreads : public QObject {
    Q_OBJECT

private slots:
    // Milliseconds per op kind of the default model's forward (quick-cpu's 64x64 tiles, batch
    // TESSERA_CPU_BENCH_BATCH or 4) on TESSERA_CPU_BENCH_THREADS threads (default: all).
    // Runs only with TESSERA_CPU_BENCH=1.
    void profileDefaultModel() {
        if (!qEnvironmentVariableIsSet("TESSERA_CPU_BENCH")) QSKIP("set TESSERA_CPU_BENCH=1 to measure");
        const UNetModel model = UNetModel::load(TESSERA_SOURCE_DIR "/resources/models/default");
        const int batch = envInt("TESSERA_CPU_BENCH_BATCH", 4), reps = std::max(1, envInt("TESSERA_CPU_BENCH_REPS", 5));
        const int H = 64, W = 64;
        CpuBackend backend(envInt("TESSERA_CPU_BENCH_THREADS", 0));
        backend.prepare(model, batch, H, W);
        backend.setProfiling(true);
        const std::size_t per = std::size_t(3) * H * W;
        const auto x = randomVector(per * std::size_t(batch), 90);
        const std::vector<float> t(std::size_t(batch), 500.0f);
        std::vector<float> out(per * std::size_t(batch));
        backend.forward(x.data(), t.data(), batch, out.data());  // warm-up
        std::map<std::string, double> byKind;
        double total = 0;
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) {
            backend.forward(x.data(), t.data(), batch, out.data());
            const auto& ops = backend.graph().ops();
            for (std::size_t i = 0; i < ops.size(); ++i) {
                std::string key = toString(ops[i].kind);
                if (ops[i].kind == OpKind::Conv)
                    key += " " + std::to_string(backend.graph().value(ops[i].output).divisor) + "x";
                byKind[key] += backend.opMilliseconds()[i] / reps;
                total += backend.opMilliseconds()[i] / reps;
            }
        }
        const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        qInfo("default model, 64x64, batch %d on %s: %.1f ms per forward (ops %.1f ms), %.2f tiles/s", batch,
              backend.info().device.c_str(), wall / reps, total, reps * batch * 1e3 / wall);
        for (const auto& [kind, ms] : byKind) qInfo("  %-22s %8.2f ms  %5.1f%%", kind.c_str(), ms, 100 * ms / total);
    }
};

QTEST_GUILESS_MAIN(TestCpuThreads)
#include "tst_cputhreads.moc"
