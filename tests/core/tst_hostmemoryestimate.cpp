// core/cpu/HostMemoryEstimate: the host memory a run needs, worked out before any work, checked
// against what the machine has; its parts measured against what the code really allocates.
#include <QtTest/QtTest>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <memory>
#include <sstream>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/sd/SdModel.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ImageOps.h"

using namespace tessera;

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// AddressSanitizer reserves terabytes of address space for its shadow: it cannot run under an
// RLIMIT_AS.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// google/ddpm-cifar10-32's UNet (the bench's "cifar" shape): 35.7 M parameters, attention at 16x16.
UNetConfig cifarConfig() {
    UNetConfig c;
    c.sampleSize = 32;
    c.layersPerBlock = 2;
    c.attentionHeadDim = std::nullopt;
    c.downsamplePadding = 0;
    c.normEps = 1e-6f;
    c.normNumGroups = 32;
    c.freqShift = 1;
    c.flipSinToCos = false;
    c.blockOutChannels = {128, 256, 256, 256};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::Down, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up};
    return c;
}

UNetConfig fixtureConfig() { return UNetModel::load(TESSERA_TEST_DATA "/models/cifar_like").config(); }

RunConfig bigCanvas() {
    RunConfig c;
    c.width = c.height = 16384;
    c.tile = 64;
    c.overlapPx = 0;
    c.tileBatch = 1;
    c.steps = 20;
    return c;
}

const MemoryItem* itemOf(const HostMemoryEstimate& e, MemoryPart part) {
    for (const MemoryItem& item : e.items)
        if (item.part == part) return &item;
    return nullptr;
}

ValidationError refusalOf(const RunConfig& config, const UNetConfig& model, BackendKind backend,
                          std::uint64_t available, const std::optional<StartImageSize>& start = std::nullopt) {
    try {
        checkHostMemory(config, model, backend, start, HostMemory{available, "a test's budget"});
    } catch (const ValidationError& e) {
        return e;
    }
    return ValidationError("", "");
}

bool fits(const RunConfig& config, const UNetConfig& model, std::uint64_t available) {
    return estimateHostMemory(config, model, BackendKind::CPU).peakBytes() <= available;
}

QRegularExpressionMatch matchOf(const std::string& text, const char* pattern) {
    return QRegularExpression(QString::fromLatin1(pattern)).match(QString::fromStdString(text));
}

std::size_t heapInUse() { return mallinfo2().uordblks; }

std::uint64_t residentBytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

std::uint64_t peakResidentBytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

class NoObserver : public RunObserver {};

}  // namespace

class TestHostMemoryEstimate : public QObject {
    Q_OBJECT

private slots:
    // A real CPU run (first in this suite, so the process's peak RSS is its own): the estimate
    // is at least the memory the run added at its peak, and not far above it.
    void estimateBoundsARealRunsPeak() {
#if defined(__SANITIZE_ADDRESS__)
        QSKIP("the sanitizer's shadow memory and quarantine are in the resident set");
#endif
        RunConfig config;
        config.width = 1024;
        config.height = 512;
        config.tile = 64;
        config.overlapPx = 0;
        config.tileBatch = 8;
        config.steps = 1;  // the last step holds the most (seam statistics); one is enough
        config.model = TESSERA_TEST_DATA "/models/cifar_like";
        const HostMemoryEstimate e = estimateHostMemory(config, fixtureConfig(), BackendKind::CPU);
        const std::uint64_t before = residentBytes();
        QVERIFY2(peakResidentBytes() < before + (64u << 20), "the suite's peak came before this test");
        CpuEngine engine(std::make_unique<CpuBackend>(1));
        NoObserver observer;
        const RunResult result = engine.run(config, observer);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        const std::uint64_t grown = peakResidentBytes() - before;
        const std::uint64_t estimated = e.bytesIn(MemoryPhase::Sampling);
        const QString text =
            QStringLiteral("estimated %1 MiB, the run added %2 MiB at its peak").arg(estimated >> 20).arg(grown >> 20);
        QVERIFY2(estimated >= grown, qPrintable(text));
        QVERIFY2(estimated - e.bytesOf(MemoryPart::Process) <= grown + grown / 2, qPrintable(text));
        qInfo("%s", qPrintable(text));
    }

