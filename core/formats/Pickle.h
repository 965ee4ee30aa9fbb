// Pickle: a reader of the Python pickle streams PyTorch checkpoints hold (torch/serialization.py
// _save / _legacy_save, protocol 2 by default), which turns the opcodes into plain data and never
// executes anything. Opcode semantics follow CPython Lib/pickle.py (_Unpickler) and
// Lib/pickletools.py; what is accepted follows torch/_weights_only_unpickler.py (Unpickler._load):
//
// - GLOBAL / STACK_GLOBAL resolve only against a short list of names a state dict needs
//   (PickleGlobal below). Any other name stops the read with a message naming 'module.name' and
//   the byte offset; no path creates a callable.
// - REDUCE, NEWOBJ and BUILD are interpreted per name: OrderedDict() is an empty dict, the torch
//   rebuild functions make a PickleTensor record (storage, offset, shape, strides), torch.Size a
//   tuple, numpy scalars a number. Any other combination is refused, naming it. Nothing is called.
// - BINPERSID takes only torch's storage references: ('storage', <torch *Storage type>, key,
//   location, numel) in the zip format, the same with a sixth element None in the legacy format.
// - INST, OBJ, NEWOBJ_EX, EXT1/2/4, PERSID, the protocol-5 buffer opcodes and the text opcodes other
//   than INT are refused, as is SETITEM(S) on anything but a dict and APPEND(S) on anything but a
//   list (CVE-2026-24747 in torch < 2.10 corrupted memory through SETITEM on a non-dict).
// - Memo references share the value (BINGET pushes the same container, as CPython does), so
//   references to one subtree cost nothing per use: reference amplification ("billion laughs")
//   cannot grow memory. Memo is a hash map: an index is never used to size anything.
//
// Every bound is checked before the allocation it protects (PickleLimits). Parsing a pickle
// allocates at most the pickle itself (<= PickleLimits::kMaxBytes, read by the caller) plus
// PickleLimits::kMaxBuiltBytes for everything built from it (values on the stack and in
// containers, strings, memo entries, tensor and storage records), counted as it is built, and the
// value stack (<= kMaxStack values, 8 MiB): under 800 MiB in all, for any input. Containers are
// flat tables that refer to each other by index, so destruction never recurses, whatever the
// input. Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// A pickle that cannot be read as data, or that asks for something a state dict does not need.
// what() says what was refused and at which byte of the pickle.
class PickleError : public std::runtime_error {
public:
    PickleError(const std::string& message, std::uint64_t offset, bool truncated)
        : std::runtime_error(message), offset_(offset), truncated_(truncated) {}
    // Byte offset of the opcode that was refused, from the pickle's first byte.
    std::uint64_t offset() const { return offset_; }
    // The input ended before STOP (a reader given a window of a longer stream may retry with more).
    bool truncated() const { return truncated_; }

private:
    std::uint64_t offset_;
    bool truncated_;
};

