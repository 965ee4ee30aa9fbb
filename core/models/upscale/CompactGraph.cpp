#include "core/models/upscale/CompactGraph.h"

#include <algorithm>
#include <cmath>

#include "core/formats/ModelWeights.h"
#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

class CompactBuilder : private GraphBuilder {
public:
    explicit CompactBuilder(const UpscaleConfig& c) : c_(c) {}

    ModelGraph build() {
        const int x = g_.addInput("image", ValueKind::FeatureMap, c_.inChannels, c_.scale);
        int h = x;
        for (int k = 0; k <= c_.blocks; ++k) {
            h = sameConv(indexed("body.", "", 2 * k), h, c_.features, 3);
            GraphOp act = newOp(OpKind::PReLU, indexed("body.", "", 2 * k + 1), h);
            act.params = declare(act.name, {{c_.features}}, {".weight"});
            h = g_.addOp(std::move(act));
        }
        const int s = c_.scale;
        h = sameConv(indexed("body.", "", 2 * c_.blocks + 2), h, c_.outChannels * s * s, 3);
        int base = x;
        if (s > 1) {
            GraphOp shuffle = newOp(OpKind::PixelShuffle, "upsampler", h);
            shuffle.factor = s;
            h = g_.addOp(std::move(shuffle));
            GraphOp up = newOp(OpKind::Upsample, "base", x);
            up.factor = s;
            base = g_.addOp(std::move(up));
        }
        g_.markOutput(residual(h, base, "output", "output"));
        return std::move(g_);
    }

private:
    const UpscaleConfig& c_;
};

}  // namespace

std::pair<int, int> scaleAndOutputChannels(std::int64_t channels, int inChannels) {
    for (const int c : {inChannels, 3, 4, 1}) {
        if (c < 1 || channels % c != 0) continue;
        const auto q = channels / c;
        const auto r = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(q))));
        if (r * r == q) return {static_cast<int>(r), c};
    }
    return {0, 0};
}

bool hasCompactKeys(const StateDict& d) { return d.has("body.0.weight") && d.has("body.1.weight"); }

UpscaleConfig inferCompactConfig(const StateDict& d) {
    UpscaleConfig c;
    c.architecture = UpscaleArchitecture::Compact;
    int highest = -1;
    for (const StateDict::Entry& e : d.entries()) {
        if (e.name.compare(0, 5, "body.") != 0) continue;
        const std::size_t dot = e.name.find('.', 5);
        const std::string index = e.name.substr(5, dot - 5);
        if (!index.empty() && index.size() < 6 &&
            std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
            highest = std::max(highest, std::stoi(index));
    }
    const std::vector<std::int64_t> first = d.shape("body.0.weight");
    const std::vector<std::int64_t> last = d.shape("body." + std::to_string(highest) + ".bias");
    if (highest < 2 || highest % 2 != 0 || first.size() != 4 || last.size() != 1)
        throw ModelError(d.source() + ": Compact: body." + std::to_string(highest) +
                         " is the last layer; SRVGGNetCompact ends with a convolution at an even index, after body.0 "
                         "[features, in, 3, 3]");
    c.blocks = (highest - 2) / 2;
    c.features = static_cast<int>(first[0]);
    c.inChannels = static_cast<int>(first[1]);
    const auto [scale, out] = scaleAndOutputChannels(last[0], c.inChannels);
    if (scale < 1)
        throw ModelError(d.source() + ": Compact: the last convolution's " + std::to_string(last[0]) +
                         " channels are no scale^2 x (1, 3 or 4) output channels");
    c.scale = scale;
    c.outChannels = out;
    if (c.outChannels != c.inChannels)
        throw ModelError(d.source() + ": Compact: " + std::to_string(c.inChannels) + " input and " +
                         std::to_string(c.outChannels) +
                         " output channels; SRVGGNetCompact adds the upsampled input to its output");
    return c;
}

ModelGraph buildCompactGraph(const UpscaleConfig& c) {
    if (c.features < 1 || c.blocks < 0 || c.scale < 1 || c.inChannels < 1 || c.outChannels != c.inChannels)
        throw std::invalid_argument("Compact: no SRVGGNetCompact for " + c.describe());
    return CompactBuilder(c).build();
}

TensorMap readCompactWeights(const UpscaleConfig& c, const StateDict& dict, const ModelGraph& graph) {
    StateDictCheck check(dict);
    for (const GraphParam& p : graph.params()) check.expect(p.name, p.shape);
    check.check("Compact (" + c.describe() + ")");
    TensorMap weights;
    for (const GraphParam& p : graph.params()) weights.emplace(p.name, HostTensor{p.shape, dict.read(p.name)});
    return weights;
}

}  // namespace tessera