    // A very large canvas: 16384 x 16384, tile 64, overlap 0 on the CPU needs about 27 GB at the
    // last step (four float canvases and two double ones); validate() accepts it.
    void bigCanvasOnTheCpuNeedsAbout27GB() {
        const RunConfig config = bigCanvas();
        validate(config);
        const HostMemoryEstimate e = estimateHostMemory(config, cifarConfig(), BackendKind::CPU);
        const std::uint64_t canvas = 3ull * 16384 * 16384;
        QCOMPARE(itemOf(e, MemoryPart::Canvas)->bytes, 4 * canvas * 4);
        QCOMPARE(itemOf(e, MemoryPart::Seams)->bytes, 2 * canvas * 8);
        QVERIFY(e.peakPhase() == MemoryPhase::Sampling);
        QVERIFY2(e.peakBytes() > 28 * kGiB && e.peakBytes() < 32 * kGiB,
                 qPrintable(QString::fromStdString(formatBytes(e.peakBytes()))));
        // The CUDA engine keeps the canvas and activations on the GPU: the host needs far less.
        const HostMemoryEstimate cuda = estimateHostMemory(config, cifarConfig(), BackendKind::CUDA);
        QVERIFY(itemOf(cuda, MemoryPart::Canvas) == nullptr && itemOf(cuda, MemoryPart::Activations) == nullptr);
        QVERIFY(cuda.peakBytes() < e.peakBytes() - 10 * kGiB);
    }

    void refusedNamingWidthWithASizeThatFits() {
        const RunConfig config = bigCanvas();
        const std::uint64_t budget = 16 * kGiB;
        const ValidationError e = refusalOf(config, cifarConfig(), BackendKind::CPU, budget);
        const std::string message = e.what();
        QCOMPARE(e.field(), std::string("width"));
        QVERIFY2(message.rfind("width: the run needs about ", 0) == 0, e.what());
        QVERIFY2(message.find("more than the 16.0 GiB available (a test's budget)") != std::string::npos, e.what());
        QVERIFY2(message.find("canvas: latents, noise and two accumulators") != std::string::npos, e.what());
        const QRegularExpressionMatch m = matchOf(message, "at most about (\\d+)x(\\d+) fits");
        QVERIFY2(m.hasMatch(), e.what());
        RunConfig smaller = config;
        smaller.width = m.captured(1).toInt();
        smaller.height = m.captured(2).toInt();
        QVERIFY2(fits(smaller, cifarConfig(), budget), e.what());
        smaller.width += 200;
        smaller.height += 200;
        QVERIFY2(!fits(smaller, cifarConfig(), budget), "the suggested size is far below what fits");
        // The same run fits with enough memory: nothing thrown.
        checkHostMemory(config, cifarConfig(), BackendKind::CPU, std::nullopt, HostMemory{64 * kGiB, "plenty"});
    }

    // Big tiles in big batches: the activations dominate, and the largest batch that fits is named.
    void refusedNamingBatch() {
        RunConfig config;
        config.width = config.height = 2048;
        config.tile = 1024;
        config.overlapPx = 0;
        config.tileBatch = 4;
        const std::uint64_t budget = 20 * kGiB;
        const ValidationError e = refusalOf(config, cifarConfig(), BackendKind::CPU, budget);
        QCOMPARE(e.field(), std::string("batch"));
        const QRegularExpressionMatch m = matchOf(e.what(), "lower batch \\(at most (\\d+) fits\\)");
        QVERIFY2(m.hasMatch(), e.what());
        const int batch = m.captured(1).toInt();
        QVERIFY(batch >= 1 && batch < 4);
        config.tileBatch = batch;
        QVERIFY(fits(config, cifarConfig(), budget));
        config.tileBatch = batch + 1;
        QVERIFY(!fits(config, cifarConfig(), budget));
    }

