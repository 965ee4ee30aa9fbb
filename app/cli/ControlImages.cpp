#include "app/cli/ControlImages.h"

#include <string>

#include "app/cli/InitImage.h"
#include "core/base/ValidationError.h"

namespace tessera {

std::vector<ImageTensor> decodeControlImages(const RunConfig& config) {
    std::vector<ImageTensor> images;
    for (std::size_t i = 0; i < config.controlNets.size(); ++i) {
        const std::string& path = config.controlNets[i].image;
        if (path.empty()) {
            images.emplace_back();
            continue;
        }
        Rgb8Image rgb;
        try {
            rgb = decodeImageFile(path);
        } catch (const InitImageError& e) {
            throw ValidationError("control_image", "control_image: ControlNet " + std::to_string(i) + ": " + e.what());
        }
        if (rgb.width != config.width || rgb.height != config.height)
            throw ValidationError("control_image",
                                  "control_image: '" + path + "' is " + std::to_string(rgb.width) + "x" +
                                      std::to_string(rgb.height) + "; the run's image is " +
                                      std::to_string(config.width) + "x" + std::to_string(config.height) +
                                      ": resize the control image to " + std::to_string(config.width) + "x" +
                                      std::to_string(config.height) + ", or give --control-image init");
        ImageTensor t{3, rgb.height, rgb.width, {}};
        const std::size_t plane = static_cast<std::size_t>(rgb.width) * rgb.height;
        t.data.resize(3 * plane);
        for (std::size_t p = 0; p < plane; ++p)
            for (std::size_t c = 0; c < 3; ++c) t.data[c * plane + p] = rgb.pixels[p * 3 + c] / 255.0f;
        images.push_back(std::move(t));
    }
    return images;
}

}  // namespace tessera
