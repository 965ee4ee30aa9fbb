// RunArena: the CUDA engine's per-run device memory (canvas, accumulators, constant tables,
// the step state and the non-finite word), carved out of one allocation that lives across runs
// of the same plan: equal plans reuse it (same pointers, so captured graphs stay valid).
#pragma once

#include <cstddef>
#include <optional>

#include "core/sampling/StepUpdate.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/ops/StepState.cuh"

namespace tessera {

// What decides the sizes of the run arena.
struct ArenaPlan {
    int channels = 0, height = 0, width = 0;
    int tileH = 0, tileW = 0, maps = 0, tiles = 0;
    int stepsCapacity = 0;
    bool history = false;  // kStepHistory history canvases (TiledPass::keepsHistory: LMS)
    bool operator==(const ArenaPlan&) const = default;
};

class RunArena {
public:
    // preview: the x0 canvas (core/sampling/TileDevice.h): previews, and DPM++ 2M's previous x0.
    std::size_t x = 0, acc = 0, accEps = 0, preview = 0, seam = 0, seamSq = 0, norm = 0, maps = 0;
    std::size_t history = 0;  // kStepHistory canvases one after the other (none without ArenaPlan::history)
    std::size_t tileX = 0, tileY = 0, tileMap = 0, coeff = 0, init = 0, state = 0;
    std::size_t nonFinite = 0;  // the first (step, slot) with a NaN or infinity (kernels/ops/NonFinite.cuh)

    // Returns true when the arena was (re)allocated.
    bool ensure(const ArenaPlan& plan) {
        if (buffer_.data() && plan_ && *plan_ == plan) return false;
        buffer_.reset();  // free first: peak memory and a flat footprint across size changes
        plan_.reset();
        layout(plan);
        buffer_ = DeviceBuffer(bytes_);
        plan_ = plan;
        return true;
    }
    // What ensure(plan) allocates, in bytes, without allocating it.
    static std::size_t bytesFor(const ArenaPlan& plan) {
        RunArena sizing;
        sizing.layout(plan);
        return sizing.bytes_;
    }
    template <typename T>
    T* at(std::size_t off) const {
        return reinterpret_cast<T*>(buffer_.as<char>() + off);
    }
    const void* base() const { return buffer_.data(); }
    std::size_t bytes() const { return bytes_; }

private:
    void layout(const ArenaPlan& plan) {
        bytes_ = 0;
        const std::size_t canvas = static_cast<std::size_t>(plan.channels) * plan.height * plan.width;
        x = reserve<float>(canvas);
        acc = reserve<float>(canvas);
        accEps = reserve<float>(canvas);
        preview = reserve<float>(canvas);
        history = reserve<float>(plan.history ? kStepHistory * canvas : 0);
        init = reserve<float>(canvas);
        seam = reserve<double>(canvas);
        seamSq = reserve<double>(canvas);
        norm = reserve<float>(static_cast<std::size_t>(plan.height) * plan.width);
        maps = reserve<float>(static_cast<std::size_t>(plan.maps) * plan.tileH * plan.tileW);
        tileX = reserve<int>(static_cast<std::size_t>(plan.tiles));
        tileY = reserve<int>(static_cast<std::size_t>(plan.tiles));
        tileMap = reserve<int>(static_cast<std::size_t>(plan.tiles));
        coeff = reserve<StepCoefficients>(static_cast<std::size_t>(plan.stepsCapacity));
        state = reserve<StepState>(1);
        nonFinite = reserve<unsigned long long>(1);
    }
    template <typename T>
    std::size_t reserve(std::size_t count) {
        const std::size_t off = (bytes_ + 255) / 256 * 256;
        bytes_ = off + count * sizeof(T);
        return off;
    }
    std::optional<ArenaPlan> plan_;
    std::size_t bytes_ = 0;
    DeviceBuffer buffer_;
};

}  // namespace tessera
