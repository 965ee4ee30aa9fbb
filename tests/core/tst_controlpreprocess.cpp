// sd-webui-controlnet's tile_resample and its resize of the map back to the run's size
// (core/sampling/ControlPreprocess.h) against the extension's code run with OpenCV
// (tests/data/controlnet/preprocess, tools/reference/make_control_preprocessor_fixtures.py): photo-like
// images of odd sizes and a 50-colour map, rates 1.1 to 8, "Just Resize" and "Crop and Resize".
#include <QtTest/QtTest>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/formats/Safetensors.h"
#include "core/sampling/ControlPreprocess.h"

using namespace tessera;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/controlnet/preprocess";

Image8 imageOf(const SafetensorsFile& file, const std::string& name) {
    const SafetensorsTensorInfo* info = file.find(name);
    if (!info || info->shape.size() != 3) throw std::runtime_error("no H x W x C image " + name);
    Image8 image;
    image.height = static_cast<int>(info->shape[0]);
    image.width = static_cast<int>(info->shape[1]);
    image.channels = static_cast<int>(info->shape[2]);
    for (const float v : file.readFloat32(*info)) image.pixels.push_back(static_cast<std::uint8_t>(v));
    return image;
}

}  // namespace

class TestControlPreprocess : public QObject {
    Q_OBJECT

    nlohmann::json cases_;

private slots:
    void initTestCase() {
        std::ifstream in(kFixtures + "/cases.json");
        QVERIFY2(in, "tests/data/controlnet/preprocess/cases.json (make_control_preprocessor_fixtures.py)");
        cases_ = nlohmann::json::parse(in)["cases"];
        QVERIFY(cases_.size() >= 24);
    }

    // Every case: the same interpolation chosen and the same bytes as OpenCV, or within one level where
    // its float accumulation rounds the other way (one value of one case today).
    void equalsTheExtensionWithOpenCv() {
        const SafetensorsFile file(kFixtures + "/images.safetensors");
        int exact = 0, worstOfAll = 0;
        for (const auto& [name, c] : cases_.items()) {
            const Image8 input = imageOf(file, c["image"].get<std::string>());
            const Image8 want = imageOf(file, name);
            const Image8 small = tileResample(input, c["rate"].get<double>());
            QCOMPARE(small.width, c["resampled"][0].get<int>());
            QCOMPARE(small.height, c["resampled"][1].get<int>());
            std::string how;
            const ControlResizeMode mode =
                c["resize_mode"] == "just_resize" ? ControlResizeMode::JustResize : ControlResizeMode::CropAndResize;
            const Image8 got = detectmapResize(small, mode, input.width, input.height, &how);
            QCOMPARE(how, c["interpolation"].get<std::string>());
            QCOMPARE(got.pixels.size(), want.pixels.size());
            int differ = 0, worst = 0;
            for (std::size_t i = 0; i < got.pixels.size(); ++i) {
                const int d = std::abs(int(got.pixels[i]) - int(want.pixels[i]));
                differ += d != 0;
                worst = std::max(worst, d);
            }
            if (differ) qInfo("%s: %d values differ, worst by %d", name.c_str(), differ, worst);
            worstOfAll = std::max(worstOfAll, worst);
            exact += differ == 0;
        }
        qInfo("%d of %d cases bit for bit", exact, int(cases_.size()));
        QVERIFY(worstOfAll <= 1);
        QVERIFY(exact + 2 >= int(cases_.size()));
    }

    // On a hint canvas (channels x H x W in [0, 1]): the identity below 1.1, the 8-bit result above.
    void hintCanvas() {
        const SafetensorsFile file(kFixtures + "/images.safetensors");
        const nlohmann::json& c = cases_["photo 77x53 rate 2 just_resize"];
        const Image8 input = imageOf(file, "photo 77x53"), want = imageOf(file, "photo 77x53 rate 2 just_resize");
        const std::size_t plane = static_cast<std::size_t>(input.width) * input.height;
        std::vector<float> hint(plane * 3);
        for (std::size_t p = 0; p < plane; ++p)
            for (std::size_t k = 0; k < 3; ++k) hint[k * plane + p] = input.pixels[p * 3 + k] / 255.0f;
        QVERIFY(tileResampleHint(hint, 3, input.height, input.width, 1.05, ControlResizeMode::JustResize) == hint);
        const std::vector<float> got = tileResampleHint(hint, 3, input.height, input.width, c["rate"].get<double>(),
                                                        ControlResizeMode::JustResize);
        for (std::size_t p = 0; p < plane; ++p)
            for (std::size_t k = 0; k < 3; ++k)
                QCOMPARE(int(std::lround(got[k * plane + p] * 255.0f)), int(want.pixels[p * 3 + k]));
    }

    void badSizesRefused() {
        Image8 image;
        image.width = image.height = 2;
        image.channels = 3;
        image.pixels.assign(11, 0);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resizeCubic(image, 4, 4));
        image.pixels.assign(12, 0);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resizeArea(image, 0, 4));
    }
};

QTEST_GUILESS_MAIN(TestControlPreprocess)
#include "tst_controlpreprocess.moc"
