// One CHECK family for the CUDA runtime, cuDNN and cuBLAS. A failed call throws
// tessera::CudaError whose message names the status, the statement, file:line and the current
// device, so the GUI worker can report it (runFailed) instead of aborting. Never used in
// destructors.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace tessera {

class CudaError : public std::runtime_error {
public:
    // what(): "<status> in `<statement>` at <location> (CUDA device <device>)", e.g.
    // "cudaErrorMemoryAllocation: out of memory in `cudaMalloc(&p, bytes)` at
    // kernels/device/DeviceResources.h:120 (CUDA device 0)"; device -1 (not readable) leaves
    // the parenthesis out.
    CudaError(const std::string& statement, const std::string& status, const std::string& location, int device,
              bool oom = false);
    // True for allocation failures (cudaErrorMemoryAllocation, CUDNN_STATUS_ALLOC_FAILED,
    // CUBLAS_STATUS_ALLOC_FAILED), which prepare() turns into a sizing message.
    bool outOfMemory() const noexcept { return oom_; }

private:
    bool oom_ = false;
};

namespace cudacheck {
inline bool failed(cudaError_t s) { return s != cudaSuccess; }
inline bool failed(cudnnStatus_t s) { return s != CUDNN_STATUS_SUCCESS; }
inline bool failed(cublasStatus_t s) { return s != CUBLAS_STATUS_SUCCESS; }
std::string describe(cudaError_t);
std::string describe(cudnnStatus_t);
std::string describe(cublasStatus_t);
inline bool isOom(cudaError_t s) { return s == cudaErrorMemoryAllocation; }
inline bool isOom(cudnnStatus_t s) { return s == CUDNN_STATUS_ALLOC_FAILED; }
inline bool isOom(cublasStatus_t s) { return s == CUBLAS_STATUS_ALLOC_FAILED; }
[[noreturn]] void raise(const char* statement, const std::string& status, bool oom, const char* file, int line);
}  // namespace cudacheck

}  // namespace tessera

// TESSERA_CHECK(cudaMalloc(...)); TESSERA_CHECK(cudnnCreate(...)); TESSERA_CHECK(cublasCreate(...));
#define TESSERA_CHECK(stmt)                                                                                      \
    do {                                                                                                         \
        const auto tessera_check_status_ = (stmt);                                                               \
        if (::tessera::cudacheck::failed(tessera_check_status_))                                                 \
            ::tessera::cudacheck::raise(#stmt, ::tessera::cudacheck::describe(tessera_check_status_),            \
                                        ::tessera::cudacheck::isOom(tessera_check_status_), __FILE__, __LINE__); \
    } while (0)

// After a kernel launch: launch-configuration errors (and earlier asynchronous faults).
#define TESSERA_CHECK_LAUNCH() TESSERA_CHECK(cudaGetLastError())
