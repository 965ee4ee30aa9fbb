// The parts of the CUDA backend that need no device (kernels/backend/CudaMemoryPlan.h, CudaAlgorithmChoice.h,
// CudaSettings.h, CudaWeights.h): buffer placement, the tuning ledger and the choice texts, the
// environment settings, bf16 rounding and conv weight repacking. Runs without a GPU.
#include <QtTest/QtTest>

#include <bit>
#include <cstring>
#include <random>
#include <stdexcept>
#include <tuple>

#include "CudaTestSupport.h"
#include "core/formats/TuningCache.h"
#include "kernels/backend/CudaAlgorithmChoice.h"
#include "kernels/backend/CudaMemoryPlan.h"
#include "kernels/backend/CudaSettings.h"
#include "kernels/backend/CudaWeights.h"

using namespace tessera;

namespace {

PlanBuffer buffer(std::size_t bytes, bool wholeRun = false) {
    PlanBuffer b;
    b.bytes = bytes;
    b.wholeRun = wholeRun;
    return b;
}

bool overlaps(const PlanBuffer& a, const PlanBuffer& b) {
    const bool inTime = a.first <= b.last && b.first <= a.last;
    const bool inSpace = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
    return inTime && inSpace;
}

}  // namespace

class TestCudaBackendParts : public QObject {
    Q_OBJECT

private slots:
    // Buffers whose lifetimes do not overlap share bytes; the largest are placed first.
    void placeBuffersSharesByLifetime() {
        std::vector<PlanBuffer> b{buffer(1024), buffer(1024), buffer(512)};
        const ActivationLayout layout = placeBuffers(b, {{0, 2}, {1, 2}, {1}});
        QCOMPARE(b[0].first, 0);
        QCOMPARE(b[0].last, 0);
        QCOMPARE(b[1].first, 1);
        QCOMPARE(b[1].last, 2);
        QCOMPARE(b[0].offset, std::size_t(0));
        QCOMPARE(b[1].offset, std::size_t(0));     // after buffer 0's last use
        QCOMPARE(b[2].offset, std::size_t(1024));  // lives with both
        QCOMPARE(layout.bytes, std::size_t(1536));
        QCOMPARE(layout.unsharedBytes, std::size_t(2560));
    }

    // Whole-run buffers (inputs, outputs, staging) and buffers no op uses are never shared.
    void placeBuffersKeepsWholeRunApart() {
        std::vector<PlanBuffer> b{buffer(256), buffer(256, true), buffer(256), buffer(256)};
        const ActivationLayout layout = placeBuffers(b, {{0}, {2}});
        QCOMPARE(b[1].first, 0);
        QCOMPARE(b[1].last, 2);
        QCOMPARE(b[3].first, 0);
        QCOMPARE(b[3].last, 2);
        for (std::size_t i = 0; i < b.size(); ++i)
            for (std::size_t j = i + 1; j < b.size(); ++j) QVERIFY(!overlaps(b[i], b[j]));
        QCOMPARE(b[0].offset, b[2].offset);  // ops 0 and 1: apart in time
        QCOMPARE(layout.bytes, std::size_t(768));
    }

    // Random plans: no two buffers alive at once overlap, and the region holds them all.
    void placeBuffersNeverOverlapsLiveBuffers() {
        std::mt19937 rng(7);
        for (int plan = 0; plan < 50; ++plan) {
            const int n = 2 + static_cast<int>(rng() % 30), opCount = 1 + static_cast<int>(rng() % 20);
            std::vector<PlanBuffer> b;
            for (int i = 0; i < n; ++i) b.push_back(buffer(alignUp(1 + rng() % 5000), rng() % 8 == 0));
            std::vector<std::vector<int>> uses(static_cast<std::size_t>(opCount));
            for (auto& u : uses)
                for (int k = 0; k < 3; ++k) u.push_back(static_cast<int>(rng() % static_cast<unsigned>(n)));
            const ActivationLayout layout = placeBuffers(b, uses);
            std::size_t unshared = 0;
            for (std::size_t i = 0; i < b.size(); ++i) {
                unshared += b[i].bytes;
                QVERIFY(b[i].offset + b[i].bytes <= layout.bytes);
                QCOMPARE(b[i].offset % kAlign, std::size_t(0));
                for (std::size_t j = i + 1; j < b.size(); ++j) QVERIFY(!overlaps(b[i], b[j]));
            }
            QCOMPARE(layout.unsharedBytes, unshared);
            QVERIFY(layout.bytes <= unshared);
        }
    }

