// How long a Stable Diffusion 1.x run's text conditioning takes on the CPU backend (where both
// engines encode text): a CLIP ViT-L/14 text encoder (SD 1.5's: 12 layers, 768 wide; random
// weights) on a prompt and a negative prompt,
//   two   encodePrompt on each text (two encoder passes)
//   one   encodeEachPrompt: both in one encoder batch (what runs do)
//   again the same texts once more: the rows come from the encoder's row memo
// each the median of REPEATS (default 5) on the host clock; the conditionings are checked equal.
// THREADS: the CPU backend's threads (0, the default: all hardware threads).
//
// Build, from the source root, with BUILD a build folder that has built tessera_core:
//   g++ -O2 -std=c++20 -I. -DTESSERA_SOURCE_DIR='"."' bench/cpu/text_encode.cpp BUILD/core/libtessera_core.a \
//       -lopenblas -lspdlog -lfmt -lnettle -lz -o text_encode && ./text_encode [THREADS]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/text/ClipTokenizer.h"

using namespace tessera;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class F>
double msOf(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const int repeats = std::getenv("REPEATS") ? std::atoi(std::getenv("REPEATS")) : 5;
    CpuBackend backend(argc > 1 ? std::atoi(argv[1]) : 0);
    ClipTextConfig c;
    c.hiddenSize = 768;
    c.intermediateSize = 3072;
    c.numAttentionHeads = 12;
    c.numHiddenLayers = 12;
    std::map<std::string, HostTensor> t;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const auto& [name, shape] : buildClipTextGraph(c, c.numHiddenLayers).parameterList()) {
        HostTensor h{shape, {}};
        h.data.resize(static_cast<std::size_t>(h.numel()));
        const bool normWeight = name.find("norm") != std::string::npos && name.ends_with(".weight");
        for (float& v : h.data) v = (normWeight ? 1.0f : 0.0f) + normal(rng);
        t.emplace(name, std::move(h));
    }
    ClipTextModel model = ClipTextModel::fromTensors(c, t, WeightsDigest::Skip);
    model.setRowMemoBytes(0);
    const ClipTextModel memo = ClipTextModel::fromTensors(c, std::move(t), WeightsDigest::Skip);
    const ClipTokenizer tok =
        ClipTokenizer::fromMergesGz(TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz");
    const std::string prompt = "a lighthouse on a cliff above a stormy sea, dramatic light";
    const std::string negative = "blurry, low quality";

    std::vector<double> two, one;
    PromptConditioning a, b;
    std::vector<PromptConditioning> each;
    for (int r = 0; r < repeats; ++r) {
        two.push_back(msOf([&] {
            a = encodePrompt(model, backend, tok, prompt);
            b = encodePrompt(model, backend, tok, negative);
        }));
        one.push_back(msOf([&] { each = encodeEachPrompt(model, backend, tok, {prompt, negative}); }));
    }
    if (each[0].values != a.values || each[1].values != b.values) {
        std::fprintf(stderr, "text_encode: one batch gave other values than two passes\n");
        return 1;
    }
    encodeEachPrompt(memo, backend, tok, {prompt, negative});
    std::vector<double> again;
    for (int r = 0; r < repeats; ++r)
        again.push_back(msOf([&] { each = encodeEachPrompt(memo, backend, tok, {prompt, negative}); }));
    if (each[0].values != a.values) return 1;
    std::printf("case,ms_median,ms_min,ms_max,repeats\n");
    for (const auto& [name, v] : {std::pair{"two", two}, {"one", one}, {"again", again}})
        std::printf("%s,%.1f,%.1f,%.1f,%d\n", name, median(v), *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()), repeats);
    return 0;
}
