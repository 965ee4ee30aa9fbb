// The noise of other programs' seeds (core/sampling/TorchCpuGenerator.h, NvPhiloxGenerator.h,
// A1111ImageRng.h, LatentNoise.h, CudaGeneratorEmulation.h, TorchCudaRandnLaunch.h) against
// tests/data/noise, written by tools/reference/make_noise_fixtures.py with torch itself, A1111's
// own modules/rng_philox.py, and torch mirrors of A1111's modules/rng.py ImageRNG and ComfyUI's
// comfy/sample.py prepare_noise:
//  - torch.randn on CPU generators bit for bit, with the AVX2 kernel and the portable one: 16
//    shapes from 1 to 1144 elements (the double path below 16, 16, 17, 33, not multiples of 16,
//    [3,5,7], [2,4,13,11]) and [4,64,64], [4,96,128], [4,128,128], seeds 0, 1, 42, 2^32 + 5,
//    123456789; successive draws from one generator; the cached double sample across small calls
//    and through a vectorised call; the default generator seeded by torch.manual_seed;
//  - A1111's NV generator bit for bit, and its documented Generator(0).randn((3, 4));
//  - ImageRNG for the CPU and NV sources over three next() calls: batches, the job's second batch,
//    an odd latent, variation seeds, seed resize (padded, cropped by an odd amount, to the same
//    size), ENSD: bit for bit without variation, to float rounding with it (the slerp's angles);
//  - rng.py's slerp on both of its branches; the seed-resize paste by hand;
//  - ComfyUI's prepare_noise with and without batch_index (repeated, M % 16 != 0) bit for bit;
//  - LatentNoise: every source against its generator, steps, batch_index errors, names;
//  - torch's CUDA launch arithmetic and its CPU emulation (layout, offsets, NV within 2e-6).
// The bit-exact counts per kind are printed at the end.
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/sampling/A1111ImageRng.h"
#include "core/sampling/CudaGeneratorEmulation.h"
#include "core/sampling/LatentNoise.h"
#include "core/sampling/NvPhiloxGenerator.h"
#include "core/sampling/Philox.h"
#include "core/sampling/TorchCpuGenerator.h"
#include "core/sampling/TorchCudaRandnLaunch.h"

using namespace tessera;
using nlohmann::json;

namespace {

std::uint32_t bitsOf(float v) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

std::string describe(float v) {
    char text[48];
    std::snprintf(text, sizeof text, "%.9g (0x%08x)", static_cast<double>(v), bitsOf(v));
    return text;
}

std::size_t product(const json& shape) {
    std::size_t n = 1;
    for (const auto& d : shape) n *= d.get<std::size_t>();
    return n;
}

std::unique_ptr<NormalGenerator> makeCpu(std::uint64_t seed) { return std::make_unique<TorchCpuGenerator>(seed); }
std::unique_ptr<NormalGenerator> makeNv(std::uint64_t seed) { return std::make_unique<NvPhiloxGenerator>(seed); }

// A generator that records its seeds and fills with seed + 1 + call index / 2, to see what a caller
// drew.
struct RecordingGenerator final : NormalGenerator {
    explicit RecordingGenerator(std::uint64_t s, std::vector<std::uint64_t>* log) : seed(s) { log->push_back(s); }
    void randn(float* out, std::size_t count) override {
        for (std::size_t i = 0; i < count; ++i)
            out[i] = static_cast<float>(seed) + 1.0f + 0.5f * static_cast<float>(calls);
        ++calls;
    }
    std::uint64_t seed;
    int calls = 0;
};

}  // namespace

class TestTorchNoise : public QObject {
    Q_OBJECT

    json doc_;
    std::vector<float> data_;
    struct Tally {
        std::uint64_t exact = 0, total = 0;
    };
    std::map<std::string, Tally> tally_;

    std::vector<int> casesOf(const char* kind) const {
        std::vector<int> out;
        for (std::size_t i = 0; i < doc_["cases"].size(); ++i)
            if (doc_["cases"][i]["kind"] == kind) out.push_back(static_cast<int>(i));
        return out;
    }

