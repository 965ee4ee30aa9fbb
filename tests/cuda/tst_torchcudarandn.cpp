// torch.randn on a CUDA generator (kernels/ops/TorchCudaRandn.cuh), A1111's default "GPU" noise:
//  - bit for bit against tests/data/noise/cuda_randn.json, written by
//    tools/reference/make_cuda_noise_fixtures.py with torch on a GPU (the committed file: an H200,
//    T = 270,336, torch 2.11): [4,64,64] twice from one generator, [4,256,320], [1,4,128,128],
//    [4,128,128], seeds 0, 42, 2^32 + 5, with the Philox offset after each call where torch reports
//    it. The layout depends on the GPU's thread cap T, so this runs where the file's T is this
//    device's and skips otherwise (and without the file);
//  - on any GPU, against the CPU emulation of torch's layout (core/sampling/CudaGeneratorEmulation.h)
//    within 2e-5 (the device's logf and __sincosf against double), for this GPU's T and for
//    T = 256, 1024 and a 28-SM GPU's 43,008, which put elements in components .y to .w and in
//    later grid-stride iterations; the offsets after each call equal; the first call within 2e-5 of
//    A1111's NV generator;
//  - count 0 launches nothing; a count of 2^31 is refused.
// Device tests skip without a device.
#include <QtTest/QtTest>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/sampling/CudaGeneratorEmulation.h"
#include "core/sampling/NvPhiloxGenerator.h"
#include "core/sampling/TorchCudaRandnLaunch.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/ops/TorchCudaRandn.cuh"
#include "tests/cuda/CudaTestSupport.h"

using namespace tessera;
using nlohmann::json;

