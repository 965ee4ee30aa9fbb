// CudaBackend::Impl, the CUDA backend's state and the functions that work on it, one source
// file per responsibility (docs/CUDA_BACKEND.md):
//   CudaPrepare.cpp          the device, prepare() from graph to a ready arena, planSummary
//   CudaLowering.cpp         the graph lowered to ops (one lower* per op kind) and buffers
//   CudaAttention.cpp        attention's lowering and its two paths (fused kernel, blocked plan)
//   CudaAlgorithmChoice.cpp  timed choices and the tuning cache (conv algorithms, plans, paths)
//   CudaExecution.cpp        lanes, launches, run/enqueue/upload/download, the forward's graphs
//   CudaProfiling.cpp        profileOps, timeForwards, traceForward
// with the parts that need no backend state in their own files: CudaSettings.h (environment),
// CudaWeights.h (conversion, repacking, the weight blob), CudaMemoryPlan.h (buffer placement),
// CudaAlgorithmChoice.h (choice texts, TuningLedger). Private to kernels/.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/formats/ModelWeights.h"
#include "core/graph/ModelGraph.h"
#include "kernels/backend/AttentionPlan.h"
#include "kernels/backend/CudaAlgorithmChoice.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/backend/CudaMemoryPlan.h"
#include "kernels/backend/CudaSettings.h"
#include "kernels/backend/CudaWeights.h"
#include "kernels/backend/CudnnGraphConv.h"
#include "kernels/backend/CudnnSdpa.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/ops/FlashAttention.cuh"

