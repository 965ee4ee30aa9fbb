#include "kernels/device/CudaCheck.h"

#include <cstring>

namespace tessera {

namespace {
std::string shortPath(const char* file) {
    // Keep the path from the project's layer folder on ("kernels/backend/CudaBackend.cpp").
    const char* p = std::strstr(file, "kernels/");
    return p ? std::string(p) : std::string(file);
}
}  // namespace

CudaError::CudaError(const std::string& statement, const std::string& status, const std::string& location, int device,
                     bool oom)
    : std::runtime_error(status + " in `" + statement + "` at " + location +
                         (device >= 0 ? " (CUDA device " + std::to_string(device) + ")" : std::string())),
      oom_(oom) {}

namespace cudacheck {

std::string describe(cudaError_t s) { return std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s); }
std::string describe(cudnnStatus_t s) { return std::string("cuDNN ") + cudnnGetErrorString(s); }
std::string describe(cublasStatus_t s) {
    return std::string("cuBLAS ") + cublasGetStatusName(s) + ": " + cublasGetStatusString(s);
}

void raise(const char* statement, const std::string& status, bool oom, const char* file, int line) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) device = -1;
    throw CudaError(statement, status, shortPath(file) + ":" + std::to_string(line), device, oom);
}

}  // namespace cudacheck
}  // namespace tessera
