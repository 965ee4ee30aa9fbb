// Tiled VAE decode and encode with whole-image GroupNorm statistics (core/models/vae/TiledVae.h): the tile
// grid, the cut of the VAE graphs at their GroupNorms, tiled against untiled decode and encode of
// a 1024x1024 image (>= 45 dB; per-tile statistics fall short), one tile equal to untiled, small,
// odd and border cases, bad inputs, the memory estimate against the run, the auto decision, the
// vae_tiling setting and what the run record says; no grid pattern at the tile borders when an
// SDXL-shaped VAE decodes a gradient.
//
// Weights: the tiny SD 1.x pipeline of tests/data/sdpipeline (diffusers' own random
// initialisation; block_out_channels [8, 8, 16, 16], 4 GroupNorm groups, mid-block attention:
// scale 8, so a 128x128 latent is a 1024x1024 image), a two-level VAE made here (scale 2) and an
// SDXL-shaped one made here (scale 8, scaling factor 0.13025).
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/HostMemoryEstimate.h"  // formatBytes
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/vae/TiledVae.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/Infotext.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;

namespace {

const std::string kPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The 1024x1024 image of the issue's bar; a sanitizer build (about 10x slower) checks the same
// properties on 256x256.
constexpr int kImageSide = kSanitized ? 256 : 1024;

bool pipelinePresent() { return std::ifstream(kPipeline + "/sd1/vae/config.json").good(); }

const VaeModel& pipelineVae() {
    static const VaeModel vae = VaeModel::load(kPipeline + "/sd1");
    return vae;
}

// A VAE of `configJson`: weights uniform in +-1/sqrt(fan_in), norms 1 +- 0.2 and +- 0.2, from `seed`.
VaeModel randomVae(const char* configJson, unsigned seed) {
    const VaeConfig config = vaeConfigFromJson(nlohmann::json::parse(configJson));
    std::mt19937 rng(seed);
    std::map<std::string, HostTensor> tensors;
    for (const auto& [name, shape] : VaeModel::expectedTensors(config)) {
        HostTensor t{shape, std::vector<float>(static_cast<std::size_t>(HostTensor{shape, {}}.numel()))};
        const bool norm = shape.size() == 1 && name.find("norm") != std::string::npos;
        const bool gamma = norm && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        const double fanIn = shape.size() > 1 ? static_cast<double>(t.numel() / shape[0]) : 1.0;
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : t.data) v = gamma ? 1.0f + 0.2f * u(rng) : (norm ? 0.2f : 1.0f / std::sqrt(fanIn)) * u(rng);
        tensors[name] = std::move(t);
    }
    return VaeModel::fromTensors(config, std::move(tensors));
}

// Two levels (scale 2), 8 and 16 channels, 4 groups, attention.
VaeModel twoLevelVae() {
    return randomVae(R"({
      "block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4, "latent_channels": 4,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})",
                     5);
}

// SDXL's VAE (its vae/config.json: four levels, scale 8, two resnets per level, mid-block
// attention; scaling_factor 0.13025, force_upcast) at widths [8, 8, 16, 16] with 4 groups.
VaeModel sdxlShapedVae() {
    return randomVae(R"({
      "block_out_channels": [8, 8, 16, 16], "layers_per_block": 2, "norm_num_groups": 4, "latent_channels": 4,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"],
      "scaling_factor": 0.13025, "force_upcast": true})",
                     7);
}

// Scaled latents (as sampling leaves them) that are a smooth gradient: per channel a different
// linear ramp over [-1, 1] across the image.
HostTensor gradient(int channels, int h, int w) {
    HostTensor t{{1, channels, h, w}, std::vector<float>(static_cast<std::size_t>(channels) * h * w)};
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
                const float u = static_cast<float>(x) / static_cast<float>(w - 1);
                const float v = static_cast<float>(y) / static_cast<float>(h - 1);
                const float ramp[4] = {2 * u - 1, 2 * v - 1, u + v - 1, u - v};
                t.data[(static_cast<std::size_t>(c) * h + y) * w + x] = ramp[c % 4];
            }
    return t;
}

// The grid (seams, dots) at the tile period in a decoded image [1, C, H, W]: the mean |second
// difference| across every tile core border (at the two pixels either side of it; vertical
// borders along x, horizontal ones along y) over its mean one latent pixel (`cell` pixels) to
// either side, the same positions in the decoder's own 8-pixel pattern and nearly the same image
// content. About 1 without a grid; a step or a kink at the tile borders raises it.
double gridScore(const HostTensor& image, const GraphTileGrid& grid, int cell) {
    const int C = static_cast<int>(image.shape[1]), H = static_cast<int>(image.shape[2]),
              W = static_cast<int>(image.shape[3]);
    std::set<int> xs, ys;  // borders, pixels
    for (const GraphTile& t : grid.tiles) {
        if (t.coreX > 0) xs.insert(t.coreX * cell);
        if (t.coreY > 0) ys.insert(t.coreY * cell);
    }
    // |I(i - 1) - 2 I(i) + I(i + 1)| along one axis, summed over the other axis and the channels.
    const auto d2 = [&](bool alongX, int i) {
        double sum = 0;
        const int across = alongX ? H : W;
        for (int c = 0; c < C; ++c)
            for (int j = 0; j < across; ++j) {
                const auto at = [&](int k) {
                    return static_cast<double>(
                        image.data[(static_cast<std::size_t>(c) * H + (alongX ? j : k)) * W + (alongX ? k : j)]);
                };
                sum += std::abs(at(i - 1) - 2 * at(i) + at(i + 1));
            }
        return sum;
    };
    double border = 0, beside = 0;
    for (const auto& [alongX, borders] : {std::pair{true, &xs}, std::pair{false, &ys}})
        for (const int b : *borders)
            for (const int i : {b - 1, b}) {
                border += d2(alongX, i);
                beside += 0.5 * (d2(alongX, i - cell) + d2(alongX, i + cell));
            }
    return border / std::max(beside, 1e-30);
}

