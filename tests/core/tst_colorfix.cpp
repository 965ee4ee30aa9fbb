// sd-webui-controlnet's tile_colorfix / tile_colorfix+sharp correction as one graph op
// (OpKind::ColorFix) on the CPU backend, against the extension's own code run on random tensors
// (tests/data/controlnet/colorfix, tools/reference/make_colorfix_fixtures.py: scripts/hook.py's
// functions and its "Post-processing for color fix" block, in float64); the DDPM table the
// extension registers, bit for bit; results that do not depend on the thread count; the
// controlled UNet graph's colour-fix inputs, parameter and output.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/graph/GraphBuilder.h"
#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlledUNetGraph.h"
#include "core/models/sd/SdModel.h"
#include "tests/core/GraphTestSupport.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/controlnet/colorfix";
const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// The graph of one ColorFix op over C x h x w rows: inputs eps, x_t, the latent, the timesteps
// and the row mark.
ModelGraph colorFixGraph(int channels, int radius, float weight, float sharpness) {
    ModelGraph g;
    const int eps = g.addInput("eps", ValueKind::FeatureMap, channels);
    const int x = g.addInput("x", ValueKind::FeatureMap, channels);
    const int latent = g.addInput("latent", ValueKind::FeatureMap, channels);
    const int t = g.addInput("timestep", ValueKind::Vector, 1);
    const int mark = g.addInput("cond_mark", ValueKind::Vector, 2);
    GraphOp op = newOp(OpKind::ColorFix, "colorfix", eps, x);
    op.hintLatent = latent;
    op.timesteps = t;
    op.condMark = mark;
    op.radius = radius;
    op.scale = weight;
    op.sharpness = sharpness;
    op.params = {g.addParam("table", {2, 1000})};
    g.markOutput(g.addOp(std::move(op)));
    return g;
}

TensorMap tableWeights() {
    const std::vector<float> table = colorFixDdpmTable();
    return TensorMap{{"table", HostTensor{{2, 1000}, table}}};
}

// Per element: |got - want| <= tolerance * max(1, |want|).
QString elementMismatch(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
    if (got.size() != want.size()) return QStringLiteral("sizes differ");
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double bound = tolerance * std::max(1.0, std::abs(double(want[i])));
        if (!(std::abs(double(got[i]) - double(want[i])) <= bound))
            return QStringLiteral("element %1 is %2, expected %3")
                .arg(i)
                .arg(got[i], 0, 'g', 9)
                .arg(want[i], 0, 'g', 9);
    }
    return {};
}

}  // namespace