namespace tessera {

inline DType dtypeFor(Precision p) {
    return p == Precision::FP32 ? DType::F32 : (p == Precision::FP16 ? DType::F16 : DType::BF16);
}
inline cudnnDataType_t cudnnType(DType t) {
    return t == DType::F32 ? CUDNN_DATA_FLOAT : (t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}
inline cudaDataType_t cublasType(DType t) {
    return t == DType::F32 ? CUDA_R_32F : (t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF);
}

// cuDNN has no plan for a convolution over a channel slice of a dense group's buffer: prepare
// lowers the graph again with the concatenations copied (CudaLowering.cpp findDenseGroups).
class DenseViewsRefused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct CudaBackend::Impl {
    // An NHWC activation: buffer id in the plan and its shape per sample.
    struct Act {
        int buf = -1;
        int c = 0, h = 0, w = 0;
        // A channel slice of a wider buffer (a dense block's, findDenseGroups): rows `pitch`
        // elements apart (0: packed, c), starting `offset` channels in. Only convolutions and the
        // slice kernels (kernels/ops/ChannelSlice.cuh) read or write one.
        int pitch = 0, offset = 0;
        int stride() const { return pitch > 0 ? pitch : c; }
        bool isView() const { return offset != 0 || stride() != c; }
    };

    // A densely connected block's concatenations kept in one buffer (findDenseGroups).
    struct DenseGroup {
        int channels = 0;  // the last concatenation's, the buffer's pitch
        int buf = -1;      // allocated when the first op that touches it is lowered
        std::string name;
    };
    struct DenseSlot {
        int group = -1;
        int offset = 0;       // channels before this value's in the buffer
        bool direct = false;  // written there by its convolution (else copied there by the Concat)
    };

    struct ConvLayer {
        std::string name;
        int cin = 0, cout = 0, k = 3, stride = 1, pad = 1;
        int h = 0, w = 0, ho = 0, wo = 0;  // input and output size
        int xPitch = 0, yPitch = 0;        // elements between pixels of a slice (0: packed)
        std::size_t weight = 0;            // offset in the weight blob: [cout][k][k][cin]
        TensorDescriptor xDesc, yDesc;
        FilterDescriptor wDesc;
        ConvDescriptor convDesc;
        float alpha = 1.0f;  // the scale every call of this layer uses
        // At the prepared batch: cuDNN graph-API plan when it benchmarked faster than the legacy
        // algorithm (shared between layers of one shape), else null.
        std::shared_ptr<GraphConv> graph;
        double legacyMs = 0, graphMs = 0;
        // Layers followed by a bias(+residual) epilogue: the epilogue's inputs, and at the
        // prepared batch a graph plan with the epilogue fused when that benchmarked faster.
        bool hasEpilogue = false;
        std::size_t epilogueBias = 0;  // weight-blob offset of the float32 bias
        bool epilogueResidual = false;
        std::shared_ptr<GraphConv> fused;
        double epilogueMs = 0, fusedMs = 0;
        std::vector<cudnnConvolutionFwdAlgo_t> algo;  // per batch size (index = batch)
        std::vector<cudnnMathType_t> math;
        int descBatch = -1;
        std::string key() const {
            std::ostringstream s;
            s << cin << ',' << cout << ',' << k << ',' << stride << ',' << pad << ',' << h << ',' << w;
            if (xPitch || yPitch) s << ",p" << xPitch << ',' << yPitch;
            return s.str();
        }
        // Elements one sample's input and output span (a slice's rows at their pitch).
        bool strided() const { return xPitch != 0 || yPitch != 0; }  // graph-API plans only (no legacy algorithm)
        std::size_t xElements() const { return std::size_t(h) * w * (xPitch ? xPitch : cin); }
        std::size_t yElements() const { return std::size_t(ho) * wo * (yPitch ? yPitch : cout); }
    };

    struct Op {
        std::string name;
        std::vector<int> buffers;
        std::function<void(int batch)> run;
        Act out;
        int value = -1;  // the graph value `out` holds once this op has run, else -1
    };

    // ==== the device (CudaPrepare.cpp) =========================================================
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

    // ==== the plan ==============================================================================
    ModelGraph graph;                      // the graph being run
    const TensorMap* weightMap = nullptr;  // during prepare only
    int maxBatch = 0, tileH = 0, tileW = 0;
    int imagesPerTile = 1, pixelScale = 1;  // setTileTerms: how an out-of-memory message counts
    std::size_t reservedBytes = 0;          // setReservedBytes: kept free for the caller
    // What cudaMemGetInfo reports free, less reservedBytes.
    std::size_t freeForPlan() const;
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
    bool denseViews = settings.denseViews;  // off after cuDNN refused a slice (denseRefusal)
    bool syncEveryOp = settings.syncEveryOp;

    // Tuning: the cache the timed choices are looked up in and stored to (not owned; none by
    // default), this device's context key, and what the last prepare used.
    TuningLedger tuning;

    // CUDA graphs of the whole forward, one per batch size, captured on first use.
    bool graphsWanted = false;
    bool graphsFailed = false;
    std::map<int, CudaGraphExec> graphs;
    GraphStats graphStats;
    std::string summary;

    // ==== prepare (CudaPrepare.cpp) =============================================================
    // Checks the device (bf16 needs compute capability 8.0), makes the stream and handles.
    Impl(Precision p, int dev);
    void prepare(const ModelGraph& g, const TensorMap& tensors, int batch, int h, int w, int laneCount);
    // CudaBackend::planGraph: prepare's lowering and placement, nothing allocated on the device.
    CudaMemoryPlan planOnly(const ModelGraph& g, const TensorMap& tensors, int batch, int h, int w);
    // prepare's steps: forget the last plan; weights uploaded to a temporary arena with room
    // for benchmarks and every choice made on it (returns the workspace they need); the arena
    // itself; planSummary's text.
    void clearPlan();
    std::size_t chooseOnScratchArena(std::size_t freeBytes, std::size_t base);
    std::size_t placeArena(int laneCount);
    std::string describePlan(std::size_t total) const;
    // The buffers' offsets in the activation region (CudaMemoryPlan.h).
    void planArena();
    // The error for a plan of `needed` bytes with `freeBytes` free, `fixedBytes` of it not per
    // tile: message, sizes and the largest tile batch that fits, built together.
    CudaOutOfMemory outOfMemory(std::size_t needed, std::size_t freeBytes, std::size_t fixedBytes,
                                int laneCount = 1) const;

    // ==== lowering of the graph (CudaLowering.cpp) ==============================================
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
    std::vector<Act> valueAct;                // per graph value (feature maps)
    std::vector<VectorRef> valueVec;          // per graph value (vectors)
    std::vector<std::vector<int>> readersOf;  // per value: op indices that read it
    std::vector<char> isGraphOutput;          // per value
    std::vector<int> projectionOf;            // per op: Projection index of a merged Linear, else -1
    std::vector<Projection> projections;
    std::vector<int> biasIntoNorm;   // per op: for a GroupNorm, the conv whose bias it adds; else -1
    std::vector<char> biasMoved;     // per op: conv runs without bias (into a norm)
    std::vector<int> shortcutOf;     // per op: the shortcut conv lowered with this conv, else -1
    std::vector<char> deferred;      // per op: lowered by its consumer
    std::vector<int> addIntoConv;    // per op: for a Conv, the Add of its output to a skip it computes too, else -1
    std::vector<int> affineIntoAdd;  // per op: for an Add, the Affine of an operand it applies itself, else -1
    std::vector<char> skipped;       // per op: done by another op's lowering (the two above, the next)
    std::vector<int>
        sliceInPlace;           // per op: for a GELU or QkNormRope, the token ChannelSlice it reads in place, else -1
    std::vector<int> tailInto;  // per op: for a Conv, the Concat whose tail its epilogue writes, else -1
    std::map<int, Act> concatEarly;  // Concat op -> its output, made by the conv that writes its tail
    std::vector<DenseSlot> denseOf;  // per value: its place in a dense group's buffer
    std::vector<DenseGroup> denseGroups;
    std::vector<int> denseConcat;        // per op: the group a Concat belongs to, else -1
    std::vector<int> stageIn, stageOut;  // per graph input / output: float32 NCHW staging, -1 for vectors

    void build(const ModelGraph& g, const TensorMap& weights);
    // The lowering choices above, decided before anything is emitted.
    void analyse();
    void findDenseGroups();
    std::string denseRefusal;  // why cuDNN could not run a dense group's slices: groups off since
    void findSkipAdds();
    void findConcatTails();
    bool sameShapeAdd(const GraphOp& op) const;
    bool denseReaderConv(const GraphOp& op, int value) const;
    int denseBuffer(int group);
    // Staging for the host-facing float32 NCHW inputs/outputs, the vector inputs, and the
    // NHWC input activations (channels padded to a multiple of 8 for cuDNN).
    void lowerInputs();

    int newBuffer(std::size_t bytes, std::string name);
    Act newAct(int c, int h, int w, const std::string& name);
    // `out` is the tensor the op produces (for traceForward); buf -1 for none.
    void addOp(std::string name, std::vector<int> bufs, Act out, std::function<void(int)> run);
    const HostTensor& weight(int param) const;
    std::size_t floats(int param) { return blob.addFloats(weight(param).data); }
    // Conv weight [O, I, k, k] -> [Opad][k][k][Ipad] in the activation type.
    std::size_t convWeight(int param, int ipad, int opad);
    int addConv(const std::string& name, int cin, int cout, int k, int stride, int pad, int h, int w,
                std::size_t weight);
    const GraphOp& opAt(int i) const { return graph.ops()[static_cast<std::size_t>(i)]; }
    int producerOf(int value) const;
    bool onlyReader(int value, int op) const;
    static bool plainConv(const GraphOp& op);
    const Act& act(int value, const GraphOp& op, bool unpadded = true, bool view = false) const;

    // Every op on vectors, in graph order, as one float32 op.
    void lowerVectors();
    // The merged projections of one input: weights concatenated in graph order; the biases of
    // the convs whose GroupNorm reads a slice added to that slice.
    std::function<void(int)> lowerProjection(Projection& p, std::vector<int>& bufs);
    void lowerPointwise(const GraphOp& op);
    // conv (+ bias, + residual) * outputScale. The epilogue lists the conv's input among its
    // buffers only when there is no residual.
    void lowerConv(int index);
    void lowerGroupNorm(int index);

    // ---- token sequences ([B, rows, C]: NHWC with the rows as pixels; tile tokens keep the
    // feature map's h x w, fixed ones are rows x 1) ----
    Act tokenAct(int value, int channels, const std::string& name);
    // ToTokens and ToFeatureMap change no bytes (both NHWC): the output is the input's buffer,
    // unless ToFeatureMap adds a residual.
    void lowerLayoutChange(const GraphOp& op);
    void lowerLayerNorm(const GraphOp& op);
    // Per token: one GEMM over every row of the batch, then bias (+ residual).
    void lowerTokenLinear(const GraphOp& op);
    // The projection GEMM (+ bias) into [rows, 2 * inner], then value * gelu(gate).
    void lowerGeglu(const GraphOp& op);
    void lowerGelu(int index);
    void lowerConcat(const GraphOp& op);
    void lowerUpsample(const GraphOp& op);
    void lowerPixelShuffle(const GraphOp& op);  // PixelShuffle and PixelUnshuffle
    // A conv's fused LeakyReLU (GraphOp::leakyRelu) in place on its output y, after its epilogue.
    void lowerConvActivation(const GraphOp& op, const Act& y);

    // ---- CLIP's first and last ops: ids are graph inputs, read as float32 from their staging
    // buffer (exact up to 2^24; fp16 holds integers exactly only up to 2048) ----
    bool readAsIdsOnly(int value) const;
    int idsBuffer(int value, const GraphOp& op) const;
    void lowerTokenEmbedding(const GraphOp& op);
    void lowerEosPool(const GraphOp& op);
    void lowerColorFix(const GraphOp& op);  // CudaColorFix.cpp
    // FLUX's transformer ops (CudaTransformer.cpp).
    void lowerTokenSlice(const GraphOp& op);  // ChannelSlice over tokens
    void lowerAdaLayerNorm(const GraphOp& op);
    void lowerGatedAdd(const GraphOp& op);
    void lowerQkNormRope(int index);
    void lowerPackedAttention(int index);
    void lowerTokenJoin(const GraphOp& op);  // TokenConcat and TokenSplit

    // ==== attention (CudaAttention.cpp) =========================================================
    // Where one attention's Q, K, V and head outputs live (activation type): rows of `*Row`
    // elements, images `*Image` elements apart, head h's channels from column h * headDim; its
    // shape and causal flag. The fused kernel's arguments (FlashAttention.cuh) without the
    // per-call dtype, batch and scale (flashArgs sets them).
    using AttentionOperands = FlashAttentionArgs;
    // How one attention computes softmax(Q K^T * scale) V: the fused kernel, or the blocked
    // plan with its score and probability buffers.
    struct AttentionChoice {
        bool fused = false;
        FlashTiling tiling;  // fused: query rows and warps per CTA
        AttentionPlan plan;
        int scores = -1, probs = -1;
        std::shared_ptr<CudnnSdpa> sdpa;  // cuDNN's fused attention at the prepared batch (else null)
    };
    // Lays an attention's operands over buffers: its inputs (Q, K, V) from `in`, the heads'
    // output at `out`.
    using AttentionBinder = std::function<AttentionOperands(char* in, char* out)>;

    // Q, K, V in one GEMM, softmax(Q K^T / sqrt(d)) V (attentionPath: fused, or float32 scores in
    // the blocks of an AttentionPlan, softmax, P V), the output projection, then the bias +
    // residual epilogue with the output scale.
    void lowerAttention(int index);
    // Attention over tokens: Q = x Wq^T, [K | V] = context [Wk; Wv]^T in one GEMM (biases when
    // qkvBias), softmax(Q K^T / sqrt(d) [+ causal mask]) V (attentionPath: fused, or float32
    // scores in the passes of an AttentionPlan, softmax, P V), then the output projection with
    // the bias + residual epilogue and the output scale.
    void lowerTokenAttention(int index);
    // The path of one attention (`a`: its shape, strides and causal flag; pointers unset) by
    // TESSERA_CUDA_FLASH: fp32, and shapes the fused kernel does not take, take the blocked
    // plan; 0 / 1 force a path; auto takes the tuning cache's choice, else times both on
    // scratch operands laid out by `bind` (inputs of `inBytes`, output of `outBytes`) and keeps
    // the faster (stored in the cache). `offsets` are the operands' offsets within their
    // buffers (elements). Noted for planSummary and attentionPaths().
    AttentionChoice attentionPath(const GraphOp& op, const AttentionOperands& a,
                                  std::initializer_list<long long> offsets, std::size_t inBytes, std::size_t outBytes,
                                  const AttentionBinder& bind, float scale);
    void runAttention(const AttentionChoice& path, const AttentionOperands& a, int batch, float scale);
    // O = softmax(Q K^T * scale [+ causal mask]) V for `batch` images in the passes of `plan`:
    // per pass one strided GEMM of float32 scores (over the images when there is one head,
    // else over the pass's heads), the mask, the row softmax into `probs`, one GEMM P V.
    void attend(const AttentionOperands& a, const AttentionPlan& plan, int batch, float scale, float* scores,
                void* probs);
    static FlashAttentionArgs flashArgs(DType t, const AttentionOperands& a, int batch, float scale);
    std::string attentionNotes;  // one line per attention op: its path (attentionPath)
    std::vector<CudaBackend::AttentionPath> attentionRecords;
    std::map<std::string, CudaBackend::AttentionPath> attentionChosen;  // per op key, this prepare
    std::map<std::string, std::shared_ptr<CudnnSdpa>> sdpaChosen;       // per op key (null: not cuDNN)
    std::size_t sdpaWorkspace = 0;  // the largest workspace a chosen cuDNN attention plan needs

    // ==== choices made by timing or from the tuning cache (CudaAlgorithmChoice.cpp) =============
    // Each choice has an op key (the shape, batch included); the tuning cache is keyed by it
    // within the ledger's context (device, driver, cuDNN, runtime, precision). A cached choice
    // that cuDNN refuses now is timed again and replaced, with a warning.

    // Picks each convolution's algorithm (once per distinct shape at the prepared batch:
    // legacyAlgorithm) and checks it for every smaller batch, returning the workspace all of
    // them need.
    std::size_t chooseAlgorithms(void* ws, std::size_t wsCap);
    // The legacy algorithm of one conv shape at the prepared batch: the tuning cache's when cuDNN
    // accepts it, else benchmarked (TESSERA_CUDNN_FIND=0: the heuristics' order) among the
    // deterministic algorithms (fp32: FMA kernels only).
    std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> legacyAlgorithm(ConvLayer& c, void* ws, std::size_t wsCap);
    // Why cuDNN would not run `algo` with `math` for c at the prepared batch now ("" = it would).
    std::string legacyRefusal(ConvLayer& c, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, std::size_t wsCap);
    // Sets c's algorithm for every batch up to the prepared one (the chosen one where cuDNN takes
    // it at that batch, else the heuristics' first deterministic choice) and returns the largest
    // workspace they need.
    std::size_t applyAlgorithm(ConvLayer& c, std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> chosen,
                               std::size_t wsCap);

    // fp16/bf16: for each distinct (shape, scale) at the prepared batch, the graph API's plan or
    // the legacy algorithm (graphPlanFor), and for convs with an epilogue, fused or apart
    // (fusedPlanFor). TESSERA_CUDNN_API=legacy keeps the legacy path everywhere, and
    // TESSERA_CUDNN_FUSE=0 the epilogues apart (diagnostics). Returns the workspace the chosen
    // graph plans need.
    std::size_t chooseGraphConvs(void* ws, std::size_t wsCap);
    // (plan or null, and two times in ms: -1 when the choice came from the tuning cache).
    using PlanChoice = std::tuple<std::shared_ptr<GraphConv>, double, double>;
    // For one (shape, scale) at the prepared batch: the graph API's fastest deterministic plan
    // when it beats the legacy algorithm chosen above, else null (legacy); (plan, legacy ms,
    // graph ms), the times -1 when the choice came from the tuning cache.
    PlanChoice graphPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws, std::size_t wsCap);
    // For a conv with a bias (+ residual) epilogue: a plan with the epilogue fused when it beats
    // the best unfused conv plus the epilogue kernel (timed on the same buffers), else null;
    // (plan, epilogue ms, fused ms), the times -1 when the choice came from the tuning cache.
    PlanChoice fusedPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws, std::size_t wsCap);
    // A graph-API plan as the tuning cache names it ("engine=N", or `none` for no plan): the
    // plan, or nullopt (with the choice rejected) when cuDNN no longer offers that engine.
    std::optional<std::shared_ptr<GraphConv>> cachedPlan(const std::string& op, const char* none,
                                                         const GraphConvShape& shape, std::size_t wsCap);
    // The median time of the legacy algorithm of c at the prepared batch on the arena's buffers.
    double timeLegacy(ConvLayer& c, void* ws, std::size_t wsCap);
    std::map<std::string, PlanChoice> fusedChosen;
    double fusedBuildMs = 0;
    std::string graphNotes;