    void addRows(const char* kind) {
        QTest::addColumn<int>("index");
        for (const int i : casesOf(kind)) {
            const json& c = doc_["cases"][static_cast<std::size_t>(i)];
            std::string row = c["name"].get<std::string>();
            if (c.contains("variant")) row += " " + c["variant"].get<std::string>();
            if (c.contains("seed") && c["kind"] != "a1111")
                row += " seed " + std::to_string(c["seed"].get<std::uint64_t>());
            QTest::newRow(row.c_str()) << i;
        }
    }

    const float* stored(const json& output) const { return data_.data() + output["offset"].get<std::size_t>(); }

    // Compares `got` with one fixture output bit for bit; returns "" or what differs. Counts the
    // exact values under `kind`: all of a hashed output when its hash matches, else its exact samples.
    std::string compareExact(const std::string& kind, const json& output, const std::vector<float>& got) {
        const std::size_t n = output["count"].get<std::size_t>();
        if (got.size() != n) return "size " + std::to_string(got.size()) + " vs " + std::to_string(n);
        Tally& t = tally_[kind];
        if (output.contains("offset")) {
            const float* want = stored(output);
            std::size_t bad = 0, first = n;
            for (std::size_t i = 0; i < n; ++i)
                if (bitsOf(got[i]) != bitsOf(want[i])) {
                    if (first == n) first = i;
                    ++bad;
                }
            t.exact += n - bad;
            t.total += n;
            if (bad == 0) return {};
            return std::to_string(bad) + " of " + std::to_string(n) + " differ; first at " + std::to_string(first) +
                   ": " + describe(got[first]) + " vs " + describe(want[first]);
        }
        const bool same = sha256Hex(got.data(), n * sizeof(float)) == output["sha256"].get<std::string>();
        std::size_t badSamples = 0;
        for (const auto& s : output["samples"])
            if (bitsOf(got[s[0].get<std::size_t>()]) != s[1].get<std::uint32_t>()) ++badSamples;
        if (same) {
            t.exact += n;
            t.total += n;
            return {};
        }
        const std::size_t samples = output["samples"].size();
        t.exact += samples - badSamples;
        t.total += samples;
        return "SHA-256 differs (" + std::to_string(badSamples) + " of " + std::to_string(samples) +
               " sampled values differ)";
    }

    // Within `tol` * max(1, |want|) of a stored output; counts exact values too.
    std::string compareClose(const std::string& kind, const json& output, const std::vector<float>& got, double tol,
                             double* maxDiff) {
        const std::size_t n = output["count"].get<std::size_t>();
        if (got.size() != n) return "size " + std::to_string(got.size()) + " vs " + std::to_string(n);
        const float* want = stored(output);
        Tally& t = tally_[kind];
        std::string why;
        for (std::size_t i = 0; i < n; ++i) {
            const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
            *maxDiff = std::max(*maxDiff, d);
            if (bitsOf(got[i]) == bitsOf(want[i])) ++t.exact;
            if (!(d <= tol * std::max(1.0, std::fabs(static_cast<double>(want[i])))) && why.empty())
                why = "at " + std::to_string(i) + ": " + describe(got[i]) + " vs " + describe(want[i]);
        }
        t.total += n;
        return why;
    }

private slots:
    void initTestCase() {
        const std::string dir = std::string(TESSERA_TEST_DATA) + "/noise/";
        std::ifstream js(dir + "fixtures.json");
        QVERIFY2(js, "tests/data/noise/fixtures.json is missing (tools/reference/make_noise_fixtures.py)");
        doc_ = json::parse(js);
        std::ifstream bin(dir + "fixtures.bin", std::ios::binary | std::ios::ate);
        QVERIFY(bin);
        const auto bytes = static_cast<std::size_t>(bin.tellg());
        data_.resize(bytes / sizeof(float));
        bin.seekg(0);
        bin.read(reinterpret_cast<char*>(data_.data()), static_cast<std::streamsize>(data_.size() * sizeof(float)));
        QVERIFY(bin);
        QVERIFY(!casesOf("torch_cpu").empty());
    }