// Low-frequency sinusoids over [channels, h, w]: a smooth latent (or image, amplitude 0.8).
HostTensor smooth(int channels, int h, int w) {
    HostTensor t{{1, channels, h, w}, std::vector<float>(static_cast<std::size_t>(channels) * h * w)};
    const double pi = std::acos(-1.0);
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
                const double u = static_cast<double>(x) / w, v = static_cast<double>(y) / h;
                t.data[(static_cast<std::size_t>(c) * h + y) * w + x] =
                    static_cast<float>(0.5 * std::sin(2 * pi * ((1 + c % 2) * u + 0.5 * v) + c) +
                                       0.3 * std::cos(2 * pi * (1.5 * v - 0.5 * u) * (1 + c % 3)));
            }
    return t;
}

double psnr(const HostTensor& got, const HostTensor& want) {
    return got.shape != want.shape ? -INFINITY : psnrOverRange(got.data, want.data);
}

double maxRelative(const HostTensor& got, const HostTensor& want) { return maxRelativeError(got.data, want.data); }

std::string invalidArgument(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<not invalid_argument> ") + e.what();
    }
    return "<no error>";
}

#define EXPECT_IN(text, part)                                   \
    QVERIFY2(std::string(text).find(part) != std::string::npos, \
             qPrintable(QString::fromStdString(std::string("'") + (part) + "' not in: " + std::string(text))))

int countOps(const ModelGraph& g, OpKind kind) {
    return static_cast<int>(
        std::count_if(g.ops().begin(), g.ops().end(), [&](const GraphOp& op) { return op.kind == kind; }));
}

class Silent : public RunObserver {};

// A store of a backend's own (as the CUDA backend's device canvases): here the host store,
// counting the calls and naming itself, to show runTiledGraph goes through what the backend offers.
struct StoreCalls {
    int allocates = 0, releases = 0, moments = 0, prepares = 0, runs = 0;
};
class CountingStore final : public TiledCanvasStore {
public:
    CountingStore(Backend& backend, StoreCalls& calls) : host_(makeHostCanvasStore(backend)), calls_(calls) {}
    std::string where() const override { return "counting"; }
    void allocate(int value, int channels, int h, int w, int scale) override {
        ++calls_.allocates;
        host_->allocate(value, channels, h, w, scale);
    }
    void release(int value) override {
        ++calls_.releases;
        host_->release(value);
    }
    void write(int value, const float* nchw) override { host_->write(value, nchw); }
    std::vector<float> read(int value) override { return host_->read(value); }
    std::vector<std::pair<double, double>> groupMoments(int value, int groups, int x0, int y0, int w, int h) override {
        ++calls_.moments;
        return host_->groupMoments(value, groups, x0, y0, w, h);
    }
    void prepare(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
        ++calls_.prepares;
        host_->prepare(graph, weights, batch, tileH, tileW);
    }
    void run(const std::vector<StoreInput>& inputs, const std::vector<int>& outputs, const GraphTileGrid& grid,
             int first, int count) override {
        ++calls_.runs;
        host_->run(inputs, outputs, grid, first, count);
    }
    std::uint64_t peakBytes() const override { return host_->peakBytes(); }

private:
    std::unique_ptr<TiledCanvasStore> host_;
    StoreCalls& calls_;
};

// A CPU backend that offers a CountingStore when the canvases fit `limit` bytes.
class StoreBackend final : public CpuBackend {
public:
    explicit StoreBackend(std::uint64_t limit) : limit_(limit) {}
    std::unique_ptr<TiledCanvasStore> makeCanvasStore(std::uint64_t canvasBytes) override {
        asked = canvasBytes;
        if (canvasBytes > limit_) return nullptr;
        offered = true;
        return std::make_unique<CountingStore>(*this, calls);
    }
    std::uint64_t asked = 0;
    bool offered = false;
    StoreCalls calls;

private:
    std::uint64_t limit_;
};

// The SD 1.x/2.x/XL VAE's shape (diffusers' AutoencoderKL of those checkpoints).
VaeConfig sdVaeConfig() {
    return vaeConfigFromJson(nlohmann::json::parse(R"({
      "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "norm_num_groups": 32, "latent_channels": 4,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})"));
}

}  // namespace