    // 65,536 tiles one at a time for 1000 steps: the timing rows of the record, manifest and
    // CSV dominate while the outputs are written.
    void refusedNamingSteps() {
        RunConfig config = bigCanvas();
        config.steps = 1000;
        const HostMemoryEstimate e = estimateHostMemory(config, cifarConfig(), BackendKind::CUDA);
        QVERIFY(e.peakPhase() == MemoryPhase::Output);
        const ValidationError refused = refusalOf(config, cifarConfig(), BackendKind::CUDA, 64 * kGiB);
        QCOMPARE(refused.field(), std::string("steps"));
        QVERIFY2(std::string(refused.what()).find("while writing the outputs") != std::string::npos, refused.what());
        QVERIFY2(matchOf(refused.what(), "lower steps \\(at most \\d+ fits\\)").hasMatch(), refused.what());
    }

    // A huge start image for a small run: decoding and resizing it is the peak.
    void startImageCountedFromItsHeader() {
        RunConfig config;
        config.initImage = "start.jpg";
        const StartImageSize start{12000, 12000, 40u << 20};
        const HostMemoryEstimate without = estimateHostMemory(config, fixtureConfig(), BackendKind::CPU);
        const HostMemoryEstimate with = estimateHostMemory(config, fixtureConfig(), BackendKind::CPU, start);
        QVERIFY(with.peakPhase() == MemoryPhase::StartImage);
        QVERIFY(with.bytesIn(MemoryPhase::StartImage) > 144000000ull * 7);
        QCOMPARE(with.bytesIn(MemoryPhase::Sampling) - without.bytesIn(MemoryPhase::Sampling), 3ull * 256 * 256 * 4);
        const ValidationError e = refusalOf(config, fixtureConfig(), BackendKind::CPU, 512u << 20, start);
        QCOMPARE(e.field(), std::string("init"));
        QVERIFY2(std::string(e.what()).find("use a smaller start image") != std::string::npos, e.what());
    }

    // The activation estimate is at least what CpuBackend::prepare allocates, and not far above.
    void activationsBoundWhatCpuBackendAllocates_data() {
        QTest::addColumn<bool>("cifar");
        QTest::addColumn<int>("batch");
        QTest::addColumn<int>("tile");
        QTest::newRow("fixture 1x32") << false << 1 << 32;
        QTest::newRow("fixture 8x64") << false << 8 << 64;
        QTest::newRow("fixture 2x256") << false << 2 << 256;
        QTest::newRow("cifar 1x32") << true << 1 << 32;
        QTest::newRow("cifar 8x64") << true << 8 << 64;
        QTest::newRow("cifar 1x128") << true << 1 << 128;
    }
    void activationsBoundWhatCpuBackendAllocates() {
        QFETCH(bool, cifar);
        QFETCH(int, batch);
        QFETCH(int, tile);
        const UNetModel model =
            cifar ? UNetModel::random(cifarConfig(), 1) : UNetModel::load(TESSERA_TEST_DATA "/models/cifar_like");
        CpuBackend backend(1);
        backend.prepare(model, batch, tile, tile);
        const std::uint64_t actual = backend.preparedFloats() * sizeof(float);
        const std::uint64_t estimate = cpuActivationBytes(model.config(), batch, tile, tile);
        const QString text = QStringLiteral("estimate %1, allocated %2").arg(estimate).arg(actual);
        QVERIFY2(estimate >= actual, qPrintable(text));
        // Liveness with half on top for reuse gaps, plus the scratch bands: not far above.
        QVERIFY2(estimate <= actual + actual * 2 / 5 + (80u << 20), qPrintable(text));
        // The weights item is the model's float32 parameters.
        RunConfig config;
        config.tile = tile;
        config.tileBatch = batch;
        QCOMPARE(itemOf(estimateHostMemory(config, model.config(), BackendKind::CPU), MemoryPart::Weights)->bytes,
                 static_cast<std::uint64_t>(model.parameterCount()) * 4);
    }

