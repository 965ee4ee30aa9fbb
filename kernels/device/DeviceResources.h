// Move-only RAII owners for every device resource the CUDA backend and engine hold:
// streams, events, cuDNN/cuBLAS handles and descriptors, device and pinned buffers,
// graphs and graph executables. Destructors never throw (errors at release are ignored:
// there is nothing useful to do with them during unwinding).
#pragma once

#include <cstddef>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/device/CudaCheck.h"

namespace tessera {

template <typename Handle, typename Traits>
class DeviceResource {
public:
    DeviceResource() = default;
    explicit DeviceResource(Handle h) noexcept : h_(h) {}
    ~DeviceResource() { reset(); }
    DeviceResource(DeviceResource&& o) noexcept : h_(std::exchange(o.h_, Handle{})) {}
    DeviceResource& operator=(DeviceResource&& o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, Handle{});
        }
        return *this;
    }
    DeviceResource(const DeviceResource&) = delete;
    DeviceResource& operator=(const DeviceResource&) = delete;

    Handle get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != Handle{}; }
    void reset() noexcept {
        if (h_ != Handle{}) Traits::destroy(h_);
        h_ = Handle{};
    }

private:
    Handle h_{};
};

namespace detail {
struct StreamTraits {
    static void destroy(cudaStream_t h) noexcept { (void)cudaStreamDestroy(h); }
};
struct EventTraits {
    static void destroy(cudaEvent_t h) noexcept { (void)cudaEventDestroy(h); }
};
struct GraphTraits {
    static void destroy(cudaGraph_t h) noexcept { (void)cudaGraphDestroy(h); }
};
struct GraphExecTraits {
    static void destroy(cudaGraphExec_t h) noexcept { (void)cudaGraphExecDestroy(h); }
};
struct CudnnTraits {
    static void destroy(cudnnHandle_t h) noexcept { (void)cudnnDestroy(h); }
};
struct CublasTraits {
    static void destroy(cublasHandle_t h) noexcept { (void)cublasDestroy(h); }
};
struct TensorDescTraits {
    static void destroy(cudnnTensorDescriptor_t h) noexcept { (void)cudnnDestroyTensorDescriptor(h); }
};
struct FilterDescTraits {
    static void destroy(cudnnFilterDescriptor_t h) noexcept { (void)cudnnDestroyFilterDescriptor(h); }
};
struct ConvDescTraits {
    static void destroy(cudnnConvolutionDescriptor_t h) noexcept { (void)cudnnDestroyConvolutionDescriptor(h); }
};
struct DeviceMemTraits {
    static void destroy(void* p) noexcept { (void)cudaFree(p); }
};
struct PinnedMemTraits {
    static void destroy(void* p) noexcept { (void)cudaFreeHost(p); }
};
}  // namespace detail

using CudaStream = DeviceResource<cudaStream_t, detail::StreamTraits>;
using CudaEvent = DeviceResource<cudaEvent_t, detail::EventTraits>;
using CudaGraph = DeviceResource<cudaGraph_t, detail::GraphTraits>;
using CudaGraphExec = DeviceResource<cudaGraphExec_t, detail::GraphExecTraits>;
using CudnnHandle = DeviceResource<cudnnHandle_t, detail::CudnnTraits>;
using CublasHandle = DeviceResource<cublasHandle_t, detail::CublasTraits>;
using TensorDescriptor = DeviceResource<cudnnTensorDescriptor_t, detail::TensorDescTraits>;
using FilterDescriptor = DeviceResource<cudnnFilterDescriptor_t, detail::FilterDescTraits>;
using ConvDescriptor = DeviceResource<cudnnConvolutionDescriptor_t, detail::ConvDescTraits>;

// blocking = true: ordered against the legacy default stream, so that work a library puts
// there (or a plain cudaMemcpy) cannot overlap ours.
inline CudaStream makeStream(bool blocking = true) {
    cudaStream_t s = nullptr;
    TESSERA_CHECK(cudaStreamCreateWithFlags(&s, blocking ? cudaStreamDefault : cudaStreamNonBlocking));
    return CudaStream(s);
}
inline CudaEvent makeEvent(bool timing = true) {
    cudaEvent_t e = nullptr;
    TESSERA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    return CudaEvent(e);
}
inline CudnnHandle makeCudnn() {
    cudnnHandle_t h = nullptr;
    TESSERA_CHECK(cudnnCreate(&h));
    return CudnnHandle(h);
}
inline CublasHandle makeCublas() {
    cublasHandle_t h = nullptr;
    TESSERA_CHECK(cublasCreate(&h));
    return CublasHandle(h);
}
inline TensorDescriptor makeTensorDescriptor() {
    cudnnTensorDescriptor_t d = nullptr;
    TESSERA_CHECK(cudnnCreateTensorDescriptor(&d));
    return TensorDescriptor(d);
}
inline FilterDescriptor makeFilterDescriptor() {
    cudnnFilterDescriptor_t d = nullptr;
    TESSERA_CHECK(cudnnCreateFilterDescriptor(&d));
    return FilterDescriptor(d);
}
inline ConvDescriptor makeConvDescriptor() {
    cudnnConvolutionDescriptor_t d = nullptr;
    TESSERA_CHECK(cudnnCreateConvolutionDescriptor(&d));
    return ConvDescriptor(d);
}

// Device memory owned as raw bytes; typed views are taken by the user.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
        void* p = nullptr;
        if (bytes) TESSERA_CHECK(cudaMalloc(&p, bytes));
        mem_ = DeviceResource<void*, detail::DeviceMemTraits>(p);
    }
    void* data() const noexcept { return mem_.get(); }
    template <typename T>
    T* as() const noexcept {
        return static_cast<T*>(mem_.get());
    }
    std::size_t bytes() const noexcept { return bytes_; }
    void reset() noexcept {
        mem_.reset();
        bytes_ = 0;
    }

private:
    DeviceResource<void*, detail::DeviceMemTraits> mem_;
    std::size_t bytes_ = 0;
};

// Page-locked host memory (asynchronous copies).
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(std::size_t bytes) {
        void* p = nullptr;
        if (bytes) TESSERA_CHECK(cudaMallocHost(&p, bytes));
        mem_ = DeviceResource<void*, detail::PinnedMemTraits>(p);
    }
    void* data() const noexcept { return mem_.get(); }
    template <typename T>
    T* as() const noexcept {
        return static_cast<T*>(mem_.get());
    }

private:
    DeviceResource<void*, detail::PinnedMemTraits> mem_;
};

}  // namespace tessera