// Bounds on what one pickle may hold, each far above what torch writes for real checkpoints.
struct PickleLimits {
    // torch writes ~70 bytes of pickle per tensor: an SD checkpoint's data.pkl is ~150 KiB, one with
    // 100,000 tensors ~10 MiB. (The bound torch-checkpoint readers elsewhere use for data.pkl.)
    static constexpr std::uint64_t kMaxBytes = std::uint64_t{256} << 20;
    // Memory for what the pickle builds, counted as built and never refunded: torch.save files count
    // ~2.5 KiB per tensor (stack values, memo entries, strings, records), so 512 MiB holds
    // ~200,000 tensors (kMaxTensors), 80x an SDXL checkpoint.
    static constexpr std::uint64_t kMaxBuiltBytes = std::uint64_t{512} << 20;
    // Values between a MARK and the opcode that closes it: torch's SETITEMS batches hold <= 1,000
    // pairs (CPython Lib/pickle.py _BATCHSIZE).
    static constexpr std::size_t kMaxStack = std::size_t{1} << 18;
    // Memo entries: torch memoizes ~10 values per tensor.
    static constexpr std::size_t kMaxMemo = std::size_t{4} << 20;
    // Open MARKs, and containers inside containers: state dicts nest 2-4 deep.
    static constexpr int kMaxNesting = 64;
    // One string or bytes value: keys and dtype names are < 200 bytes; hyperparameter text < 100 KiB.
    static constexpr std::uint64_t kMaxStringBytes = std::uint64_t{1} << 20;
    // Integers are int64; LONG1 longer than 8 bytes and LONG4 are refused.
    static constexpr int kMaxLongBytes = 8;
    // Tensors rebuilt in one pickle: twice the 100,000 a safetensors file may hold, for training
    // checkpoints that hold weights, EMA weights and optimizer moments.
    static constexpr std::size_t kMaxTensors = 200'000;
    // Tensor rank, and each dimension (a 32-bit int, as cuDNN and cuBLAS take them).
    static constexpr std::size_t kMaxRank = 8;
    static constexpr std::int64_t kMaxDimension = 2'147'483'647;
    // A view may hold more elements than its storage only through stride 0 or overlapping strides
    // (torch.expand, as_strided); materialized contiguously such a tensor may need at most this.
    static constexpr std::uint64_t kMaxExpandedBytes = std::uint64_t{256} << 20;
};

// The element types of torch storages and tensors (torch/storage.py _dtype_to_storage_type_map,
// c10/core/ScalarType.h).
enum class TorchDtype : std::uint8_t {
    Float64,
    Float32,
    Float16,
    BFloat16,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt8,
    Bool,
    Complex64,
    Complex128,
    Float8E4M3FN,
    Float8E5M2,
    UInt16,
    UInt32,
    UInt64
};
// torch's name without "torch." ("float32", "bfloat16", "int64").
std::string_view toString(TorchDtype);
int elementBytes(TorchDtype);

// The globals a pickle may name (GLOBAL 'module name'), each allowed only in the use noted.
enum class PickleGlobal : std::uint8_t {
    OrderedDict,                // collections / typing: REDUCE with () -> empty dict; BUILD ignored
    RebuildTensor,              // torch._utils._rebuild_tensor: REDUCE, 4 args -> tensor
    RebuildTensorV2,            // torch._utils._rebuild_tensor_v2: REDUCE, 6-7 args -> tensor
    RebuildTensorV3,            // torch._utils._rebuild_tensor_v3: REDUCE, 7-8 args -> tensor
    RebuildParameter,           // torch._utils._rebuild_parameter: REDUCE (tensor, rg, hooks) -> tensor
    RebuildParameterWithState,  // torch._utils._rebuild_parameter_with_state: the same + state
    RebuildFromTypeV2,          // torch._tensor._rebuild_from_type_v2: (func, type, args, state)
    TensorType,                 // torch.Tensor: only as _rebuild_from_type_v2's type
    ParameterType,              // torch.nn.parameter.Parameter: the same
    Storage,                    // torch.<X>Storage (PickleValue::integer: its TorchDtype): in BINPERSID
    UntypedStorage,             // torch.UntypedStorage / torch.storage.UntypedStorage: the same, bytes
    Dtype,                      // torch.float32, ... (integer: the TorchDtype): _rebuild_tensor_v3's
                                // dtype, or a leaf
    Size,                       // torch.Size: REDUCE ((ints),) -> tuple
    Device,                     // torch.device: REDUCE (type[, index]) -> str
    CodecsEncode,               // _codecs.encode: REDUCE (str, 'latin1') -> bytes
    Set,                        // builtins.set / __builtin__.set: REDUCE ([items]) -> set
    NumpyDtype,                 // numpy.dtype: REDUCE (code, False, True), then BUILD (state tuple)
    NumpyScalar,                // numpy.(_)core.multiarray.scalar: REDUCE (dtype, bytes) -> number
    Namespace,                  // argparse.Namespace: NEWOBJ (), then BUILD {attributes}
    LightningCheckpoint,        // pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint: same
};

