#include "kernels/CudaBackend.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include "core/BoundedInput.h"
#include "core/CpuBackend.h"
#include "core/ModelGraph.h"
#include "core/Safetensors.h"
#include "core/TuningCache.h"
#include "core/UNetGraph.h"
#include "core/UNetModel.h"
#include "kernels/AttentionPlan.h"
#include "kernels/BiasResidual.cuh"
#include "kernels/CausalMask.cuh"
#include "kernels/Concat.cuh"
#include "kernels/CudaCanvasStore.h"
#include "kernels/CudaCheck.h"
#include "kernels/CudnnGraphConv.h"
#include "kernels/DeviceResources.h"
#include "kernels/EosPool.cuh"
#include "kernels/FlashAttention.cuh"
#include "kernels/Gelu.cuh"
#include "kernels/GpuTiming.h"
#include "kernels/GroupNorm.cuh"
#include "kernels/LayerNorm.cuh"
#include "kernels/LayoutConvert.cuh"
#include "kernels/NvtxRange.h"
#include "kernels/PadRightBottom.cuh"
#include "kernels/Pointwise.cuh"
#include "kernels/Softmax.cuh"
#include "kernels/TimestepEmbedding.cuh"
#include "kernels/TokenEmbedding.cuh"
#include "kernels/Upsample.cuh"

namespace tessera {

namespace {

// "13.0" from CUDA's 13000.
std::string cudaVersionText(int version) {
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

// Why CUDA cannot be used, in words for a person choosing a backend (issue #17: "CUDA driver
// version is insufficient for CUDA runtime version" said nothing about what to do).
std::string cudaUnusableReason(cudaError_t error) {
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaGetLastError();
    const std::string needed = cudaVersionText(CUDART_VERSION);
    if (driver == 0)
        return "no NVIDIA driver is installed (libcuda was not found); install the NVIDIA driver for CUDA " +
               needed + " or use the CPU";
    if (error == cudaErrorInsufficientDriver || driver < CUDART_VERSION)
        return "the NVIDIA driver is too old: it supports CUDA " + cudaVersionText(driver) + ", this build needs CUDA " +
               needed + " (a newer driver)";
    if (error == cudaErrorNoDevice) return "the NVIDIA driver found no GPU";
    return std::string("no usable CUDA device: ") + cudaGetErrorString(error);
}

}  // namespace

bool cudaDeviceAvailable(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = cudaUnusableReason(e);
        return false;
    }
    if (count == 0) {
        if (why) *why = "the NVIDIA driver found no GPU";
        return false;
    }
    if (why) why->clear();
    return true;
}

namespace {

constexpr std::size_t kAlign = 256;
constexpr std::size_t kCublasWorkspace = 32u << 20;   // cuBLAS' recommendation for Hopper
constexpr std::size_t kAttentionScoreMiB = 256;   // float32 scores of one attention pass (AttentionPlan)
constexpr std::size_t kMaxAttentionScoreMiB = 1u << 20;

// Every environment setting that changes the numerical path or the timed choices, read once
// (when a backend is made) and recorded in each RunRecord (tuning.settings). Diagnostics:
//  TESSERA_CUDNN_FIND=0             cuDNN heuristics instead of benchmarks for legacy algorithms
//  TESSERA_CUDNN_API=legacy         the legacy cuDNN path everywhere (no graph-API plans)
//  TESSERA_CUDNN_FUSE=0             conv epilogues never fused into a cuDNN plan
//  TESSERA_CUDNN_RUNTIME_FUSION=1   fused plans may use engines compiled at prepare (NVRTC)
//  TESSERA_CUDA_BETA=1              accumulate onto a bias-initialised output (beta = 1)
//  TESSERA_CUDA_SYNC=op             synchronise after every layer
//  TESSERA_CUDA_STREAM=nonblocking  the stream does not order against the legacy default stream
//  TESSERA_CUDA_ATTENTION_MIB=N     float32 attention scores of one pass within N MiB (default 256):
//                                   larger score matrices are computed in blocks of query rows
//                                   (kernels/AttentionPlan.h); a whole number from 1 to 1048576
//  TESSERA_CUDA_FLASH=0|1|auto      fp16/bf16 attention: 0 the blocked path above everywhere; 1 the
//                                   fused kernel (kernels/FlashAttention.cuh) wherever it applies;
//                                   auto (default) whichever is faster per shape, timed at prepare
//                                   and kept in the tuning cache
enum class FlashMode { Auto, Off, On };
struct CudaSettings {
    std::map<std::string, std::string> values;   // name -> value ("" = not set)
    bool heuristicsOnly = false, legacyOnly = false, fuse = true, runtimeFusion = false;
    bool betaAccumulate = false, syncEveryOp = false, nonblockingStream = false;
    std::size_t attentionBudgetBytes = kAttentionScoreMiB << 20;
    FlashMode flash = FlashMode::Auto;

    // Throws std::invalid_argument naming the variable for a value it cannot take.
    static CudaSettings fromEnvironment() {
        CudaSettings s;
        for (const char* name : {"TESSERA_CUDNN_FIND", "TESSERA_CUDNN_API", "TESSERA_CUDNN_FUSE",
                                 "TESSERA_CUDNN_RUNTIME_FUSION", "TESSERA_CUDA_BETA", "TESSERA_CUDA_SYNC",
                                 "TESSERA_CUDA_STREAM", "TESSERA_CUDA_ATTENTION_MIB", "TESSERA_CUDA_FLASH"}) {
            const char* v = std::getenv(name);
            s.values[name] = v ? v : "";
        }
        s.heuristicsOnly = s.values["TESSERA_CUDNN_FIND"] == "0";
        s.legacyOnly = s.values["TESSERA_CUDNN_API"] == "legacy";
        s.fuse = s.values["TESSERA_CUDNN_FUSE"] != "0";
        s.runtimeFusion = s.values["TESSERA_CUDNN_RUNTIME_FUSION"] == "1";
        s.betaAccumulate = s.values["TESSERA_CUDA_BETA"] == "1";
        s.syncEveryOp = s.values["TESSERA_CUDA_SYNC"] == "op";
        s.nonblockingStream = s.values["TESSERA_CUDA_STREAM"] == "nonblocking";
        const std::string& budget = s.values["TESSERA_CUDA_ATTENTION_MIB"];
        if (!budget.empty()) {
            const bool digits = budget.size() <= 8 && budget.find_first_not_of("0123456789") == std::string::npos;
            const unsigned long mibValue = digits ? std::stoul(budget) : 0;
            if (mibValue < 1 || mibValue > kMaxAttentionScoreMiB)
                throw std::invalid_argument("TESSERA_CUDA_ATTENTION_MIB: '" + excerpt(budget) +
                                            "' is not allowed; give a whole number of MiB from 1 to " +
                                            std::to_string(kMaxAttentionScoreMiB));
            s.attentionBudgetBytes = static_cast<std::size_t>(mibValue) << 20;
        }
        const std::string& flash = s.values["TESSERA_CUDA_FLASH"];
        if (flash == "0")
            s.flash = FlashMode::Off;
        else if (flash == "1")
            s.flash = FlashMode::On;
        else if (!flash.empty() && flash != "auto")
            throw std::invalid_argument("TESSERA_CUDA_FLASH: '" + excerpt(flash) +
                                        "' is not allowed; give 0 (the blocked attention path), 1 (the fused kernel "
                                        "wherever it applies) or auto (the faster of the two per shape)");
        return s;
    }
};

// "algo=1 math=1" <-> (algorithm, math type) of a legacy cuDNN convolution; nullopt for text
// that is not one (a damaged or foreign cache entry).
std::string legacyChoice(cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math) {
    return "algo=" + std::to_string(static_cast<int>(algo)) + " math=" + std::to_string(static_cast<int>(math));
}
std::optional<std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> parseLegacyChoice(const std::string& text) {
    int algo = -1, math = -1;
    char tail = 0;
    if (std::sscanf(text.c_str(), "algo=%d math=%d%c", &algo, &math, &tail) != 2) return std::nullopt;
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || math < 0 || math > CUDNN_FMA_MATH) return std::nullopt;
    return std::make_pair(static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math));
}
// "engine=12 config=0" <-> a graph-API plan (GraphConv::PlanId); `none` ("legacy" / "apart")
// <-> no plan (engine -1).
std::string planChoice(const std::shared_ptr<GraphConv>& plan, const char* none) {
    if (!plan) return none;
    const GraphConv::PlanId id = plan->planId();
    return "engine=" + std::to_string(id.engine) + " config=" + std::to_string(id.ordinal);
}
std::optional<GraphConv::PlanId> parsePlanChoice(const std::string& text, const char* none) {
    if (text == none) return GraphConv::PlanId{};
    long long engine = -1;
    int ordinal = -1;
    char tail = 0;
    if (std::sscanf(text.c_str(), "engine=%lld config=%d%c", &engine, &ordinal, &tail) != 2 || engine < 0 ||
        ordinal < 0)
        return std::nullopt;
    return GraphConv::PlanId{engine, ordinal};
}

DType dtypeFor(Precision p) {
    return p == Precision::FP32 ? DType::F32 : (p == Precision::FP16 ? DType::F16 : DType::BF16);
}

std::size_t alignUp(std::size_t v, std::size_t a = kAlign) { return (v + a - 1) / a * a; }
double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::uint16_t floatToBf16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    x += 0x7FFFu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(x >> 16);
}

std::uint16_t floatToHalf(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7FFFFFFFu;
    if (x >= 0x7F800000u) return static_cast<std::uint16_t>(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u));
    if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);   // rounds to infinity
    if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);            // <= 2^-25: rounds to zero
    const int e = static_cast<int>(x >> 23);
    if (e < 113) {  // half subnormal
        const std::uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
        const int shift = 126 - e;
        std::uint32_t h = m >> shift;
        const std::uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
        return static_cast<std::uint16_t>(sign | h);
    }
    const std::uint32_t mant = x & 0x7FFFFFu;
    std::uint32_t h = (static_cast<std::uint32_t>(e - 112) << 10) | (mant >> 13);
    const std::uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
}

// IEEE half bits -> float bits (diagnostics only).
std::uint32_t halfBits(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13);
    if (e == 0) {
        if (m == 0) return sign;
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; --e; }
        m &= 0x3FFu;
        return sign | (e << 23) | (m << 13);
    }
    return sign | ((e + 112) << 23) | (m << 13);
}

cudnnDataType_t cudnnType(DType t) {
    return t == DType::F32 ? CUDNN_DATA_FLOAT : (t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}
cudaDataType_t cublasType(DType t) { return t == DType::F32 ? CUDA_R_32F : (t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF); }

const char* algoName(cudnnConvolutionFwdAlgo_t a) {
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit_precomp_gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "fft_tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
    default: return "?";
    }
}

// An NHWC activation: buffer id in the plan and its shape per sample.
struct Act {
    int buf = -1;
    int c = 0, h = 0, w = 0;
};

// Weights, biases and norms packed on the host, uploaded once into the arena.
class WeightBlob {
public:
    std::size_t add(const void* p, std::size_t n) {
        const std::size_t off = alignUp(bytes_.size());
        bytes_.resize(off + n);
        std::memcpy(bytes_.data() + off, p, n);
        return off;
    }
    std::size_t addFloats(const std::vector<float>& v) { return add(v.data(), v.size() * sizeof(float)); }
    std::size_t addTyped(const std::vector<float>& v, DType t) {
        if (t == DType::F32) return addFloats(v);
        std::vector<std::uint16_t> h(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) h[i] = t == DType::F16 ? floatToHalf(v[i]) : floatToBf16(v[i]);
        return add(h.data(), h.size() * 2);
    }
    std::size_t size() const { return alignUp(bytes_.size()); }
    const unsigned char* data() const { return bytes_.data(); }

private:
    std::vector<unsigned char> bytes_;
};

struct PlanBuffer {
    std::size_t bytes = 0;
    int first = INT_MAX, last = -1;
    bool wholeRun = false;
    std::size_t offset = 0;
    std::string name;
};

struct ConvLayer {
    std::string name;
    int cin = 0, cout = 0, k = 3, stride = 1, pad = 1;
    int h = 0, w = 0, ho = 0, wo = 0;   // input and output size
    std::size_t weight = 0;             // offset in the weight blob: [cout][k][k][cin]
    TensorDescriptor xDesc, yDesc;
    FilterDescriptor wDesc;
    ConvDescriptor convDesc;
    float alpha = 1.0f;                 // the scale every call of this layer uses
    // At the prepared batch: cuDNN graph-API plan when it benchmarked faster than the legacy
    // algorithm (shared between layers of one shape), else null.
    std::shared_ptr<GraphConv> graph;
    double legacyMs = 0, graphMs = 0;
    // Layers followed by a bias(+residual) epilogue: the epilogue's inputs, and at the
    // prepared batch a graph plan with the epilogue fused when that benchmarked faster.
    bool hasEpilogue = false;
    std::size_t epilogueBias = 0;   // weight-blob offset of the float32 bias
    bool epilogueResidual = false;
    std::shared_ptr<GraphConv> fused;
    double epilogueMs = 0, fusedMs = 0;
    std::vector<cudnnConvolutionFwdAlgo_t> algo;   // per batch size (index = batch)
    std::vector<cudnnMathType_t> math;
    int descBatch = -1;
    std::string key() const {
        std::ostringstream s;
        s << cin << ',' << cout << ',' << k << ',' << stride << ',' << pad << ',' << h << ',' << w;
        return s.str();
    }
};

struct Op {
    std::string name;
    std::vector<int> buffers;
    std::function<void(int batch)> run;
    Act out;
    int value = -1;  // the graph value `out` holds once this op has run, else -1
};

}  // namespace

struct CudaBackend::Impl {
    Precision precision;
    DType dtype;
    int device = 0;
    cudaDeviceProp props{};
    CudaStream stream;
    CudnnHandle cudnn;
    CublasHandle cublas;
    // Lanes: independent copies of the activation region and workspaces (weights shared), so
    // that several tile batches can run at once on different streams (CudaEngine's lanes).
    // The ops read the current lane's bases and stream; selectLane() switches them.
    int lanes = 1;
    std::vector<char*> laneAct;            // [lanes]
    std::vector<CublasHandle> laneCublas;  // lanes 1.. (lane 0 uses `cublas`)
    cudaStream_t opStream = nullptr;       // where the ops enqueue (the lane's stream)
    cublasHandle_t opCublas = nullptr;

    // Plan
    ModelGraph graph;                       // the graph being run
    const TensorMap* weightMap = nullptr;   // during prepare only
    int maxBatch = 0, tileH = 0, tileW = 0;
    int inPad = 0, outPad = 0;
    WeightBlob blob;
    std::vector<PlanBuffer> buffers;
    std::vector<Op> ops;
    std::vector<ConvLayer> convs;
    // The first feature-map input, vector input and feature-map output (the UNet's sample,
    // timesteps and prediction), for the engine.
    int inputBuf = -1, outputBuf = -1, timestepBuf = -1, tokenBuf = -1;
    std::size_t activationBytes = 0, unsharedBytes = 0, convWorkspace = 0;
    DeviceBuffer arena;
    char* weightsBase = nullptr;
    char* actBase = nullptr;
    char* workspace = nullptr;
    bool prepared = false;
    CudaMemoryPlan plan;
    // Diagnostics (environment, read once: CudaSettings): TESSERA_CUDA_BETA=1 accumulates onto
    // a bias-initialised output (beta = 1) instead of the epilogue; TESSERA_CUDA_SYNC=op
    // synchronises after every layer.
    const CudaSettings settings = CudaSettings::fromEnvironment();
    bool betaAccumulate = settings.betaAccumulate;
    bool syncEveryOp = settings.syncEveryOp;

