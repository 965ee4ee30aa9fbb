// The one way work becomes a CUDA graph: the engine's graph cache (kernels/engine/GraphCache.h:
// tile and step graphs) and the backend's own forward graphs and profile
// (kernels/backend/CudaExecution.cpp, CudaProfiling.cpp) all capture and instantiate here, so a
// failed capture is cleaned up and reported the same way wherever it happens.
#pragma once

#include <functional>
#include <stdexcept>

#include <cuda_runtime.h>

#include "kernels/device/DeviceResources.h"

namespace tessera {

// A capture that could not be completed; what() says why ("capture failed: ..."). Nothing
// captured was executed and the stream is no longer capturing, so the caller can enqueue the
// same work eagerly (graphs off).
class GraphCaptureFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct CapturedGraph {
    CudaGraph graph;
    double captureMs = 0;  // host time from the start of the capture to its end
    int nodes = 0;
};

// Captures the work `record` enqueues on `stream` (cudaStreamCaptureModeThreadLocal: other
// threads' CUDA calls are unaffected). Throws GraphCaptureFailed when `record` throws or the
// capture is invalidated (an operation a capture does not allow), CudaError when the capture
// cannot begin.
CapturedGraph captureGraph(cudaStream_t stream, const std::function<void()>& record);

// The executable graph of `graph` (cudaGraphInstantiate, no flags). Throws CudaError.
CudaGraphExec instantiateGraph(cudaGraph_t graph);

}  // namespace tessera
