// The tiled VAE (core/models/vae/TiledVae.h) on the CUDA backend: a 1024x1024 decode of a smooth latent
// tiled (4x4 tiles, whole-image GroupNorm statistics, attention over the whole image; canvases in
// device memory, kernels/backend/CudaCanvasStore.h) against the untiled decode on the same device, in
// fp32, fp16 and bf16, against the CPU reference and against the same pass with host canvases;
// the same for the encoder. The device's GroupNorm statistics (kernels/ops/GroupMoments.cuh) against
// float64 on the host; CudaTileDevice's VAE budget (free memory, 2 bytes a value, cuDNN's element
// limit) and vae_tiling auto under a small forced budget. The tiled pass feeds the backend what no other graph does (a statistics
// vector into a lone ScaleShift, a context of every latent pixel into a token attention, ~30
// re-prepares per image). Weights: the tiny SD 1.x VAE of tests/data/sdpipeline. Skips where no
// CUDA device is present.
#include <QtTest/QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <string>

#include <random>

#include <cuda_fp16.h>

#include "core/cpu/CpuBackend.h"
#include "core/models/vae/TiledVae.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/engine/CudaTileDevice.h"
#include "kernels/ops/GroupMoments.cuh"
#include "tests/cuda/CudaTestSupport.h"

using namespace tessera;

namespace {

const std::string kPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";

HostTensor smooth(int channels, int h, int w, double amplitude) {
    const double pi = 3.14159265358979323846;
    HostTensor t{{1, channels, h, w}, std::vector<float>(static_cast<std::size_t>(channels) * h * w)};
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
                const double u = static_cast<double>(x) / w, v = static_cast<double>(y) / h;
                t.data[(static_cast<std::size_t>(c) * h + y) * w + x] =
                    static_cast<float>(amplitude * (0.6 * std::sin(2 * pi * ((1 + c % 2) * u + 0.5 * v) + c) +
                                                    0.4 * std::cos(2 * pi * (1.5 * v - 0.5 * u) * (1 + c % 3))));
            }
    return t;
}

// launchGroupMoments refuses a region outside the image.
bool invalidRegionRefused() {
    tessera::GroupMomentsParams p{tessera::DType::F32, nullptr, 8, 8, 8, 2, 4, 0, 5, 1};
    try {
        tessera::launchGroupMoments(p, nullptr, nullptr, nullptr);
    } catch (const std::invalid_argument& e) {
        return std::string(e.what()).find("the region inside the image") != std::string::npos;
    }
    return false;
}

double psnr(const HostTensor& got, const HostTensor& want) {
    if (got.data.size() != want.data.size()) return -INFINITY;
    const auto [lo, hi] = std::minmax_element(want.data.begin(), want.data.end());
    double se = 0;
    for (std::size_t i = 0; i < want.data.size(); ++i)
        se += std::pow(static_cast<double>(got.data[i]) - want.data[i], 2);
    const double mse = se / static_cast<double>(want.data.size()), range = static_cast<double>(*hi) - *lo;
    return mse == 0 ? INFINITY : 10 * std::log10(range * range / mse);
}

// The CUDA backend without its canvas store: a tiled pass over it keeps host canvases.
class HostCanvases final : public Backend {
public:
    explicit HostCanvases(CudaBackend& b) : b_(b) {}
    BackendInfo info() const override { return b_.info(); }
    void prepareGraph(const ModelGraph& g, const TensorMap& w, int batch, int h, int wd) override {
        b_.prepareGraph(g, w, batch, h, wd);
    }
    void run(const std::vector<const float*>& in, int batch, const std::vector<float*>& out) override {
        b_.run(in, batch, out);
    }
    void prepare(const UNetModel& m, int batch, int h, int w) override { b_.prepare(m, batch, h, w); }
    void forward(const float* x, const float* t, int batch, float* out) override { b_.forward(x, t, batch, out); }

private:
    CudaBackend& b_;
};

}  // namespace