namespace {

std::uint32_t bitsOf(float v) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

// One torch.randn call of `count` elements on the device, copied back.
std::vector<float> deviceRandn(TorchCudaGenerator& generator, std::size_t count, std::uint64_t threadCap) {
    DeviceBuffer buffer(count * sizeof(float));
    launchTorchCudaRandn(generator, buffer.as<float>(), static_cast<long long>(count), threadCap, nullptr);
    std::vector<float> out(count);
    TESSERA_CHECK(cudaMemcpy(out.data(), buffer.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

std::size_t product(const json& shape) {
    std::size_t n = 1;
    for (const auto& d : shape) n *= d.get<std::size_t>();
    return n;
}

}  // namespace

class TestTorchCudaRandn : public QObject {
    Q_OBJECT

private slots:
    void matchesTorchOnThisGpu() {
        REQUIRE_DEVICE();
        std::ifstream file(std::string(TESSERA_TEST_DATA) + "/noise/cuda_randn.json");
        if (!file)
            QSKIP(
                "tests/data/noise/cuda_randn.json is missing: run tools/reference/make_cuda_noise_fixtures.py "
                "on a GPU");
        const json doc = json::parse(file);
        int device = 0;
        TESSERA_CHECK(cudaGetDevice(&device));
        const std::uint64_t threadCap = torchCudaThreadCapOf(device);
        if (doc["thread_cap"].get<std::uint64_t>() != threadCap)
            QSKIP(qPrintable(QString("the fixture's GPU (%1) has thread cap %2, this one %3")
                                 .arg(doc["device"].get<std::string>().c_str())
                                 .arg(doc["thread_cap"].get<qulonglong>())
                                 .arg(static_cast<qulonglong>(threadCap))));
        std::uint64_t exact = 0, total = 0;
        for (const json& c : doc["cases"]) {
            TorchCudaGenerator generator{c["seed"].get<std::uint64_t>(), 0};
            for (const json& output : c["outputs"]) {
                const std::vector<float> got = deviceRandn(generator, product(output["shape"]), threadCap);
                QCOMPARE(got.size(), output["count"].get<std::size_t>());
                const std::string where =
                    c["name"].get<std::string>() + " seed " + std::to_string(c["seed"].get<std::uint64_t>());
                int badSamples = 0;
                for (const json& s : output["samples"])
                    if (bitsOf(got[s[0].get<std::size_t>()]) != s[1].get<std::uint32_t>()) ++badSamples;
                const bool same =
                    sha256Hex(got.data(), got.size() * sizeof(float)) == output["sha256"].get<std::string>();
                total += got.size();
                if (same) exact += got.size();
                QVERIFY2(same, qPrintable(QString("%1: SHA-256 differs, %2 of %3 samples differ")
                                              .arg(where.c_str())
                                              .arg(badSamples)
                                              .arg(output["samples"].size())));
                if (output.contains("offset_after"))
                    QCOMPARE(generator.philoxOffset, output["offset_after"].get<std::uint64_t>());
            }
        }
        qInfo("%llu of %llu values bit-exact (%s, T = %llu)", static_cast<unsigned long long>(exact),
              static_cast<unsigned long long>(total), doc["device"].get<std::string>().c_str(),
              static_cast<unsigned long long>(threadCap));
    }

    void followsTheEmulatedLayout_data() {
        QTest::addColumn<qulonglong>("threadCap");  // 0: this device's
        QTest::addColumn<qulonglong>("seed");
        QTest::addColumn<QList<qulonglong>>("calls");
        const QList<qulonglong> latents = {16384, 16384, 327680, 65536};
        QTest::newRow("this GPU") << qulonglong{0} << qulonglong{42} << latents;
        QTest::newRow("this GPU, seed 2^32 + 5") << qulonglong{0} << qulonglong{(1ull << 32) + 5} << latents;
        QTest::newRow("28 SMs x 1536") << qulonglong{43008} << qulonglong{0} << latents;
        QTest::newRow("T 1024") << qulonglong{1024} << qulonglong{7} << QList<qulonglong>{1, 17, 4097, 5000, 16384};
        QTest::newRow("T 256") << qulonglong{256} << qulonglong{123456789} << QList<qulonglong>{2049, 255, 1025};
    }

    void followsTheEmulatedLayout() {
        REQUIRE_DEVICE();
        QFETCH(qulonglong, threadCap);
        QFETCH(qulonglong, seed);
        QFETCH(QList<qulonglong>, calls);
        if (threadCap == 0) {
            int device = 0;
            TESSERA_CHECK(cudaGetDevice(&device));
            threadCap = torchCudaThreadCapOf(device);
        }
        TorchCudaGenerator generator{seed, 0};
        CudaGeneratorEmulation emulation(seed, threadCap);
        double maxDiff = 0;
        for (const qulonglong count : calls) {
            const std::vector<float> got = deviceRandn(generator, count, threadCap);
            const std::vector<float> want = emulation.randn(count);
            for (std::size_t i = 0; i < got.size(); ++i) {
                const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
                maxDiff = std::max(maxDiff, d);
                QVERIFY2(d <= 2e-5, qPrintable(QString("count %1, element %2: %3 vs %4")
                                                   .arg(count)
                                                   .arg(i)
                                                   .arg(static_cast<double>(got[i]), 0, 'g', 9)
                                                   .arg(static_cast<double>(want[i]), 0, 'g', 9)));
            }
            QCOMPARE(generator.philoxOffset, emulation.philoxOffset());
        }
        qInfo("max |device - emulation| %.3g", maxDiff);
    }

    void firstCallIsNearNv() {
        REQUIRE_DEVICE();
        int device = 0;
        TESSERA_CHECK(cudaGetDevice(&device));
        TorchCudaGenerator generator{2024, 0};
        const std::vector<float> got = deviceRandn(generator, 4 * 64 * 64, torchCudaThreadCapOf(device));
        const std::vector<float> nv = NvPhiloxGenerator(2024).randn(got.size());
        double maxDiff = 0;
        std::size_t exact = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            maxDiff = std::max(maxDiff, std::fabs(static_cast<double>(got[i]) - nv[i]));
            if (bitsOf(got[i]) == bitsOf(nv[i])) ++exact;
        }
        QVERIFY2(maxDiff <= 2e-5, qPrintable(QString::number(maxDiff)));
        qInfo("NV: max |difference| %.3g, %zu of %zu bit-exact", maxDiff, exact, got.size());
    }

    void edgeCounts() {
        REQUIRE_DEVICE();
        TorchCudaGenerator generator{1, 0};
        launchTorchCudaRandn(generator, nullptr, 0, 270336, nullptr);
        QCOMPARE(generator.philoxOffset, std::uint64_t{0});
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 launchTorchCudaRandn(generator, nullptr, 1ll << 31, 270336, nullptr));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, launchTorchCudaRandn(generator, nullptr, -1, 270336, nullptr));
        int device = 0, sms = 0, perSm = 0;
        TESSERA_CHECK(cudaGetDevice(&device));
        TESSERA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        TESSERA_CHECK(cudaDeviceGetAttribute(&perSm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
        QCOMPARE(torchCudaThreadCapOf(device), torchCudaThreadCap(sms, perSm));
    }
};

QTEST_APPLESS_MAIN(TestTorchCudaRandn)
#include "tst_torchcudarandn.moc"
