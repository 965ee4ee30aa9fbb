// CudaBackend::Impl: diagnostics. The GPU time of every op (profileOps), whole forwards as
// enqueue() runs them (timeForwards), and every layer's output (traceForward).
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "core/formats/Safetensors.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/GraphCapture.h"

namespace tessera {

std::vector<CudaBackend::OpTime> CudaBackend::Impl::profileOps(int batch, int repeats, bool inGraph) {
    if (!prepared) throw std::logic_error("CudaBackend: profileOps before prepare");
    selectOwnLane();
    cudaStream_t s = stream.get();
    std::vector<CudaEvent> marks;
    for (std::size_t i = 0; i <= ops.size(); ++i) marks.push_back(makeEvent());
    // Eager: events between ops on the stream. In a graph: event-record nodes between the
    // ops' kernels (cudaEventRecordExternal), so times are free of host launch latency.
    const unsigned flags = inGraph ? cudaEventRecordExternal : cudaEventRecordDefault;
    auto enqueueMarked = [&] {
        TESSERA_CHECK(cudaEventRecordWithFlags(marks[0].get(), s, flags));
        for (std::size_t i = 0; i < ops.size(); ++i) {
            ops[i].run(batch);
            TESSERA_CHECK(cudaEventRecordWithFlags(marks[i + 1].get(), s, flags));
        }
    };
    CudaGraphExec exec;
    if (inGraph) exec = instantiateGraph(captureGraph(s, enqueueMarked).graph.get());
    std::vector<std::vector<float>> samples(ops.size());
    for (int r = 0; r < repeats + 1; ++r) {  // the first pass is a warm-up
        if (inGraph)
            TESSERA_CHECK(cudaGraphLaunch(exec.get(), s));
        else
            enqueueMarked();
        TESSERA_CHECK(cudaStreamSynchronize(s));
        if (r == 0) continue;
        for (std::size_t i = 0; i < ops.size(); ++i) {
            float ms = 0;
            TESSERA_CHECK(cudaEventElapsedTime(&ms, marks[i].get(), marks[i + 1].get()));
            samples[i].push_back(ms);
        }
    }
    std::vector<CudaBackend::OpTime> times;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        std::sort(samples[i].begin(), samples[i].end());
        times.push_back({ops[i].name, samples[i].empty() ? 0.0 : samples[i][samples[i].size() / 2]});
    }
    return times;
}

CudaBackend::ForwardTimes CudaBackend::Impl::timeForwards(int batch, int warmup, int repeats) {
    if (!prepared) throw std::logic_error("CudaBackend: timeForwards before prepare");
    if (warmup < 0 || repeats < 1)
        throw std::invalid_argument("CudaBackend: timeForwards needs warmup >= 0 and repeats >= 1, got " +
                                    std::to_string(warmup) + " and " + std::to_string(repeats));
    cudaStream_t s = stream.get();
    for (int i = 0; i < warmup; ++i) enqueue(batch, 0, s);
    CudaEvent before = makeEvent(), after = makeEvent();
    CudaBackend::ForwardTimes times;
    for (int i = 0; i < repeats; ++i) {
        TESSERA_CHECK(cudaEventRecord(before.get(), s));
        const auto h0 = std::chrono::steady_clock::now();
        enqueue(batch, 0, s);
        const auto h1 = std::chrono::steady_clock::now();
        TESSERA_CHECK(cudaEventRecord(after.get(), s));
        TESSERA_CHECK(cudaEventSynchronize(after.get()));
        float ms = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&ms, before.get(), after.get()));
        times.gpuMs.push_back(ms);
        times.hostEnqueueMs.push_back(std::chrono::duration<double, std::milli>(h1 - h0).count());
    }
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    times.deviceUsedMiB = mib(totalBytes - freeBytes);
    return times;
}

std::vector<CudaBackend::LayerTrace> CudaBackend::Impl::traceForward(const float* x, const float* timesteps,
                                                                     int batch) {
    if (!prepared) throw std::logic_error("CudaBackend: traceForward before prepare");
    selectOwnLane();
    cudaStream_t s = stream.get();
    upload({x, timesteps}, batch, s);
    std::vector<CudaBackend::LayerTrace> trace;
    for (Op& op : ops) {
        op.run(batch);
        CudaBackend::LayerTrace t;
        t.name = op.name;
        if (op.value >= 0) t.value = graph.value(op.value).name;
        t.channels = op.out.c;
        if (op.out.buf >= 0) {
            const std::size_t n = static_cast<std::size_t>(batch) * op.out.c * op.out.h * op.out.w;
            t.values.resize(n);
            std::vector<std::uint16_t> raw(dtype == DType::F32 ? 0 : n);
            void* dst = dtype == DType::F32 ? static_cast<void*>(t.values.data()) : static_cast<void*>(raw.data());
            TESSERA_CHECK(cudaMemcpyAsync(dst, ptr(op.out.buf), n * dtypeSize(dtype), cudaMemcpyDeviceToHost, s));
            TESSERA_CHECK(cudaStreamSynchronize(s));
            for (std::size_t i = 0; i < raw.size(); ++i)
                t.values[i] = dtype == DType::BF16 ? bfloat16ToFloat(raw[i]) : halfToFloat(raw[i]);
        } else {
            TESSERA_CHECK(cudaStreamSynchronize(s));
        }
        trace.push_back(std::move(t));
    }
    return trace;
}

}  // namespace tessera