    // Choices stored when timed (not when heuristic), found again in the same context only,
    // counted, and a refused one warned about; the digest is core's over the choices used.
    void tuningLedgerCountsStoresAndWarns() {
        TuningLedger off;  // no cache: finds nothing
        QVERIFY(!off.cached("conv 1").has_value());

        QTemporaryDir dir;
        TuningCache stored((dir.path() + "/tuning.json").toStdString());
        TuningLedger ledger;
        ledger.setCache(&stored);
        ledger.setContext("H100|9.0");
        ledger.useNew("conv a", "algo=1 math=1", true);
        ledger.useNew("attention b", "fused", false);  // forced by a setting: not stored
        QCOMPARE(stored.find("H100|9.0", "conv a").value_or(""), std::string("algo=1 math=1"));
        QVERIFY(!stored.find("H100|9.0", "attention b").has_value());
        QCOMPARE(ledger.cached("conv a").value_or(""), std::string("algo=1 math=1"));
        ledger.setContext("other device");
        QVERIFY(!ledger.cached("conv a").has_value());

        ledger.clear();
        ledger.useCached("conv a", "algo=1 math=1");
        ledger.rejectCached("graph conv c", "engine=9 config=0", "not offered");
        ledger.useNew("graph conv c", "legacy", true);
        const TuningInfo info = ledger.info({{"TESSERA_CUDNN_FUSE", "0"}});
        QCOMPARE(info.hits, 1);
        QCOMPARE(info.misses, 1);
        QCOMPARE(info.rejected, 1);
        QCOMPARE(info.digest, tuningDigest({{"conv a", "algo=1 math=1"}, {"graph conv c", "legacy"}}));
        QCOMPARE(info.settings.at("TESSERA_CUDNN_FUSE"), std::string("0"));
        QCOMPARE(ledger.warnings().size(), std::size_t(1));
        QCOMPARE(ledger.warnings()[0],
                 std::string("tuning cache: the stored choice 'engine=9 config=0' for graph conv c "
                             "is refused now (not offered); timed again and replaced"));
        QVERIFY(ledger.summary().starts_with("  tuning: 1 choices from the cache, 1 timed, 1 refused; digest " +
                                             info.digest + "\n  tuning cache: the stored choice"));
        ledger.clear();
        QCOMPARE(ledger.info({}).hits, 0);
        QVERIFY(ledger.warnings().empty());
        QVERIFY(ledger.summary().find("digest none") != std::string::npos);
    }

