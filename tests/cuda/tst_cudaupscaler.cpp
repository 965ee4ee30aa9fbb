// The CUDA upscale device (kernels/engine/CudaUpscaler.h) against the CPU engine's
// (core/cpu/CpuUpscaler.h): every fixture of tests/data/upscale (ESRGAN in its layouts, ESRGAN+,
// pixel-unshuffled inputs, x8, Compact, SPAN) untiled and unclamped in fp32 (relative L2 below
// 1e-5), fp16 (1e-2) and bf16 (6e-2: 8 bits of mantissa through every layer); tiled against
// untiled on the GPU (crop tiling with twice the receptive radius: equal within float tolerance)
// and feathered tiling in batches over both slots against the CPU's same tiling; CUDA graphs on
// and off to the bit; the fp32 fallback of a model crafted to overflow fp16 (first-layer weights
// of 3000: 27 x 3000 > 65504 for a white pixel), on the whole image and on the last tile only;
// and the device memory budget, with the peak in use sampled while an ESRGAN of 4x-UltraSharp's
// shape upscales. Skipped without a CUDA device. Fixtures from $TESSERA_TEST_DATA_DIR when set.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/base/FormatNumber.h"
#include "core/cpu/CpuUpscaler.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/sampling/UpscaleTiler.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaUpscaler.h"
#include "kernels/engine/DeviceMemoryProbe.h"
#include "tests/cuda/CudaTestSupport.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;
using tessera::testing::outputMismatch;
using tessera::testing::precisionName;

namespace {

// Test data: $TESSERA_TEST_DATA_DIR (the GPU machine has another tree), else the compiled-in tests/data.
const std::string kFixtures = (qEnvironmentVariableIsEmpty("TESSERA_TEST_DATA_DIR")
                                   ? std::string(TESSERA_TEST_DATA)
                                   : qEnvironmentVariable("TESSERA_TEST_DATA_DIR").toStdString()) +
                              "/upscale";
const char* kCases[] = {"esrgan_old_x4",
                        "esrgan_basicsr_x2_unshuffle",
                        "esrgan_basicsr_x1_unshuffle4",
                        "esrgan_trunk_x8",
                        "esrgan_plus_x4",
                        "compact_x4",
                        "compact_x3",
                        "span_x4",
                        "span_x2_nonorm_noeval"};

// Relative L2 against the CPU engine's float32 output, untiled and unclamped.
double tolerance(Precision p) { return p == Precision::FP32 ? 1e-5 : (p == Precision::FP16 ? 1e-2 : 6e-2); }

ImageTensor tensorImage(const SafetensorsFile& f, const char* name) {
    const SafetensorsTensorInfo* t = f.find(name);
    ImageTensor im;
    im.channels = static_cast<int>(t->shape[1]);
    im.height = static_cast<int>(t->shape[2]);
    im.width = static_cast<int>(t->shape[3]);
    im.data = f.readFloat32(*t);
    return im;
}

ImageTensor randomImage(int channels, int h, int w, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    ImageTensor im{channels, h, w, std::vector<float>(std::size_t(channels) * h * w)};
    for (float& v : im.data) v = u(rng);
    return im;
}

UpscaleTiling tiling(int tile, int overlap, UpscaleBlend blend = UpscaleBlend::Feather, bool clamp = false) {
    UpscaleTiling t;
    t.tile = tile;
    t.overlap = overlap;
    t.blend = blend;
    t.clamp = clamp;
    return t;
}

CudaUpscaleOptions options(Precision p, int tileBatch = 0) {
    CudaUpscaleOptions o;
    o.precision = p;
    o.tileBatch = tileBatch;
    o.tuningCache = "off";
    return o;
}

// Random weights for `config`'s graph: N(0, stddev^2), or as PyTorch initialises a convolution
// (uniform in +-1/sqrt(fan_in)) with stddev 0.
TensorMap randomWeights(const UpscaleConfig& config, std::uint32_t seed, float stddev) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, stddev);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    TensorMap w;
    const ModelGraph graph = buildUpscaleGraph(config);
    for (const GraphParam& p : graph.params()) {
        HostTensor t{p.shape, std::vector<float>(static_cast<std::size_t>(HostTensor{p.shape, {}}.numel()))};
        const double fanIn = p.shape.size() == 4 ? double(p.shape[1] * p.shape[2] * p.shape[3]) : 1.0;
        for (float& v : t.data) v = stddev > 0 ? n(rng) : static_cast<float>(u(rng) / std::sqrt(fanIn));
        w[p.name] = std::move(t);
    }
    return w;
}

