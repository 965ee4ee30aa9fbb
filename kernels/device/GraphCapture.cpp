#include "kernels/device/GraphCapture.h"

#include <chrono>
#include <exception>
#include <string>

#include "kernels/device/CudaCheck.h"

namespace tessera {

CapturedGraph captureGraph(cudaStream_t stream, const std::function<void()>& record) {
    const auto t0 = std::chrono::steady_clock::now();
    TESSERA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t raw = nullptr;
    try {
        record();
    } catch (const std::exception& e) {
        // End the capture (nothing recorded ran) and clear the error it left, so the stream
        // takes eager work again.
        (void)cudaStreamEndCapture(stream, &raw);
        if (raw) (void)cudaGraphDestroy(raw);
        (void)cudaGetLastError();
        throw GraphCaptureFailed(std::string("capture failed: ") + e.what());
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &raw);
    if (end != cudaSuccess || !raw) {
        if (raw) (void)cudaGraphDestroy(raw);
        (void)cudaGetLastError();
        throw GraphCaptureFailed(std::string("capture failed: ") + cudaGetErrorName(end) + ": " +
                                 cudaGetErrorString(end));
    }
    CapturedGraph captured;
    captured.graph = CudaGraph(raw);
    captured.captureMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::size_t nodes = 0;
    TESSERA_CHECK(cudaGraphGetNodes(captured.graph.get(), nullptr, &nodes));
    captured.nodes = static_cast<int>(nodes);
    return captured;
}

CudaGraphExec instantiateGraph(cudaGraph_t graph) {
    cudaGraphExec_t exec = nullptr;
    TESSERA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    return CudaGraphExec(exec);
}

}  // namespace tessera
