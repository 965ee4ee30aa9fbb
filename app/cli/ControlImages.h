// ControlImages: the control images a run's ControlNets name (RunConfig::controlNets' image),
// decoded for the engine: C x H x W float32 in [0, 1] (A1111's uint8 / 255), one per unit, empty
// for a unit that takes the start image. Qt-free (tessera-cli links no Qt).
#pragma once

#include <vector>

#include "core/run/Engine.h"
#include "core/run/RunConfig.h"

namespace tessera {

// Decodes each unit's image file (PNG or JPEG, checked as init images are). The image must have
// the run's size (config.width x config.height): a control image steers the tile under it, so
// resampling it silently would move what it shows; ValidationError("control_image") naming the
// file, both sizes and the fix otherwise, and for a file that cannot be read.
std::vector<ImageTensor> decodeControlImages(const RunConfig& config);

}  // namespace tessera