class TestTiledVae : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    // Cores partition the image, differ by at most one cell, and keep `halo` cells of context
    // or the image edge on every side; every extent has the same size and lies inside.
    void gridCoversTheImageOnce_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("halo");
        QTest::addColumn<int>("cols");
        QTest::addColumn<int>("rows");
        QTest::newRow("128 by 64 + 2") << 128 << 128 << 64 << 2 << 2 << 2;
        QTest::newRow("one cell") << 1 << 1 << 64 << 2 << 1 << 1;
        QTest::newRow("odd 13x7 by 4 + 1") << 13 << 7 << 4 << 1 << 4 << 2;
        QTest::newRow("border cores smaller") << 40 << 9 << 16 << 3 << 3 << 1;
        QTest::newRow("halo larger than the image") << 10 << 12 << 4 << 50 << 1 << 1;
        QTest::newRow("no halo") << 17 << 17 << 5 << 0 << 4 << 4;
    }
    void gridCoversTheImageOnce() {
        QFETCH(int, width);
        QFETCH(int, height);
        QFETCH(int, tile);
        QFETCH(int, halo);
        QFETCH(int, cols);
        QFETCH(int, rows);
        const GraphTileGrid grid = GraphTileGrid::make(width, height, tile, halo);
        QCOMPARE(grid.cols, cols);
        QCOMPARE(grid.rows, rows);
        QCOMPARE(static_cast<int>(grid.tiles.size()), cols * rows);
        std::vector<int> owner(static_cast<std::size_t>(width) * height, 0);
        std::vector<int> coreW, coreH;
        for (const GraphTile& t : grid.tiles) {
            QCOMPARE(t.w, grid.extentW);
            QCOMPARE(t.h, grid.extentH);
            QVERIFY(t.x >= 0 && t.y >= 0 && t.x + t.w <= width && t.y + t.h <= height);
            QVERIFY(t.coreW <= tile || cols == 1);  // one tile on an axis owns all of it
            QVERIFY(t.coreH <= tile || rows == 1);
            coreW.push_back(t.coreW);
            coreH.push_back(t.coreH);
            // Context: at least the halo, or the image's edge.
            QVERIFY(t.coreX - t.x >= halo || t.x == 0);
            QVERIFY(t.coreY - t.y >= halo || t.y == 0);
            QVERIFY(t.x + t.w - (t.coreX + t.coreW) >= halo || t.x + t.w == width);
            QVERIFY(t.y + t.h - (t.coreY + t.coreH) >= halo || t.y + t.h == height);
            for (int y = t.coreY; y < t.coreY + t.coreH; ++y)
                for (int x = t.coreX; x < t.coreX + t.coreW; ++x) ++owner[static_cast<std::size_t>(y) * width + x];
        }
        QVERIFY(std::all_of(owner.begin(), owner.end(), [](int n) { return n == 1; }));
        // Nearly equal cores along each axis: they differ by at most one cell.
        for (const auto* sizes : {&coreW, &coreH}) {
            const auto [lo, hi] = std::minmax_element(sizes->begin(), sizes->end());
            QVERIFY(*hi - *lo <= 1);
        }
    }

    void gridRefusesBadSizes() {
        EXPECT_IN(invalidArgument([] { GraphTileGrid::make(0, 4, 4, 1); }), "at least 1 cell");
        EXPECT_IN(invalidArgument([] { GraphTileGrid::make(4, 4, 0, 1); }), "tile 0");
        EXPECT_IN(invalidArgument([] { GraphTileGrid::make(4, 4, 4, -1); }), "halo -1");
    }

    // SD's decoder (structure only): cut before each of its GroupNorms and its attention; no
    // segment holds a GroupNorm; the inputs are tiles, statistics and the attention's context;
    // the exact halo is 2 latent pixels (a 3x3 conv at 1/8 then one at 1/4 after the upsample
    // inside one segment: 8 + 4 px), the encoder's 1 (a 3x3 conv and a stride-2 conv at 1/4: 4 + 4).
    void sdGraphsCutAtEveryGroupNorm() {
        const VaeConfig sd = vaeConfigFromJson(nlohmann::json::parse(
            R"({"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "norm_num_groups": 32,
                "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
                "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})"));
        for (const bool decoder : {true, false}) {
            const ModelGraph g = decoder ? buildVaeDecoderGraph(sd) : buildVaeEncoderGraph(sd);
            const int norms = countOps(g, OpKind::GroupNorm), attentions = countOps(g, OpKind::Attention);
            QCOMPARE(attentions, 1);
            const auto segments = cutAtNorms(g, SegmentOptions{AttentionContext::Image, 512, 512});
            QCOMPARE(static_cast<int>(segments.size()), norms + attentions + 1);
            int normInputs = 0, contexts = 0;
            for (const GraphSegment& s : segments) {
                QCOMPARE(countOps(s.graph, OpKind::GroupNorm), 0);
                QCOMPARE(s.inputs.size(), s.graph.inputs().size());
                QCOMPARE(s.outputs.size(), s.graph.outputs().size());
                for (const SegmentInput& in : s.inputs) {
                    normInputs += in.kind == SegmentInput::Kind::NormVector;
                    if (in.kind == SegmentInput::Kind::Context) {
                        ++contexts;
                        QCOMPARE(
                            s.graph.value(s.graph.inputs()[static_cast<std::size_t>(&in - s.inputs.data())]).tokens,
                            64 * 64);  // every latent pixel of the 512x512 image
                    }
                }
            }
            QCOMPARE(normInputs, norms);
            QCOMPARE(contexts, 1);
            QCOMPARE(requiredHalo(segments, 8), decoder ? 2 : 1);
            // Tile-local attention: the attention stays inside its segment.
            QCOMPARE(static_cast<int>(cutAtNorms(g, SegmentOptions{AttentionContext::Tile, 512, 512}).size()),
                     norms + 1);
        }
        // What tiling saves: SD's decoder at 2048x2048 in fp16 whole, and in 64-px tiles.
        const ModelGraph decoder = buildVaeDecoderGraph(sd);
        const std::uint64_t whole = graphActivationBytes(fuseForExecution(decoder), 1, 2048, 2048, 2);
        const TiledGraphReport tiles = estimateTiledGraph(decoder, 2048, 2048, GraphTiling{}, 2);
        qInfo("SD decoder 2048x2048, fp16: whole %s of activations; %s, device %s", formatBytes(whole).c_str(),
              tiles.describe().c_str(), formatBytes(tiles.deviceBytes).c_str());
        QVERIFY(tiles.deviceBytes * 4 < whole);
        // A fused graph cannot be cut.
        EXPECT_IN(invalidArgument([&] { cutAtNorms(vaeDecoderExecutionGraph(sd), {}); }), "fused");
    }

    // The issue's bar: a 1024x1024 decode of a smooth latent, tiled (4x4 tiles of 32 latent px
    // with the exact halo) against untiled: >= 45 dB. Per-tile GroupNorm statistics on the same
    // input fall well short.
    void tiledDecodeMatchesUntiled() {
        if (!pipelinePresent()) QSKIP("tests/data/sdpipeline is not there");
        const VaeModel& vae = pipelineVae();
        const int side = kImageSide / 8;
        const HostTensor latent = smooth(4, side, side);
        CpuBackend backend;
        QElapsedTimer timer;
        timer.start();
        const HostTensor whole = vae.decode(backend, latent);
        const qint64 untiledMs = timer.restart();
        GraphTiling tiling;
        tiling.tile = side / 4;
        tiling.batch = 2;
        TiledGraphReport report;
        const HostTensor tiled = decodeTiled(backend, vae, latent, tiling, &report);
        const qint64 tiledMs = timer.restart();
        QCOMPARE(tiled.shape, whole.shape);
        QCOMPARE(report.grid.cols, 4);
        QCOMPARE(report.grid.halo, report.requiredHalo);
        const double exact = psnr(tiled, whole);
        qInfo("decode %dx%d: tiled (%s) vs untiled: %.1f dB; %lld ms untiled, %lld ms tiled", kImageSide, kImageSide,
              report.describe().c_str(), exact, static_cast<long long>(untiledMs), static_cast<long long>(tiledMs));
        QVERIFY2(exact >= 45.0, qPrintable(QString::number(exact)));

        tiling.statistics = NormStatistics::PerTile;
        const double seams = psnr(decodeTiled(backend, vae, latent, tiling), whole);
        qInfo("  per-tile GroupNorm statistics: %.1f dB", seams);
        QVERIFY2(seams < 45.0, qPrintable(QString::number(seams)));
    }

    // The two approximations a tiled pass can make, measured on a 256x256 decode (4x4 tiles):
    // attention within each tile (what other tilers do) and a halo below the exact one. Both
    // lose accuracy that the exact pass keeps.
    void approximationsMeasured() {
        if (!pipelinePresent()) QSKIP("tests/data/sdpipeline is not there");
        const VaeModel& vae = pipelineVae();
        const int side = 32;  // in every build: a smaller latent leaves the larger halo no room
        const HostTensor latent = smooth(4, side, side);
        CpuBackend backend;
        const HostTensor whole = vae.decode(backend, latent);
        GraphTiling tiling;
        tiling.tile = side / 4;
        const double exact = psnr(decodeTiled(backend, vae, latent, tiling), whole);
        std::string line;
        double best = -INFINITY;
        for (const int halo : {2, 6}) {
            GraphTiling local = tiling;
            local.attention = AttentionContext::Tile;
            local.halo = halo;
            const double db = psnr(decodeTiled(backend, vae, latent, local), whole);
            best = std::max(best, db);
            line += "halo " + std::to_string(halo) + ": " + QString::number(db, 'f', 1).toStdString() + " dB; ";
        }
        GraphTiling thin = tiling;
        thin.halo = 0;
        const double noHalo = psnr(decodeTiled(backend, vae, latent, thin), whole);
        qInfo("decode %dx%d, exact %.1f dB; attention within each tile, %shalo 0 with whole-image attention: %.1f dB",
              side * 8, side * 8, exact, line.c_str(), noHalo);
        QVERIFY(best < exact - 20 && noHalo < exact - 20);
    }

    // No dot or grid pattern from a tiled decode with an SDXL-shaped VAE. A smooth
    // gradient latent (scaled by 0.13025 as SDXL's are) decoded in 4 x 3 tiles: with whole-image
    // GroupNorm statistics the tile borders look like everywhere else (gridScore as untiled); the
    // per-tile statistics other tilers use put a pattern there, which the same measure catches.
    void sdxlGradientShowsNoGrid() {
        const VaeModel vae = sdxlShapedVae();
        QCOMPARE(vae.config().scalingFactor, 0.13025f);
        QVERIFY(vae.config().forceUpcast);
        const HostTensor z = unscaleLatents(vae.config(), gradient(4, 48, 64));  // 384 x 512 px
        CpuBackend backend;
        GraphTiling tiling;
        tiling.tile = 16;
        TiledGraphReport report;
        const HostTensor tiled = decodeTiled(backend, vae, z, tiling, &report);
        QCOMPARE(report.grid.cols, 4);
        QCOMPARE(report.grid.rows, 3);
        const HostTensor whole = vae.decode(backend, z);
        tiling.statistics = NormStatistics::PerTile;
        const HostTensor perTile = decodeTiled(backend, vae, z, tiling);
        const int cell = report.cellPixels;
        QCOMPARE(cell, 8);
        const double untiledScore = gridScore(whole, report.grid, cell);
        const double ours = gridScore(tiled, report.grid, cell), theirs = gridScore(perTile, report.grid, cell);
        qInfo(
            "grid score at the tile borders (1 = none): untiled %.3f, tiled whole-image statistics %.3f, "
            "per-tile statistics %.3f; PSNR vs untiled %.1f / %.1f dB",
            untiledScore, ours, theirs, psnr(tiled, whole), psnr(perTile, whole));
        // Measured: untiled 0.995, ours 0.995, per-tile statistics 5.7.
        QVERIFY2(std::abs(ours - untiledScore) < 0.02 && ours < 1.1, qPrintable(QString::number(ours)));
        QVERIFY2(theirs > 1.5, qPrintable(QString::number(theirs)));  // the same bar fails where there is a grid
    }

    // The encoder over a 512x512 smooth image: posterior means within 45 dB of untiled.
    void tiledEncodeMatchesUntiled() {
        if (!pipelinePresent()) QSKIP("tests/data/sdpipeline is not there");
        const VaeModel& vae = pipelineVae();
        const int side = kImageSide / 2;
        const HostTensor image = smooth(3, side, side);
        CpuBackend backend;
        const HostTensor whole = posteriorMean(vae.encode(backend, image));
        GraphTiling tiling;
        tiling.tile = side / 8 / 4;
        TiledGraphReport report;
        const HostTensor tiled = posteriorMean(encodeTiled(backend, vae, image, tiling, &report));
        const double db = psnr(tiled, whole);
        qInfo("encode %dx%d: tiled (%s) vs untiled posterior mean: %.1f dB", side, side, report.describe().c_str(), db);
        QVERIFY2(db >= 45.0, qPrintable(QString::number(db)));
        tiling.statistics = NormStatistics::PerTile;
        const double seams = psnr(posteriorMean(encodeTiled(backend, vae, image, tiling)), whole);
        qInfo("  per-tile GroupNorm statistics: %.1f dB", seams);
        QVERIFY2(seams < 45.0, qPrintable(QString::number(seams)));
    }

    // One tile covering the whole latent is the untiled pass, up to the rounding of the
    // GroupNorm's ScaleShift form; a second image in the batch is its own.
    void oneTileEqualsUntiled() {
        const VaeModel vae = twoLevelVae();
        HostTensor latent = smooth(4, 24, 20);
        latent.shape[0] = 2;
        for (std::size_t i = 0, n = latent.data.size(); i < n; ++i) latent.data.push_back(-0.5f * latent.data[i]);
        CpuBackend backend;
        GraphTiling tiling;
        tiling.tile = 64;
        TiledGraphReport report;
        const HostTensor tiled = decodeTiled(backend, vae, latent, tiling, &report);
        const HostTensor whole = vae.decode(backend, latent);
        QCOMPARE(report.grid.tiles.size(), std::size_t{1});
        QCOMPARE(report.prepares, 2 * report.segments);  // once per segment and image
        const double decodeError = maxRelative(tiled, whole);
        const HostTensor image = smooth(3, 48, 40);
        const double encodeError = maxRelative(encodeTiled(backend, vae, image, tiling), vae.encode(backend, image));
        qInfo("one tile vs untiled: decode %.2g, encode %.2g (max |diff| / max |untiled|)", decodeError, encodeError);
        QVERIFY2(decodeError < 1e-5, qPrintable(QString::number(decodeError)));
        QVERIFY2(encodeError < 1e-5, qPrintable(QString::number(encodeError)));
    }

    // Small, odd and border cases on the two-level VAE (cells of 2 px): with the exact halo the
    // tiled pass equals the untiled one to float rounding, whatever the grid.
    void smallAndOddCanvases_data() {
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("halo");
        QTest::addColumn<int>("batch");
        QTest::newRow("1 latent pixel") << 1 << 1 << 4 << -1 << 1;
        QTest::newRow("odd 13x11, tile 3") << 13 << 11 << 3 << -1 << 3;
        QTest::newRow("uneven cores: 17x9, tile 8") << 17 << 9 << 8 << -1 << 2;
        QTest::newRow("one cell tiles") << 9 << 7 << 1 << -1 << 4;
        QTest::newRow("halo larger than the image") << 6 << 9 << 2 << 40 << 1;
    }
    void smallAndOddCanvases() {
        QFETCH(int, height);
        QFETCH(int, width);
        QFETCH(int, tile);
        QFETCH(int, halo);
        QFETCH(int, batch);
        const VaeModel vae = twoLevelVae();
        CpuBackend backend;
        GraphTiling tiling{tile, halo, batch};
        const HostTensor latent = smooth(4, height, width);
        TiledGraphReport report;
        const HostTensor tiled = decodeTiled(backend, vae, latent, tiling, &report);
        const double decodeError = maxRelative(tiled, vae.decode(backend, latent));
        const HostTensor image = smooth(3, 2 * height, 2 * width);
        const double encodeError = maxRelative(encodeTiled(backend, vae, image, tiling), vae.encode(backend, image));
        qInfo("%s: decode %.2g, encode %.2g", report.describe().c_str(), decodeError, encodeError);
        QVERIFY2(decodeError < 1e-5 && encodeError < 1e-5,
                 qPrintable(QString::number(decodeError) + " " + QString::number(encodeError)));
        const int tiles = static_cast<int>(report.grid.tiles.size());
        QCOMPARE(report.batchRuns, report.segments * ((tiles + batch - 1) / batch));
    }

    void badInputsNamed() {
        const VaeModel vae = twoLevelVae();
        CpuBackend backend;
        const GraphTiling tiling;
        HostTensor latent = smooth(3, 4, 4);  // 3 channels; the VAE takes 4
        EXPECT_IN(invalidArgument([&] { decodeTiled(backend, vae, latent, tiling); }), "latent: shape [1, 3, 4, 4]");
        latent = smooth(4, 4, 4);
        latent.shape = {4, 4, 4};
        EXPECT_IN(invalidArgument([&] { decodeTiled(backend, vae, latent, tiling); }), "expected [batch 1 to");
        const HostTensor odd = smooth(3, 5, 4);  // 5 is no multiple of the scale 2
        EXPECT_IN(invalidArgument([&] { encodeTiled(backend, vae, odd, tiling); }), "each side a multiple of 2");
        latent = smooth(4, 4, 4);
        latent.data.pop_back();
        EXPECT_IN(invalidArgument([&] { decodeTiled(backend, vae, latent, tiling); }), "63 values for shape");
        latent = smooth(4, 4, 4);
        for (const GraphTiling& bad : {GraphTiling{0, -1, 1}, GraphTiling{4, -2, 1}, GraphTiling{4, 1, 0}})
            EXPECT_IN(invalidArgument([&] { decodeTiled(backend, vae, latent, bad); }),
                      "the tile must be at least 1 cell");
    }

    // What the run held on the host is what the estimate says, for both statistics modes and
    // with a context; the device estimate is one segment's activations, far below untiled.
    void hostPeakMatchesTheEstimate() {
        const VaeModel vae = twoLevelVae();
        CpuBackend backend;
        const HostTensor latent = smooth(4, 32, 24);
        for (const NormStatistics statistics : {NormStatistics::WholeImage, NormStatistics::PerTile}) {
            GraphTiling tiling{8, -1, 3, AttentionContext::Image, statistics};
            TiledGraphReport ran;
            decodeTiled(backend, vae, latent, tiling, &ran);
            const ModelGraph g = buildVaeDecoderGraph(vae.config());
            const TiledGraphReport estimate = estimateTiledGraph(g, 64, 48, tiling, 4);
            QCOMPARE(ran.hostPeakBytes, estimate.hostPeakBytes);
            QVERIFY(estimate.deviceBytes > 0);
            QVERIFY(estimate.deviceBytes < graphActivationBytes(fuseForExecution(g), 1, 64, 48, 4));
        }
    }

    // graphActivationBytes: the largest live set, plus a whole attention score matrix.
    void activationBytesOfAChain() {
        ModelGraph g;
        int x = g.addInput("x", ValueKind::FeatureMap, 2);
        GraphOp op;
        op.kind = OpKind::SiLU;
        op.name = "a";
        op.input = x;
        const int a = g.addOp(op);
        op.name = "b";
        op.input = a;
        g.markOutput(g.addOp(op));
        // x (2 x 4 x 4) and a live at once, then a and b: 2 x 32 floats.
        QCOMPARE(graphActivationBytes(g, 1, 4, 4, 4), std::uint64_t{2 * 32 * 4});
        QCOMPARE(graphActivationBytes(g, 3, 4, 4, 2), std::uint64_t{3 * 2 * 32 * 2});
    }

    // vae_tiling: off is whole; on is tiled (tiles halved while a batch does not fit the
    // budget); auto whole when it fits or nothing is known, else tiled; the reason says which.
    void planFollowsTheSettingAndTheBudget() {
        const VaeModel vae = twoLevelVae();
        const ModelGraph g = buildVaeDecoderGraph(vae.config());
        const std::uint64_t untiled = graphActivationBytes(fuseForExecution(g), 1, 1024, 1024, 4);
        const VaeMemoryBudget roomy{untiled * 4, 4, true, "test budget"};
        const VaeMemoryBudget tight{untiled / 2, 4, false, "test budget"};
        const VaeMemoryBudget tiny{1, 4, true, "test budget"};

        VaePassPlan plan = planVaePass(VaeTiling::Off, g, 1024, 1024, tiny);
        QVERIFY(!plan.tiled);
        QCOMPARE(plan.reason, std::string("vae_tiling off"));
        plan = planVaePass(VaeTiling::Auto, g, 1024, 1024, std::nullopt);
        QVERIFY(!plan.tiled);
        EXPECT_IN(plan.reason, "no memory budget known");
        plan = planVaePass(VaeTiling::Auto, g, 1024, 1024, roomy);
        QVERIFY(!plan.tiled);
        EXPECT_IN(plan.reason,
                  "activations " + formatBytes(untiled) + " of " + formatBytes(roomy.bytes) + " (test budget)");
        QCOMPARE(plan.untiledBytes, untiled);

        plan = planVaePass(VaeTiling::Auto, g, 1024, 1024, tight);
        QVERIFY(plan.tiled);
        EXPECT_IN(plan.reason,
                  "activations " + formatBytes(untiled) + " exceed " + formatBytes(tight.bytes) + " (test budget)");
        QVERIFY(plan.estimate.deviceBytes <= tight.bytes);
        QCOMPARE(plan.tiling.tile, 64);
        plan = planVaePass(VaeTiling::Auto, g, 1024, 1024, tiny);
        QVERIFY(plan.tiled);
        QCOMPARE(plan.tiling.tile, 8);  // halved as far as it goes
        plan = planVaePass(VaeTiling::On, g, 1024, 1024, roomy);
        QVERIFY(plan.tiled);
        QCOMPARE(plan.reason, std::string("vae_tiling on"));
        QCOMPARE(plan.tiling.tile, 64);
        QCOMPARE(plan.estimate.grid.cols, 8);  // 512 latent px in 64-px tiles
    }

    // runVaePass says which way it went; on, the image is the untiled one's.
    void runVaePassDescribesItself() {
        const VaeModel vae = twoLevelVae();
        CpuBackend backend;
        const HostTensor latent = smooth(4, 40, 40);
        std::string off, on;
        const HostTensor whole = runVaePass(backend, vae, latent, true, VaeTiling::Off, std::nullopt, &off);
        const HostTensor tiled = runVaePass(backend, vae, latent, true, VaeTiling::On, std::nullopt, &on);
        QCOMPARE(off, std::string("untiled (vae_tiling off)"));
        EXPECT_IN(on,
                  "tiled 1x1 tiles of 64 latent px + 2 halo (80x80 px evaluated)");  // one tile over the 40x40 latent
        EXPECT_IN(on, "whole-image GroupNorm, attention over the whole image, host peak ");
        QVERIFY(maxRelative(tiled, whole) < 1e-5);
        EXPECT_IN(invalidArgument(
                      [&] { runVaePass(backend, vae, smooth(2, 4, 4), true, VaeTiling::Auto, std::nullopt, nullptr); }),
                  "latent: shape [1, 2, 4, 4]");
    }

    // The setting: JSON key vae_tiling (auto, on, off; anything else names the key and the
    // choices), the PNG parameters' "VAE tiling" key when not auto, read back.
    void vaeTilingSetting() {
        RunConfig c;
        QVERIFY(c.vaeTiling == VaeTiling::Auto);
        QCOMPARE(toJson(c)["vae_tiling"].get<std::string>(), std::string("auto"));
        for (const VaeTiling mode : {VaeTiling::Auto, VaeTiling::On, VaeTiling::Off}) {
            c.vaeTiling = mode;
            QVERIFY(runConfigFromJson(toJson(c)).vaeTiling == mode);
            const std::string text = parametersLine(c);
            QCOMPARE(text.find("VAE tiling") != std::string::npos, mode != VaeTiling::Auto);
            RunConfig back;
            back.vaeTiling = mode == VaeTiling::On ? VaeTiling::Off : VaeTiling::On;
            if (mode != VaeTiling::Auto) {
                applyInfotext(parseInfotext(text), back);
                QVERIFY(back.vaeTiling == mode);
            }
        }
        QVERIFY(parseVaeTiling("ON") == VaeTiling::On);
        nlohmann::json j = toJson(RunConfig{});
        j["vae_tiling"] = "sometimes";
        try {
            runConfigFromJson(j);
            QFAIL("no error");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("vae_tiling"));
            QCOMPARE(std::string(e.what()), std::string("vae_tiling: 'sometimes' is not one of auto, on or off"));
        }
        RunConfig a, b;
        b.vaeTiling = VaeTiling::Off;
        QCOMPARE(mappedFieldDifferences(a, b), std::vector<std::string>{"vae_tiling"});
    }

    // A Stable Diffusion run (the tiny SD 1.x pipeline): the record says how the VAE ran, and
    // vae_tiling on gives the image of vae_tiling off.
    void runRecordSaysHowTheVaeRan() {
        if (!pipelinePresent()) QSKIP("tests/data/sdpipeline is not there");
        RunConfig config;
        config.model = kPipeline + "/sd1";
        config.width = 128;
        config.height = 96;
        config.tile = 128;
        config.overlapPx = 16;
        config.steps = 2;
        config.prompt = "a red cube";
        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        config.previewEvery = 0;
        Silent observer;
        std::vector<RunResult> results;
        for (const VaeTiling mode : {VaeTiling::Off, VaeTiling::On, VaeTiling::Auto}) {
            config.vaeTiling = mode;
            CpuEngine engine(std::make_unique<CpuBackend>());
            results.push_back(engine.run(config, observer));
            QCOMPARE(std::string(toString(results.back().record.status)), std::string("finished"));
            QVERIFY(results.back().record.config.vaeTiling == mode);
        }
        const auto message = [](const RunRecord& r) {
            for (const std::string& m : r.messages)
                if (m.rfind("vae decode: ", 0) == 0) return m;
            return std::string("<none>");
        };
        EXPECT_IN(message(results[0].record), "vae decode: 128x96 untiled (vae_tiling off), ");
        EXPECT_IN(message(results[1].record), "vae decode: 128x96 tiled 1x1 tiles of 64 latent px + 2 halo");
        EXPECT_IN(message(results[2].record), "vae decode: 128x96 untiled (activations ");
        const HostTensor off{{1, 3, 96, 128}, results[0].image.data}, on{{1, 3, 96, 128}, results[1].image.data};
        QVERIFY(maxRelative(on, off) < 1e-5);

        // Image-to-image: the encode says so too.
        config.vaeTiling = VaeTiling::On;
        config.initImage = "start.png";
        CpuEngine engine(std::make_unique<CpuBackend>());
        engine.setInitImage(ImageTensor{3, 96, 128, smooth(3, 96, 128).data});
        const RunResult img2img = engine.run(config, observer);
        const auto& m = img2img.record.messages;
        QVERIFY2(std::any_of(m.begin(), m.end(),
                             [](const std::string& s) { return s.rfind("vae encode: tiled 1x1 tiles", 0) == 0; }),
                 qPrintable(QString::fromStdString(nlohmann::json(m).dump())));
    }

    // A backend's own canvas store (Backend::makeCanvasStore) carries the whole pass: asked with
    // the host store's float32 peak, it gets every canvas, statistic, prepare and tile batch, and
    // the image is the host store's to the bit; one that declines leaves the host store.
    void backendCanvasStoreCarriesThePass() {
        const VaeModel vae = twoLevelVae();
        const HostTensor latent = smooth(4, 32, 24);
        const GraphTiling tiling{8, -1, 3, AttentionContext::Image, NormStatistics::WholeImage};
        CpuBackend cpu;
        TiledGraphReport hostReport;
        const HostTensor host = decodeTiled(cpu, vae, latent, tiling, &hostReport);
        QCOMPARE(hostReport.canvases, std::string("host"));

        StoreBackend offering(UINT64_MAX);
        TiledGraphReport storeReport;
        const HostTensor stored = decodeTiled(offering, vae, latent, tiling, &storeReport);
        QVERIFY(host.shape == stored.shape);
        QVERIFY(host.data == stored.data);  // bit-identical
        QCOMPARE(offering.asked, hostReport.hostPeakBytes);
        QCOMPARE(storeReport.canvases, std::string("counting"));
        QCOMPARE(storeReport.storePeakBytes, hostReport.hostPeakBytes);
        QCOMPARE(storeReport.hostPeakBytes, std::uint64_t{0});
        EXPECT_IN(storeReport.describe(), "canvases on the counting (peak ");
        QCOMPARE(offering.calls.prepares, storeReport.prepares);
        QCOMPARE(offering.calls.runs, storeReport.batchRuns);
        QCOMPARE(offering.calls.releases, offering.calls.allocates);  // every canvas given back
        const ModelGraph g = buildVaeDecoderGraph(vae.config());
        QCOMPARE(offering.calls.moments, countOps(g, OpKind::GroupNorm));  // whole-image: once per GroupNorm

        StoreBackend declining(hostReport.hostPeakBytes - 1);
        TiledGraphReport declined;
        const HostTensor fallback = decodeTiled(declining, vae, latent, tiling, &declined);
        QVERIFY(!declining.offered);
        QCOMPARE(declined.canvases, std::string("host"));
        QVERIFY(fallback.data == host.data);

        // Per-tile statistics: one statistics call per GroupNorm and tile.
        StoreBackend perTile(UINT64_MAX);
        TiledGraphReport perTileReport;
        decodeTiled(perTile, vae, latent, GraphTiling{8, -1, 3, AttentionContext::Image, NormStatistics::PerTile},
                    &perTileReport);
        QCOMPARE(perTile.calls.moments,
                 countOps(g, OpKind::GroupNorm) * static_cast<int>(perTileReport.grid.tiles.size()));
    }

    // largestTensorElements: the largest value, channels padded as asked. The SD VAE decoder's
    // largest is the 256-channel full-resolution input of its last up block: 2^32 elements at
    // 4096x4096 (over cuDNN's 2^31 - 1; its 128-channel ones have 2^31).
    void largestTensorOfTheSdDecoder() {
        const ModelGraph decoder = fuseForExecution(buildVaeDecoderGraph(sdVaeConfig()));
        QCOMPARE(largestTensorElements(decoder, 1, 4096, 4096, 8), std::int64_t{1} << 32);
        QCOMPARE(largestTensorElements(decoder, 1, 2048, 2048, 8), std::int64_t{1} << 30);
        QCOMPARE(largestTensorElements(decoder, 2, 1024, 1024, 1), std::int64_t{1} << 29);
        // Padding: a graph whose largest value has 3 channels counts 8 when asked.
        ModelGraph g;
        GraphOp op;
        op.kind = OpKind::SiLU;
        op.name = "a";
        op.input = g.addInput("x", ValueKind::FeatureMap, 3);
        g.markOutput(g.addOp(op));
        QCOMPARE(largestTensorElements(g, 1, 4, 4, 1), std::int64_t{3 * 16});
        QCOMPARE(largestTensorElements(g, 1, 4, 4, 8), std::int64_t{8 * 16});
    }

    // auto tiles where the whole image fits the budget's bytes but a tensor exceeds its element
    // limit (cuDNN's 2^31 - 1 on CUDA), and says so; its tiles keep every tensor under the limit.
    // off stays whole and says it is over. No limit (0): the bytes alone decide.
    void autoTilesPastTheTensorLimit() {
        const ModelGraph decoder = buildVaeDecoderGraph(sdVaeConfig());
        const std::int64_t cudnn = (std::int64_t{1} << 31) - 1;
        const VaeMemoryBudget h100{70ull << 30, 2, false, "test budget", cudnn};
        VaePassPlan plan = planVaePass(VaeTiling::Auto, decoder, 2048, 2048, h100);
        QVERIFY2(!plan.tiled, plan.reason.c_str());
        QCOMPARE(plan.untiledLargest, std::int64_t{1} << 30);

        // At 4096x4096 the whole image's estimate (the mid-block attention's 262144^2 scores held
        // whole, a bound) exceeds 70 GiB anyway; a budget of exactly that estimate leaves the
        // element limit as the reason to tile.
        const std::uint64_t whole4096 = planVaePass(VaeTiling::Off, decoder, 4096, 4096, h100).untiledBytes;
        QVERIFY(whole4096 > h100.bytes);
        VaeMemoryBudget ample = h100;
        ample.bytes = whole4096;
        plan = planVaePass(VaeTiling::Auto, decoder, 4096, 4096, ample);
        QVERIFY(plan.tiled);
        EXPECT_IN(plan.reason,
                  "activations " + formatBytes(whole4096) + " of " + formatBytes(whole4096) +
                      " (test budget), but its largest tensor has 4294967296 elements, over the 2147483647 "
                      "the device takes");
        const ModelGraph execution = fuseForExecution(decoder);
        const int cell = plan.estimate.cellPixels;
        QVERIFY(largestTensorElements(execution, plan.tiling.batch, plan.estimate.grid.extentH * cell,
                                      plan.estimate.grid.extentW * cell, 8) <= cudnn);

        plan = planVaePass(VaeTiling::Off, decoder, 4096, 4096, h100);
        QVERIFY(!plan.tiled);
        EXPECT_IN(plan.reason, "vae_tiling off, although its largest tensor has 4294967296 elements");

        VaeMemoryBudget unlimited = ample;
        unlimited.maxTensorElements = 0;
        QVERIFY(!planVaePass(VaeTiling::Auto, decoder, 4096, 4096, unlimited).tiled);
        EXPECT_IN(planVaePass(VaeTiling::Auto, decoder, 4096, 4096, h100).reason,
                  "activations " + formatBytes(whole4096) +
                      " exceed 70.0 GiB (test budget), and its largest tensor has "
                      "4294967296 elements");
        // A small forced budget tiles a size that fits the element limit.
        VaeMemoryBudget small = h100;
        small.bytes = 256ull << 20;
        plan = planVaePass(VaeTiling::Auto, decoder, 2048, 2048, small);
        QVERIFY(plan.tiled);
        QVERIFY(plan.estimate.deviceBytes <= small.bytes);
    }

    // A device's own budget batches tiles per segment call while the batch and the canvases (at
    // its bytes per value) fit: 8 of the 64 tiles of a 4096x4096 decode in 70 GiB, fewer in less,
    // one where only one fits; a host budget keeps one tile a call.
    void deviceBudgetBatchesTiles() {
        const ModelGraph decoder = buildVaeDecoderGraph(sdVaeConfig());
        const std::int64_t cudnn = (std::int64_t{1} << 31) - 1;
        const VaeMemoryBudget h100{70ull << 30, 2, false, "test budget", cudnn};
        const VaePassPlan roomy = planVaePass(VaeTiling::Auto, decoder, 4096, 4096, h100);
        QVERIFY(roomy.tiled);
        QCOMPARE(roomy.estimate.grid.tiles.size(), std::size_t{64});
        QCOMPARE(roomy.tiling.batch, 8);
        const auto need = [](const VaePassPlan& p) { return p.estimate.deviceBytes + p.estimate.hostPeakBytes / 2; };
        QVERIFY(need(roomy) <= h100.bytes);

        VaeMemoryBudget less = h100;
        less.bytes = need(roomy) - 1;
        const VaePassPlan fewer = planVaePass(VaeTiling::Auto, decoder, 4096, 4096, less);
        QCOMPARE(fewer.tiling.batch, 4);
        QVERIFY(need(fewer) <= less.bytes);

        VaeMemoryBudget host = h100;
        host.sharedWithHost = true;
        host.bytes = 1ull << 40;
        QCOMPARE(planVaePass(VaeTiling::On, decoder, 4096, 4096, host).tiling.batch, 1);
    }
};

QTEST_GUILESS_MAIN(TestTiledVae)
#include "tst_tiledvae.moc"