class TestCudaTiledVae : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        REQUIRE_DEVICE();
        if (!std::ifstream(kPipeline + "/vae/config.json").good()) QSKIP("tests/data/sdpipeline is not there");
    }

    void decodeTiledMatchesUntiled_data() {
        QTest::addColumn<int>("precision");
        QTest::addColumn<double>("minDb");
        QTest::newRow("fp32") << int(Precision::FP32) << 90.0;
        QTest::newRow("fp16") << int(Precision::FP16) << 45.0;
        QTest::newRow("bf16") << int(Precision::BF16) << 40.0;
    }
    void decodeTiledMatchesUntiled() {
        QFETCH(int, precision);
        QFETCH(double, minDb);
        const VaeModel vae = VaeModel::load(kPipeline);
        const HostTensor latent = smooth(4, 128, 128, 1.0);  // 1024 x 1024 pixels
        CudaBackend backend(static_cast<Precision>(precision));
        const HostTensor whole = vae.decode(backend, latent);
        GraphTiling tiling;
        tiling.tile = 32;
        tiling.batch = 4;
        TiledGraphReport report;
        const HostTensor tiled = decodeTiled(backend, vae, latent, tiling, &report);
        CpuBackend cpu;
        const HostTensor reference = vae.decode(cpu, latent);
        const double db = psnr(tiled, whole), dbCpu = psnr(tiled, reference), untiledCpu = psnr(whole, reference);
        qInfo(
            "decode 1024x1024 %s: tiled (%s) vs untiled on CUDA %.1f dB; tiled vs CPU %.1f dB; untiled vs CPU %.1f dB",
            QTest::currentDataTag(), report.describe().c_str(), db, dbCpu, untiledCpu);
        QCOMPARE(report.grid.cols, 4);
        QCOMPARE(report.canvases, std::string("device"));
        QVERIFY(report.storePeakBytes > 0);
        QVERIFY2(db >= minDb, qPrintable(QString::number(db)));
        QVERIFY2(dbCpu >= std::min(minDb, 45.0), qPrintable(QString::number(dbCpu)));

        // The same pass with host canvases (the fallback): the same image up to the statistics'
        // summation order (float64 on the host, float32 chunks merged in float64 on the device).
        HostCanvases hostOnly(backend);
        TiledGraphReport hostReport;
        const HostTensor viaHost = decodeTiled(hostOnly, vae, latent, tiling, &hostReport);
        QCOMPARE(hostReport.canvases, std::string("host"));
        const double dbStores = psnr(tiled, viaHost);
        qInfo("  device canvases vs host canvases %.1f dB", dbStores);
        QVERIFY2(dbStores >= minDb, qPrintable(QString::number(dbStores)));
    }

    // launchGroupMoments against a float64 two-pass reference: the whole image and a region, fp32
    // and fp16 storage, padded channels (20 real of 24), 4 groups.
    void groupMomentsMatchFloat64_data() {
        QTest::addColumn<int>("precision");
        QTest::newRow("fp32") << int(Precision::FP32);
        QTest::newRow("fp16") << int(Precision::FP16);
    }
    void groupMomentsMatchFloat64() {
        QFETCH(int, precision);
        const bool half = static_cast<Precision>(precision) == Precision::FP16;
        const int H = 37, W = 53, C = 20, stride = 24, groups = 4;
        std::mt19937 rng(3);
        std::normal_distribution<float> n(0.5f, 2.0f);
        std::vector<float> values(static_cast<std::size_t>(H) * W * stride, 0.0f);
        for (std::size_t i = 0; i < values.size(); ++i)
            if (static_cast<int>(i % stride) < C) values[i] = half ? __half2float(__float2half(n(rng))) : n(rng);
        std::vector<__half> halves(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) halves[i] = __float2half(values[i]);
        const std::size_t bytes = values.size() * (half ? 2 : 4);
        DeviceBuffer x(bytes), moments(2 * groups * sizeof(double));
        TESSERA_CHECK(cudaMemcpy(x.data(), half ? static_cast<const void*>(halves.data()) : values.data(), bytes,
                                 cudaMemcpyHostToDevice));
        for (const auto& [x0, y0, w, h] : {std::array<int, 4>{0, 0, W, H}, std::array<int, 4>{7, 5, 30, 21}}) {
            GroupMomentsParams p{half ? DType::F16 : DType::F32, x.data(), W, stride, C, groups, x0, y0, w, h};
            DeviceBuffer scratch(groupMomentsScratch(p) * sizeof(double));
            launchGroupMoments(p, moments.as<double>(), scratch.as<double>(), nullptr);
            std::vector<double> got(2 * groups);
            TESSERA_CHECK(cudaMemcpy(got.data(), moments.data(), got.size() * sizeof(double), cudaMemcpyDeviceToHost));
            for (int g = 0; g < groups; ++g) {
                double sum = 0, sq = 0;
                const int per = C / groups;
                const auto at = [&](int y, int xx, int c) {
                    return static_cast<double>(values[(static_cast<std::size_t>(y) * W + xx) * stride + c]);
                };
                for (int y = y0; y < y0 + h; ++y)
                    for (int xx = x0; xx < x0 + w; ++xx)
                        for (int c = g * per; c < (g + 1) * per; ++c) sum += at(y, xx, c);
                const double count = static_cast<double>(w) * h * per, mean = sum / count;
                for (int y = y0; y < y0 + h; ++y)
                    for (int xx = x0; xx < x0 + w; ++xx)
                        for (int c = g * per; c < (g + 1) * per; ++c)
                            sq += (at(y, xx, c) - mean) * (at(y, xx, c) - mean);
                QVERIFY2(std::abs(got[2 * g] - mean) <= 1e-4 * (1 + std::abs(mean)),
                         qPrintable(QString::number(got[2 * g] - mean)));
                QVERIFY2(std::abs(got[2 * g + 1] - sq / count) <= 1e-4 * sq / count,
                         qPrintable(QString::number(got[2 * g + 1] - sq / count)));
            }
        }
        QVERIFY(invalidRegionRefused());
    }

    // CudaTileDevice's budget: the device's free memory less the reserve, 2 bytes a value in
    // fp16 (4 in fp32), cuDNN's element limit, not shared with the host; setVaeMemoryLimit caps it.
    // Under a small cap, vae_tiling auto tiles a 512x512 decode (device canvases) and matches the
    // untiled one; without it, it decodes whole and says of what budget.
    void autoTilesUnderAForcedBudget() {
        const VaeModel vae = VaeModel::load(kPipeline);
        CudaTileDevice device(0);
        RunConfig config;
        config.precision = Precision::FP16;
        config.tuningCache = "off";
        std::optional<VaeMemoryBudget> budget = device.vaeMemoryBudget(config);
        QVERIFY(budget.has_value());
        QCOMPARE(budget->bytesPerValue, 2);
        QCOMPARE(budget->maxTensorElements, (std::int64_t{1} << 31) - 1);
        QVERIFY(!budget->sharedWithHost);
        QVERIFY2(budget->source.find("device free memory") == 0, budget->source.c_str());
        config.precision = Precision::FP32;
        QCOMPARE(device.vaeMemoryBudget(config)->bytesPerValue, 4);
        config.precision = Precision::FP16;

        Backend& backend = device.wholeGraphBackend(config);
        const HostTensor latent = smooth(4, 64, 64, 1.0);  // 512 x 512 pixels
        std::string whole, tiled;
        const HostTensor untiled = runVaePass(backend, vae, latent, true, VaeTiling::Auto, budget, &whole);
        QVERIFY2(whole.rfind("untiled (activations ", 0) == 0, whole.c_str());
        // The same decode again (the same graph, weights and shape: the plan is kept): the same bits.
        QVERIFY(runVaePass(backend, vae, latent, true, VaeTiling::Auto, budget, nullptr).data == untiled.data);
        const std::uint64_t untiledBytes = graphActivationBytes(vaeDecoderExecutionGraph(vae.config()), 1, 512, 512, 2);
        device.setVaeMemoryLimit(untiledBytes / 2);
        budget = device.vaeMemoryBudget(config);
        QCOMPARE(budget->bytes, untiledBytes / 2);
        QVERIFY2(budget->source.find(", limited to ") != std::string::npos, budget->source.c_str());
        const HostTensor viaTiles = runVaePass(backend, vae, latent, true, VaeTiling::Auto, budget, &tiled);
        qInfo("auto under %s: %s", budget->source.c_str(), tiled.c_str());
        QVERIFY2(tiled.rfind("tiled ", 0) == 0, tiled.c_str());
        QVERIFY2(tiled.find("canvases on the device") != std::string::npos, tiled.c_str());
        QVERIFY2(tiled.find(" exceed ") != std::string::npos, tiled.c_str());
        const double db = psnr(viaTiles, untiled);
        QVERIFY2(db >= 45.0, qPrintable(QString::number(db)));
    }

    void encodeTiledMatchesUntiled() {
        const VaeModel vae = VaeModel::load(kPipeline);
        const HostTensor image = smooth(3, 512, 512, 0.8);
        CudaBackend backend(Precision::FP16);
        const HostTensor whole = vae.encode(backend, image);
        GraphTiling tiling;
        tiling.tile = 16;
        tiling.batch = 4;
        const HostTensor tiled = encodeTiled(backend, vae, image, tiling);
        const double db = psnr(tiled, whole);
        qInfo("encode 512x512 fp16: tiled vs untiled on CUDA %.1f dB", db);
        QVERIFY2(db >= 45.0, qPrintable(QString::number(db)));
    }
};

QTEST_MAIN(TestCudaTiledVae)
#include "tst_cudatiledvae.moc"