    // The per-row constants for the run record and its manifest/CSV text are upper bounds of
    // what RunRecord and RunRecordIO allocate (heap in use, measured with mallinfo2).
    void recordRowsBoundWhatTheRecordAllocates() {
#if defined(__SANITIZE_ADDRESS__)
        QSKIP("mallinfo2 does not see the sanitizer's allocator");
#endif
        RunConfig config;
        config.width = 64 * 25;
        config.height = 64 * 40;  // 1000 tiles of 64, overlap 0
        config.overlapPx = 0;
        config.tileBatch = 4;
        config.steps = 40;  // 250 batches a step: 10,000 rows
        config.previewEvery = 0;
        const HostMemoryEstimate e = estimateHostMemory(config, fixtureConfig(), BackendKind::CPU);
        const std::size_t before = heapInUse();
        RunRecord record;
        record.config = config;
        for (int step = 0; step < config.steps; ++step)
            for (int j = 0; j < 250; ++j) {
                TileBatchTiming b;
                b.step = step;
                b.batchIndex = j;
                b.timestep = 999.5f - step;
                b.hostMs = 12.345678 + j;
                for (int t = 0; t < 4; ++t) b.tileIds.push_back(j * 4 + t);
                record.batches.push_back(std::move(b));
            }
        record.batches.shrink_to_fit();
        const std::size_t recordBytes = heapInUse() - before;
        QVERIFY2(
            recordBytes <= itemOf(e, MemoryPart::Record)->bytes,
            qPrintable(
                QStringLiteral("record %1 > estimate %2").arg(recordBytes).arg(itemOf(e, MemoryPart::Record)->bytes)));
        const std::size_t beforeText = heapInUse();
        const std::string manifest = manifestJson(record).dump(2);
        const std::string csv = timingsCsv(record);
        // The manifest text lives again in the PNG's iTXt chunk and in the PNG bytes' copy.
        const std::size_t textBytes = heapInUse() - beforeText + 2 * manifest.size();
        QVERIFY2(
            textBytes <= itemOf(e, MemoryPart::OutputText)->bytes,
            qPrintable(
                QStringLiteral("text %1 > estimate %2").arg(textBytes).arg(itemOf(e, MemoryPart::OutputText)->bytes)));
        QVERIFY(!csv.empty());
    }

    void memAvailableParsed() {
        const std::string meminfo =
            "MemTotal:       24684096 kB\nMemFree:         1000 kB\nMemAvailable:   19555376 kB\n";
        QCOMPARE(parseMemAvailable(meminfo).value_or(0), 19555376ull * 1024);
        QVERIFY(!parseMemAvailable("MemTotal: 5 kB\n").has_value());
        QVERIFY(!parseMemAvailable("XMemAvailable: 5 kB\n").has_value());
        QVERIFY(!parseMemAvailable("MemAvailable: lots kB\n").has_value());
        QVERIFY(!parseMemAvailable("MemAvailable: 99999999999999999999999 kB\n").has_value());
        QCOMPARE(parseMemAvailable("MemTotal: 5 kB\nMemAvailable: 7 kB").value_or(0), 7ull * 1024);
        // This machine's.
        const std::optional<HostMemory> here = availableHostMemory();
        QVERIFY(here.has_value());
        QVERIFY(here->availableBytes > 0);
        QVERIFY(!here->source.empty());
    }

    // The start image's resize holds the smaller of its two first passes (core/sampling/ImageOps.h):
    // a 1 x 65535 image made 4096 x 64 holds 64 x 1 pixels in between, not 65535 x 4096 (3.2 GB).
    void startImageResizeCountedInItsOrder() {
        QVERIFY(resizeColumnsFirst(1, 65535, 4096, 64));
        QCOMPARE(resizeIntermediatePixels(1, 65535, 4096, 64), 64ull);
        QVERIFY(!resizeColumnsFirst(512, 512, 768, 768));  // the same scale both ways: rows first
        QVERIFY(!resizeColumnsFirst(41, 3, 6, 20));
        QCOMPARE(resizeIntermediatePixels(41, 3, 6, 20), 18ull);
        RunConfig config;
        config.initImage = "tall.png";
        config.width = 4096;
        config.height = 64;
        const StartImageSize tall{1, 65535, 338};
        for (const HostMemoryEstimate& e : {estimateHostMemory(config, fixtureConfig(), BackendKind::CPU, tall),
                                            estimateSdHostMemory(config, nullptr, BackendKind::CPU, tall)}) {
            QCOMPARE(itemOf(e, MemoryPart::StartImageResize)->bytes, 64ull * 3 * sizeof(float));
            QVERIFY(e.bytesIn(MemoryPhase::StartImage) < 256 * kMiB);
        }
    }