    void cleanupTestCase() {
        for (const auto& [kind, t] : tally_)
            qInfo("%s: %llu of %llu values bit-exact", kind.c_str(), static_cast<unsigned long long>(t.exact),
                  static_cast<unsigned long long>(t.total));
    }

    void torchCpuRandn_data() { addRows("torch_cpu"); }
    void torchCpuRandn() {
        QFETCH(int, index);
        const json& c = doc_["cases"][static_cast<std::size_t>(index)];
        const TorchCpuTransform transform =
            c["variant"] == "avx2" ? TorchCpuTransform::Avx2 : TorchCpuTransform::Scalar;
        TorchCpuGenerator generator(c["seed"].get<std::uint64_t>(), transform);
        for (std::size_t k = 0; k < c["calls"].size(); ++k) {
            std::vector<float> got(product(c["calls"][k]));
            generator.randn(got.data(), got.size());
            const std::string why =
                compareExact("torch CPU randn (" + c["variant"].get<std::string>() + ")", c["outputs"][k], got);
            QVERIFY2(why.empty(), qPrintable(QString("call %1: %2").arg(k).arg(why.c_str())));
        }
    }

    void cpuGeneratorIsMt19937OnTheLow32Bits() {
        // The reference mt19937's 10000th output for seed 5489 (C++ [rand.predef]).
        TorchCpuGenerator g(5489);
        std::uint32_t last = 0;
        for (int i = 0; i < 10000; ++i) last = g.random();
        QCOMPARE(last, 4123659995u);
        TorchCpuGenerator a(5), b((std::uint64_t{1} << 32) + 5), c(6);
        const std::vector<float> x = a.randn(100), y = b.randn(100), z = c.randn(100);
        QVERIFY(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
        QVERIFY(std::memcmp(x.data(), z.data(), x.size() * sizeof(float)) != 0);
        // random64 = first << 32 | second.
        TorchCpuGenerator d(7), e(7);
        const std::uint64_t hi = d.random(), lo = d.random();
        QCOMPARE(e.random64(), (hi << 32) | lo);
    }

    void manualSeedDropsTheCachedSample() {
        TorchCpuGenerator g(42);
        g.randn(3);  // leaves the second value of a pair cached
        g.manualSeed(42);
        TorchCpuGenerator fresh(42);
        const std::vector<float> a = g.randn(2), b = fresh.randn(2);
        QCOMPARE(bitsOf(a[0]), bitsOf(b[0]));
        QCOMPARE(bitsOf(a[1]), bitsOf(b[1]));
        // The block transforms on their own: uniforms 0 give radius 0 (0 * cos 0 = +0).
        for (const TorchCpuTransform t : {TorchCpuTransform::Avx2, TorchCpuTransform::Scalar}) {
            float block[16] = {};
            torchNormalFill16(block, t);
            for (const float v : block) QCOMPARE(bitsOf(v), 0u);
        }
    }

    void nvDocumentedExample() {
        // rng_philox.py's docstring: Generator(seed=0).randn(shape=(3, 4)), printed to 8 digits (by a
        // version whose last digits differ by up to 2e-7 from what the file computes today, which the
        // fixture rows check bit for bit).
        const double documented[12] = {-0.92466259, -0.42534415, -2.6438457,  0.14518388,  -0.12086647, -0.57972564,
                                       -0.62285122, -0.32838709, -1.07454231, -0.36314407, -1.67105067, 2.26550497};
        NvPhiloxGenerator g(0);
        const std::vector<float> got = g.randn(12);
        for (int i = 0; i < 12; ++i) QVERIFY2(std::fabs(got[i] - documented[i]) < 5e-7, qPrintable(QString::number(i)));
        QCOMPARE(g.calls(), 1u);
    }

    void nvRandn_data() { addRows("nv"); }
    void nvRandn() {
        QFETCH(int, index);
        const json& c = doc_["cases"][static_cast<std::size_t>(index)];
        NvPhiloxGenerator generator(c["seed"].get<std::uint64_t>());
        for (std::size_t k = 0; k < c["calls"].size(); ++k) {
            std::vector<float> got(product(c["calls"][k]));
            generator.randn(got.data(), got.size());
            const std::string why = compareExact("A1111 NV", c["outputs"][k], got);
            QVERIFY2(why.empty(), qPrintable(QString("call %1: %2").arg(k).arg(why.c_str())));
        }
    }

    void a1111ImageRng_data() { addRows("a1111"); }
    void a1111ImageRng() {
        QFETCH(int, index);
        const json& c = doc_["cases"][static_cast<std::size_t>(index)];
        const double strength = c["subseed_strength"].get<double>();
        const int batch = c["batch"].get<int>(), first = c["first_image"].get<int>();
        A1111NoiseOptions options;
        options.seeds = a1111ImageSeeds(c["seed"].get<std::uint64_t>(), strength, first, batch);
        options.subseeds = a1111ImageSubseeds(c["subseed"].get<std::uint64_t>(), first, batch);
        options.subseedStrength = strength;
        options.seedResizeFromHeight = c["seed_resize_from_h"].get<int>();
        options.seedResizeFromWidth = c["seed_resize_from_w"].get<int>();
        options.etaNoiseSeedDelta = c["ensd"].get<std::int64_t>();
        const json& shape = c["shape"];
        const bool nv = c["source"] == "NV";
        A1111ImageRng rng(shape[0].get<int>(), shape[1].get<int>(), shape[2].get<int>(), options,
                          nv ? NormalGeneratorFactory(makeNv) : NormalGeneratorFactory(makeCpu));
        QCOMPARE(rng.batch(), batch);
        for (std::size_t k = 0; k < c["outputs"].size(); ++k) {
            const std::vector<float> got = rng.next();
            const std::string kind = std::string("A1111 ImageRNG ") + (nv ? "NV" : "CPU");
            // The slerp's angles come from torch's float reductions and Sleef functions (not
            // reproduced): a variation's first call agrees to float rounding; everything else exactly.
            if (k == 0 && strength != 0.0 && strength != 1.0) {
                double maxDiff = 0;
                const std::string why = compareClose(kind + " with variation", c["outputs"][k], got, 2e-6, &maxDiff);
                QVERIFY2(why.empty(), why.c_str());
                qInfo("%s: max |difference| %.3g", c["name"].get<std::string>().c_str(), maxDiff);
            } else {
                const std::string why = compareExact(kind, c["outputs"][k], got);
                QVERIFY2(why.empty(), qPrintable(QString("call %1: %2").arg(k).arg(why.c_str())));
            }
        }
    }

    void a1111Slerp_data() { addRows("slerp"); }
    void a1111Slerp() {
        QFETCH(int, index);
        const json& c = doc_["cases"][static_cast<std::size_t>(index)];
        const json& shape = c["shape"];
        const std::size_t n = product(shape);
        std::vector<float> got(n);
        tessera::a1111Slerp(c["val"].get<double>(), stored(c["inputs"][0]), stored(c["inputs"][1]), got.data(),
                            shape[0].get<int>(), shape[1].get<int>(), shape[2].get<int>());
        double maxDiff = 0;
        const std::string why = compareClose("A1111 slerp", c["outputs"][0], got, 2e-6, &maxDiff);
        QVERIFY2(why.empty(), why.c_str());
        qInfo("max |difference| %.3g", maxDiff);
    }

    void a1111SlerpMayWriteOverItsInput() {
        std::vector<float> low = TorchCpuGenerator(1).randn(60), high = TorchCpuGenerator(2).randn(60);
        std::vector<float> expected(60);
        tessera::a1111Slerp(0.4, low.data(), high.data(), expected.data(), 2, 5, 6);
        tessera::a1111Slerp(0.4, low.data(), high.data(), low.data(), 2, 5, 6);
        QVERIFY(std::memcmp(low.data(), expected.data(), 60 * sizeof(float)) == 0);
    }

    void a1111PasteCentredFollowsPythonSlices() {
        // A 1 x 3 x 5 noise onto a 1 x 4 x 2 latent: rows pad by (4 - 3) // 2 = 0, columns crop by
        // (2 - 5) // 2 = -2 on the left, keeping 5 + 2 * (-2) = 1 column (source column 2).
        std::vector<float> noise(15);
        for (int i = 0; i < 15; ++i) noise[static_cast<std::size_t>(i)] = static_cast<float>(i);
        std::vector<float> x(8, -1.0f);
        a1111PasteCentred(noise.data(), 3, 5, x.data(), 1, 4, 2);
        const std::vector<float> expected = {2, -1, 7, -1, 12, -1, -1, -1};
        QCOMPARE(x, expected);
        // A 2 x 1 x 1 noise into 2 x 3 x 3: the centre of each channel.
        std::vector<float> y(18, 0.0f);
        const float centre[2] = {5, 6};
        a1111PasteCentred(centre, 1, 1, y.data(), 2, 3, 3);
        QCOMPARE(y[4], 5.0f);
        QCOMPARE(y[13], 6.0f);
        QCOMPARE(std::count(y.begin(), y.end(), 0.0f), std::ptrdiff_t{16});
    }

    void a1111Seeds() {
        const std::vector<std::uint64_t> plain = {12, 13, 14}, variation = {10, 10, 10}, sub = {7, 8, 9};
        QCOMPARE(a1111ImageSeeds(10, 0.0, 2, 3), plain);
        QCOMPARE(a1111ImageSeeds(10, 0.5, 2, 3), variation);
        QCOMPARE(a1111ImageSubseeds(5, 2, 3), sub);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 A1111ImageRng(4, 8, 8, A1111NoiseOptions{}, NormalGeneratorFactory(makeCpu)));
    }

