// NonFiniteError: a run stopped because sampling produced a NaN or an infinity. It says where
// (the step, and the tile batch whose UNet output held it, or the latents after the step's
// update), in which precision the UNet computed and what to change, and it carries the run's
// record marked failed. Both engines throw it (core/CpuEngine, kernels/CudaEngine); front
// ends report it as a failure while running (tessera-cli: exit 1), never as a finished image.
// Qt-free.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

struct NonFiniteSite {
    int step = 0, steps = 0;                // 0-based step index; the run's step count
    float timestep = 0;                     // the UNet timestep of that step
    int batch = -1, batches = 0;            // 0-based tile batch whose UNet output was not finite;
                                            // -1: the latents after the step's scheduler update
    int firstTile = 0, tileCount = 0;       // that batch's tiles: ids firstTile .. firstTile + tileCount - 1
    Precision precision = Precision::FP32;  // what the UNet computed in (the CPU engine: fp32)
};

// "non-finite values (NaN or infinity) in the UNet output at step 3/20 (timestep 850), tile
// batch 2/9 (tiles 4-7); the UNet computed in fp16, which overflows above 65504: run again with
// precision bf16 or fp32". Steps and batches are counted from 1 here, as the console shows them.
std::string nonFiniteMessage(const NonFiniteSite& site);

class NonFiniteError : public std::runtime_error {
public:
    // record: the run up to the failure; kept with status "failed" and error = what().
    NonFiniteError(const NonFiniteSite& site, RunRecord record);
    const NonFiniteSite& site() const noexcept { return site_; }
    const RunRecord& record() const noexcept { return *record_; }

private:
    NonFiniteSite site_;
    std::shared_ptr<const RunRecord> record_;  // shared: copying the exception never throws
};

// Whether every value of [data, data + n) is finite.
bool allFinite(const float* data, std::size_t n);

}  // namespace tessera