    // Stable Diffusion: every component's weights as float32 (on either engine: the loaded model
    // stays on the host), the latent canvas at an eighth of each side, guidance's doubled tile
    // batch and the VAE's pass on the CPU; without the model's configurations, what the request
    // alone sizes.
    void stableDiffusionEstimate() {
        const SdModelConfigs sd15 = randomSdModelConfigs("random:sd15");
        RunConfig config;
        config.width = config.height = 512;
        config.tile = 512;
        config.cfgScale = 7;
        const HostMemoryEstimate cpu = estimateSdHostMemory(config, &sd15, BackendKind::CPU);
        const std::uint64_t weights = itemOf(cpu, MemoryPart::Weights)->bytes;
        // SD 1.5: 1.07 G parameters (UNet 860 M, CLIP ViT-L 123 M, VAE 84 M).
        QVERIFY2(weights > 4000 * kMiB && weights < 4100 * kMiB, qPrintable(QString::number(weights)));
        QCOMPARE(itemOf(cpu, MemoryPart::Canvas)->bytes, 4ull * 4 * 64 * 64 * sizeof(float));
        bool doubled = false, vae = false;
        for (const MemoryItem& item : cpu.items) {
            doubled = doubled || item.what.find("UNet activations for 2 latent tiles of 64x64") != std::string::npos;
            vae = vae || item.what.find("VAE decode of 512x512 px") != std::string::npos;
        }
        QVERIFY(doubled && vae);
        const HostMemoryEstimate cuda = estimateSdHostMemory(config, &sd15, BackendKind::CUDA);
        QCOMPARE(itemOf(cuda, MemoryPart::Weights)->bytes, weights);
        QVERIFY(!itemOf(cuda, MemoryPart::Canvas) && !itemOf(cuda, MemoryPart::Activations));
        const HostMemoryEstimate unknown = estimateSdHostMemory(config, nullptr, BackendKind::CPU);
        QVERIFY(!itemOf(unknown, MemoryPart::Weights) && !itemOf(unknown, MemoryPart::Activations));
        QCOMPARE(itemOf(unknown, MemoryPart::Canvas)->bytes, itemOf(cpu, MemoryPart::Canvas)->bytes);
        RunConfig larger = config;
        larger.width = larger.height = 2048;
        QVERIFY(estimateSdHostMemory(larger, &sd15, BackendKind::CPU).peakBytes() > cpu.peakBytes() + 200 * kMiB);

        // Refused naming what weighs most, with a size that fits where the size is to blame.
        try {
            checkSdHostMemory(config, &sd15, BackendKind::CPU, std::nullopt, HostMemory{2 * kGiB, "a test's budget"});
            QFAIL("a 4 GiB model fitted in 2 GiB");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("model"));
            QVERIFY2(
                std::string(e.what()).find("more than the 2.0 GiB available (a test's budget)") != std::string::npos,
                e.what());
        }
        RunConfig huge = config;
        huge.width = huge.height = 16384;
        try {
            checkSdHostMemory(huge, &sd15, BackendKind::CPU, std::nullopt, HostMemory{16 * kGiB, "a test's budget"});
            QFAIL("16384 x 16384 fitted in 16 GiB");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("width"));
            QVERIFY2(matchOf(e.what(), "lower width and height \\(at most about \\d+x\\d+ fits\\)").hasMatch(),
                     e.what());
        }
    }

    // Under one of the process's limits (it counts address space mapped, touched or not), the
    // computing threads' stacks, arenas and BLAS buffers are counted too.
    void threadAddressSpaceCountedUnderAProcessLimit() {
        RunConfig config;
        config.width = config.height = 64;
        config.threads = 4;
        const std::uint64_t peak = estimateHostMemory(config, fixtureConfig(), BackendKind::CPU).peakBytes();
        checkHostMemory(config, fixtureConfig(), BackendKind::CPU, std::nullopt, HostMemory{peak + kMiB, "RAM"});
        try {
            checkHostMemory(config, fixtureConfig(), BackendKind::CPU, std::nullopt,
                            HostMemory{peak + kMiB, "a process limit", true});
            QFAIL("four threads' address space was not counted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("threads"));
            QVERIFY2(std::string(e.what()).find("address space of 4 threads") != std::string::npos, e.what());
        }
    }

    void statusLinesParsed() {
        const std::string status = "Name:\ttessera-cli\nVmPeak:\t  900000 kB\nVmSize:\t  876543 kB\nVmData:   12 kB\n";
        QCOMPARE(parseKibLine(status, "VmSize").value_or(0), 876543ull * 1024);
        QCOMPARE(parseKibLine(status, "VmData").value_or(0), 12ull * 1024);
        QVERIFY(!parseKibLine(status, "VmSwap").has_value());
        QVERIFY(!parseKibLine("XVmSize: 5 kB\n", "VmSize").has_value());
        QVERIFY(!parseKibLine("VmSizeX: 5 kB\n", "VmSize").has_value());
        QVERIFY(!parseKibLine("VmSize: 5 MB\n", "VmSize").has_value());
        const ProcessMemoryLimit limit{kGiB, 900 * kMiB, "address-space limit (RLIMIT_AS, ulimit -v)",
                                       "already mapped"};
        QCOMPARE(limit.leftBytes(), 124 * kMiB);
        QCOMPARE(limit.describe(), std::string("the process's address-space limit (RLIMIT_AS, ulimit -v) of 1.0 GiB "
                                               "less the 900.0 MiB already mapped"));
        QCOMPARE((ProcessMemoryLimit{kMiB, 2 * kMiB, "", ""}.leftBytes()), 0ull);
    }

    // RLIMIT_AS set in a child (nothing else here runs under it): what is available is at most
    // the limit less what the child has mapped, and says so.
    void addressSpaceLimitBindsWhatIsAvailable() {
        if (kAddressSanitizer) QSKIP("AddressSanitizer cannot run under RLIMIT_AS");
        const pid_t pid = ::fork();
        if (pid == 0) {
            std::ifstream in("/proc/self/status");
            std::stringstream text;
            text << in.rdbuf();
            const std::optional<std::uint64_t> mapped = parseKibLine(text.str(), "VmSize");
            if (!mapped) ::_exit(3);
            const rlim_t cap = static_cast<rlim_t>(*mapped + 256 * kMiB);
            const rlimit limit{cap, cap};
            if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(4);
            const std::optional<HostMemory> available = availableHostMemory();
            const bool ok = available && available->availableBytes <= 256 * kMiB && available->countsAddressSpace &&
                            available->source.find("RLIMIT_AS") != std::string::npos;
            ::_exit(ok ? 0 : 1);
        }
        QVERIFY(pid > 0);
        int status = 0;
        QCOMPARE(::waitpid(pid, &status, 0), pid);
        QVERIFY(WIFEXITED(status));
        QCOMPARE(WEXITSTATUS(status), 0);
    }

    void bytesFormatted() {
        QCOMPARE(formatBytes(800), std::string("800 bytes"));
        QCOMPARE(formatBytes(3u << 20), std::string("3.0 MiB"));
        QCOMPARE(formatBytes(27 * kGiB + kGiB / 2), std::string("27.5 GiB"));
    }
};

QTEST_GUILESS_MAIN(TestHostMemoryEstimate)
#include "tst_hostmemoryestimate.moc"