enum class PickleKind : std::uint8_t {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Set,
    Dict,
    Object,      // a Namespace or ModelCheckpoint instance: attributes only
    Global,      // one of PickleGlobal, by itself (a dtype or class named as a value)
    Storage,     // a storage reference from BINPERSID
    Tensor,      // a rebuilt tensor
    NumpyDtype,  // numpy.dtype(code)
};
std::string_view toString(PickleKind);

// A value: scalars inline, everything else an index into its PickleDocument's tables. Copies
// refer to the same container, as Python references do.
struct PickleValue {
    PickleKind kind = PickleKind::None;
    // Str/Bytes: strings; Tuple..Object: containers; Storage: storages; Tensor: tensors;
    // Global: the PickleGlobal; NumpyDtype: numpyDtypes.
    std::uint32_t slot = 0;
    std::int64_t integer = 0;  // Bool (0/1), Int; Global Storage/Dtype: the TorchDtype
    double real = 0;           // Float
};

struct PickleContainer {
    PickleKind kind = PickleKind::List;
    // Dict: key, value, key, value ... in insertion order; Object: its attributes dict, if built.
    std::vector<PickleValue> items;
    bool ordered = false;                                // made by collections.OrderedDict (BUILD allowed)
    PickleGlobal objectClass = PickleGlobal::Namespace;  // Object only
    int depth = 1;                                       // containers inside, plus one
};

struct PickleStorage {
    std::string key;       // the archive record data/<key> (zip) or the legacy root key
    std::string location;  // "cpu", "cuda:0", ...: ignored
    TorchDtype dtype = TorchDtype::Float32;
    bool untyped = false;        // torch.UntypedStorage: numel counts bytes
    std::uint64_t numel = 0;     // elements of dtype, as declared
    std::uint64_t byteSize = 0;  // numel * elementBytes(dtype), checked
};

struct PickleTensor {
    std::uint32_t storage = 0;  // index into storages
    TorchDtype dtype = TorchDtype::Float32;
    std::uint64_t offset = 0;  // in elements of dtype
    std::vector<std::int64_t> shape, strides;
    std::uint64_t numel = 0;
    bool requiresGrad = false;
};

// What one pickle built. Tables only grow; values refer into them by index.
struct PickleDocument {
    PickleValue root;
    std::deque<std::string> strings;  // Str and Bytes
    std::vector<PickleContainer> containers;
    std::vector<PickleStorage> storages;  // one per distinct key
    std::vector<PickleTensor> tensors;
    struct NumpyDtypeInfo {
        std::string code;  // "f8", "i8", "b1", ...
        char byteOrder = '=';
    };
    std::vector<NumpyDtypeInfo> numpyDtypes;
    std::uint64_t builtBytes = 0;  // what parsing counted against PickleLimits::kMaxBuiltBytes

    const std::string& text(const PickleValue& v) const { return strings[v.slot]; }
    const PickleContainer& container(const PickleValue& v) const { return containers[v.slot]; }
    const PickleTensor& tensor(const PickleValue& v) const { return tensors[v.slot]; }
};

// Which persistent ids (BINPERSID) a pickle may hold.
enum class PicklePersistentIds {
    None,    // none: sys_info and key-list pickles of the legacy format
    Zip,     // ('storage', type, key, location, numel); keys are decimal digits
    Legacy,  // ('storage', type, root_key, location, numel, None)
};

// Parses one pickle from the start of `bytes` up to and including its STOP. `consumed` receives
// the number of bytes read. Throws PickleError for anything refused or malformed; with
// truncated() when `bytes` ended first.
PickleDocument parsePickle(std::string_view bytes, PicklePersistentIds ids, std::size_t* consumed = nullptr);

// The name a message uses for a global ("collections.OrderedDict").
std::string_view toString(PickleGlobal);

}  // namespace tessera