// Compact 2x, 8 features, 2 convolutions, whose first convolution sums the 27 input values of a 3 x 3
// window times 3000: a white window gives 81000, past fp16's 65504; a black one 0.
UpscaleModel overflowingModel() {
    UpscaleConfig c;
    c.architecture = UpscaleArchitecture::Compact;
    c.features = 8;
    c.blocks = 2;
    c.scale = 2;
    TensorMap w = randomWeights(c, 11, 0.15f);
    std::fill(w.at("body.0.weight").data.begin(), w.at("body.0.weight").data.end(), 3000.0f);
    std::fill(w.at("body.0.bias").data.begin(), w.at("body.0.bias").data.end(), 0.0f);
    return UpscaleModel(c, std::move(w), "overflows fp16");
}

// The values of channel planes [y0, y1) x [x0, x1) of `im`.
std::vector<float> region(const ImageTensor& im, int y0, int y1, int x0, int x1) {
    std::vector<float> r;
    for (int c = 0; c < im.channels; ++c)
        for (int y = y0; y < y1; ++y)
            for (int x = x0; x < x1; ++x) r.push_back(im.data[(std::size_t(c) * im.height + y) * im.width + x]);
    return r;
}

}  // namespace

class TestCudaUpscaler : public QObject {
    Q_OBJECT

private slots:
    void matchesCpu_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("precision");
        for (const char* c : kCases)
            for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16})
                QTest::newRow((std::string(c) + " " + precisionName(p)).c_str()) << QString(c) << int(p);
    }
    void matchesCpu() {
        REQUIRE_DEVICE();
        QFETCH(QString, name);
        QFETCH(int, precision);
        const auto p = static_cast<Precision>(precision);
        const std::string dir = kFixtures + "/" + name.toStdString();
        const UpscaleModel model = UpscaleModel::loadFile(dir + "/model.safetensors");
        const ImageTensor input = tensorImage(SafetensorsFile(dir + "/io.safetensors"), "input");
        CpuUpscaler cpu(2);
        const ImageTensor want = cpu.upscale(model, input, tiling(0, 0));
        CudaUpscaler gpu(options(p));
        const ImageTensor got = gpu.upscale(model, input, tiling(0, 0));
        QCOMPARE(got.width, want.width);
        QCOMPARE(got.height, want.height);
        const QString what = name + " " + precisionName(p);
        const QString mismatch = outputMismatch(want.data, got.data, tolerance(p), what, true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
        QVERIFY2(gpu.note().empty(), gpu.note().c_str());
        QVERIFY(gpu.precision() == p);
    }

    void tiledMatchesUntiled() {
        REQUIRE_DEVICE();
        // Compact x4, 5 convolutions: a receptive radius of 7 input pixels; crop tiling with an
        // overlap of 16 gives every owned pixel all of its context: equal to the untiled output.
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/compact_x4/model.safetensors");
        const ImageTensor in = randomImage(3, 75, 83, 3);
        for (Precision p : {Precision::FP32, Precision::FP16}) {
            CudaUpscaler gpu(options(p, 3));
            const ImageTensor whole = gpu.upscale(model, in, tiling(0, 0));
            UpscaleTiler tiler(model, gpu, tiling(32, 16, UpscaleBlend::Crop));
            const UpscalePlan plan = tiler.plan(in.width, in.height);
            QCOMPARE(plan.batch, 3);
            QVERIFY(plan.tiles() > 2 * plan.batch && plan.tiles() % plan.batch != 0);  // both slots, a short batch
            const ImageTensor tiled = tiler.upscale(in);
            const double tol = p == Precision::FP32 ? 1e-5 : tolerance(p);
            const QString mismatch = outputMismatch(whole.data, tiled.data, tol,
                                                    QString("crop-tiled vs untiled %1").arg(precisionName(p)), true);
            QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
        }
        // Feathered, auto batch, both slots: the GPU's blend of its tiles is the CPU's.
        CpuUpscaler cpu(2);
        CudaUpscaler gpu(options(Precision::FP32));
        const UpscaleTiling feather = tiling(24, 8);
        const ImageTensor want = UpscaleTiler(model, cpu, feather).upscale(in);
        UpscaleTiler tiler(model, gpu, feather);
        const UpscalePlan plan = tiler.plan(in.width, in.height);
        QVERIFY(plan.batch > 1);
        QCOMPARE(plan.slotCount, 2);
        const ImageTensor got = tiler.upscale(in);
        const QString mismatch = outputMismatch(want.data, got.data, 1e-5, "feathered, GPU vs CPU", true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
        const CudaUpscaleTimes t = gpu.timings();
        qInfo("%d tiles in %d forwards of up to %d: forwards %.2f ms, copies and checks %.2f ms", plan.tiles(),
              t.forwards, gpu.forwardBatch(), t.forwardMs, t.copyMs);
        QCOMPARE(t.forwards, (plan.tiles() + plan.batch - 1) / plan.batch);
    }

    void graphsChangeNoBit() {
        REQUIRE_DEVICE();
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/span_x4/model.safetensors");
        const ImageTensor in = randomImage(3, 50, 61, 4);
        // One tuning cache: the second device takes the first one's cuDNN choices, so both run the
        // same kernels.
        QTemporaryDir dir;
        CudaUpscaleOptions on = options(Precision::FP16);
        on.tuningCache = dir.filePath("tuning.json").toStdString();
        CudaUpscaleOptions off = on;
        off.graphs = false;
        CudaUpscaler withGraphs(on), without(off);
        const ImageTensor a = withGraphs.upscale(model, in, tiling(24, 8, UpscaleBlend::Feather, true));
        const ImageTensor b = without.upscale(model, in, tiling(24, 8, UpscaleBlend::Feather, true));
        QVERIFY(a.data == b.data);
        QVERIFY(withGraphs.backend()->graphStats().captures > 0);
        QCOMPARE(without.backend()->graphStats().captures, 0);
    }

    // Dense blocks kept in one buffer (each conv reading a prefix, writing its slice) compute what
    // the copied concatenations compute.
    void denseBlocksMatchCopiedConcatenations_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("precision");
        for (const char* c : {"esrgan_old_x4", "esrgan_plus_x4", "esrgan_basicsr_x2_unshuffle"})
            for (Precision p : {Precision::FP32, Precision::FP16})
                QTest::newRow((std::string(c) + " " + precisionName(p)).c_str()) << QString(c) << int(p);
    }
    void denseBlocksMatchCopiedConcatenations() {
        REQUIRE_DEVICE();
        QFETCH(QString, name);
        QFETCH(int, precision);
        const auto p = static_cast<Precision>(precision);
        const std::string dir = kFixtures + "/" + name.toStdString();
        const UpscaleModel model = UpscaleModel::loadFile(dir + "/model.safetensors");
        const ImageTensor input = tensorImage(SafetensorsFile(dir + "/io.safetensors"), "input");
        ImageTensor a;
        {
            const tessera::testing::ScopedEnv slices("TESSERA_CUDA_DENSE", "1");
            CudaUpscaler dense(options(p));
            a = dense.upscale(model, input, tiling(0, 0));
            QVERIFY2(dense.backend()->planSummary().find("dense groups: ") != std::string::npos,
                     dense.backend()->planSummary().c_str());
        }
        CudaUpscaler copied(options(p));
        const ImageTensor b = copied.upscale(model, input, tiling(0, 0));
        QVERIFY(copied.backend()->planSummary().find("dense groups: ") == std::string::npos);
        const QString mismatch = outputMismatch(b.data, a.data, p == Precision::FP32 ? 1e-6 : 2e-3, name, true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    }

    void fallsBackToFp32() {
        REQUIRE_DEVICE();
        const UpscaleModel model = overflowingModel();
        CpuUpscaler cpu(2);
        // A white image: the first tile overflows, and so everything runs in fp32.
        ImageTensor white{3, 40, 44, std::vector<float>(std::size_t(3) * 40 * 44, 1.0f)};
        CudaUpscaler gpu(options(Precision::FP16));
        UpscaleTiler tiler(model, gpu, tiling(0, 0));
        ImageTensor got;
        got.channels = 3;
        got.height = 80;
        got.width = 88;
        got.data.resize(std::size_t(3) * 80 * 88);
        const UpscalePlan ran = tiler.run(white, [&got](int first, int rows, const float* band) {
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < 3; ++c)
                    std::copy(band + (std::size_t(r) * 3 + c) * 88, band + (std::size_t(r) * 3 + c + 1) * 88,
                              got.data.begin() + static_cast<std::ptrdiff_t>((std::size_t(c) * 80 + first + r) * 88));
        });
        qInfo("%s", ran.deviceNote.c_str());
        QVERIFY2(ran.deviceNote.find("fp16 gave a NaN or an infinity in tile 1") == 0, ran.deviceNote.c_str());
        QVERIFY(gpu.precision() == Precision::FP32);
        const ImageTensor want = cpu.upscale(model, white, tiling(0, 0));
        float largest = 0;
        for (float v : want.data) largest = std::max(largest, std::fabs(v));
        QVERIFY(std::isfinite(largest) && largest > 100.0f);  // large, and finite in fp32
        QString mismatch = outputMismatch(want.data, got.data, 1e-5, "fp32 fallback vs CPU", true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
        // The next run of the model starts in fp32 and says why.
        const ImageTensor again = gpu.upscale(model, white, tiling(0, 0));
        QVERIFY2(gpu.note().find("fp32: this model gave a NaN or an infinity in fp16 in an earlier run") == 0,
                 gpu.note().c_str());
        mismatch = outputMismatch(want.data, again.data, 1e-5, "fp32 from the start vs CPU", true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));

        // Black but for the corner that only the last of 3 x 3 tiles holds: tiles 1 to 8 in fp16, the
        // ninth in fp32 after its fp16 run overflowed.
        ImageTensor corner{3, 96, 96, std::vector<float>(std::size_t(3) * 96 * 96, 0.0f)};
        for (int c = 0; c < 3; ++c)
            for (int y = 90; y < 96; ++y)
                for (int x = 90; x < 96; ++x) corner.data[(std::size_t(c) * 96 + y) * 96 + x] = 1.0f;
        CudaUpscaler oneByOne(options(Precision::FP16, 1));
        const UpscaleTiling grid = tiling(48, 8);
        UpscaleTiler gridTiler(model, oneByOne, grid);
        QCOMPARE(gridTiler.plan(96, 96).tiles(), 9);
        const ImageTensor tiled = gridTiler.upscale(corner);
        qInfo("%s", oneByOne.note().c_str());
        QVERIFY2(oneByOne.note().find("fp16 gave a NaN or an infinity in tile 9:") == 0, oneByOne.note().c_str());
        const ImageTensor reference = UpscaleTiler(model, cpu, grid).upscale(corner);
        // Output rows and columns from 176 (input 88) belong to the last tile alone: fp32. Those
        // below 160 (input 80) never meet it: fp16.
        mismatch = outputMismatch(region(reference, 176, 192, 176, 192), region(tiled, 176, 192, 176, 192), 1e-5,
                                  "last tile (fp32) vs CPU", true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
        mismatch = outputMismatch(region(reference, 0, 160, 0, 160), region(tiled, 0, 160, 0, 160), 1e-2,
                                  "tiles 1 to 8 (fp16) vs CPU", true);
        QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    }

    void memoryBudget() {
        REQUIRE_DEVICE();
        // 4x-UltraSharp's shape (ESRGAN 64 features, 23 blocks), PyTorch's default initialisation.
        const UpscaleConfig ultra;
        const UpscaleModel model(ultra, randomWeights(ultra, 5, 0.0f), "4x-UltraSharp shape");
        const ImageTensor in = randomImage(3, 512, 512, 6);
        constexpr std::uint64_t budget = 3ull << 29;  // 1.5 GiB
        const DeviceMemoryProbe probe(0);
        const std::uint64_t before = probe.currentBytes();
        CudaUpscaleOptions o = options(Precision::FP16);
        o.memoryBudget = budget;
        CudaUpscaler gpu(o);
        UpscaleTiler tiler(model, gpu, tiling(512, 32, UpscaleBlend::Feather, true));
        const UpscalePlan plan = tiler.plan(in.width, in.height);
        qInfo("budget %s: %s; tile %d, batch %d, %d tiles, planned %s on the device", formatBytes(budget).c_str(),
              plan.note.c_str(), plan.tile, plan.batch, plan.tiles(), formatBytes(plan.deviceBytes).c_str());
        QVERIFY(plan.tile < 512);  // a 512 tile (2048 x 2048 output, 64 features: about 1.1 GiB of activations)
        QVERIFY(!plan.note.empty());
        QVERIFY(plan.deviceBytes <= budget);
        const ImageTensor out = tiler.upscale(in);
        const std::uint64_t peak = probe.peakBytes();
        const CudaMemoryPlan arena = gpu.backend()->memoryPlan();
        qInfo("peak in use %s over %s before (%s more); the arena %s at %d tiles per forward",
              formatBytes(peak).c_str(), formatBytes(before).c_str(), formatBytes(peak - before).c_str(),
              formatBytes(arena.totalBytes).c_str(), gpu.forwardBatch());
        QVERIFY(arena.totalBytes <= budget - CudaUpscaler::kHeadroomBytes);
        QVERIFY2(peak - before <= budget, qPrintable(QString::fromStdString(formatBytes(peak - before))));
        QCOMPARE(out.width, 2048);
        for (std::size_t i = 0; i < out.data.size(); i += 997) QVERIFY(std::isfinite(out.data[i]));
    }
};

QTEST_APPLESS_MAIN(TestCudaUpscaler)
#include "tst_cudaupscaler.moc"