    // The path for an attention the fused kernel takes (op key `key`): forced by TESSERA_CUDA_FLASH
    // = 0 / 1, else (auto) the tuning cache's choice, else both timed and the faster kept.
    CudaBackend::AttentionPath choosePath(const std::string& key, int headDim, const AttentionPlan& plan,
                                          std::size_t inBytes, std::size_t outBytes, const AttentionBinder& bind,
                                          float scale);
    // Both paths on scratch operands at the prepared batch (inputs uniform noise), GPU ms each
    // (median of 10): {fused, blocked}; the fused kernel at each of its tilings (flashTilings),
    // the fastest in `best`, every tiling's time in `times` ("64/4w 0.1234 ms, ...").
    // cuDNN's fused attention for the attention of op key `key` at the prepared batch, by
    // TESSERA_CUDA_SDPA: off; on wherever cuDNN offers a plan; auto the tuning cache's choice,
    // else timed on scratch operands (as choosePath) beside the path `record` already holds
    // and taken where faster. Fills record's cudnn fields; null when not taken.
    std::shared_ptr<CudnnSdpa> chooseCudnnAttention(const std::string& key, const AttentionOperands& a,
                                                    const AttentionPlan& plan, std::size_t inBytes,
                                                    std::size_t outBytes, const AttentionBinder& bind, float scale,
                                                    CudaBackend::AttentionPath& record);
    std::pair<double, double> timeAttentionPaths(const AttentionPlan& plan, std::size_t inBytes, std::size_t outBytes,
                                                 const AttentionBinder& bind, float scale, FlashTiling& best,
                                                 std::string& times);