    // The texts the tuning cache holds, and damaged ones refused.
    void choiceTextsRoundTrip() {
        const std::string text = legacyChoice(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_TENSOR_OP_MATH);
        const auto parsed = parseLegacyChoice(text);
        QVERIFY(parsed.has_value());
        QCOMPARE(parsed->first, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
        QCOMPARE(parsed->second, CUDNN_TENSOR_OP_MATH);
        for (const char* bad : {"algo=1", "algo=1 math=1x", "algo=99 math=0", "algo=1 math=9", "fused"})
            QVERIFY2(!parseLegacyChoice(bad).has_value(), bad);
        QCOMPARE(planChoice(std::shared_ptr<GraphConv>(), "legacy"), std::string("legacy"));
        QCOMPARE(parsePlanChoice("legacy", "legacy")->engine, -1LL);
        const auto plan = parsePlanChoice("engine=12 config=3", "apart");
        QVERIFY(plan.has_value());
        QCOMPARE(plan->engine, 12LL);
        QCOMPARE(plan->ordinal, 3);
        for (const char* bad : {"engine=-1 config=0", "engine=1", "legacy", "engine=1 config=0 x"})
            QVERIFY2(!parsePlanChoice(bad, "apart").has_value(), bad);
        QCOMPARE(std::string(algoName(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)),
                 std::string("implicit_precomp_gemm"));
    }

    void settingsFromEnvironment() {
        using tessera::testing::ScopedEnv;
        {
            const ScopedEnv mib("TESSERA_CUDA_ATTENTION_MIB", "64"), flash("TESSERA_CUDA_FLASH", "1"),
                fuse("TESSERA_CUDNN_FUSE", "0"), sync("TESSERA_CUDA_SYNC", "op");
            const CudaSettings s = CudaSettings::fromEnvironment();
            QCOMPARE(s.attentionBudgetBytes, std::size_t(64) << 20);
            QVERIFY(s.flash == FlashMode::On);
            QVERIFY(!s.fuse);
            QVERIFY(s.syncEveryOp);
            QCOMPARE(s.values.size(), std::size_t(12));  // every setting recorded, set or not
            QVERIFY(!s.denseViews);
            QCOMPARE(s.values.at("TESSERA_CUDNN_FUSE"), std::string("0"));
            QCOMPARE(s.values.at("TESSERA_CUDNN_API"), std::string(""));
        }
        {
            const ScopedEnv dense("TESSERA_CUDA_DENSE", "1");
            QVERIFY(CudaSettings::fromEnvironment().denseViews);
        }
        {
            QVERIFY(CudaSettings::fromEnvironment().lt);  // cuBLASLt's bias epilogue by default
            const ScopedEnv lt("TESSERA_CUBLASLT", "0");
            QVERIFY(!CudaSettings::fromEnvironment().lt);
        }
        {
            const ScopedEnv mib("TESSERA_CUDA_ATTENTION_MIB", ""), flash("TESSERA_CUDA_FLASH", "");
            const CudaSettings s = CudaSettings::fromEnvironment();
            QCOMPARE(s.attentionBudgetBytes, kAttentionScoreMiB << 20);
            QVERIFY(s.flash == FlashMode::Auto);
        }
        for (const char* bad : {"0", "abc", "1048577", "123456789", "-5"}) {
            const ScopedEnv mib("TESSERA_CUDA_ATTENTION_MIB", bad);
            try {
                (void)CudaSettings::fromEnvironment();
                QFAIL(bad);
            } catch (const std::invalid_argument& e) {
                const std::string m = e.what();
                QVERIFY2(
                    m.starts_with("TESSERA_CUDA_ATTENTION_MIB: '") && m.find("from 1 to 1048576") != std::string::npos,
                    e.what());
            }
        }
        for (const auto& [value, rows, warps] : {std::tuple{"1", 64, 4}, {"128", 128, 4}, {"128w8", 128, 8}}) {
            const ScopedEnv flash("TESSERA_CUDA_FLASH", value);
            const CudaSettings s = CudaSettings::fromEnvironment();
            QVERIFY(s.flash == FlashMode::On);
            QCOMPARE(s.flashBlockQueries, rows);
            QCOMPARE(s.flashWarps, warps);
        }
        for (const auto& [value, mode] :
             {std::pair{"0", FlashMode::Off}, {"1", FlashMode::On}, {"auto", FlashMode::Auto}, {"", FlashMode::Auto}}) {
            const ScopedEnv sdpa("TESSERA_CUDA_SDPA", value);
            QVERIFY(CudaSettings::fromEnvironment().sdpa == mode);
        }
        {
            const ScopedEnv sdpa("TESSERA_CUDA_SDPA", "cudnn");
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, CudaSettings::fromEnvironment());
        }
        const ScopedEnv flash("TESSERA_CUDA_FLASH", "yes");
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, CudaSettings::fromEnvironment());
    }

    void bf16RoundsToNearestEven() {
        QCOMPARE(floatToBf16(1.0f), std::uint16_t(0x3F80));
        QCOMPARE(floatToBf16(std::bit_cast<float>(0x3F808000u)), std::uint16_t(0x3F80));  // tie: even
        QCOMPARE(floatToBf16(std::bit_cast<float>(0x3F818000u)), std::uint16_t(0x3F82));  // tie: even
        QCOMPARE(floatToBf16(std::bit_cast<float>(0x3F808001u)), std::uint16_t(0x3F81));
        QCOMPARE(floatToBf16(-2.0f), std::uint16_t(0xC000));
        QCOMPARE(floatToBf16(std::numeric_limits<float>::quiet_NaN()), std::uint16_t(0x7FC0));
        QCOMPARE(floatToBf16(std::bit_cast<float>(0xFF800001u)), std::uint16_t(0x7FC0));  // any NaN: canonical
    }

    // [O, I, kh, kw] -> [opad][kh][kw][ipad], padding zero; the blob keeps 256-byte offsets.
    void convWeightsRepackedAndBlobAligned() {
        HostTensor t;
        t.shape = {2, 3, 1, 2};
        for (int i = 0; i < 12; ++i) t.data.push_back(static_cast<float>(i + 1));
        const std::vector<float> packed = packConvWeight(t, 4, 3);
        QCOMPARE(packed.size(), std::size_t(3 * 1 * 2 * 4));
        // out[o][0][x][i] = t[o][i][0][x]
        for (int o = 0; o < 3; ++o)
            for (int x = 0; x < 2; ++x)
                for (int i = 0; i < 4; ++i) {
                    const float want = o < 2 && i < 3 ? t.data[static_cast<std::size_t>((o * 3 + i) * 2 + x)] : 0.0f;
                    QCOMPARE(packed[static_cast<std::size_t>((o * 2 + x) * 4 + i)], want);
                }
        WeightBlob blob;
        QCOMPARE(blob.addFloats({1.0f, 2.0f}), std::size_t(0));
        QCOMPARE(blob.addTyped({1.0f, 2.0f, 3.0f}, DType::BF16), kAlign);
        QCOMPARE(blob.addTyped({1.0f}, DType::F16), 2 * kAlign);
        QCOMPARE(blob.size(), 3 * kAlign);
        std::uint16_t bf = 0, half = 0;
        std::memcpy(&bf, blob.data() + kAlign + 2, 2);
        std::memcpy(&half, blob.data() + 2 * kAlign, 2);
        QCOMPARE(bf, std::uint16_t(0x4000));    // 2.0 in bf16
        QCOMPARE(half, std::uint16_t(0x3C00));  // 1.0 in fp16
    }
};

QTEST_GUILESS_MAIN(TestCudaBackendParts)
#include "tst_cudabackendparts.moc"