    void a1111GeneratorsPerImageAndEnsd() {
        // Which generators ImageRNG makes and draws from: image generators first (seeds), the
        // variation draws from fresh ones (subseeds), ENSD replaces the image generators after x_T.
        std::vector<std::uint64_t> made;
        A1111NoiseOptions options;
        options.seeds = {100, 101};
        options.subseeds = {7};  // the second image's variation seed is missing: 0
        options.subseedStrength = 1.0;
        options.etaNoiseSeedDelta = 31337;
        A1111ImageRng rng(1, 2, 2, options, [&made](std::uint64_t seed) -> std::unique_ptr<NormalGenerator> {
            return std::make_unique<RecordingGenerator>(seed, &made);
        });
        const std::vector<float> first = rng.next(), step = rng.next();
        const std::vector<std::uint64_t> expected = {100, 101, 7, 0, 100 + 31337, 101 + 31337};
        QCOMPARE(made, expected);
        // Constant columns are parallel, so rng.py's slerp takes its linear branch, which weights
        // the image's own noise by the strength: at strength 1 it is all seed noise. The steps are
        // the first draws of the reseeded generators.
        QCOMPARE(first[0], 101.0f);
        QCOMPARE(first[4], 102.0f);
        QCOMPARE(step[0], 31438.0f);
        QCOMPARE(step[4], 31439.0f);
    }