    // ==== execution (CudaExecution.cpp) =========================================================
    // Points the ops at lane `lane`'s activations and workspaces and enqueues them on `s`.
    void selectLane(int lane, cudaStream_t s);
    void selectOwnLane() { selectLane(0, stream.get()); }
    char* ptr(int buf) const { return actBase + buffers[static_cast<std::size_t>(buf)].offset; }
    char* at(const Act& a) const { return ptr(a.buf) + static_cast<std::size_t>(a.offset) * dtypeSize(dtype); }
    char* lanePtr(int lane, int buf) const;
    const float* wf(std::size_t off) const { return reinterpret_cast<const float*>(weightsBase + off); }
    const void* wt(std::size_t off) const { return weightsBase + off; }
    float* vec(const VectorRef& r) const { return reinterpret_cast<float*>(ptr(r.buf)) + r.offset; }
    // A lane's buffer of graph input or output `v` (CudaBackend::deviceGraphInput).
    void* graphValuePtr(int v, int lane = 0) const;

    void setConvBatch(ConvLayer& c, int batch);
    void runConv(int layer, const void* x, void* y, float alpha, float beta, int batch);
    // conv + bias (+ residual) in one cuDNN plan when chosen at prepare for this batch;
    // returns false when the caller must run the conv and the epilogue apart.
    bool runConvFused(int layer, const void* x, void* y, const void* residual, int batch);
    bool fusedAt(int layer, int batch) const {
        return convs[static_cast<std::size_t>(layer)].fused && batch == maxBatch;
    }
    // y[rows, nOut] = alpha * x[rows, k] W^T + beta * y, W [nOut, k] row-major, all in `t`.
    void gemmRows(DType t, const void* w, const void* x, void* y, int rows, int k, int nOut, float alpha, float beta);
    // y[rows, nOut] = x[rows, k] w[nOut, k]^T + bias[nOut] (+ residual[rows, nOut]) as one cuBLASLt
    // matmul with the bias epilogue (bias in `t`, the residual read as C with beta 1), 16-bit
    // types only; false where cuBLASLt offers no algorithm (the caller falls back to gemmRows and
    // its own epilogue). Descriptors and the heuristic's algorithm are kept per shape.
    bool gemmRowsBias(DType t, const void* w, const void* x, void* y, int rows, int k, int nOut, const void* bias,
                      const void* residual);
    struct LtPlan;
    std::map<std::tuple<int, int, int, int, bool>, std::shared_ptr<LtPlan>> ltPlans;  // (dtype, rows, k, n, residual)
    std::mutex ltMutex;

