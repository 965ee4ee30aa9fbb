// The torch noise sources (RunConfig::noiseSource) on the CUDA engine: the device's torch CUDA
// generator (CudaTileDevice::torchCudaGenerators, A1111's "GPU" source) against the CPU emulation
// of torch's layout for this GPU, over two successive draws; runs with host-drawn noise (cpu, nv)
// against the CPU engine's, graphs off and step (the step noise added after the fuse, captured in
// the step graph); a gpu run against the CPU engine's NV stand-in. Skips without a CUDA device.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "core/sampling/CudaGeneratorEmulation.h"
#include "kernels/engine/CudaEngine.h"
#include "kernels/engine/CudaTileDevice.h"
#include "kernels/ops/TorchCudaRandn.cuh"

using namespace tessera;

namespace {

std::shared_ptr<const UNetModel> smallModel() {
    UNetConfig c;
    c.inChannels = 4;
    c.outChannels = 4;
    c.blockOutChannels = {32, 64};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 8;
    c.attentionHeadDim = 8;
    SchedulerOptions o;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    return std::make_shared<const UNetModel>(UNetModel::fromTensors(c, UNetModel::random(c, 91).tensors(), o));
}

RunConfig runConfig(RngSource source, GraphMode graphs) {
    RunConfig r;
    r.width = 56;
    r.height = 40;
    r.seed = 42;
    r.steps = 6;
    r.scheduler = SchedulerKind::EulerAncestral;
    r.tile = 32;
    r.overlapPx = 12;
    r.tileBatch = 2;
    r.precision = Precision::FP32;
    r.graphs = graphs;
    r.graphWarmup = 1;
    r.previewEvery = 0;
    r.noiseSource = source;
    r.variationSeed = 5;
    r.variationStrength = 0.25;
    r.etaNoiseSeedDelta = 31337;
    return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 1e30;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        num += std::isfinite(d) ? d * d : 1e30;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

bool mentions(const std::vector<std::string>& messages, const std::string& part) {
    return std::any_of(messages.begin(), messages.end(),
                       [&](const std::string& m) { return m.find(part) != std::string::npos; });
}

}  // namespace

class TestCudaNoiseSource : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    // torch.randn on the device, read back: torch's layout for this GPU (the emulation's double
    // log and sine stand in for the device's __sincosf: within 2.5e-6), the stream continued.
    void deviceGeneratorIsTorchsLayout() {
        CudaTileDevice device(0);
        const NormalGeneratorFactory generators = device.torchCudaGenerators();
        QVERIFY(generators);
        for (const std::size_t count : {std::size_t{4 * 64 * 64}, std::size_t{4 * 128 * 160}}) {
            auto gpu = generators(42);
            CudaGeneratorEmulation emulation(42, torchCudaThreadCapOf(0));
            for (int call = 0; call < 2; ++call) {
                std::vector<float> got(count), want(count);
                gpu->randn(got.data(), count);
                emulation.randn(want.data(), count);
                double worst = 0;
                for (std::size_t i = 0; i < count; ++i)
                    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) /
                                                std::max(1.0, std::fabs(static_cast<double>(want[i]))));
                QVERIFY2(worst < 2.5e-6, qPrintable(QString("%1 values, call %2: %3").arg(count).arg(call).arg(worst)));
            }
        }
    }

    void hostNoiseMatchesTheCpuEngine_data() {
        QTest::addColumn<int>("source");
        QTest::addColumn<int>("graphs");
        for (const RngSource s : {RngSource::CPU, RngSource::NV})
            for (const GraphMode g : {GraphMode::Off, GraphMode::Step})
                QTest::newRow((std::string(toString(s)) + " graphs " + std::string(toString(g))).c_str())
                    << int(s) << int(g);
    }
    void hostNoiseMatchesTheCpuEngine() {
        QFETCH(int, source);
        QFETCH(int, graphs);
        const RunConfig config = runConfig(RngSource(source), GraphMode(graphs));
        const auto model = smallModel();
        CpuEngine cpu(std::make_unique<CpuBackend>(2));
        cpu.setModel(model);
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult want = cpu.run(config, quiet);
        const RunResult got = gpu.run(config, quiet);
        QVERIFY2(got.record.graphs.fallbackReason.empty(), got.record.graphs.fallbackReason.c_str());
        const double r = rel(got.image.data, want.image.data);
        QVERIFY2(r < 1e-4, qPrintable(QString("CUDA vs CPU engine: %1").arg(r)));
        // The noise matters: Tessera's noise gives another image.
        RunConfig tessera = config;
        tessera.noiseSource = RngSource::Tessera;
        QVERIFY(rel(gpu.run(tessera, quiet).image.data, want.image.data) > 1e-2);
    }

    // A1111's GPU source and ComfyUI's ancestral noise: the device's own bits on the CUDA engine, NV's
    // within about 3e-6 on the CPU.
    void gpuSourceIsNearTheCpuEnginesNv_data() {
        QTest::addColumn<int>("source");
        QTest::newRow("gpu") << int(RngSource::GPU);
        QTest::newRow("comfyui") << int(RngSource::ComfyUI);
    }
    void gpuSourceIsNearTheCpuEnginesNv() {
        QFETCH(int, source);
        const RunConfig config = runConfig(RngSource(source), GraphMode::Off);
        const auto model = smallModel();
        CpuEngine cpu(std::make_unique<CpuBackend>(2));
        cpu.setModel(model);
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult want = cpu.run(config, quiet);
        const RunResult got = gpu.run(config, quiet);
        QVERIFY(mentions(got.record.messages, "on this GPU"));
        QVERIFY(mentions(want.record.messages, "not bit for bit"));
        const double r = rel(got.image.data, want.image.data);
        QVERIFY2(r < 1e-3, qPrintable(QString("CUDA gpu source vs the CPU engine's NV: %1").arg(r)));
    }
};

QTEST_GUILESS_MAIN(TestCudaNoiseSource)
#include "tst_cudanoisesource.moc"
