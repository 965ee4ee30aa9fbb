// The tiled VAE (core/TiledVae.h) on the CUDA backend: a 1024x1024 decode of a smooth latent
// tiled (4x4 tiles, whole-image GroupNorm statistics, attention over the whole image) against the
// untiled decode on the same device, in fp32, fp16 and bf16, and against the CPU reference; the
// same for the encoder. The tiled pass feeds the backend what no other graph does (a statistics
// vector into a lone ScaleShift, a context of every latent pixel into a token attention, ~30
// re-prepares per image). Weights: the tiny SD 1.x VAE of tests/data/sdpipeline. Skips where no
// CUDA device is present.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "core/CpuBackend.h"
#include "core/TiledVae.h"
#include "core/VaeModel.h"
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
                t.data[(static_cast<std::size_t>(c) * h + y) * w + x] = static_cast<float>(
                    amplitude * (0.6 * std::sin(2 * pi * ((1 + c % 2) * u + 0.5 * v) + c) +
                                 0.4 * std::cos(2 * pi * (1.5 * v - 0.5 * u) * (1 + c % 3))));
            }
    return t;
}

double psnr(const HostTensor& got, const HostTensor& want) {
    if (got.data.size() != want.data.size()) return -INFINITY;
    const auto [lo, hi] = std::minmax_element(want.data.begin(), want.data.end());
    double se = 0;
    for (std::size_t i = 0; i < want.data.size(); ++i) se += std::pow(static_cast<double>(got.data[i]) - want.data[i], 2);
    const double mse = se / static_cast<double>(want.data.size()), range = static_cast<double>(*hi) - *lo;
    return mse == 0 ? INFINITY : 10 * std::log10(range * range / mse);
}

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
        const HostTensor latent = smooth(4, 128, 128, 1.0);   // 1024 x 1024 pixels
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
        qInfo("decode 1024x1024 %s: tiled (%s) vs untiled on CUDA %.1f dB; tiled vs CPU %.1f dB; untiled vs CPU %.1f dB",
              QTest::currentDataTag(), report.describe().c_str(), db, dbCpu, untiledCpu);
        QCOMPARE(report.grid.cols, 4);
        QVERIFY2(db >= minDb, qPrintable(QString::number(db)));
        QVERIFY2(dbCpu >= std::min(minDb, 45.0), qPrintable(QString::number(dbCpu)));
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
