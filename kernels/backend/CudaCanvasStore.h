// CudaCanvasStore: a tiled pass's whole-image canvases (core/models/vae/TiledVae.h TiledCanvasStore) in
// device memory, in the backend's own layout (NHWC, channels rounded up to 8, the activation
// type), so that a segment's tile extents are cut into its inputs and its tile cores pasted
// back with strided device copies (cudaMemcpy2DAsync), the attention context is the canvas
// itself, and the GroupNorm statistics are taken on the device (kernels/ops/GroupMoments.cuh).
// Nothing goes through the host between segments but the statistics (2 doubles a group) and
// the ScaleShift vectors; no synchronisation per tile. NVTX ranges per segment prepare and run.
#pragma once

#include <cstdint>
#include <memory>

#include "core/models/vae/TiledVae.h"

namespace tessera {

class CudaBackend;

// Free device memory a device canvas store leaves to the segments' plans (their activations,
// workspaces and weights): 2 GiB, or a quarter of the device's memory where that is less.
std::uint64_t canvasStoreReserveBytes(std::uint64_t totalDeviceBytes);

// A store on `device`'s memory whose segments are prepared through `preparer` (`device` itself, or
// a wrapper that adds the tuning cache; it must prepare `device`), when canvases of `canvasBytes`
// (float32; the store holds them at the activation type's size) fit the free memory less
// canvasStoreReserveBytes; else nullptr. Both must outlive the store.
std::unique_ptr<TiledCanvasStore> makeCudaCanvasStore(Backend& preparer, CudaBackend& device,
                                                      std::uint64_t canvasBytes);

}  // namespace tessera