    // Tuning: the cache the timed choices are looked up in and stored to (not owned; null =
    // none), this device's context key, and what the last prepare used.
    TuningCache* tuningCache = nullptr;
    std::string tuningContext;
    std::map<std::string, std::string> choicesUsed;
    int tuningHits = 0, tuningMisses = 0, tuningRejected = 0;
    std::vector<std::string> tuningWarnings;

    // CUDA graphs of the whole forward, one per batch size, captured on first use.
    bool graphsWanted = false;
    bool graphsFailed = false;
    std::map<int, CudaGraphExec> graphs;
    GraphStats graphStats;
    std::string summary;

    Impl(Precision p, int dev) : precision(p), dtype(dtypeFor(p)), device(dev) {
        std::string why;
        if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
        int count = 0;
        TESSERA_CHECK(cudaGetDeviceCount(&count));
        if (dev < 0 || dev >= count)
            throw std::runtime_error("CUDA device " + std::to_string(dev) + " does not exist (" +
                                     std::to_string(count) + " present)");
        TESSERA_CHECK(cudaSetDevice(dev));
        TESSERA_CHECK(cudaGetDeviceProperties(&props, dev));
        if (p == Precision::BF16 && props.major < 8)
            throw std::runtime_error(std::string("bf16 needs compute capability 8.0 or newer; ") + props.name +
                                     " has " + std::to_string(props.major) + "." + std::to_string(props.minor));
        int driver = 0, runtime = 0;
        TESSERA_CHECK(cudaDriverGetVersion(&driver));
        TESSERA_CHECK(cudaRuntimeGetVersion(&runtime));
        tuningContext = TuningContext{props.name,
                                      std::to_string(props.major) + "." + std::to_string(props.minor),
                                      driver,
                                      runtime,
                                      static_cast<int>(cudnnGetVersion()),
                                      std::string(toString(p))}
                            .key();
        stream = makeStream(!settings.nonblockingStream);
        cudnn = makeCudnn();
        cublas = makeCublas();
        TESSERA_CHECK(cudnnSetStream(cudnn.get(), stream.get()));
        TESSERA_CHECK(cublasSetStream(cublas.get(), stream.get()));
        // fp32 means fp32: no TF32 anywhere (the CPU comparison is at 1e-5).
        TESSERA_CHECK(cublasSetMathMode(cublas.get(), p == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
        opStream = stream.get();
        opCublas = cublas.get();
    }

    // Points the ops at lane `lane`'s activations and workspaces and enqueues them on `s`.
    void selectLane(int lane, cudaStream_t s) {
        if (lane < 0 || lane >= lanes)
            throw std::invalid_argument("CudaBackend: lane " + std::to_string(lane) + " outside 0.." +
                                        std::to_string(lanes - 1) + " (the prepared lanes)");
        actBase = laneAct[static_cast<std::size_t>(lane)];
        workspace = actBase + activationBytes;
        opStream = s;
        opCublas = lane == 0 ? cublas.get() : laneCublas[static_cast<std::size_t>(lane) - 1].get();
        TESSERA_CHECK(cudnnSetStream(cudnn.get(), s));
        // cublasSetStream resets the handle's workspace to cuBLAS' own pool: set ours again.
        TESSERA_CHECK(cublasSetStream(opCublas, s));
        TESSERA_CHECK(cublasSetWorkspace(opCublas, workspace + convWorkspace, kCublasWorkspace));
    }
    void selectOwnLane() { selectLane(0, stream.get()); }

    // ---- plan building -------------------------------------------------------------------
    int newBuffer(std::size_t bytes, std::string name) {
        PlanBuffer b;
        b.bytes = alignUp(bytes);
        b.name = std::move(name);
        buffers.push_back(b);
        return static_cast<int>(buffers.size()) - 1;
    }
    Act newAct(int c, int h, int w, const std::string& name) {
        Act a;
        a.c = c;
        a.h = h;
        a.w = w;
        a.buf = newBuffer(static_cast<std::size_t>(maxBatch) * h * w * c * dtypeSize(dtype), name);
        return a;
    }
    // `out` is the tensor the op produces (for traceForward); buf -1 for none.
    void addOp(std::string name, std::vector<int> bufs, Act out, std::function<void(int)> run) {
        ops.push_back(Op{std::move(name), std::move(bufs), std::move(run), out});
    }
    char* ptr(int buf) const { return actBase + buffers[static_cast<std::size_t>(buf)].offset; }
    char* lanePtr(int lane, int buf) const {
        if (lane < 0 || lane >= static_cast<int>(laneAct.size()) || !laneAct[static_cast<std::size_t>(lane)])
            throw std::invalid_argument("CudaBackend: lane " + std::to_string(lane) + " is not prepared");
        return laneAct[static_cast<std::size_t>(lane)] + buffers[static_cast<std::size_t>(buf)].offset;
    }
    const float* wf(std::size_t off) const { return reinterpret_cast<const float*>(weightsBase + off); }
    const void* wt(std::size_t off) const { return weightsBase + off; }

    // Conv weight [O, I, k, k] -> [Opad][k][k][Ipad] in the activation type.
    std::size_t convWeight(int param, int ipad, int opad) {
        const HostTensor& t = weight(param);
        const int o = static_cast<int>(t.shape.at(0)), i = static_cast<int>(t.shape.at(1));
        const int kh = static_cast<int>(t.shape.at(2)), kw = static_cast<int>(t.shape.at(3));
        std::vector<float> out(static_cast<std::size_t>(opad) * kh * kw * ipad, 0.0f);
        for (int a = 0; a < o; ++a)
            for (int b = 0; b < i; ++b)
                for (int y = 0; y < kh; ++y)
                    for (int x = 0; x < kw; ++x)
                        out[((static_cast<std::size_t>(a) * kh + y) * kw + x) * ipad + b] =
                            t.data[((static_cast<std::size_t>(a) * i + b) * kh + y) * kw + x];
        return blob.addTyped(out, dtype);
    }

    int addConv(const std::string& name, int cin, int cout, int k, int stride, int pad, int h, int w,
                std::size_t weight) {
        ConvLayer c;
        c.name = name;
        c.cin = cin;
        c.cout = cout;
        c.k = k;
        c.stride = stride;
        c.pad = pad;
        c.h = h;
        c.w = w;
        c.ho = (h + 2 * pad - k) / stride + 1;
        c.wo = (w + 2 * pad - k) / stride + 1;
        c.weight = weight;
        c.xDesc = makeTensorDescriptor();
        c.yDesc = makeTensorDescriptor();
        c.wDesc = makeFilterDescriptor();
        c.convDesc = makeConvDescriptor();
        TESSERA_CHECK(cudnnSetFilter4dDescriptor(c.wDesc.get(), cudnnType(dtype), CUDNN_TENSOR_NHWC, cout, cin, k, k));
        TESSERA_CHECK(cudnnSetConvolution2dDescriptor(c.convDesc.get(), pad, pad, stride, stride, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        TESSERA_CHECK(cudnnSetConvolutionMathType(c.convDesc.get(),
                                                  dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
        c.algo.assign(static_cast<std::size_t>(maxBatch) + 1, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
        c.math.assign(static_cast<std::size_t>(maxBatch) + 1, dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
        convs.push_back(std::move(c));
        return static_cast<int>(convs.size()) - 1;
    }

    void setConvBatch(ConvLayer& c, int batch) {
        if (c.descBatch == batch) return;
        TESSERA_CHECK(cudnnSetTensor4dDescriptor(c.xDesc.get(), CUDNN_TENSOR_NHWC, cudnnType(dtype), batch, c.cin, c.h, c.w));
        TESSERA_CHECK(cudnnSetTensor4dDescriptor(c.yDesc.get(), CUDNN_TENSOR_NHWC, cudnnType(dtype), batch, c.cout, c.ho, c.wo));
        TESSERA_CHECK(cudnnSetConvolutionMathType(c.convDesc.get(), c.math[static_cast<std::size_t>(batch)]));
        c.descBatch = batch;
    }

    void runConv(int layer, const void* x, void* y, float alpha, float beta, int batch) {
        ConvLayer& c = convs[static_cast<std::size_t>(layer)];
        if (c.graph && batch == maxBatch && beta == 0.0f && alpha == c.alpha) {
            c.graph->run(x, wt(c.weight), y, nullptr, nullptr, workspace);
            return;
        }
        setConvBatch(c, batch);
        TESSERA_CHECK(cudnnConvolutionForward(cudnn.get(), &alpha, c.xDesc.get(), x, c.wDesc.get(), wt(c.weight),
                                              c.convDesc.get(), c.algo[static_cast<std::size_t>(batch)], workspace,
                                              convWorkspace, &beta, c.yDesc.get(), y));
    }

    // conv + bias (+ residual) in one cuDNN plan when chosen at prepare for this batch;
    // returns false when the caller must run the conv and the epilogue apart.
    bool runConvFused(int layer, const void* x, void* y, const void* residual, int batch) {
        ConvLayer& c = convs[static_cast<std::size_t>(layer)];
        if (!c.fused || batch != maxBatch) return false;
        c.fused->run(x, wt(c.weight), y, wf(c.epilogueBias), residual, workspace);
        return true;
    }
    bool fusedAt(int layer, int batch) const {
        return convs[static_cast<std::size_t>(layer)].fused && batch == maxBatch;
    }

    // y[rows, nOut] = alpha * x[rows, k] W^T + beta * y, W [nOut, k] row-major, all in `t`.
    void gemmRows(DType t, const void* w, const void* x, void* y, int rows, int k, int nOut, float alpha, float beta) {
        const cublasComputeType_t compute = t == DType::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
        TESSERA_CHECK(cublasGemmEx(opCublas, CUBLAS_OP_T, CUBLAS_OP_N, nOut, rows, k, &alpha, w, cublasType(t), k,
                                   x, cublasType(t), k, &beta, y, cublasType(t), nOut, compute, CUBLAS_GEMM_DEFAULT));
    }

    // ---- lowering of the graph ---------------------------------------------------------------
    // One function per op kind. Lowering choices (not a second topology):
    //  - every op on vectors (the time MLP and the resnets' projections) runs in float32 as one
    //    op placed where the first of them is; Linears whose outputs only GroupNorms read as
    //    pre-add/FiLM are concatenated, per input, into one GEMM;
    //  - a conv read only by a GroupNorm (resnet conv1) runs without bias: the bias joins the
    //    norm's pre-add (folded into the projection's bias, or on its own when there is none);
    //  - a conv read only as another conv's residual (conv_shortcut) runs without bias where
    //    that conv is lowered, its bias folded into that conv's epilogue;
    //  - a conv's bias/residual/scale epilogue is a kernel of its own unless a cuDNN plan
    //    with the epilogue fused benchmarks faster (chooseGraphConvs);
    //  - bottom/right padding beyond the top/left is a pad kernel before the conv.
    struct VectorRef {
        int buf = -1;
        int offset = 0;  // floats into each sample's row
        int stride = 0;  // floats between samples
    };
    struct Projection {
        int input = -1;
        int buf = -1;
        int width = 0;
        std::vector<int> members;  // Linear op indices
    };
    std::vector<Act> valueAct;          // per graph value (feature maps)
    std::vector<VectorRef> valueVec;    // per graph value (vectors)
    std::vector<std::vector<int>> readersOf;  // per value: op indices that read it
    std::vector<char> isGraphOutput;    // per value
    std::vector<int> projectionOf;      // per op: Projection index of a merged Linear, else -1
    std::vector<Projection> projections;
    std::vector<int> biasIntoNorm;      // per op: for a GroupNorm, the conv whose bias it adds; else -1
    std::vector<char> biasMoved;        // per op: conv runs without bias (into a norm)
    std::vector<int> shortcutOf;        // per op: the shortcut conv lowered with this conv, else -1
    std::vector<char> deferred;         // per op: lowered by its consumer
    std::vector<int> stageIn, stageOut; // per graph input / output: float32 NCHW staging, -1 for vectors

    const HostTensor& weight(int param) const {
        const GraphParam& p = graph.param(param);
        const auto it = weightMap->find(p.name);
        if (it == weightMap->end()) throw ModelError("weights: no tensor '" + p.name + "'");
        if (it->second.shape != p.shape)
            throw ModelError(p.name + ": expected " + shapeToString(p.shape) + ", found " + shapeToString(it->second.shape));
        return it->second;
    }
    std::size_t floats(int param) { return blob.addFloats(weight(param).data); }
    const GraphOp& opAt(int i) const { return graph.ops()[static_cast<std::size_t>(i)]; }
    int producerOf(int value) const {
        for (std::size_t i = 0; i < graph.ops().size(); ++i)
            if (graph.ops()[i].output == value) return static_cast<int>(i);
        return -1;
    }
    bool onlyReader(int value, int op) const {
        const auto& r = readersOf[static_cast<std::size_t>(value)];
        return !isGraphOutput[static_cast<std::size_t>(value)] && r.size() == 1 && r[0] == op;
    }
    static bool plainConv(const GraphOp& op) {
        return op.kind == OpKind::Conv && op.residual < 0 && op.outputScale == 1.0f;
    }
    const Act& act(int value, const GraphOp& op, bool unpadded = true) const {
        const Act& a = valueAct[static_cast<std::size_t>(value)];
        if (a.buf < 0) throw std::logic_error("CudaBackend: " + op.name + " reads a value that is not lowered");
        if (unpadded && a.c != graph.value(value).channels)
            throw std::invalid_argument("CudaBackend: " + op.name + " (" + toString(op.kind) + ") cannot read '" +
                                        graph.value(value).name + "', stored with " + std::to_string(a.c) +
                                        " channels (padded for cuDNN)");
        return a;
    }
    float* vec(const VectorRef& r) const { return reinterpret_cast<float*>(ptr(r.buf)) + r.offset; }
    // Lane 0's buffer of graph input or output `v` (CudaBackend::deviceGraphInput).
    void* graphValuePtr(int v) const {
        if (!prepared) throw std::logic_error("CudaBackend: device buffers before prepare");
        if (graph.value(v).kind == ValueKind::Vector) return lanePtr(0, valueVec[static_cast<std::size_t>(v)].buf) +
                                                             valueVec[static_cast<std::size_t>(v)].offset * sizeof(float);
        const int buf = valueAct[static_cast<std::size_t>(v)].buf;
        return buf < 0 ? nullptr : lanePtr(0, buf);
    }

    // The lowering choices above, decided before anything is emitted.
    void analyse() {
        const auto& ops = graph.ops();
        const std::size_t nv = graph.values().size(), no = ops.size();
        readersOf.assign(nv, {});
        isGraphOutput.assign(nv, 0);
        for (std::size_t i = 0; i < no; ++i)
            for (int v : ops[i].operands()) readersOf[static_cast<std::size_t>(v)].push_back(static_cast<int>(i));
        for (int v : graph.outputs()) isGraphOutput[static_cast<std::size_t>(v)] = 1;
        projectionOf.assign(no, -1);
        projections.clear();
        biasIntoNorm.assign(no, -1);
        biasMoved.assign(no, 0);
        shortcutOf.assign(no, -1);
        deferred.assign(no, 0);
        for (std::size_t i = 0; i < no; ++i) {
            const GraphOp& op = ops[i];
            if (op.kind != OpKind::Linear || op.silu || isGraphOutput[static_cast<std::size_t>(op.output)] ||
                graph.value(op.output).kind != ValueKind::Vector)
                continue;
            const auto& readers = readersOf[static_cast<std::size_t>(op.output)];
            const bool normsOnly = !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](int r) {
                const GraphOp& n = opAt(r);
                return n.kind == OpKind::GroupNorm && n.input != op.output;
            });
            if (!normsOnly) continue;
            auto p = std::find_if(projections.begin(), projections.end(), [&](const Projection& q) { return q.input == op.input; });
            if (p == projections.end()) p = projections.insert(projections.end(), Projection{op.input, -1, 0, {}});
            projectionOf[i] = static_cast<int>(p - projections.begin());
            p->members.push_back(static_cast<int>(i));
        }
        for (std::size_t i = 0; i < no; ++i) {
            const GraphOp& norm = ops[i];
            if (norm.kind != OpKind::GroupNorm) continue;
            const int c = producerOf(norm.input);
            if (c < 0 || !plainConv(opAt(c)) || !onlyReader(norm.input, static_cast<int>(i))) continue;
            // The bias goes into the projection feeding the pre-add (read by this norm only), or
            // becomes the pre-add itself.
            const int p = norm.preAdd >= 0 ? producerOf(norm.preAdd) : -1;
            if (norm.preAdd >= 0 && (p < 0 || projectionOf[static_cast<std::size_t>(p)] < 0 ||
                                     !onlyReader(norm.preAdd, static_cast<int>(i))))
                continue;
            biasIntoNorm[i] = c;
            biasMoved[static_cast<std::size_t>(c)] = 1;
        }
        for (std::size_t i = 0; i < no; ++i) {
            const GraphOp& s = ops[i];
            if (!plainConv(s) || biasMoved[i] || isGraphOutput[static_cast<std::size_t>(s.output)]) continue;
            const auto& readers = readersOf[static_cast<std::size_t>(s.output)];
            if (readers.size() != 1) continue;
            const GraphOp& r = opAt(readers[0]);
            if (r.kind == OpKind::Conv && r.residual == s.output && r.input != s.output && r.padEnd == r.padBegin) {
                shortcutOf[static_cast<std::size_t>(readers[0])] = static_cast<int>(i);
                deferred[i] = 1;
            }
        }
    }

    // Staging for the host-facing float32 NCHW inputs/outputs, the vector inputs, and the
    // NHWC input activations (channels padded to a multiple of 8 for cuDNN).
    void lowerInputs() {
        const std::size_t nv = graph.values().size();
        valueAct.assign(nv, Act{});
        valueVec.assign(nv, VectorRef{});
        stageIn.assign(graph.inputs().size(), -1);
        stageOut.assign(graph.outputs().size(), -1);
        auto planeBytes = [&](int v) { return static_cast<std::size_t>(graph.elements(v, maxBatch, tileH, tileW)) * 4; };
        for (std::size_t k = 0; k < graph.inputs().size(); ++k)
            if (graph.value(graph.inputs()[k]).kind != ValueKind::Vector)
                stageIn[k] = newBuffer(planeBytes(graph.inputs()[k]), "stage." + graph.value(graph.inputs()[k]).name);
        for (std::size_t k = 0; k < graph.outputs().size(); ++k)
            if (graph.value(graph.outputs()[k]).kind != ValueKind::Vector)
                stageOut[k] = newBuffer(planeBytes(graph.outputs()[k]), "stage." + graph.value(graph.outputs()[k]).name);
        timestepBuf = inputBuf = tokenBuf = -1;
        for (int v : graph.inputs()) {
            const GraphValue& g = graph.value(v);
            if (g.kind != ValueKind::Vector) continue;
            valueVec[static_cast<std::size_t>(v)] = {newBuffer(static_cast<std::size_t>(maxBatch) * g.channels * 4, g.name), 0,
                                                     g.channels};
            if (timestepBuf < 0) timestepBuf = valueVec[static_cast<std::size_t>(v)].buf;
        }
        for (int v : graph.inputs()) {
            const GraphValue& g = graph.value(v);
            if (g.kind == ValueKind::Tokens) {  // [B, rows, C] is NHWC already; channels not padded
                // Ids are read from the float32 staging (idsBuffer); no activation copy unless
                // another op reads the value as tokens.
                if (!readAsIdsOnly(v)) {
                    valueAct[static_cast<std::size_t>(v)] = tokenAct(v, g.channels, g.name);
                    if (tokenBuf < 0) tokenBuf = valueAct[static_cast<std::size_t>(v)].buf;
                }
                continue;
            }
            if (g.kind != ValueKind::FeatureMap) continue;
            valueAct[static_cast<std::size_t>(v)] = newAct((g.channels + 7) / 8 * 8, tileH / g.divisor, tileW / g.divisor, g.name);
            if (inputBuf < 0) {
                inputBuf = valueAct[static_cast<std::size_t>(v)].buf;
                inPad = valueAct[static_cast<std::size_t>(v)].c;
            }
        }
    }

    // Every op on vectors, in graph order, as one float32 op.
    void lowerVectors() {
        std::vector<int> bufs;
        std::vector<std::function<void(int)>> steps;
        bool timestep = false;
        for (int v : graph.inputs())
            if (valueVec[static_cast<std::size_t>(v)].buf >= 0) bufs.push_back(valueVec[static_cast<std::size_t>(v)].buf);
        for (std::size_t i = 0; i < graph.ops().size(); ++i) {
            const GraphOp& op = graph.ops()[i];
            const GraphValue& out = graph.value(op.output);
            if (out.kind != ValueKind::Vector || op.kind == OpKind::EosPool) continue;
            for (int v : op.operands()) {
                const int p = producerOf(v);
                if (p >= 0 && opAt(p).kind == OpKind::EosPool)
                    throw std::invalid_argument("CudaBackend: " + op.name + " reads the pooled vector '" +
                                                graph.value(v).name +
                                                "'; vector ops run before the token ops here, so none may read it");
            }
            const VectorRef x = valueVec[static_cast<std::size_t>(op.input)];
            const int in = graph.value(op.input).channels, C = out.channels;
            if (projectionOf[i] >= 0) {
                Projection& p = projections[static_cast<std::size_t>(projectionOf[i])];
                if (p.buf < 0) steps.push_back(lowerProjection(p, bufs));
                continue;
            }
            const VectorRef y{newBuffer(static_cast<std::size_t>(maxBatch) * C * 4, op.name), 0, C};
            valueVec[static_cast<std::size_t>(op.output)] = y;
            bufs.push_back(y.buf);
            switch (op.kind) {
            case OpKind::TimestepEmbedding:
                timestep = true;
                steps.push_back([=, this](int batch) {
                    launchTimestepEmbedding(vec(x), vec(y), batch, C, op.freqShift, op.flipSinToCos, opStream);
                });
                break;
            case OpKind::Linear: {
                const std::size_t w = floats(op.params[0]), b = floats(op.params[1]);
                const bool silu = op.silu;
                steps.push_back([=, this](int batch) {
                    gemmRows(DType::F32, wf(w), vec(x), vec(y), batch, in, C, 1.0f, 0.0f);
                    launchBiasActivationF32(vec(y), wf(b), batch, C, silu, nullptr, opStream);
                });
                break;
            }
            default: {  // Affine, SiLU, Add of vectors
                PointwiseParams p;
                p.op = op.kind == OpKind::Affine ? PointwiseOp::Affine
                                                 : (op.kind == OpKind::SiLU ? PointwiseOp::Silu : PointwiseOp::Add);
                if (op.kind != OpKind::Affine && op.kind != OpKind::SiLU && op.kind != OpKind::Add)
                    throw std::logic_error("CudaBackend: " + op.name + " is not a vector op");
                p.channels = C;
                p.scale = op.scale;
                p.shift = op.shift;
                const VectorRef other = op.input2 >= 0 ? valueVec[static_cast<std::size_t>(op.input2)] : VectorRef{};
                steps.push_back([=, this](int batch) mutable {
                    p.x = vec(x);
                    p.other = other.buf >= 0 ? vec(other) : nullptr;
                    p.y = vec(y);
                    p.rows = batch;
                    launchPointwise(p, opStream);
                });
            }
            }
        }
        addOp(timestep ? "time_embedding" : "vectors", bufs, Act{}, [steps](int batch) {
            for (const auto& step : steps) step(batch);
        });
    }

    // The merged projections of one input: weights concatenated in graph order; the biases of
    // the convs whose GroupNorm reads a slice added to that slice.
    std::function<void(int)> lowerProjection(Projection& p, std::vector<int>& bufs) {
        std::vector<float> w, b;
        for (int m : p.members) {
            const GraphOp& op = opAt(m);
            valueVec[static_cast<std::size_t>(op.output)] = VectorRef{-1, p.width, 0};
            const HostTensor& wt = weight(op.params[0]);
            w.insert(w.end(), wt.data.begin(), wt.data.end());
            std::vector<float> bias = weight(op.params[1]).data;
            for (int r : readersOf[static_cast<std::size_t>(op.output)]) {
                const int conv = biasIntoNorm[static_cast<std::size_t>(r)];
                if (conv < 0 || opAt(r).preAdd != op.output) continue;
                const std::vector<float>& cb = weight(opAt(conv).params[1]).data;
                for (std::size_t c = 0; c < cb.size(); ++c) bias[c] += cb[c];
            }
            b.insert(b.end(), bias.begin(), bias.end());
            p.width += op.channels;
        }
        p.buf = newBuffer(static_cast<std::size_t>(maxBatch) * p.width * 4, "projections." + graph.value(p.input).name);
        bufs.push_back(p.buf);
        for (int m : p.members) {
            VectorRef& r = valueVec[static_cast<std::size_t>(opAt(m).output)];
            r.buf = p.buf;
            r.stride = p.width;
        }
        const std::size_t wOff = blob.addFloats(w), bOff = blob.addFloats(b);
        const VectorRef x = valueVec[static_cast<std::size_t>(p.input)];
        const int in = graph.value(p.input).channels, width = p.width, buf = p.buf;
        return [=, this](int batch) {
            gemmRows(DType::F32, wf(wOff), vec(x), ptr(buf), batch, in, width, 1.0f, 0.0f);
            launchBiasActivationF32(reinterpret_cast<float*>(ptr(buf)), wf(bOff), batch, width, false, nullptr, opStream);
        };
    }

    void lowerPointwise(const GraphOp& op) {
        const bool sameShape = op.kind == OpKind::Affine || op.kind == OpKind::SiLU ||
                               (op.kind == OpKind::Add && graph.value(op.input2).kind != ValueKind::Vector);
        const Act x = act(op.input, op, !sameShape);
        const Act y = newAct(x.c, x.h, x.w, op.name);
        std::vector<int> bufs{x.buf, y.buf};
        PointwiseParams p;
        p.channels = x.c;
        p.rowsPerSample = static_cast<long long>(x.h) * x.w;
        p.scale = op.scale;
        p.shift = op.shift;
        Act other;
        VectorRef v;
        switch (op.kind) {
        case OpKind::Affine: p.op = PointwiseOp::Affine; break;
        case OpKind::SiLU: p.op = PointwiseOp::Silu; break;
        case OpKind::Add:
            if (sameShape) {
                p.op = PointwiseOp::Add;
                other = act(op.input2, op, false);
                if (other.c != x.c) throw std::invalid_argument("CudaBackend: " + op.name + ": operands stored differently");
                bufs.push_back(other.buf);
            } else {
                p.op = PointwiseOp::AddVector;
                v = valueVec[static_cast<std::size_t>(op.input2)];
            }
            break;
        case OpKind::ScaleShift:
            p.op = PointwiseOp::ScaleShift;
            v = valueVec[static_cast<std::size_t>(op.input2)];
            break;
        default: throw std::logic_error("CudaBackend: " + op.name + " is not elementwise");
        }
        if (v.buf >= 0) {
            bufs.push_back(v.buf);
            p.vectorStride = v.stride;
        }
        addOp(op.name, bufs, y, [=, this](int batch) mutable {
            p.dtype = dtype;
            p.x = ptr(x.buf);
            p.other = other.buf >= 0 ? ptr(other.buf) : nullptr;
            p.vector = v.buf >= 0 ? vec(v) : nullptr;
            p.y = ptr(y.buf);
            p.rows = batch * p.rowsPerSample;
            launchPointwise(p, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    // conv (+ bias, + residual) * outputScale. Buffer lists as the reference plan had them
    // (docs/PERFORMANCE.md): the epilogue lists the conv's input only when there is no residual.
    void lowerConv(int index) {
        const GraphOp& op = opAt(index);
        const bool output = isGraphOutput[static_cast<std::size_t>(op.output)];
        const int co = output ? (op.channels + 7) / 8 * 8 : op.channels;
        Act src = act(op.input, op, false);
        if (op.padEnd != op.padBegin) {  // one more row/column at the bottom/right (§2.7)
            const Act unpadded = src;
            src = newAct(src.c, src.h + 1, src.w + 1, op.name + ".pad");
            const Act padded = src;
            addOp(op.name + ".pad", {unpadded.buf, padded.buf}, padded, [this, unpadded, padded](int batch) {
                launchPadRightBottom(dtype, ptr(unpadded.buf), ptr(padded.buf), batch, unpadded.h, unpadded.w, unpadded.c,
                                     opStream);
            });
        }
        const std::size_t w = convWeight(op.params[0], src.c, co);
        const int layer = addConv(op.name, src.c, co, op.kernel, op.stride, op.padBegin, src.h, src.w, w);
        const int ho = convs.back().ho, wo = convs.back().wo;
        if (biasMoved[static_cast<std::size_t>(index)]) {  // into the GroupNorm that reads it
            const Act y = newAct(co, ho, wo, op.name);
            addOp(op.name, {src.buf, y.buf}, y,
                  [this, layer, src, y](int batch) { runConv(layer, ptr(src.buf), ptr(y.buf), 1.0f, 0.0f, batch); });
            valueAct[static_cast<std::size_t>(op.output)] = y;
            return;
        }
        std::vector<float> bias = weight(op.params[1]).data;
        bias.resize(static_cast<std::size_t>(co), 0.0f);
        const float scale = op.outputScale;
        convs.back().alpha = scale;
        const Act y = newAct(co, ho, wo, op.name);
        std::vector<int> bufs{src.buf, y.buf};
        int rb = -1, sc = -1;
        Act xs;
        const int s = shortcutOf[static_cast<std::size_t>(index)];
        if (s >= 0) {  // conv_shortcut, lowered here without its bias
            const GraphOp& shortcut = opAt(s);
            const std::vector<float>& sb = weight(shortcut.params[1]).data;
            for (std::size_t k = 0; k < sb.size(); ++k) bias[k] += sb[k];
            xs = act(shortcut.input, shortcut, false);
            sc = addConv(shortcut.name, xs.c, co, shortcut.kernel, 1, shortcut.padBegin, xs.h, xs.w,
                         convWeight(shortcut.params[0], xs.c, co));
            rb = newBuffer(static_cast<std::size_t>(maxBatch) * xs.h * xs.w * co * dtypeSize(dtype), shortcut.name);
            bufs.push_back(xs.buf);
        } else if (op.residual >= 0) {
            const Act r = act(op.residual, op, false);
            if (r.c != co) throw std::invalid_argument("CudaBackend: " + op.name + ": residual stored with other channels");
            rb = r.buf;
        }
        if (rb >= 0) bufs.push_back(rb);
        const std::size_t b = blob.addFloats(bias);
        const long long pix = static_cast<long long>(ho) * wo;
        if (betaAccumulate) {  // diagnostics: the output initialised, the convolutions accumulate
            addOp(op.name, bufs, y, [=, this](int batch) {
                launchBiasResidual(dtype, ptr(y.buf), false, wf(b), sc < 0 && rb >= 0 ? ptr(rb) : nullptr, batch * pix, co,
                                   scale, opStream);
                if (sc >= 0) runConv(sc, ptr(xs.buf), ptr(y.buf), scale, 1.0f, batch);
                runConv(layer, ptr(src.buf), ptr(y.buf), scale, 1.0f, batch);
            });
            valueAct[static_cast<std::size_t>(op.output)] = y;
            return;
        }
        if (sc >= 0)
            addOp(opAt(s).name, {xs.buf, rb}, Act{rb, co, xs.h, xs.w},
                  [=, this](int batch) { runConv(sc, ptr(xs.buf), ptr(rb), 1.0f, 0.0f, batch); });
        ConvLayer& layerRef = convs[static_cast<std::size_t>(layer)];
        layerRef.hasEpilogue = scale == 1.0f;
        layerRef.epilogueBias = b;
        layerRef.epilogueResidual = rb >= 0;
        // Two ops (same launches) so that profiles show the convolution and its epilogue apart.
        addOp(op.name, bufs, y, [=, this](int batch) {
            const void* r = rb >= 0 ? ptr(rb) : nullptr;
            if (!runConvFused(layer, ptr(src.buf), ptr(y.buf), r, batch))
                runConv(layer, ptr(src.buf), ptr(y.buf), scale, 0.0f, batch);
        });
        std::vector<int> epilogueBufs = rb >= 0 ? std::vector<int>{y.buf, rb} : std::vector<int>{src.buf, y.buf};
        if (s >= 0) epilogueBufs.push_back(xs.buf);
        addOp(op.name + ".epilogue", epilogueBufs, y, [=, this](int batch) {
            if (fusedAt(layer, batch)) return;
            launchBiasResidual(dtype, ptr(y.buf), true, wf(b), rb >= 0 ? ptr(rb) : nullptr, batch * pix, co, scale,
                               opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    void lowerGroupNorm(int index) {
        const GraphOp& op = opAt(index);
        const Act x = act(op.input, op);
        const Act y = newAct(x.c, x.h, x.w, op.name);
        const int pixels = x.h * x.w;
        const int chunks = groupNormChunks(pixels, maxBatch, props.multiProcessorCount);
        const int scratch = newBuffer(groupNormScratchFloats(maxBatch, chunks, op.groups) * sizeof(float), op.name + ".stats");
        const std::size_t gamma = floats(op.params[0]), beta = floats(op.params[1]);
        std::vector<int> bufs{x.buf, y.buf, scratch};
        // Pre-add: a vector (the projection, which holds the conv bias when it was moved), or the
        // moved conv bias alone (shared by the samples).
        const VectorRef pre = op.preAdd >= 0 ? valueVec[static_cast<std::size_t>(op.preAdd)] : VectorRef{};
        const VectorRef film = op.scaleShift >= 0 ? valueVec[static_cast<std::size_t>(op.scaleShift)] : VectorRef{};
        const int conv = biasIntoNorm[static_cast<std::size_t>(index)];
        const bool ownBias = conv >= 0 && op.preAdd < 0;
        const std::size_t convBias = ownBias ? floats(opAt(conv).params[1]) : 0;
        for (int b : {pre.buf, film.buf})
            if (b >= 0 && std::find(bufs.begin(), bufs.end(), b) == bufs.end()) bufs.push_back(b);
        const int groups = op.groups, channels = x.c;
        const float eps = op.eps;
        const bool silu = op.silu;
        addOp(op.name, bufs, y, [=, this](int batch) {
            GroupNormParams p;
            p.dtype = dtype;
            p.x = ptr(x.buf);
            p.y = ptr(y.buf);
            p.batch = batch;
            p.pixels = pixels;
            p.channels = channels;
            p.groups = groups;
            p.eps = eps;
            p.gamma = wf(gamma);
            p.beta = wf(beta);
            p.silu = silu;
            p.chunks = chunks;
            p.scratch = reinterpret_cast<float*>(ptr(scratch));
            if (pre.buf >= 0) {
                p.preAdd = vec(pre);
                p.preAddBatchStride = pre.stride;
            } else if (ownBias) {
                p.preAdd = wf(convBias);
                p.preAddBatchStride = 0;
            }
            if (film.buf >= 0) {
                p.scale = vec(film);
                p.shift = vec(film) + channels;
                p.filmBatchStride = film.stride;
            }
            launchGroupNorm(p, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    // Where one attention's Q, K, V and head outputs live (activation type): rows of `*Row`
    // elements, images `*Image` elements apart, head h's channels from column h * d.
    struct AttentionOperands {
        const char* q = nullptr;
        long long qRow = 0, qImage = 0;
        const char* k = nullptr;
        long long kRow = 0, kImage = 0;
        const char* v = nullptr;
        long long vRow = 0, vImage = 0;
        char* o = nullptr;
        long long oRow = 0, oImage = 0;
        int queries = 0, keys = 0, heads = 1, d = 0;
        bool causal = false;
    };

    // O = softmax(Q K^T * scale [+ causal mask]) V for `batch` images in the passes of `plan`:
    // per pass one strided GEMM of float32 scores (over the images when there is one head,
    // else over the pass's heads), the mask, the row softmax into `probs`, one GEMM P V.
    void attend(const AttentionOperands& a, const AttentionPlan& plan, int batch, float scale, float* scores,
                void* probs) {
        const DType t = dtype;
        const cudaDataType_t ct = cublasType(t);
        const long long es = static_cast<long long>(dtypeSize(t));
        const cublasComputeType_t compute = t == DType::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
        const float one = 1.0f, zero = 0.0f;
        const bool overImages = a.heads == 1;
        const long long qStride = overImages ? a.qImage : a.d, kStride = overImages ? a.kImage : a.d;
        const long long vStride = overImages ? a.vImage : a.d, oStride = overImages ? a.oImage : a.d;
        for (int b0 = 0; b0 < batch; b0 += plan.imagesPerPass)
            for (int h0 = 0; h0 < a.heads; h0 += plan.headsPerPass)
                for (int q0 = 0; q0 < a.queries; q0 += plan.queryBlock) {
                    const int count = overImages ? std::min(plan.imagesPerPass, batch - b0)
                                                 : std::min(plan.headsPerPass, a.heads - h0);
                    const int nq = std::min(plan.queryBlock, a.queries - q0);
                    const long long block = static_cast<long long>(nq) * a.keys;
                    const long long head = static_cast<long long>(h0) * a.d;
                    const char* qB = a.q + (b0 * a.qImage + q0 * a.qRow + head) * es;
                    const char* kB = a.k + (b0 * a.kImage + head) * es;
                    const char* vB = a.v + (b0 * a.vImage + head) * es;
                    char* oB = a.o + (b0 * a.oImage + q0 * a.oRow + head) * es;
                    // S^T (keys x queries, column-major) = K_h^T-view x Q_h: row-major S[query][key].
                    TESSERA_CHECK(cublasGemmStridedBatchedEx(
                        opCublas, CUBLAS_OP_T, CUBLAS_OP_N, a.keys, nq, a.d, &scale, kB, ct, static_cast<int>(a.kRow),
                        kStride, qB, ct, static_cast<int>(a.qRow), qStride, &zero, scores, CUDA_R_32F, a.keys, block,
                        count, compute, CUBLAS_GEMM_DEFAULT));
                    if (a.causal) launchCausalMask(scores, count, nq, a.keys, q0, opStream);
                    launchSoftmaxRows(t, scores, probs, static_cast<long long>(count) * nq, a.keys, opStream);
                    // O_h^T (d x queries) = V_h^T-view x P^T-view.
                    TESSERA_CHECK(cublasGemmStridedBatchedEx(
                        opCublas, CUBLAS_OP_N, CUBLAS_OP_N, a.d, nq, a.keys, &one, vB, ct, static_cast<int>(a.vRow),
                        vStride, probs, ct, a.keys, block, &zero, oB, ct, static_cast<int>(a.oRow), oStride, count,
                        compute, CUBLAS_GEMM_DEFAULT));
                }
    }

    static FlashAttentionArgs flashArgs(DType t, const AttentionOperands& a, int batch, float scale) {
        FlashAttentionArgs f;
        f.dtype = t;
        f.q = a.q;
        f.qRow = a.qRow;
        f.qImage = a.qImage;
        f.k = a.k;
        f.kRow = a.kRow;
        f.kImage = a.kImage;
        f.v = a.v;
        f.vRow = a.vRow;
        f.vImage = a.vImage;
        f.o = a.o;
        f.oRow = a.oRow;
        f.oImage = a.oImage;
        f.batch = batch;
        f.heads = a.heads;
        f.queries = a.queries;
        f.keys = a.keys;
        f.headDim = a.d;
        f.scale = scale;
        f.causal = a.causal;
        return f;
    }

    // How one attention computes softmax(Q K^T * scale) V: the fused kernel, or the blocked
    // plan with its score and probability buffers.
    struct AttentionChoice {
        bool fused = false;
        AttentionPlan plan;
        int scores = -1, probs = -1;
    };
    // Lays an attention's operands over buffers: its inputs (Q, K, V) from `in`, the heads'
    // output at `out`.
    using AttentionBinder = std::function<AttentionOperands(char* in, char* out)>;

    // Both paths on scratch operands at the prepared batch (inputs uniform noise), GPU ms each
    // (median of 10): {fused, blocked}.
    std::pair<double, double> timeAttentionPaths(const AttentionPlan& plan, std::size_t inBytes, std::size_t outBytes,
                                                 const AttentionBinder& bind, float scale) {
        const std::size_t in = alignUp(inBytes), out = alignUp(outBytes), sc = alignUp(plan.scoreBytes);
        DeviceBuffer scratch(in + out + sc + alignUp(plan.probBytes));
        char* base = scratch.as<char>();
        launchFillUniform(dtype, base, static_cast<long long>(in / dtypeSize(dtype)), 4321u, 1.0f, stream.get());
        const AttentionOperands a = bind(base, base + in);
        float* scores = reinterpret_cast<float*>(base + in + out);
        void* probs = base + in + out + sc;
        const double fused = medianGpuMs(stream.get(), 10, 1, [&] {
            launchFlashAttention(flashArgs(dtype, a, maxBatch, scale), stream.get());
        });
        const double blocked = medianGpuMs(stream.get(), 10, 1, [&] { attend(a, plan, maxBatch, scale, scores, probs); });
        return {fused, blocked};
    }

    // The path of one attention (`a`: its shape, strides and causal flag; pointers unset) by
    // TESSERA_CUDA_FLASH: fp32, and shapes the fused kernel does not take, take the blocked
    // plan; 0 / 1 force a path; auto takes the tuning cache's choice, else times both on
    // scratch operands laid out by `bind` (inputs of `inBytes`, output of `outBytes`) and keeps
    // the faster (stored in the cache). `offsets` are the operands' offsets within their
    // buffers (elements). Noted for planSummary and attentionPaths().
    AttentionChoice attentionPath(const GraphOp& op, const AttentionOperands& a, std::initializer_list<long long> offsets,
                                  std::size_t inBytes, std::size_t outBytes, const AttentionBinder& bind, float scale) {
        const AttentionPlan plan =
            planAttention(maxBatch, a.heads, a.queries, a.keys, dtypeSize(dtype), settings.attentionBudgetBytes);
        CudaBackend::AttentionPath record;
        record.reason = flashAttentionRefusal(dtype, a.d, maxBatch, a.heads, offsets);
        if (record.reason.empty()) {
            const std::string key = "attention n" + std::to_string(maxBatch) + " h" + std::to_string(a.heads) + " q" +
                                    std::to_string(a.queries) + " k" + std::to_string(a.keys) + " d" +
                                    std::to_string(a.d) + (a.causal ? " causal" : "") + " rows " +
                                    std::to_string(a.qRow) + "," + std::to_string(a.kRow) + " scores " +
                                    std::to_string(plan.scoreBytes);
            // Once per distinct shape and layout in a prepare (later ops of the shape take it).
            auto it = attentionChosen.find(key);
            if (it == attentionChosen.end())
                it = attentionChosen.emplace(key, choosePath(key, plan, inBytes, outBytes, bind, scale)).first;
            record = it->second;
        }
        record.op = op.name;
        record.flops = 4.0 * maxBatch * a.heads * static_cast<double>(a.queries) * a.keys * a.d;
        AttentionChoice choice;
        choice.fused = record.fused;
        if (!choice.fused) {
            choice.plan = plan;
            choice.scores = newBuffer(plan.scoreBytes, op.name + ".scores");
            choice.probs = newBuffer(plan.probBytes, op.name + ".probs");
        }
        char times[96] = "";
        if (record.fusedMs >= 0)
            std::snprintf(times, sizeof times, "; fused %.4f ms, blocked %.4f ms", record.fusedMs, record.blockedMs);
        attentionNotes += "  " + op.name + ": " +
                          (choice.fused ? "fused (" + flashAttentionTiling(a.d) + ")" : "blocked, " + plan.describe(a.queries)) +
                          " [" + record.reason + times + "]\n";
        attentionRecords.push_back(record);
        return choice;
    }

    // The path for an attention the fused kernel takes (op key `key`): forced by TESSERA_CUDA_FLASH
    // = 0 / 1, else (auto) the tuning cache's choice, else both timed and the faster kept.
    CudaBackend::AttentionPath choosePath(const std::string& key, const AttentionPlan& plan, std::size_t inBytes,
                                          std::size_t outBytes, const AttentionBinder& bind, float scale) {
        CudaBackend::AttentionPath r;
        if (settings.flash != FlashMode::Auto) {
            r.fused = settings.flash == FlashMode::On;
            r.reason = r.fused ? "TESSERA_CUDA_FLASH=1" : "TESSERA_CUDA_FLASH=0";
            useNew(key, r.fused ? "fused" : "blocked", false);
            return r;
        }
        if (const auto cached = cachedChoice(key)) {
            if (*cached == "fused" || *cached == "blocked") {
                r.fused = *cached == "fused";
                r.reason = "tuning cache";
                useCached(key, *cached);
                return r;
            }
            rejectCached(key, *cached, "not an attention path");
        }
        try {
            std::tie(r.fusedMs, r.blockedMs) = timeAttentionPaths(plan, inBytes, outBytes, bind, scale);
            r.fused = r.fusedMs < r.blockedMs;
            r.reason = "timed";
            useNew(key, r.fused ? "fused" : "blocked", true);
        } catch (const CudaError& e) {
            if (!e.outOfMemory()) throw;
            (void)cudaGetLastError();
            // No room for the blocked path's scratch: the fused kernel needs none.
            r.fused = true;
            r.reason = "not timed (no device memory for the blocked path's scratch)";
            useNew(key, "fused", false);
        }
        return r;
    }

    // Q, K, V in one GEMM, softmax(Q K^T / sqrt(d)) V (attentionPath: fused, or float32 scores in
    // the blocks of an AttentionPlan, softmax, P V), the output projection, then the bias +
    // residual epilogue with the output scale.
    void lowerAttention(int index) {
        const GraphOp& op = opAt(index);
        if (!op.qkvBias) throw std::invalid_argument("CudaBackend: " + op.name + ": attention over a feature map needs q/k/v biases");
        const Act xn = act(op.input, op);
        const Act res = op.residual >= 0 ? act(op.residual, op) : Act{};
        const int C = xn.c, N = xn.h * xn.w, heads = op.heads, d = C / heads;
        std::vector<float> wqkv, bqkv;
        for (int k = 0; k < 3; ++k) {
            const HostTensor& w = weight(op.params[static_cast<std::size_t>(2 * k)]);
            const HostTensor& b = weight(op.params[static_cast<std::size_t>(2 * k + 1)]);
            wqkv.insert(wqkv.end(), w.data.begin(), w.data.end());
            bqkv.insert(bqkv.end(), b.data.begin(), b.data.end());
        }
        const std::size_t wq = blob.addTyped(wqkv, dtype), bq = blob.addFloats(bqkv);
        const std::size_t wo = blob.addTyped(weight(op.params[6]).data, dtype);
        const std::size_t bo = floats(op.params[7]);

        const std::size_t es = dtypeSize(dtype);
        const std::size_t qkvBytes = static_cast<std::size_t>(maxBatch) * N * 3 * C * es;
        const std::size_t headBytes = static_cast<std::size_t>(maxBatch) * N * C * es;
        // Q, K, V interleaved per pixel ([q | k | v], 3C), the heads' output [N, C].
        auto operands = [=](char* qkvBase, char* oBase) {
            AttentionOperands a;
            a.q = qkvBase;
            a.k = qkvBase ? qkvBase + static_cast<std::size_t>(C) * es : nullptr;
            a.v = qkvBase ? qkvBase + static_cast<std::size_t>(2 * C) * es : nullptr;
            a.qRow = a.kRow = a.vRow = 3LL * C;
            a.qImage = a.kImage = a.vImage = 3LL * C * N;
            a.o = oBase;
            a.oRow = C;
            a.oImage = static_cast<long long>(C) * N;
            a.queries = a.keys = N;
            a.heads = heads;
            a.d = d;
            return a;
        };
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        const AttentionChoice path = attentionPath(op, operands(nullptr, nullptr), {3LL * C, 3LL * C * N, C, 2LL * C},
                                                   qkvBytes, headBytes, operands, scale);
        const int qkv = newBuffer(qkvBytes, op.name + ".qkv");
        const int o = newBuffer(headBytes, op.name + ".heads");
        const Act out = newAct(C, xn.h, xn.w, op.name + ".out");
        const float s = op.outputScale;
        std::vector<int> bufs{xn.buf, qkv, o, out.buf};
        if (!path.fused) bufs.insert(bufs.end(), {path.scores, path.probs});
        if (res.buf >= 0) bufs.insert(bufs.begin(), res.buf);
        addOp(op.name, bufs, out, [=, this](int batch) {
            const DType t = dtype;
            gemmRows(t, wt(wq), ptr(xn.buf), ptr(qkv), batch * N, C, 3 * C, 1.0f, 0.0f);
            launchBiasResidual(t, ptr(qkv), true, wf(bq), nullptr, static_cast<long long>(batch) * N, 3 * C, 1.0f,
                               opStream);
            runAttention(path, operands(ptr(qkv), ptr(o)), batch, scale);
            gemmRows(t, wt(wo), ptr(o), ptr(out.buf), batch * N, C, C, s, 0.0f);
            launchBiasResidual(t, ptr(out.buf), true, wf(bo), res.buf >= 0 ? ptr(res.buf) : nullptr,
                               static_cast<long long>(batch) * N, C, s, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = out;
    }

    void runAttention(const AttentionChoice& path, const AttentionOperands& a, int batch, float scale) {
        if (path.fused)
            launchFlashAttention(flashArgs(dtype, a, batch, scale), opStream);
        else
            attend(a, path.plan, batch, scale, reinterpret_cast<float*>(ptr(path.scores)), ptr(path.probs));
    }

    // ---- token sequences ([B, rows, C]: NHWC with the rows as pixels; tile tokens keep the
    // feature map's h x w, fixed ones are rows x 1) ----
    Act tokenAct(int value, int channels, const std::string& name) {
        const GraphValue& g = graph.value(value);
        if (g.tokens > 0) return newAct(channels, g.tokens, 1, name);
        return newAct(channels, tileH / g.divisor, tileW / g.divisor, name);
    }

    // ToTokens and ToFeatureMap change no bytes (both NHWC): the output is the input's buffer,
    // unless ToFeatureMap adds a residual.
    void lowerLayoutChange(const GraphOp& op) {
        const Act x = act(op.input, op);
        if (op.residual < 0) {
            valueAct[static_cast<std::size_t>(op.output)] = x;
            return;
        }
        const Act r = act(op.residual, op);
        const Act y = newAct(x.c, x.h, x.w, op.name);
        PointwiseParams p;
        p.op = PointwiseOp::Add;
        p.channels = x.c;
        addOp(op.name, {x.buf, r.buf, y.buf}, y, [=, this](int batch) mutable {
            p.dtype = dtype;
            p.x = ptr(x.buf);
            p.other = ptr(r.buf);
            p.y = ptr(y.buf);
            p.rows = static_cast<long long>(batch) * x.h * x.w;
            launchPointwise(p, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    void lowerLayerNorm(const GraphOp& op) {
        const Act x = act(op.input, op);
        const Act y = newAct(x.c, x.h, x.w, op.name);
        const std::size_t gamma = floats(op.params[0]), beta = floats(op.params[1]);
        const float eps = op.eps;
        addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
            launchLayerNorm(dtype, ptr(x.buf), ptr(y.buf), wf(gamma), wf(beta), static_cast<long long>(batch) * x.h * x.w,
                            x.c, eps, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    // Per token: one GEMM over every row of the batch, then bias (+ residual).
    void lowerTokenLinear(const GraphOp& op) {
        if (graph.value(op.input).kind != ValueKind::Tokens) throw std::logic_error("CudaBackend: " + op.name + " is not over tokens");
        const Act x = act(op.input, op);
        const Act r = op.residual >= 0 ? act(op.residual, op) : Act{};
        const int in = x.c, out = op.channels;
        const Act y = newAct(out, x.h, x.w, op.name);
        const std::size_t w = blob.addTyped(weight(op.params[0]).data, dtype), b = floats(op.params[1]);
        std::vector<int> bufs{x.buf, y.buf};
        if (r.buf >= 0) bufs.push_back(r.buf);
        addOp(op.name, bufs, y, [=, this](int batch) {
            const long long rows = static_cast<long long>(batch) * x.h * x.w;
            gemmRows(dtype, wt(w), ptr(x.buf), ptr(y.buf), static_cast<int>(rows), in, out, 1.0f, 0.0f);
            launchBiasResidual(dtype, ptr(y.buf), true, wf(b), r.buf >= 0 ? ptr(r.buf) : nullptr, rows, out, 1.0f, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    // The projection GEMM (+ bias) into [rows, 2 * inner], then value * gelu(gate).
    void lowerGeglu(const GraphOp& op) {
        const Act x = act(op.input, op);
        const int in = x.c, inner = op.channels;
        const int proj = newBuffer(static_cast<std::size_t>(maxBatch) * x.h * x.w * 2 * inner * dtypeSize(dtype),
                                   op.name + ".proj");
        const Act y = newAct(inner, x.h, x.w, op.name);
        const std::size_t w = blob.addTyped(weight(op.params[0]).data, dtype), b = floats(op.params[1]);
        addOp(op.name, {x.buf, proj, y.buf}, y, [=, this](int batch) {
            const long long rows = static_cast<long long>(batch) * x.h * x.w;
            gemmRows(dtype, wt(w), ptr(x.buf), ptr(proj), static_cast<int>(rows), in, 2 * inner, 1.0f, 0.0f);
            launchBiasResidual(dtype, ptr(proj), true, wf(b), nullptr, rows, 2 * inner, 1.0f, opStream);
            launchGegluGate(dtype, ptr(proj), ptr(y.buf), rows, inner, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    void lowerGelu(const GraphOp& op) {
        const Act x = act(op.input, op);
        const Act y = newAct(x.c, x.h, x.w, op.name);
        const GeluKind kind = op.kind == OpKind::QuickGELU ? GeluKind::Quick : (op.geluTanh ? GeluKind::Tanh : GeluKind::Exact);
        addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
            launchGelu(dtype, kind, ptr(x.buf), ptr(y.buf), static_cast<long long>(batch) * x.h * x.w * x.c, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    // Attention over tokens: Q = x Wq^T, [K | V] = context [Wk; Wv]^T in one GEMM (biases when
    // qkvBias), softmax(Q K^T / sqrt(d) [+ causal mask]) V (attentionPath: fused, or float32
    // scores in the passes of an AttentionPlan, softmax, P V), then the output projection with
    // the bias + residual epilogue and the output scale.
    void lowerTokenAttention(int index) {
        const GraphOp& op = opAt(index);
        const Act x = act(op.input, op);
        const Act ctx = op.input2 >= 0 ? act(op.input2, op) : x;
        const Act res = op.residual >= 0 ? act(op.residual, op) : Act{};
        const int C = x.c, N = x.h * x.w, M = ctx.h * ctx.w, Ckv = ctx.c, heads = op.heads, d = C / heads;
        std::size_t k = 0;
        auto next = [&]() -> const HostTensor& { return weight(op.params[k++]); };
        const std::vector<float> wqData = next().data;
        const std::vector<float> bqData = op.qkvBias ? next().data : std::vector<float>{};
        std::vector<float> wkv = next().data, bkv = op.qkvBias ? next().data : std::vector<float>{};
        const HostTensor& wvT = next();
        wkv.insert(wkv.end(), wvT.data.begin(), wvT.data.end());
        if (op.qkvBias) {
            const std::vector<float>& bv = next().data;
            bkv.insert(bkv.end(), bv.begin(), bv.end());
        }
        const std::size_t wq = blob.addTyped(wqData, dtype), wkvOff = blob.addTyped(wkv, dtype);
        const std::size_t wo = blob.addTyped(next().data, dtype), bo = blob.addFloats(next().data);
        const bool bias = op.qkvBias;
        const std::size_t bq = bias ? blob.addFloats(bqData) : 0, bkvOff = bias ? blob.addFloats(bkv) : 0;

        const std::size_t es = dtypeSize(dtype);
        const std::size_t qBytes = static_cast<std::size_t>(maxBatch) * N * C * es;
        const std::size_t kvBytes = static_cast<std::size_t>(maxBatch) * M * 2 * C * es;
        const float scale = 1.0f / std::sqrt(static_cast<float>(d)), s = op.outputScale;
        const bool causal = op.causal;
        // Q [N, C], K and V interleaved per context token ([k | v], 2C), the heads' output [N, C].
        auto operands = [=](char* qBase, char* kvBase, char* oBase) {
            AttentionOperands a;
            a.q = qBase;
            a.qRow = C;
            a.qImage = static_cast<long long>(N) * C;
            a.k = kvBase;
            a.v = kvBase ? kvBase + static_cast<std::size_t>(C) * es : nullptr;
            a.kRow = a.vRow = 2LL * C;
            a.kImage = a.vImage = 2LL * C * M;
            a.o = oBase;
            a.oRow = C;
            a.oImage = static_cast<long long>(N) * C;
            a.queries = N;
            a.keys = M;
            a.heads = heads;
            a.d = d;
            a.causal = causal;
            return a;
        };
        // For timing: Q, then K | V after it, in one scratch buffer.
        auto bindScratch = [=](char* in, char* oBase) { return operands(in, in + alignUp(qBytes), oBase); };
        const AttentionChoice path =
            attentionPath(op, operands(nullptr, nullptr, nullptr), {C, 2LL * C, static_cast<long long>(N) * C, 2LL * C * M},
                          alignUp(qBytes) + kvBytes, qBytes, bindScratch, scale);
        const int q = newBuffer(qBytes, op.name + ".q");
        const int kv = newBuffer(kvBytes, op.name + ".kv");
        const int o = newBuffer(qBytes, op.name + ".heads");
        const Act out = newAct(C, x.h, x.w, op.name + ".out");
        std::vector<int> bufs{x.buf, q, kv, o, out.buf};
        if (!path.fused) bufs.insert(bufs.end(), {path.scores, path.probs});
        if (ctx.buf != x.buf) bufs.insert(bufs.begin(), ctx.buf);
        if (res.buf >= 0 && res.buf != x.buf) bufs.insert(bufs.begin(), res.buf);
        addOp(op.name, bufs, out, [=, this](int batch) {
            const DType t = dtype;
            gemmRows(t, wt(wq), ptr(x.buf), ptr(q), batch * N, C, C, 1.0f, 0.0f);
            gemmRows(t, wt(wkvOff), ptr(ctx.buf), ptr(kv), batch * M, Ckv, 2 * C, 1.0f, 0.0f);
            if (bias) {
                launchBiasResidual(t, ptr(q), true, wf(bq), nullptr, static_cast<long long>(batch) * N, C, 1.0f, opStream);
                launchBiasResidual(t, ptr(kv), true, wf(bkvOff), nullptr, static_cast<long long>(batch) * M, 2 * C, 1.0f,
                                   opStream);
            }
            runAttention(path, operands(ptr(q), ptr(kv), ptr(o)), batch, scale);
            gemmRows(t, wt(wo), ptr(o), ptr(out.buf), batch * N, C, C, s, 0.0f);
            launchBiasResidual(t, ptr(out.buf), true, wf(bo), res.buf >= 0 ? ptr(res.buf) : nullptr,
                               static_cast<long long>(batch) * N, C, s, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = out;
    }

    // ---- CLIP's first and last ops: ids are graph inputs, read as float32 from their staging
    // buffer (exact up to 2^24; fp16 holds integers exactly only up to 2048) ----
    bool readAsIdsOnly(int value) const {
        const auto& readers = readersOf[static_cast<std::size_t>(value)];
        if (readers.empty() || isGraphOutput[static_cast<std::size_t>(value)]) return false;
        return std::all_of(readers.begin(), readers.end(), [&](int r) {
            const GraphOp& op = opAt(r);
            return (op.kind == OpKind::TokenEmbedding && op.operands() == std::vector<int>{value}) ||
                   (op.kind == OpKind::EosPool && op.input2 == value && op.input != value);
        });
    }
    int idsBuffer(int value, const GraphOp& op) const {
        const auto& in = graph.inputs();
        const auto it = std::find(in.begin(), in.end(), value);
        if (it == in.end())
            throw std::invalid_argument("CudaBackend: " + op.name + " (" + toString(op.kind) + ") reads ids '" +
                                        graph.value(value).name + "', which are not a graph input");
        return stageIn[static_cast<std::size_t>(it - in.begin())];
    }
    // Every TokenEmbedding's host ids, checked before any upload as the CPU backend checks them.
    void checkIds(const std::vector<const float*>& inputs, int batch) const {
        const auto& in = graph.inputs();
        for (const GraphOp& op : graph.ops()) {
            if (op.kind != OpKind::TokenEmbedding) continue;
            const auto k = static_cast<std::size_t>(std::find(in.begin(), in.end(), op.input) - in.begin());
            if (k < inputs.size())
                cpu::checkTokenIds(batch, graph.value(op.input).tokens, graph.param(op.params[0]).shape.at(0), inputs[k]);
        }
    }

    void lowerTokenEmbedding(const GraphOp& op) {
        const int ids = idsBuffer(op.input, op);
        const int tokens = graph.value(op.input).tokens, C = op.channels;
        const long long vocab = graph.param(op.params[0]).shape.at(0);
        const Act y = tokenAct(op.output, C, op.name);
        const std::size_t table = blob.addTyped(weight(op.params[0]).data, dtype);
        const std::size_t positions = blob.addTyped(weight(op.params[1]).data, dtype);
        addOp(op.name, {ids, y.buf}, y, [=, this](int batch) {
            launchTokenEmbedding(dtype, reinterpret_cast<const float*>(ptr(ids)), wt(table), wt(positions), ptr(y.buf),
                                 static_cast<long long>(batch) * tokens, tokens, C, vocab, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
    }

    void lowerEosPool(const GraphOp& op) {
        const Act x = act(op.input, op);
        const int ids = idsBuffer(op.input2, op);
        const int tokens = graph.value(op.input).tokens, C = x.c, token = op.token;
        const VectorRef y{newBuffer(static_cast<std::size_t>(maxBatch) * C * 4, op.name), 0, C};
        valueVec[static_cast<std::size_t>(op.output)] = y;
        addOp(op.name, {x.buf, ids, y.buf}, Act{}, [=, this](int batch) {
            launchEosPool(dtype, ptr(x.buf), reinterpret_cast<const float*>(ptr(ids)), vec(y), batch, tokens, C, token,
                          opStream);
        });
    }

    void lowerConcat(const GraphOp& op) {
        const Act a = act(op.input, op), s = act(op.input2, op);
        const Act cat = newAct(a.c + s.c, a.h, a.w, op.name);
        addOp(op.name, {a.buf, s.buf, cat.buf}, cat, [this, a, s, cat](int batch) {
            launchConcatChannels(dtype, ptr(a.buf), a.c, ptr(s.buf), s.c, ptr(cat.buf),
                                 static_cast<long long>(batch) * a.h * a.w, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = cat;
    }

    void lowerUpsample(const GraphOp& op) {
        const Act src = act(op.input, op, false);
        const Act up = newAct(src.c, src.h * 2, src.w * 2, op.name);
        addOp(op.name, {src.buf, up.buf}, up, [this, src, up](int batch) {
            launchUpsampleNearest2x(dtype, ptr(src.buf), ptr(up.buf), batch, src.h, src.w, src.c, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = up;
    }

    void build(const ModelGraph& g, const TensorMap& weights) {
        graph = g;
        weightMap = &weights;
        graph.checkTileSize(tileH, tileW);
        analyse();
        lowerInputs();
        bool vectorsDone = false;
        for (std::size_t i = 0; i < graph.ops().size(); ++i) {
            const GraphOp& op = graph.ops()[i];
            const std::size_t before = ops.size();
            // Every vector op but the pooling (which waits for its tokens) runs as one stage.
            if (graph.value(op.output).kind == ValueKind::Vector && op.kind != OpKind::EosPool) {
                if (!vectorsDone) lowerVectors();
                vectorsDone = true;
                continue;
            }
            switch (op.kind) {
            case OpKind::Conv:
                if (!deferred[i]) lowerConv(static_cast<int>(i));
                break;
            case OpKind::GroupNorm: lowerGroupNorm(static_cast<int>(i)); break;
            case OpKind::Attention:
                if (graph.value(op.input).kind == ValueKind::Tokens) lowerTokenAttention(static_cast<int>(i));
                else lowerAttention(static_cast<int>(i));
                break;
            case OpKind::ToTokens:
            case OpKind::ToFeatureMap: lowerLayoutChange(op); break;
            case OpKind::LayerNorm: lowerLayerNorm(op); break;
            case OpKind::Linear: lowerTokenLinear(op); break;
            case OpKind::GEGLU: lowerGeglu(op); break;
            case OpKind::GELU:
            case OpKind::QuickGELU: lowerGelu(op); break;
            case OpKind::Concat: lowerConcat(op); break;
            case OpKind::Upsample: lowerUpsample(op); break;
            case OpKind::TokenEmbedding: lowerTokenEmbedding(op); break;
            case OpKind::EosPool: lowerEosPool(op); break;
            default: lowerPointwise(op); break;
            }
            // The op that completes the value (not a conv whose bias went into the norm after it).
            if (ops.size() > before && !biasMoved[i]) ops.back().value = op.output;
        }
        // Buffers the host or the engine touches between calls live for the whole run.
        outputBuf = -1;
        for (int v : graph.outputs()) {
            const int buf = graph.value(v).kind == ValueKind::Vector ? valueVec[static_cast<std::size_t>(v)].buf
                                                                     : valueAct[static_cast<std::size_t>(v)].buf;
            buffers[static_cast<std::size_t>(buf)].wholeRun = true;
            if (outputBuf < 0 && graph.value(v).kind == ValueKind::FeatureMap) {
                outputBuf = buf;
                outPad = valueAct[static_cast<std::size_t>(v)].c;
            }
        }
        for (int b : stageIn)
            if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;
        for (int b : stageOut)
            if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;
        for (int v : graph.inputs()) {
            const int b = graph.value(v).kind == ValueKind::Vector ? valueVec[static_cast<std::size_t>(v)].buf
                                                                   : valueAct[static_cast<std::size_t>(v)].buf;
            if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;  // ids only: no activation
        }
        weightMap = nullptr;
    }

    // Greedy by size: each buffer at the lowest offset that does not overlap, in address and
    // in lifetime, a buffer already placed.
    void planArena() {
        const int n = static_cast<int>(buffers.size());
        const int last = static_cast<int>(ops.size());
        for (std::size_t i = 0; i < ops.size(); ++i)
            for (int b : ops[i].buffers) {
                PlanBuffer& pb = buffers[static_cast<std::size_t>(b)];
                pb.first = std::min(pb.first, static_cast<int>(i));
                pb.last = std::max(pb.last, static_cast<int>(i));
            }
        for (PlanBuffer& b : buffers)
            if (b.wholeRun || b.last < 0) {
                b.first = 0;
                b.last = last;
            }
        std::vector<int> order(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return buffers[static_cast<std::size_t>(a)].bytes > buffers[static_cast<std::size_t>(b)].bytes;
        });
        std::vector<int> placed;
        activationBytes = 0;
        unsharedBytes = 0;
        for (int id : order) {
            PlanBuffer& b = buffers[static_cast<std::size_t>(id)];
            unsharedBytes += b.bytes;
            std::vector<std::pair<std::size_t, std::size_t>> busy;
            for (int p : placed) {
                const PlanBuffer& q = buffers[static_cast<std::size_t>(p)];
                if (q.first <= b.last && b.first <= q.last) busy.emplace_back(q.offset, q.offset + q.bytes);
            }
            std::sort(busy.begin(), busy.end());
            std::size_t off = 0;
            for (const auto& [lo, hi] : busy) {
                if (off + b.bytes <= lo) break;
                off = std::max(off, hi);
            }
            b.offset = off;
            activationBytes = std::max(activationBytes, off + b.bytes);
            placed.push_back(id);
        }
    }

    // ---- choices made by timing (or from the tuning cache) -------------------------------------
    // Each choice has an op key (the shape, batch included); the tuning cache is keyed by it
    // within tuningContext (device, driver, cuDNN, runtime, precision). A cached choice that
    // cuDNN refuses now is timed again and replaced, with a warning.
    std::optional<std::string> cachedChoice(const std::string& op) const {
        if (!tuningCache) return std::nullopt;
        return tuningCache->find(tuningContext, op);
    }
    void useCached(const std::string& op, const std::string& choice) {
        ++tuningHits;
        choicesUsed[op] = choice;
    }
    void rejectCached(const std::string& op, const std::string& choice, const std::string& why) {
        ++tuningRejected;
        tuningWarnings.push_back("tuning cache: the stored choice '" + choice + "' for " + op + " is refused now (" +
                                 why + "); timed again and replaced");
    }
    // A choice made now: `timed` ones are stored in the cache (heuristic ones are the same in
    // every process and are not).
    void useNew(const std::string& op, const std::string& choice, bool timed) {
        choicesUsed[op] = choice;
        if (!timed) return;
        ++tuningMisses;
        if (tuningCache) tuningCache->store(tuningContext, op, choice);
    }

    // Why cuDNN would not run `algo` with `math` for c at the prepared batch now ("" = it would).
    std::string legacyRefusal(ConvLayer& c, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, std::size_t wsCap) {
        if (dtype == DType::F32 && math != CUDNN_FMA_MATH) return "fp32 takes FMA kernels only";
        c.math[static_cast<std::size_t>(maxBatch)] = math;
        c.descBatch = -1;
        setConvBatch(c, maxBatch);
        std::size_t bytes = 0;
        const cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                        c.convDesc.get(), c.yDesc.get(), algo, &bytes);
        if (s != CUDNN_STATUS_SUCCESS) return std::string("cuDNN: ") + cudnnGetErrorString(s);
        if (bytes > wsCap) return "needs " + std::to_string(bytes) + " bytes of workspace, more than the " +
                                  std::to_string(wsCap) + " available";
        return {};
    }

    // The legacy algorithm of one conv shape at the prepared batch: the tuning cache's when cuDNN
    // accepts it, else benchmarked (TESSERA_CUDNN_FIND=0: the heuristics' order) among the
    // deterministic algorithms (fp32: FMA kernels only).
    std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> legacyAlgorithm(ConvLayer& c, void* ws, std::size_t wsCap) {
        const std::string op = "conv " + c.key() + " n" + std::to_string(maxBatch);
        if (auto cached = settings.heuristicsOnly ? std::nullopt : cachedChoice(op)) {
            const auto parsed = parseLegacyChoice(*cached);
            const std::string why = parsed ? legacyRefusal(c, parsed->first, parsed->second, wsCap) : "not an algorithm";
            if (why.empty()) {
                useCached(op, *cached);
                return *parsed;
            }
            rejectCached(op, *cached, why);
        }
        const cudnnMathType_t wantMath = dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
        c.descBatch = -1;
        c.math[static_cast<std::size_t>(maxBatch)] = wantMath;
        setConvBatch(c, maxBatch);
        // Real buffers for the benchmark: any activation region of the right size will do.
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int returned = 0;
        const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.h * c.w * c.cin * dtypeSize(dtype);
        const std::size_t yBytes = static_cast<std::size_t>(maxBatch) * c.ho * c.wo * c.cout * dtypeSize(dtype);
        if (xBytes + yBytes > activationBytes) throw std::logic_error("conv benchmark buffers exceed the arena");
        if (settings.heuristicsOnly) {
            TESSERA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                 c.convDesc.get(), c.yDesc.get(),
                                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
            for (int i = 0; i < returned; ++i)
                if (perf[i].memory > wsCap) perf[i].status = CUDNN_STATUS_NOT_SUPPORTED;
        } else {
            TESSERA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                cudnn.get(), c.xDesc.get(), actBase, c.wDesc.get(), wt(c.weight), c.convDesc.get(), c.yDesc.get(),
                actBase + alignUp(xBytes), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws, wsCap));
        }
        for (int i = 0; i < returned; ++i) {
            const cudnnConvolutionFwdAlgoPerf_t& p = perf[i];
            if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
            if (dtype == DType::F32 && p.mathType != CUDNN_FMA_MATH) continue;
            useNew(op, legacyChoice(p.algo, p.mathType), !settings.heuristicsOnly);
            return {p.algo, p.mathType};
        }
        throw std::runtime_error("cuDNN offers no deterministic forward algorithm for " + c.name + " (" + c.key() +
                                 ", " + dtypeName(dtype) + ")");
    }

    // Sets c's algorithm for every batch up to the prepared one (the chosen one where cuDNN takes
    // it at that batch, else the heuristics' first deterministic choice) and returns the largest
    // workspace they need.
    std::size_t applyAlgorithm(ConvLayer& c, std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> chosen,
                               std::size_t wsCap) {
        const cudnnMathType_t wantMath = dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
        std::size_t need = 0;
        for (int b = 1; b <= maxBatch; ++b) {
            c.algo[static_cast<std::size_t>(b)] = chosen.first;
            c.math[static_cast<std::size_t>(b)] = chosen.second;
            c.descBatch = -1;
            setConvBatch(c, b);
            std::size_t bytes = 0;
            cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                      c.convDesc.get(), c.yDesc.get(), chosen.first,
                                                                      &bytes);
            if (s != CUDNN_STATUS_SUCCESS) {
                // Not usable at this batch: take the heuristics' first deterministic choice.
                c.math[static_cast<std::size_t>(b)] = wantMath;
                c.descBatch = -1;
                setConvBatch(c, b);
                cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
                int returned = 0;
                TESSERA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                     c.convDesc.get(), c.yDesc.get(),
                                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
                bool ok = false;
                for (int i = 0; i < returned && !ok; ++i) {
                    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
                        perf[i].memory > wsCap)
                        continue;
                    if (dtype == DType::F32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
                    c.algo[static_cast<std::size_t>(b)] = perf[i].algo;
                    c.math[static_cast<std::size_t>(b)] = perf[i].mathType;
                    c.descBatch = -1;
                    setConvBatch(c, b);
                    s = cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                c.convDesc.get(), c.yDesc.get(), perf[i].algo, &bytes);
                    ok = s == CUDNN_STATUS_SUCCESS;
                }
                if (!ok) TESSERA_CHECK(s);
            }
            need = std::max(need, bytes);
        }
        c.descBatch = -1;
        return need;
    }

    // Picks each convolution's algorithm (once per distinct shape at the prepared batch:
    // legacyAlgorithm) and checks it for every smaller batch, returning the workspace all of
    // them need.
    std::size_t chooseAlgorithms(void* ws, std::size_t wsCap) {
        std::map<std::string, std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> chosen;
        std::size_t need = 0;
        for (ConvLayer& c : convs) {
            auto it = chosen.find(c.key());
            if (it == chosen.end()) it = chosen.emplace(c.key(), legacyAlgorithm(c, ws, wsCap)).first;
            need = std::max(need, applyAlgorithm(c, it->second, wsCap));
        }
        return alignUp(need);
    }

    // A graph-API plan as the tuning cache names it ("engine=N", or `none` for no plan): the
    // plan, or nullopt (with the choice rejected) when cuDNN no longer offers that engine.
    std::optional<std::shared_ptr<GraphConv>> cachedPlan(const std::string& op, const char* none,
                                                         const GraphConvShape& shape, std::size_t wsCap) {
        const auto cached = cachedChoice(op);
        if (!cached) return std::nullopt;
        const auto id = parsePlanChoice(*cached, none);
        if (!id) {
            rejectCached(op, *cached, "not a plan choice");
            return std::nullopt;
        }
        try {
            std::shared_ptr<GraphConv> plan;
            if (id->engine >= 0) plan = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap, 8, *id);
            useCached(op, *cached);
            return plan;
        } catch (const std::exception& e) {
            (void)cudaGetLastError();
            rejectCached(op, *cached, e.what());
            return std::nullopt;
        }
    }

    // The median time of the legacy algorithm of c at the prepared batch on the arena's buffers.
    double timeLegacy(ConvLayer& c, void* ws, std::size_t wsCap) {
        const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.h * c.w * c.cin * dtypeSize(dtype);
        void* x = actBase;
        void* y = actBase + alignUp(xBytes);
        c.descBatch = -1;
        setConvBatch(c, maxBatch);
        return medianGpuMs(stream.get(), 5, 1, [&] {
            const float one = c.alpha, zero = 0.0f;
            TESSERA_CHECK(cudnnConvolutionForward(cudnn.get(), &one, c.xDesc.get(), x, c.wDesc.get(), wt(c.weight),
                                                  c.convDesc.get(), c.algo[static_cast<std::size_t>(maxBatch)], ws,
                                                  wsCap, &zero, c.yDesc.get(), y));
        });
    }

    // For one (shape, scale) at the prepared batch: the graph API's fastest deterministic plan
    // when it beats the legacy algorithm chosen above, else null (legacy); (plan, legacy ms,
    // graph ms), the times -1 when the choice came from the tuning cache.
    using PlanChoice = std::tuple<std::shared_ptr<GraphConv>, double, double>;
    PlanChoice graphPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws, std::size_t wsCap) {
        const std::string op = "graph conv " + shape.key();
        if (auto plan = cachedPlan(op, "legacy", shape, wsCap)) return {*plan, -1.0, -1.0};
        const double legacy = timeLegacy(c, ws, wsCap);
        const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.h * c.w * c.cin * dtypeSize(dtype);
        void* x = actBase;
        void* y = actBase + alignUp(xBytes);
        std::shared_ptr<GraphConv> graph;
        double graphMs = -1;
        try {
            graph = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap);
            graphMs = graph->benchmark(stream.get(), x, wt(c.weight), y, nullptr, nullptr, ws);
        } catch (const std::exception& e) {
            graph.reset();
            (void)cudaGetLastError();
            graphNotes += "  " + c.name + ": legacy only (" + e.what() + ")\n";
        }
        if (graph && !(graphMs < legacy)) graph.reset();
        useNew(op, planChoice(graph, "legacy"), true);
        return {graph, legacy, graphMs};
    }

    // For a conv with a bias (+ residual) epilogue: a plan with the epilogue fused when it beats
    // the best unfused conv plus the epilogue kernel (timed on the same buffers), else null;
    // (plan, epilogue ms, fused ms), the times -1 when the choice came from the tuning cache.
    PlanChoice fusedPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws, std::size_t wsCap) {
        const std::string op = "fused conv " + shape.key();
        if (auto plan = cachedPlan(op, "apart", shape, wsCap)) return {*plan, -1.0, -1.0};
        const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.h * c.w * c.cin * dtypeSize(dtype);
        const std::size_t yBytes = static_cast<std::size_t>(maxBatch) * c.ho * c.wo * c.cout * dtypeSize(dtype);
        void* x = actBase;
        void* y = actBase + alignUp(xBytes);
        void* r = c.epilogueResidual && alignUp(xBytes) + 2 * alignUp(yBytes) <= activationBytes
                      ? actBase + alignUp(xBytes) + alignUp(yBytes)
                      : nullptr;
        const double epilogueMs = medianGpuMs(stream.get(), 5, 1, [&] {
            launchBiasResidual(dtype, y, true, wf(c.epilogueBias), r, static_cast<long long>(maxBatch) * c.ho * c.wo,
                               c.cout, 1.0f, stream.get());
        });
        std::shared_ptr<GraphConv> fused;
        double fusedMs = -1;
        if (!c.epilogueResidual || r) {
            try {
                const auto t0 = std::chrono::steady_clock::now();
                fused = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap);
                fusedMs = fused->benchmark(stream.get(), x, wt(c.weight), y, wf(c.epilogueBias), r, ws);
                fusedBuildMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            } catch (const std::exception& e) {
                fused.reset();
                (void)cudaGetLastError();
                graphNotes += "  " + c.name + ": no fused epilogue (" + e.what() + ")\n";
            }
        }
        // The unfused side: this layer's graph plan when it has one, else the legacy algorithm
        // (timed here when its graph choice came from the cache).
        const double convMs = c.graph ? (c.graphMs >= 0 ? c.graphMs : c.graph->benchmark(stream.get(), x, wt(c.weight), y,
                                                                                         nullptr, nullptr, ws))
                                      : (c.legacyMs >= 0 ? c.legacyMs : timeLegacy(c, ws, wsCap));
        if (fused && !(fusedMs < convMs + epilogueMs)) fused.reset();
        useNew(op, planChoice(fused, "apart"), true);
        return {fused, epilogueMs, fusedMs};
    }

    // fp16/bf16: for each distinct (shape, scale) at the prepared batch, the graph API's plan or
    // the legacy algorithm (graphPlanFor), and for convs with an epilogue, fused or apart
    // (fusedPlanFor). TESSERA_CUDNN_API=legacy keeps the legacy path everywhere, and
    // TESSERA_CUDNN_FUSE=0 the epilogues apart (diagnostics). Returns the workspace the chosen
    // graph plans need.
    std::size_t chooseGraphConvs(void* ws, std::size_t wsCap) {
        if (dtype == DType::F32 || settings.legacyOnly) return 0;
        std::map<std::string, PlanChoice> chosen;
        std::size_t need = 0;
        for (ConvLayer& c : convs) {
            GraphConvShape shape;
            shape.dtype = dtype;
            shape.n = maxBatch;
            shape.cin = c.cin;
            shape.h = c.h;
            shape.w = c.w;
            shape.cout = c.cout;
            shape.k = c.k;
            shape.stride = c.stride;
            shape.pad = c.pad;
            shape.ho = c.ho;
            shape.wo = c.wo;
            shape.alpha = c.alpha;
            auto it = chosen.find(shape.key());
            if (it == chosen.end()) it = chosen.emplace(shape.key(), graphPlanFor(c, shape, ws, wsCap)).first;
            std::tie(c.graph, c.legacyMs, c.graphMs) = it->second;
            c.descBatch = -1;
            if (c.graph) need = std::max(need, c.graph->workspaceBytes());
            if (!c.hasEpilogue || !settings.fuse) continue;
            shape.bias = true;
            shape.residual = c.epilogueResidual;
            // cuDNN's fused conv+bias+add engines compile at prepare time (NVRTC): about
            // 0.5 s per distinct shape, 4-10 s per prepare, for 2-4% faster forwards (H100,
            // docs/PERFORMANCE.md). Opt-in for long renders and benchmarks.
            shape.allowRuntimeCompiled = settings.runtimeFusion;
            auto fit = fusedChosen.find(shape.key());
            if (fit == fusedChosen.end()) fit = fusedChosen.emplace(shape.key(), fusedPlanFor(c, shape, ws, wsCap)).first;
            std::tie(c.fused, c.epilogueMs, c.fusedMs) = fit->second;
            if (c.fused) need = std::max(need, c.fused->workspaceBytes());
        }
        return alignUp(need);
    }
    std::map<std::string, PlanChoice> fusedChosen;
    double fusedBuildMs = 0;
    std::string graphNotes;
    std::string attentionNotes;   // one line per attention op: its path (attentionPath)
    std::vector<CudaBackend::AttentionPath> attentionRecords;
    std::map<std::string, CudaBackend::AttentionPath> attentionChosen;   // per op key, this prepare

    std::string oomMessage(std::size_t needed, std::size_t freeBytes, std::size_t fixedBytes, int* largest,
                           int laneCount = 1) const {
        const double perSample = static_cast<double>(activationBytes) * laneCount / std::max(1, maxBatch);
        const double room = static_cast<double>(freeBytes) - static_cast<double>(fixedBytes);
        int fit = room > perSample ? static_cast<int>(room / perSample) : 0;
        fit = std::min(fit, maxBatch - 1);
        *largest = std::max(0, fit);
        std::ostringstream s;
        s.setf(std::ios::fixed);
        s.precision(0);
        s << "not enough GPU memory for tile batch " << maxBatch << " of " << tileW << "x" << tileH << " ("
          << dtypeName(dtype) << "): needs " << mib(needed) << " MiB, " << mib(freeBytes) << " MiB free on "
          << props.name << "; ";
        if (*largest > 0)
            s << "the largest tile batch that fits is about " << *largest;
        else
            s << "not even one tile fits: use a smaller tile or fp16";
        if (laneCount > 1) s << " (with " << laneCount << " lanes, each a copy of the activations: or use fewer lanes)";
        return s.str();
    }

    void prepare(const ModelGraph& g, const TensorMap& tensors, int batch, int h, int w, int laneCount) {
        if (batch < 1) throw std::invalid_argument("tile batch must be at least 1, got " + std::to_string(batch));
        if (h < 1 || w < 1) throw std::invalid_argument("tile size must be positive");
        if (laneCount < 1 || laneCount > kMaxLanes)
            throw std::invalid_argument("lanes must be 1.." + std::to_string(kMaxLanes) + ", got " +
                                        std::to_string(laneCount));
        TESSERA_CHECK(cudaSetDevice(device));
        prepared = false;
        lanes = 1;
        laneAct.assign(1, nullptr);
        laneCublas.clear();
        opStream = stream.get();
        opCublas = cublas.get();
        TESSERA_CHECK(cudnnSetStream(cudnn.get(), stream.get()));
        TESSERA_CHECK(cublasSetStream(cublas.get(), stream.get()));
        graphs.clear();
        graphsFailed = false;
        graphStats = GraphStats{};
        graphStats.mode = graphsWanted ? "tile" : "off";
        arena.reset();
        buffers.clear();
        ops.clear();
        convs.clear();
        graphNotes.clear();
        attentionNotes.clear();
        attentionRecords.clear();
        attentionChosen.clear();
        fusedChosen.clear();
        fusedBuildMs = 0;
        choicesUsed.clear();
        tuningHits = tuningMisses = tuningRejected = 0;
        tuningWarnings.clear();
        blob = WeightBlob();
        maxBatch = batch;
        tileH = h;
        tileW = w;
        const NvtxRange nvtxPrepare("CudaBackend prepare " + std::to_string(batch) + "x" + std::to_string(w) + "x" +
                              std::to_string(h));
        {
            const NvtxRange nvtxLower("lower + plan arena");
            build(g, tensors);
            planArena();
        }

        std::size_t freeBytes = 0, totalBytes = 0;
        TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
        const std::size_t weights = blob.size();
        const std::size_t base = weights + activationBytes + kCublasWorkspace;
        int largest = 0;
        if (base > freeBytes) throw CudaOutOfMemory(oomMessage(base, freeBytes, weights + kCublasWorkspace, &largest),
                                                    mib(base), mib(freeBytes), largest);
        // Benchmark arena: weights + activations + a generous workspace, given back afterwards.
        const std::size_t findCap = std::min<std::size_t>(std::size_t(1) << 30, (freeBytes - base) / 2);
        std::size_t wsNeed = 0;
        {
            const NvtxRange nvtxChoose("weights + algorithm choice (tuning cache or timing)");
            DeviceBuffer temp(weights + activationBytes + findCap);
            weightsBase = temp.as<char>();
            actBase = weightsBase + weights;
            // On the backend's stream, then waited for: a plain cudaMemcpy from pageable memory
            // may return before its DMA lands, and a non-blocking stream would not wait for it.
            TESSERA_CHECK(cudaMemcpyAsync(weightsBase, blob.data(), weights, cudaMemcpyHostToDevice, stream.get()));
            TESSERA_CHECK(cudaStreamSynchronize(stream.get()));
            launchFillUniform(dtype, actBase, static_cast<long long>(activationBytes / dtypeSize(dtype)), 1234u, 1.0f,
                              stream.get());
            wsNeed = chooseAlgorithms(findCap ? actBase + activationBytes : nullptr, findCap);
            wsNeed = std::max(wsNeed, chooseGraphConvs(findCap ? actBase + activationBytes : nullptr, findCap));
            TESSERA_CHECK(cudaStreamSynchronize(stream.get()));
        }
        convWorkspace = alignUp(wsNeed);
        // One copy of the activations and workspaces per lane, after the shared weights.
        const std::size_t laneBytes = alignUp(activationBytes + convWorkspace + kCublasWorkspace);
        const std::size_t total = weights + static_cast<std::size_t>(laneCount) * laneBytes;
        const std::size_t fixed = weights + static_cast<std::size_t>(laneCount) * (convWorkspace + kCublasWorkspace);
        TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
        if (total > freeBytes)
            throw CudaOutOfMemory(oomMessage(total, freeBytes, fixed, &largest, laneCount), mib(total), mib(freeBytes),
                                  largest);
        const NvtxRange nvtxPlace("arena + weights upload");
        try {
            arena = DeviceBuffer(total);
        } catch (const CudaError& e) {
            if (!e.outOfMemory()) throw;
            (void)cudaGetLastError();
            throw CudaOutOfMemory(oomMessage(total, freeBytes, fixed, &largest, laneCount), mib(total), mib(freeBytes),
                                  largest);
        }
        weightsBase = arena.as<char>();
        lanes = laneCount;
        laneAct.assign(static_cast<std::size_t>(lanes), nullptr);
        for (int l = 0; l < lanes; ++l) laneAct[static_cast<std::size_t>(l)] = weightsBase + weights + l * laneBytes;
        for (int l = 1; l < lanes; ++l) {
            laneCublas.push_back(makeCublas());
            TESSERA_CHECK(cublasSetMathMode(laneCublas.back().get(),
                                            precision == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
        }
        TESSERA_CHECK(cudaMemcpyAsync(weightsBase, blob.data(), weights, cudaMemcpyHostToDevice, stream.get()));
        for (int l = 0; l < lanes; ++l)
            TESSERA_CHECK(cudaMemsetAsync(laneAct[static_cast<std::size_t>(l)], 0, activationBytes, stream.get()));
        selectOwnLane();
        TESSERA_CHECK(cudaStreamSynchronize(stream.get()));

        plan.weightsBytes = weights;
        plan.activationsBytes = activationBytes;
        plan.unsharedActivationsBytes = unsharedBytes;
        plan.workspaceBytes = convWorkspace + kCublasWorkspace;
        plan.totalBytes = total;
        plan.lanes = lanes;
        plan.tensors = static_cast<int>(buffers.size());

        std::ostringstream s;
        s.setf(std::ios::fixed);
        s.precision(1);
        s << "CudaBackend " << dtypeName(dtype) << " on " << props.name << ": batch " << maxBatch << " of " << tileW
          << "x" << tileH << ", " << ops.size() << " layers, " << convs.size() << " convolutions, " << buffers.size()
          << " tensors; arena " << mib(total) << " MiB = weights " << mib(weights) << " + " << lanes
          << (lanes == 1 ? " lane" : " lanes") << " x (activations " << mib(activationBytes) << " (unshared "
          << mib(unsharedBytes) << ") + workspace " << mib(convWorkspace + kCublasWorkspace) << ")\n";
        for (const ConvLayer& c : convs) {
            s << "  " << c.name << " " << c.key() << ": " << algoName(c.algo[static_cast<std::size_t>(maxBatch)])
              << (c.math[static_cast<std::size_t>(maxBatch)] == CUDNN_FMA_MATH ? " (fma)" : "");
            // Times where this prepare measured them (-1: not measured, or the tuning cache chose).
            const auto ms = [](double v) { return v >= 0 ? std::to_string(v).substr(0, 6) + " ms" : std::string("-"); };
            if (c.legacyMs != 0 || c.graph) {
                s << " " << ms(c.legacyMs) << "; " << (c.graph ? c.graph->engineName() : std::string("graph API"))
                  << " " << ms(c.graphMs) << (c.graph ? " [graph]" : " [legacy]")
                  << (c.legacyMs < 0 && c.graphMs < 0 ? " (tuning cache)" : "");
                if (c.hasEpilogue && (c.fused || c.epilogueMs != 0))
                    s << "; epilogue " << ms(c.epilogueMs) << ", fused " << ms(c.fusedMs)
                      << (c.fused ? " [fused: " + c.fused->engineName() + "]" : std::string(" [apart]"))
                      << (c.epilogueMs < 0 && c.fusedMs < 0 ? " (tuning cache)" : "");
            }
            s << "\n";
        }
        s << graphNotes << attentionNotes;
        s << "  fused-plan build + benchmark time " << fusedBuildMs << " ms\n";
        s << "  tuning: " << tuningHits << " choices from the cache, " << tuningMisses << " timed, " << tuningRejected
          << " refused; digest " << (choicesUsed.empty() ? std::string("none") : tuningDigest(choicesUsed)) << "\n";
        for (const std::string& warning : tuningWarnings) s << "  " << warning << "\n";
        summary = s.str();
        prepared = true;
    }

    void runOps(int batch) {
        for (Op& op : ops) {
            op.run(batch);
            if (syncEveryOp) TESSERA_CHECK(cudaStreamSynchronize(opStream));
        }
    }

    // Captures runOps(batch) into a graph; on failure records why and returns nullptr.
    cudaGraphExec_t capture(int batch) {
        const auto t0 = std::chrono::steady_clock::now();
        cudaGraph_t raw = nullptr;
        TESSERA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
        try {
            runOps(batch);
        } catch (const std::exception& e) {
            (void)cudaStreamEndCapture(stream.get(), &raw);
            if (raw) (void)cudaGraphDestroy(raw);
            (void)cudaGetLastError();
            graphsFailed = true;
            graphStats.mode = "off";
            graphStats.fallbackReason = std::string("capture failed: ") + e.what();
            return nullptr;
        }
        const cudaError_t end = cudaStreamEndCapture(stream.get(), &raw);
        if (end != cudaSuccess || !raw) {
            (void)cudaGetLastError();
            graphsFailed = true;
            graphStats.mode = "off";
            graphStats.fallbackReason = std::string("capture failed: ") + cudaGetErrorString(end);
            return nullptr;
        }
        CudaGraph graph(raw);
        const auto t1 = std::chrono::steady_clock::now();
        cudaGraphExec_t exec = nullptr;
        TESSERA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
        const auto t2 = std::chrono::steady_clock::now();
        std::size_t nodes = 0;
        TESSERA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &nodes));
        graphStats.captures += 1;
        graphStats.instantiations += 1;
        graphStats.nodes = static_cast<int>(nodes);
        graphStats.captureMs += std::chrono::duration<double, std::milli>(t1 - t0).count();
        graphStats.instantiateMs += std::chrono::duration<double, std::milli>(t2 - t1).count();
        graphs[batch] = CudaGraphExec(exec);
        return exec;
    }

    void enqueue(int batch, int lane, cudaStream_t s) {
        if (!prepared) throw std::logic_error("CudaBackend: enqueue before prepare");
        if (batch < 1 || batch > maxBatch)
            throw std::invalid_argument("CudaBackend: batch " + std::to_string(batch) + " outside 1.." +
                                        std::to_string(maxBatch) + " (the prepared tile batch)");
        if (!s) s = stream.get();
        selectLane(lane, s);
        // Inside a capture of the caller's own (a step graph) the forward's kernels become
        // nodes of that graph directly.
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        TESSERA_CHECK(cudaStreamIsCapturing(s, &capturing));
        if (capturing != cudaStreamCaptureStatusNone || lane != 0 || s != stream.get()) {
            runOps(batch);
            return;
        }
        if (graphsWanted && !graphsFailed && !syncEveryOp) {
            auto it = graphs.find(batch);
            cudaGraphExec_t exec = nullptr;
            if (it != graphs.end()) {
                exec = it->second.get();
                graphStats.hits += 1;
            } else {
                graphStats.misses += 1;
                exec = capture(batch);
            }
            if (exec) {
                TESSERA_CHECK(cudaGraphLaunch(exec, stream.get()));
                return;
            }
        }
        runOps(batch);
    }

    // Host float32 inputs into the staging buffers and on into the NHWC input activations.
    void upload(const std::vector<const float*>& inputs, int batch, cudaStream_t s) {
        if (inputs.size() != graph.inputs().size())
            throw std::invalid_argument("CudaBackend: " + std::to_string(inputs.size()) + " inputs for a graph of " +
                                        std::to_string(graph.inputs().size()));
        for (std::size_t k = 0; k < inputs.size(); ++k) {
            const int v = graph.inputs()[k];
            const GraphValue& g = graph.value(v);
            if (g.kind == ValueKind::Vector) {
                TESSERA_CHECK(cudaMemcpyAsync(vec(valueVec[static_cast<std::size_t>(v)]), inputs[k],
                                              static_cast<std::size_t>(batch) * g.channels * 4, cudaMemcpyHostToDevice, s));
                continue;
            }
            const Act& a = valueAct[static_cast<std::size_t>(v)];
            TESSERA_CHECK(cudaMemcpyAsync(ptr(stageIn[k]), inputs[k],
                                          static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)) * 4,
                                          cudaMemcpyHostToDevice, s));
            if (a.buf < 0) continue;  // ids only: read from the staging buffer
            // Tokens: host [B, rows, C] is the device layout; as one-channel NCHW the conversion
            // is a plain type conversion.
            const bool tokens = g.kind == ValueKind::Tokens;
            launchNchwToNhwc(reinterpret_cast<const float*>(ptr(stageIn[k])), dtype, ptr(a.buf), batch,
                             tokens ? 1 : g.channels, tokens ? a.h * a.w * a.c : a.h, tokens ? 1 : a.w, tokens ? 1 : a.c,
                             1.0f, s);
        }
    }

    void download(const std::vector<float*>& outputs, int batch, cudaStream_t s) {
        if (outputs.size() != graph.outputs().size())
            throw std::invalid_argument("CudaBackend: " + std::to_string(outputs.size()) + " outputs for a graph of " +
                                        std::to_string(graph.outputs().size()));
        for (std::size_t k = 0; k < outputs.size(); ++k) {
            const int v = graph.outputs()[k];
            const GraphValue& g = graph.value(v);
            if (g.kind == ValueKind::Vector) {
                TESSERA_CHECK(cudaMemcpyAsync(outputs[k], vec(valueVec[static_cast<std::size_t>(v)]),
                                              static_cast<std::size_t>(batch) * g.channels * 4, cudaMemcpyDeviceToHost, s));
                continue;
            }
            const Act& a = valueAct[static_cast<std::size_t>(v)];
            const bool tokens = g.kind == ValueKind::Tokens;  // as in upload()
            launchNhwcToNchw(dtype, ptr(a.buf), reinterpret_cast<float*>(ptr(stageOut[k])), batch, tokens ? 1 : g.channels,
                             tokens ? a.h * a.w * a.c : a.h, tokens ? 1 : a.w, tokens ? 1 : a.c, s);
            TESSERA_CHECK(cudaMemcpyAsync(outputs[k], ptr(stageOut[k]),
                                          static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)) * 4,
                                          cudaMemcpyDeviceToHost, s));
        }
    }

    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
        if (!prepared) throw std::logic_error("CudaBackend: run before prepare");
        selectOwnLane();
        if (batch < 1 || batch > maxBatch)
            throw std::invalid_argument("CudaBackend: batch " + std::to_string(batch) + " outside 1.." +
                                        std::to_string(maxBatch) + " (the prepared tile batch)");
        TESSERA_CHECK(cudaSetDevice(device));
        checkIds(inputs, batch);
        cudaStream_t s = stream.get();
        upload(inputs, batch, s);
        enqueue(batch, 0, s);
        download(outputs, batch, s);
        TESSERA_CHECK(cudaStreamSynchronize(s));
    }

    std::vector<CudaBackend::OpTime> profileOps(int batch, int repeats, bool inGraph) {
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
        if (inGraph) {
            cudaGraph_t raw = nullptr;
            TESSERA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            enqueueMarked();
            TESSERA_CHECK(cudaStreamEndCapture(s, &raw));
            CudaGraph graph(raw);
            cudaGraphExec_t e = nullptr;
            TESSERA_CHECK(cudaGraphInstantiate(&e, graph.get(), 0));
            exec = CudaGraphExec(e);
        }
        std::vector<std::vector<float>> samples(ops.size());
        for (int r = 0; r < repeats + 1; ++r) {   // the first pass is a warm-up
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

    CudaBackend::ForwardTimes timeForwards(int batch, int warmup, int repeats) {
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

    std::vector<CudaBackend::LayerTrace> traceForward(const float* x, const float* timesteps, int batch) {
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
                for (std::size_t i = 0; i < raw.size(); ++i) {
                    std::uint32_t bits = dtype == DType::BF16 ? static_cast<std::uint32_t>(raw[i]) << 16 : halfBits(raw[i]);
                    std::memcpy(&t.values[i], &bits, 4);
                }
            } else {
                TESSERA_CHECK(cudaStreamSynchronize(s));
            }
            trace.push_back(std::move(t));
        }
        return trace;
    }
};

CudaBackend::CudaBackend(Precision precision, int device) : impl_(std::make_unique<Impl>(precision, device)) {}
CudaBackend::~CudaBackend() = default;

BackendInfo CudaBackend::info() const {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    BackendInfo i;
    i.name = "cuda";
    i.device = std::string(impl_->props.name) + " (sm_" + std::to_string(impl_->props.major) +
               std::to_string(impl_->props.minor) + ", " + dtypeName(impl_->dtype) + ", CUDA runtime " +
               std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", driver " +
               std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", cuDNN " +
               std::to_string(cudnnGetVersion()) + ")";
    return i;
}

void CudaBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) {
    impl_->prepare(graph, weights, batch, tileH, tileW, 1);
}
void CudaBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW,
                               int lanes) {
    impl_->prepare(graph, weights, batch, tileH, tileW, lanes);
}
void CudaBackend::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    impl_->run(inputs, batch, outputs);
}
void CudaBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    prepare(model, batch, tileH, tileW, 1);
}
void CudaBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW, int lanes) {
    impl_->prepare(unet2DExecutionGraph(model.config()), model.tensors(), batch, tileH, tileW, lanes);
}
const ModelGraph& CudaBackend::graph() const { return impl_->graph; }
int CudaBackend::lanes() const { return impl_->prepared ? impl_->lanes : 0; }
void CudaBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    impl_->run({x, timesteps}, batch, {out});
}
Precision CudaBackend::precision() const { return impl_->precision; }
int CudaBackend::preparedBatch() const { return impl_->prepared ? impl_->maxBatch : 0; }
CudaMemoryPlan CudaBackend::memoryPlan() const { return impl_->plan; }
std::string CudaBackend::planSummary() const { return impl_->summary; }
std::vector<CudaBackend::AttentionPath> CudaBackend::attentionPaths() const { return impl_->attentionRecords; }
CUstream_st* CudaBackend::stream() const { return impl_->stream.get(); }
void* CudaBackend::deviceInput(int lane) const { return impl_->lanePtr(lane, impl_->inputBuf); }
const void* CudaBackend::deviceOutput(int lane) const { return impl_->lanePtr(lane, impl_->outputBuf); }
void* CudaBackend::deviceTokens(int lane) const {
    return impl_->tokenBuf < 0 ? nullptr : impl_->lanePtr(lane, impl_->tokenBuf);
}
float* CudaBackend::deviceVector(const std::string& name, int lane) const {
    for (int v : impl_->graph.inputs()) {
        const GraphValue& g = impl_->graph.value(v);
        const int buf = g.kind == ValueKind::Vector ? impl_->valueVec[static_cast<std::size_t>(v)].buf : -1;
        if (g.name == name && buf >= 0) return reinterpret_cast<float*>(impl_->lanePtr(lane, buf));
    }
    return nullptr;
}
float* CudaBackend::deviceTimesteps(int lane) const {
    return reinterpret_cast<float*>(impl_->lanePtr(lane, impl_->timestepBuf));
}
void* CudaBackend::deviceGraphInput(std::size_t k) const { return impl_->graphValuePtr(impl_->graph.inputs().at(k)); }
const void* CudaBackend::deviceGraphOutput(std::size_t k) const {
    return impl_->graphValuePtr(impl_->graph.outputs().at(k));
}
std::unique_ptr<TiledCanvasStore> CudaBackend::makeCanvasStore(std::uint64_t canvasBytes) {
    return makeCudaCanvasStore(*this, *this, canvasBytes);
}
int CudaBackend::inputChannelsPadded() const { return impl_->inPad; }
int CudaBackend::outputChannelsPadded() const { return impl_->outPad; }
void CudaBackend::enqueue(int batch) { impl_->enqueue(batch, 0, nullptr); }
void CudaBackend::enqueue(int batch, int lane, CUstream_st* stream) { impl_->enqueue(batch, lane, stream); }
void CudaBackend::setGraphs(bool enabled) {
    impl_->graphsWanted = enabled;
    if (!impl_->graphsFailed) impl_->graphStats.mode = enabled ? "tile" : "off";
}
GraphStats CudaBackend::graphStats() const { return impl_->graphStats; }
void CudaBackend::setTuningCache(TuningCache* cache) { impl_->tuningCache = cache; }
TuningInfo CudaBackend::tuningInfo() const {
    TuningInfo t;
    t.hits = impl_->tuningHits;
    t.misses = impl_->tuningMisses;
    t.rejected = impl_->tuningRejected;
    t.digest = tuningDigest(impl_->choicesUsed);
    t.settings = impl_->settings.values;
    return t;
}
std::vector<std::string> CudaBackend::tuningWarnings() const { return impl_->tuningWarnings; }
std::vector<CudaBackend::OpTime> CudaBackend::profileOps(int batch, int repeats, bool inGraph) {
    return impl_->profileOps(batch, repeats, inGraph);
}
CudaBackend::ForwardTimes CudaBackend::timeForwards(int batch, int warmup, int repeats) {
    return impl_->timeForwards(batch, warmup, repeats);
}
std::vector<CudaBackend::LayerTrace> CudaBackend::traceForward(const float* x, const float* timesteps, int batch) {
    return impl_->traceForward(x, timesteps, batch);
}

}  // namespace tessera