class TestColorFix : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    // The extension's register_schedule tables (float64, rounded to float32), bit for bit.
    void ddpmTableIsTheExtensions() {
        SafetensorsFile io(kFixtures + "/colorfix.safetensors");
        const std::vector<float> want = io.readFloat32("ddpm_table");
        const std::vector<float> got = colorFixDdpmTable();
        QCOMPARE(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
            QVERIFY2(
                got[i] == want[i],
                qPrintable(
                    QStringLiteral("entry %1: %2, expected %3").arg(i).arg(got[i], 0, 'g', 9).arg(want[i], 0, 'g', 9)));
    }

    void opMatchesExtension_data() {
        QTest::addColumn<QString>("name");
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        for (const auto& c : cases.at("cases")) {
            const std::string name = c.at("name");
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
        }
    }
    // Odd sizes, several timesteps (halves rounded to even), both variants, a weight below 1 and
    // one above (clamped), mixed conditional and unconditional rows.
    void opMatchesExtension() {
        QFETCH(QString, name);
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        nlohmann::json info;
        for (const auto& c : cases.at("cases"))
            if (c.at("name") == name.toStdString()) info = c;
        const std::vector<int> shape = info.at("shape").get<std::vector<int>>();
        const int B = shape[0], C = shape[1], H = shape[2], W = shape[3];
        const bool sharp = info.at("preprocessor") == "tile_colorfix+sharp";
        const auto weight = static_cast<float>(std::clamp(info.at("weight").get<double>(), 0.0, 1.0));
        const float sharpness = sharp ? static_cast<float>(info.at("threshold_b").get<double>() * 0.01) : -1.0f;
        const ModelGraph g =
            colorFixGraph(C, static_cast<int>(info.at("threshold_a").get<double>()), weight, sharpness);
        SafetensorsFile io(kFixtures + "/colorfix.safetensors");
        const std::string n = name.toStdString();
        std::vector<float> timesteps, marks;
        for (const double t : info.at("timesteps").get<std::vector<double>>())
            timesteps.push_back(static_cast<float>(t));
        for (const int m : info.at("cond_mark").get<std::vector<int>>()) {
            marks.push_back(static_cast<float>(m) - 1.0f);  // the FiLM row: mark - 1, then 0
            marks.push_back(0.0f);
        }
        const std::vector<std::vector<float>> inputs{io.readFloat32(n + ".eps"), io.readFloat32(n + ".x"),
                                                     io.readFloat32(n + ".latent"), timesteps, marks};
        const std::vector<float> want = io.readFloat32(n + ".out");
        const std::vector<float> got = graphtest::runCpu(g, tableWeights(), B, H, W, inputs)[0];
        const QString e = elementMismatch(got, want, 1e-6);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        // The correction changed the output (the case tests something).
        QVERIFY(elementMismatch(inputs[0], want, 1e-3).size() > 0);
        // One thread or three: the same bits.
        const TensorMap weights = tableWeights();  // the backends keep a reference
        CpuBackend one(1), three(3);
        std::vector<float> a(want.size()), b(want.size());
        std::vector<const float*> pointers;
        for (const auto& v : inputs) pointers.push_back(v.data());
        one.prepareGraph(g, weights, B, H, W);
        one.run(pointers, B, {a.data()});
        three.prepareGraph(g, weights, B, H, W);
        three.run(pointers, B, {b.data()});
        QVERIFY(a == b);
        QVERIFY(a == got);
    }

    // Weight 0: the UNet's output unchanged, bit for bit.
    void weightZeroIsIdentity() {
        const int B = 2, C = 4, H = 7, W = 9;
        const ModelGraph g = colorFixGraph(C, 3, 0.0f, 0.01f);
        const auto n = static_cast<std::size_t>(B * C * H * W);
        const std::vector<std::vector<float>> inputs{graphtest::randomVector(n, 1),
                                                     graphtest::randomVector(n, 2),
                                                     graphtest::randomVector(n, 3),
                                                     {500.0f, 20.0f},
                                                     {0.0f, 0.0f, -1.0f, 0.0f}};
        QVERIFY(graphtest::runCpu(g, tableWeights(), B, H, W, inputs)[0] == inputs[0]);
    }

    // The graph refuses a colour fix whose operands do not fit.
    void graphChecks() {
        ModelGraph g;
        const int eps = g.addInput("eps", ValueKind::FeatureMap, 4);
        const int x = g.addInput("x", ValueKind::FeatureMap, 4, 2);
        const int t = g.addInput("timestep", ValueKind::Vector, 1);
        const int mark = g.addInput("cond_mark", ValueKind::Vector, 2);
        GraphOp op = newOp(OpKind::ColorFix, "colorfix", eps, x);
        op.hintLatent = eps;
        op.timesteps = t;
        op.condMark = mark;
        op.params = {g.addParam("table", {2, 1000})};
        QVERIFY_THROWS_EXCEPTION(std::logic_error, g.addOp(op));  // x_t of another size
        op.input2 = eps;
        op.scale = 1.5f;
        QVERIFY_THROWS_EXCEPTION(std::logic_error, g.addOp(op));  // a weight above 1
        op.scale = 1.0f;
        op.condMark = t;
        QVERIFY_THROWS_EXCEPTION(std::logic_error, g.addOp(op));  // a mark of width 1
        op.condMark = mark;
        QVERIFY(g.addOp(op) >= 0);
        GraphOp add = newOp(OpKind::Add, "add", eps, eps);
        add.timesteps = t;
        QVERIFY_THROWS_EXCEPTION(std::logic_error, g.addOp(add));  // only ColorFix reads timesteps
    }

    // The controlled graph: per colour-fixing ControlNet a latent and a mark input after every
    // ControlNet's, its table parameter, and the colour fixes (in the ControlNets' order) as the
    // graph's output; without colour fixes the graph is the one it was.
    void controlledGraphInputs() {
        const SdModel sd = loadSdModel(kSdPipeline);
        const ControlNetConfig net = controlNetConfigFromJson(nlohmann::json::parse(
            R"({"_class_name": "ControlNetModel", "block_out_channels": [16, 32],
                "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 1,
                "norm_num_groups": 8, "cross_attention_dim": 8, "attention_head_dim": 2,
                "conditioning_embedding_out_channels": [4, 6, 8, 10]})"));
        const ModelGraph plain = controlledUNetExecutionGraph(sd.unet->config(), {{net, {}}, {net, {}}}, {77, false});
        std::vector<ControlledNet> nets{{net, {}}, {net, {}}};
        nets[1].colorFix = ColorFixSettings{5, 0.5f, 0.01f};
        const ModelGraph fixed = controlledUNetExecutionGraph(sd.unet->config(), nets, {77, false});
        QCOMPARE(fixed.inputs().size(), plain.inputs().size() + 2);
        for (std::size_t i = 0; i < plain.inputs().size(); ++i)
            QCOMPARE(fixed.value(fixed.inputs()[i]).name, plain.value(plain.inputs()[i]).name);
        const GraphValue& latent = fixed.value(fixed.inputs()[plain.inputs().size()]);
        QCOMPARE(latent.name, colorFixLatentInput(1));
        QCOMPARE(latent.channels, 4);
        QCOMPARE(latent.divisor, 8);  // the latent tile in a graph whose tile is the hint's
        QCOMPARE(fixed.value(fixed.inputs().back()).name, colorFixMarkInput(1));
        QCOMPARE(fixed.ops().size(), plain.ops().size() + 1);
        const GraphOp& last = fixed.ops().back();
        QCOMPARE(last.kind, OpKind::ColorFix);
        QCOMPARE(last.output, fixed.outputs().front());
        QCOMPARE(last.radius, 5);
        QCOMPARE(fixed.param(last.params.front()).name, colorFixTableParam(1));
        QCOMPARE(fixed.value(last.input2).name, std::string("sample"));
        QCOMPARE(fixed.value(last.timesteps).name, std::string("timestep"));
    }
};

QTEST_GUILESS_MAIN(TestColorFix)
#include "tst_colorfix.moc"