    // Host float32 in and out through the staging buffers; synchronises.
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs);
    // Every TokenEmbedding's host ids, checked before any upload as the CPU backend checks them.
    void checkIds(const std::vector<const float*>& inputs, int batch) const;
    // Host float32 inputs into the staging buffers and on into the NHWC input activations.
    void upload(const std::vector<const float*>& inputs, int batch, cudaStream_t s);
    void download(const std::vector<float*>& outputs, int batch, cudaStream_t s);
    // The staging of graph input / output k into its activation, and an output's activation into
    // its staging (upload's and download's device halves).
    void stagedToActivation(std::size_t k, int batch, cudaStream_t s);
    void activationToStaged(std::size_t k, int batch, cudaStream_t s);
    // Lane 0's staging buffer k of `stages` (stageIn or stageOut); nullptr for a vector.
    float* stagingPtr(const std::vector<int>& stages, std::size_t k) const;
    // CudaBackend::enqueueStaged.
    void enqueueStaged(int batch);
    // The forward on lane `lane` and stream `s` (nullptr: stream()): the captured graph of this
    // batch when graphs are on (lane 0 on stream() only, outside a caller's capture), else the
    // ops one by one.
    void enqueue(int batch, int lane, cudaStream_t s);
    void runOps(int batch);
    // Captures runOps(batch) into a graph; on failure records why and returns nullptr.
    cudaGraphExec_t capture(int batch);

    // ==== diagnostics (CudaProfiling.cpp) =======================================================
    std::vector<CudaBackend::OpTime> profileOps(int batch, int repeats, bool inGraph);
    CudaBackend::ForwardTimes timeForwards(int batch, int warmup, int repeats);
    std::vector<CudaBackend::LayerTrace> traceForward(const float* x, const float* timesteps, int batch);
};

}  // namespace tessera