    void comfyPrepareNoise_data() { addRows("comfy"); }
    void comfyPrepareNoise() {
        QFETCH(int, index);
        const json& c = doc_["cases"][static_cast<std::size_t>(index)];
        const json& s = c["shape"];
        const LatentShape shape{s[0].get<int>(), s[1].get<int>(), s[2].get<int>(), s[3].get<int>()};
        std::vector<int> batchIndex;
        if (!c["batch_index"].is_null()) batchIndex = c["batch_index"].get<std::vector<int>>();
        std::vector<float> got(shape.elements());
        tessera::comfyPrepareNoise(c["seed"].get<std::uint64_t>(), shape, batchIndex, got.data());
        std::string why = compareExact("ComfyUI prepare_noise", c["outputs"][0], got);
        QVERIFY2(why.empty(), why.c_str());
        // The same through LatentNoise.
        NoiseSettings settings;
        settings.source = NoiseSource::ComfyUI;
        settings.seed = c["seed"].get<std::uint64_t>();
        settings.batchIndex = batchIndex;
        LatentNoise noise(settings, shape);
        std::vector<float> again(shape.elements());
        noise.initial(again.data());
        QVERIFY(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) == 0);
    }

    void comfyRefusesBadBatchIndex() {
        const LatentShape shape{2, 4, 8, 8};
        std::vector<float> out(shape.elements());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, tessera::comfyPrepareNoise(1, shape, {0}, out.data()));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, tessera::comfyPrepareNoise(1, shape, {0, -1}, out.data()));
        NoiseSettings settings;
        settings.source = NoiseSource::ComfyUI;
        settings.batchIndex = {0, 1, 2};
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, LatentNoise(settings, shape));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, LatentNoise(NoiseSettings{}, LatentShape{1, 4, 0, 8}));
    }

    void latentNoiseSources() {
        const LatentShape shape{2, 4, 6, 5};
        const std::size_t image = shape.imageElements();
        std::vector<float> out(shape.elements()), step(shape.elements());
        // Tessera: Philox draw 0 for x_T, k + 1 for the k-th step, seed + b for image b.
        fillInitialNoise(NoiseSource::Tessera, 9, shape, out.data());
        QCOMPARE(bitsOf(out[3]), bitsOf(philoxNormal(9, 0, 3)));
        QCOMPARE(bitsOf(out[image + 3]), bitsOf(philoxNormal(10, 0, 3)));
        NoiseSettings tessera;
        tessera.seed = 9;
        LatentNoise t(tessera, shape);
        t.initial(out.data());
        t.step(step.data());
        QCOMPARE(bitsOf(step[3]), bitsOf(philoxNormal(9, 1, 3)));
        t.step(step.data());
        QCOMPARE(bitsOf(step[image]), bitsOf(philoxNormal(10, 2, 0)));

        // A1111 CPU and NV: image b's generator seeded seed + b, x_T its first draw, steps the next.
        for (const NoiseSource source : {NoiseSource::A1111Cpu, NoiseSource::A1111Nv, NoiseSource::A1111Gpu}) {
            NoiseSettings settings;
            settings.source = source;
            settings.seed = 42;
            LatentNoise noise(settings, shape);
            noise.initial(out.data());
            noise.step(step.data());
            std::unique_ptr<NormalGenerator> second =
                source == NoiseSource::A1111Cpu ? makeCpu(43) : makeNv(43);  // GPU on the CPU engine: NV
            std::vector<float> x(image), s(image);
            second->randn(x.data(), image);
            second->randn(s.data(), image);
            QVERIFY(std::memcmp(out.data() + image, x.data(), image * sizeof(float)) == 0);
            QVERIFY(std::memcmp(step.data() + image, s.data(), image * sizeof(float)) == 0);
        }

        // The CUDA engine's device generator for A1111 GPU and ComfyUI's steps.
        std::vector<std::uint64_t> made;
        const NormalGeneratorFactory device = [&made](std::uint64_t seed) -> std::unique_ptr<NormalGenerator> {
            return std::make_unique<RecordingGenerator>(seed, &made);
        };
        NoiseSettings gpu;
        gpu.source = NoiseSource::A1111Gpu;
        gpu.seed = 5;
        LatentNoise a(gpu, shape, device);
        a.initial(out.data());
        QCOMPARE(out[image], 7.0f);  // image 1's generator, seeded 6
        NoiseSettings comfy;
        comfy.source = NoiseSource::ComfyUI;
        comfy.seed = 5;
        LatentNoise c(comfy, shape, device);
        c.initial(out.data());
        c.step(step.data());
        c.step(step.data());
        QCOMPARE(step[shape.elements() - 1], 6.5f);  // the second call of one generator seeded 5
        // ComfyUI's steps on the CPU engine: NV's emulation of the GPU generator, whole batch per call.
        LatentNoise cpuComfy(comfy, shape);
        cpuComfy.initial(out.data());
        cpuComfy.step(step.data());
        const std::vector<float> nvFirst = NvPhiloxGenerator(5).randn(shape.elements());
        QVERIFY(std::memcmp(step.data(), nvFirst.data(), step.size() * sizeof(float)) == 0);
    }

    void noiseSourceNames() {
        for (const NoiseSource s : {NoiseSource::Tessera, NoiseSource::A1111Gpu, NoiseSource::A1111Cpu,
                                    NoiseSource::A1111Nv, NoiseSource::ComfyUI})
            QCOMPARE(parseNoiseSource(noiseSourceName(s)), std::optional<NoiseSource>(s));
        QCOMPARE(noiseSourceName(NoiseSource::A1111Nv), std::string_view("a1111-nv"));
        QVERIFY(!parseNoiseSource("A1111").has_value());
    }

    void torchCudaLaunchArithmetic() {
        // An H200: 132 SMs x 2048 threads; a 28-SM GPU of 1536 threads per SM.
        QCOMPARE(torchCudaThreadCap(132, 2048), std::uint64_t{270336});
        QCOMPARE(torchCudaThreadCap(28, 1536), std::uint64_t{43008});
        // [4,64,64]: 64 blocks, one iteration. [4,256,320] on an H200: capped, .y used, still 4.
        TorchCudaRandnLaunch l = torchCudaRandnLaunch(16384, 270336);
        QCOMPARE(l.blocks, std::uint64_t{64});
        QCOMPARE(l.offsetIncrement, std::uint64_t{4});
        l = torchCudaRandnLaunch(327680, 270336);
        QCOMPARE(l.threads, std::uint64_t{270336});
        QCOMPARE(l.offsetIncrement, std::uint64_t{4});
        // SDXL 1024^2 on the small GPU: 65536 > T, still one iteration; 4T + 1 takes two.
        QCOMPARE(torchCudaRandnLaunch(65536, 43008).offsetIncrement, std::uint64_t{4});
        QCOMPARE(torchCudaRandnLaunch(4 * 43008 + 1, 43008).offsetIncrement, std::uint64_t{8});
        QCOMPARE(torchCudaRandnLaunch(1, 43008).threads, std::uint64_t{256});
    }

    void cudaEmulationLayout() {
        // Up to T elements: NV's formula (u, v rounded to float instead of double: within 2e-6).
        CudaGeneratorEmulation big(1234, 270336);
        NvPhiloxGenerator nv(1234);
        for (int call = 0; call < 2; ++call) {
            const std::vector<float> e = big.randn(4 * 64 * 64), n = nv.randn(4 * 64 * 64);
            for (std::size_t i = 0; i < e.size(); ++i)
                QVERIFY2(std::fabs(e[i] - n[i]) <= 2e-6 * std::max(1.0f, std::fabs(n[i])),
                         qPrintable(QString::number(i)));
        }
        QCOMPARE(big.philoxOffset(), std::uint64_t{8});
        // T = 256 (one block) over 2049 elements: element i < 256 is .x of thread i's first block,
        // 1024 + i the .x of its second block (what the next call of a large GPU gives element i),
        // and the offset grows by 4 per iteration: 3 iterations.
        CudaGeneratorEmulation small(77, 256), wide(77, 1 << 20);
        const std::vector<float> s = small.randn(2049);
        const std::vector<float> w0 = wide.randn(256), w1 = wide.randn(256), w2 = wide.randn(1);
        for (std::size_t i = 0; i < 256; ++i) {
            QCOMPARE(bitsOf(s[i]), bitsOf(w0[i]));
            QCOMPARE(bitsOf(s[1024 + i]), bitsOf(w1[i]));
        }
        QCOMPARE(bitsOf(s[2048]), bitsOf(w2[0]));
        QCOMPARE(small.philoxOffset(), std::uint64_t{12});
        small.randn(nullptr, 0);  // nothing drawn, offset kept
        QCOMPARE(small.philoxOffset(), std::uint64_t{12});
    }
};

QTEST_APPLESS_MAIN(TestTorchNoise)
#include "tst_torchnoise.moc"
