#include "core/formats/Pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"

namespace tessera {

namespace {

struct DtypeInfo {
    TorchDtype dtype;
    std::string_view name;  // torch.<name>
    int bytes;
    std::string_view storage;  // torch.<storage>, "" for dtypes without a typed storage class
};

constexpr std::array<DtypeInfo, 17> kDtypes{{
    {TorchDtype::Float64, "float64", 8, "DoubleStorage"},
    {TorchDtype::Float32, "float32", 4, "FloatStorage"},
    {TorchDtype::Float16, "float16", 2, "HalfStorage"},
    {TorchDtype::BFloat16, "bfloat16", 2, "BFloat16Storage"},
    {TorchDtype::Int64, "int64", 8, "LongStorage"},
    {TorchDtype::Int32, "int32", 4, "IntStorage"},
    {TorchDtype::Int16, "int16", 2, "ShortStorage"},
    {TorchDtype::Int8, "int8", 1, "CharStorage"},
    {TorchDtype::UInt8, "uint8", 1, "ByteStorage"},
    {TorchDtype::Bool, "bool", 1, "BoolStorage"},
    {TorchDtype::Complex64, "complex64", 8, "ComplexFloatStorage"},
    {TorchDtype::Complex128, "complex128", 16, "ComplexDoubleStorage"},
    {TorchDtype::Float8E4M3FN, "float8_e4m3fn", 1, ""},
    {TorchDtype::Float8E5M2, "float8_e5m2", 1, ""},
    {TorchDtype::UInt16, "uint16", 2, ""},
    {TorchDtype::UInt32, "uint32", 4, ""},
    {TorchDtype::UInt64, "uint64", 8, ""},
}};

const DtypeInfo& dtypeInfo(TorchDtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)]; }

// The allow-list: every (module, name) a GLOBAL may name, after torch/_weights_only_unpickler.py
// _get_allowed_globals, narrowed to what state dicts and their training wrappers hold.
struct GlobalName {
    std::string_view module, name;
    PickleGlobal global;
};

constexpr std::array<GlobalName, 22> kGlobals{{
    {"collections", "OrderedDict", PickleGlobal::OrderedDict},
    {"typing", "OrderedDict", PickleGlobal::OrderedDict},
    {"torch._utils", "_rebuild_tensor", PickleGlobal::RebuildTensor},
    {"torch._utils", "_rebuild_tensor_v2", PickleGlobal::RebuildTensorV2},
    {"torch._utils", "_rebuild_tensor_v3", PickleGlobal::RebuildTensorV3},
    {"torch._utils", "_rebuild_parameter", PickleGlobal::RebuildParameter},
    {"torch._utils", "_rebuild_parameter_with_state", PickleGlobal::RebuildParameterWithState},
    {"torch._tensor", "_rebuild_from_type_v2", PickleGlobal::RebuildFromTypeV2},
    {"torch", "Tensor", PickleGlobal::TensorType},
    {"torch.nn.parameter", "Parameter", PickleGlobal::ParameterType},
    {"torch", "UntypedStorage", PickleGlobal::UntypedStorage},
    {"torch.storage", "UntypedStorage", PickleGlobal::UntypedStorage},
    {"torch", "Size", PickleGlobal::Size},
    {"torch", "device", PickleGlobal::Device},
    {"_codecs", "encode", PickleGlobal::CodecsEncode},
    {"builtins", "set", PickleGlobal::Set},
    {"__builtin__", "set", PickleGlobal::Set},  // protocol < 3 writes Python 2 names
    {"numpy", "dtype", PickleGlobal::NumpyDtype},
    {"numpy.core.multiarray", "scalar", PickleGlobal::NumpyScalar},
    {"numpy._core.multiarray", "scalar", PickleGlobal::NumpyScalar},
    {"argparse", "Namespace", PickleGlobal::Namespace},
    {"pytorch_lightning.callbacks.model_checkpoint", "ModelCheckpoint", PickleGlobal::LightningCheckpoint},
}};

PickleValue globalValue(PickleGlobal global, std::int64_t dtype = 0) {
    PickleValue v;
    v.kind = PickleKind::Global;
    v.slot = static_cast<std::uint32_t>(global);
    v.integer = dtype;
    return v;
}

std::optional<PickleValue> resolveGlobal(std::string_view module, std::string_view name) {
    for (const GlobalName& g : kGlobals)
        if (g.module == module && g.name == name) return globalValue(g.global);
    if (module == "torch")
        for (const DtypeInfo& d : kDtypes) {
            if (!d.storage.empty() && name == d.storage)
                return globalValue(PickleGlobal::Storage, static_cast<std::int64_t>(d.dtype));
            if (name == d.name) return globalValue(PickleGlobal::Dtype, static_cast<std::int64_t>(d.dtype));
        }
    return std::nullopt;
}

PickleGlobal globalOf(const PickleValue& v) { return static_cast<PickleGlobal>(v.slot); }

bool isGlobal(const PickleValue& v, PickleGlobal g) { return v.kind == PickleKind::Global && globalOf(v) == g; }

// "torch.FloatStorage": the name a message gives a global value.
std::string globalName(const PickleValue& v) {
    const PickleGlobal g = globalOf(v);
    const auto dtype = static_cast<TorchDtype>(v.integer);
    if (g == PickleGlobal::Storage) return "torch." + std::string(dtypeInfo(dtype).storage);
    if (g == PickleGlobal::Dtype) return "torch." + std::string(dtypeInfo(dtype).name);
    return std::string(toString(g));
}

// The opcodes, named as CPython Lib/pickletools.py names them.
namespace op {
constexpr unsigned char MARK = '(';
constexpr unsigned char STOP = '.';
constexpr unsigned char POP = '0';
constexpr unsigned char POP_MARK = '1';
constexpr unsigned char DUP = '2';
constexpr unsigned char FLOAT = 'F';
constexpr unsigned char INT = 'I';
constexpr unsigned char BININT = 'J';
constexpr unsigned char BININT1 = 'K';
constexpr unsigned char LONG = 'L';
constexpr unsigned char BININT2 = 'M';
constexpr unsigned char NONE = 'N';
constexpr unsigned char PERSID = 'P';
constexpr unsigned char BINPERSID = 'Q';
constexpr unsigned char REDUCE = 'R';
constexpr unsigned char STRING = 'S';
constexpr unsigned char BINSTRING = 'T';
constexpr unsigned char SHORT_BINSTRING = 'U';
constexpr unsigned char UNICODE = 'V';
constexpr unsigned char BINUNICODE = 'X';
constexpr unsigned char APPEND = 'a';
constexpr unsigned char BUILD = 'b';
constexpr unsigned char GLOBAL = 'c';
constexpr unsigned char DICT = 'd';
constexpr unsigned char EMPTY_DICT = '}';
constexpr unsigned char APPENDS = 'e';
constexpr unsigned char GET = 'g';
constexpr unsigned char BINGET = 'h';
constexpr unsigned char INST = 'i';
constexpr unsigned char LONG_BINGET = 'j';
constexpr unsigned char LIST = 'l';
constexpr unsigned char EMPTY_LIST = ']';
constexpr unsigned char OBJ = 'o';
constexpr unsigned char PUT = 'p';
constexpr unsigned char BINPUT = 'q';
constexpr unsigned char LONG_BINPUT = 'r';
constexpr unsigned char SETITEM = 's';
constexpr unsigned char TUPLE = 't';
constexpr unsigned char EMPTY_TUPLE = ')';
constexpr unsigned char SETITEMS = 'u';
constexpr unsigned char BINFLOAT = 'G';
constexpr unsigned char PROTO = 0x80;
constexpr unsigned char NEWOBJ = 0x81;
constexpr unsigned char EXT1 = 0x82;
constexpr unsigned char EXT2 = 0x83;
constexpr unsigned char EXT4 = 0x84;
constexpr unsigned char TUPLE1 = 0x85;
constexpr unsigned char TUPLE2 = 0x86;
constexpr unsigned char TUPLE3 = 0x87;
constexpr unsigned char NEWTRUE = 0x88;
constexpr unsigned char NEWFALSE = 0x89;
constexpr unsigned char LONG1 = 0x8a;
constexpr unsigned char LONG4 = 0x8b;
constexpr unsigned char BINBYTES = 'B';
constexpr unsigned char SHORT_BINBYTES = 'C';
constexpr unsigned char SHORT_BINUNICODE = 0x8c;
constexpr unsigned char BINUNICODE8 = 0x8d;
constexpr unsigned char BINBYTES8 = 0x8e;
constexpr unsigned char EMPTY_SET = 0x8f;
constexpr unsigned char ADDITEMS = 0x90;
constexpr unsigned char FROZENSET = 0x91;
constexpr unsigned char NEWOBJ_EX = 0x92;
constexpr unsigned char STACK_GLOBAL = 0x93;
constexpr unsigned char MEMOIZE = 0x94;
constexpr unsigned char FRAME = 0x95;
constexpr unsigned char BYTEARRAY8 = 0x96;
constexpr unsigned char NEXT_BUFFER = 0x97;
constexpr unsigned char READONLY_BUFFER = 0x98;
}  // namespace op

// CPython Lib/pickletools.py opcode names, for messages.
std::string opcodeName(unsigned char code) {
    static const std::unordered_map<unsigned char, std::string_view> kNames{
        {op::MARK, "MARK"},
        {op::STOP, "STOP"},
        {op::POP, "POP"},
        {op::POP_MARK, "POP_MARK"},
        {op::DUP, "DUP"},
        {op::FLOAT, "FLOAT"},
        {op::INT, "INT"},
        {op::BININT, "BININT"},
        {op::BININT1, "BININT1"},
        {op::LONG, "LONG"},
        {op::BININT2, "BININT2"},
        {op::NONE, "NONE"},
        {op::PERSID, "PERSID"},
        {op::BINPERSID, "BINPERSID"},
        {op::REDUCE, "REDUCE"},
        {op::STRING, "STRING"},
        {op::BINSTRING, "BINSTRING"},
        {op::SHORT_BINSTRING, "SHORT_BINSTRING"},
        {op::UNICODE, "UNICODE"},
        {op::BINUNICODE, "BINUNICODE"},
        {op::APPEND, "APPEND"},
        {op::BUILD, "BUILD"},
        {op::GLOBAL, "GLOBAL"},
        {op::DICT, "DICT"},
        {op::EMPTY_DICT, "EMPTY_DICT"},
        {op::APPENDS, "APPENDS"},
        {op::GET, "GET"},
        {op::BINGET, "BINGET"},
        {op::INST, "INST"},
        {op::LONG_BINGET, "LONG_BINGET"},
        {op::LIST, "LIST"},
        {op::EMPTY_LIST, "EMPTY_LIST"},
        {op::OBJ, "OBJ"},
        {op::PUT, "PUT"},
        {op::BINPUT, "BINPUT"},
        {op::LONG_BINPUT, "LONG_BINPUT"},
        {op::SETITEM, "SETITEM"},
        {op::TUPLE, "TUPLE"},
        {op::EMPTY_TUPLE, "EMPTY_TUPLE"},
        {op::SETITEMS, "SETITEMS"},
        {op::BINFLOAT, "BINFLOAT"},
        {op::PROTO, "PROTO"},
        {op::NEWOBJ, "NEWOBJ"},
        {op::EXT1, "EXT1"},
        {op::EXT2, "EXT2"},
        {op::EXT4, "EXT4"},
        {op::TUPLE1, "TUPLE1"},
        {op::TUPLE2, "TUPLE2"},
        {op::TUPLE3, "TUPLE3"},
        {op::NEWTRUE, "NEWTRUE"},
        {op::NEWFALSE, "NEWFALSE"},
        {op::LONG1, "LONG1"},
        {op::LONG4, "LONG4"},
        {op::BINBYTES, "BINBYTES"},
        {op::SHORT_BINBYTES, "SHORT_BINBYTES"},
        {op::SHORT_BINUNICODE, "SHORT_BINUNICODE"},
        {op::BINUNICODE8, "BINUNICODE8"},
        {op::BINBYTES8, "BINBYTES8"},
        {op::EMPTY_SET, "EMPTY_SET"},
        {op::ADDITEMS, "ADDITEMS"},
        {op::FROZENSET, "FROZENSET"},
        {op::NEWOBJ_EX, "NEWOBJ_EX"},
        {op::STACK_GLOBAL, "STACK_GLOBAL"},
        {op::MEMOIZE, "MEMOIZE"},
        {op::FRAME, "FRAME"},
        {op::BYTEARRAY8, "BYTEARRAY8"},
        {op::NEXT_BUFFER, "NEXT_BUFFER"},
        {op::READONLY_BUFFER, "READONLY_BUFFER"},
    };
    const auto it = kNames.find(code);
    if (it != kNames.end()) return std::string(it->second);
    static constexpr std::string_view kHex = "0123456789abcdef";
    return std::string("byte 0x") + kHex[code >> 4] + kHex[code & 15];
}

// Checked unsigned arithmetic: false on overflow.
bool mulOk(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool addOk(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// What a value counts against PickleLimits::kMaxBuiltBytes: a handle on the stack and, later, in a
// container (vectors grow by doubling, so twice its size), and the records each kind allocates.
constexpr std::uint64_t kValueCost = 2 * sizeof(PickleValue);
constexpr std::uint64_t kContainerCost = sizeof(PickleContainer) + 16;
constexpr std::uint64_t kStringCost = sizeof(std::string) + 16;
constexpr std::uint64_t kMemoCost = 64;     // a hash-map node and its bucket
constexpr std::uint64_t kDictKeyCost = 64;  // the duplicate-key set's node

class Parser {
public:
    Parser(std::string_view in, PicklePersistentIds ids) : in_(in), ids_(ids) {}
    PickleDocument run(std::size_t* consumed);

private:
    // --- input ---
    [[noreturn]] void fail(const std::string& why) const;
    [[noreturn]] void failTruncated(const std::string& why) const;
    std::string_view take(std::uint64_t n, std::string_view what);
    std::uint64_t littleEndian(int bytes, std::string_view what);
    std::string_view line(std::string_view what);
    // --- building ---
    void charge(std::uint64_t bytes);
    void push(const PickleValue& v);
    PickleValue pop();
    PickleValue& top();
    std::vector<PickleValue> popMark();
    PickleValue newString(PickleKind kind, std::string_view text);
    PickleValue newContainer(PickleKind kind, std::vector<PickleValue> items);
    int depthOf(const PickleValue& v) const;
    void insert(const PickleValue& target, std::vector<PickleValue> items, std::string_view opcode);
    std::string dictKey(const PickleValue& key) const;
    std::string describe(const PickleValue& v) const;
    const std::vector<PickleValue>& tupleItems(const PickleValue& v, std::string_view what) const;
    // --- opcodes, by group; each returns false for an opcode outside its group ---
    bool scalarOp(unsigned char code);
    bool stringOp(unsigned char code);
    bool containerOp(unsigned char code);
    bool memoOp(unsigned char code);
    bool objectOp(unsigned char code);
    [[noreturn]] void refuseOp(unsigned char code);
    // --- interpretation of the allowed globals ---
    PickleValue resolve(std::string_view module, std::string_view name);
    void reduce();
    PickleValue call(const PickleValue& callable, const PickleValue& args);
    PickleValue rebuildTensor(PickleGlobal fn, const std::vector<PickleValue>& a);
    PickleValue rebuildParameter(PickleGlobal fn, const std::vector<PickleValue>& a);
    PickleValue rebuildFromType(const std::vector<PickleValue>& a);
    PickleValue numpyScalar(const std::vector<PickleValue>& a);
    void build();
    void newObject();
    void persistentId();

    std::string_view in_;
    PicklePersistentIds ids_;
    std::size_t pos_ = 0;
    std::size_t op_ = 0;  // where the current opcode starts
    PickleDocument doc_;
    std::vector<PickleValue> stack_;
    std::vector<std::size_t> marks_;
    std::unordered_map<std::uint32_t, PickleValue> memo_;
    std::unordered_map<std::uint32_t, std::unordered_set<std::string>> dictKeys_;  // by container slot
    std::unordered_map<std::string, std::uint32_t> storageByKey_;
};

void Parser::fail(const std::string& why) const {
    throw PickleError(why + " (at byte " + std::to_string(op_) + " of the pickle)", op_, false);
}

void Parser::failTruncated(const std::string& why) const {
    throw PickleError(why + " (at byte " + std::to_string(op_) + " of the pickle; truncated?)", op_, true);
}

std::string_view Parser::take(std::uint64_t n, std::string_view what) {
    if (n > in_.size() - pos_)
        failTruncated(std::string(what) + " of " + std::to_string(n) + " bytes runs past the end of the pickle");
    const std::string_view out = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
}

std::uint64_t Parser::littleEndian(int bytes, std::string_view what) {
    const std::string_view raw = take(static_cast<std::uint64_t>(bytes), what);
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(raw[static_cast<std::size_t>(i)]);
    return v;
}

// A text argument ending in '\n' (GLOBAL, INST, INT, PERSID), at most 1 KiB.
std::string_view Parser::line(std::string_view what) {
    constexpr std::size_t kMaxLine = 1024;
    const std::string_view rest = in_.substr(pos_, std::min(in_.size() - pos_, kMaxLine + 1));
    const std::size_t end = rest.find('\n');
    if (end == std::string_view::npos) {
        if (rest.size() > kMaxLine) fail(std::string(what) + " longer than " + std::to_string(kMaxLine) + " bytes");
        failTruncated(std::string(what) + " runs past the end of the pickle");
    }
    pos_ += end + 1;
    return rest.substr(0, end);
}

void Parser::charge(std::uint64_t bytes) {
    doc_.builtBytes += bytes;
    if (doc_.builtBytes > PickleLimits::kMaxBuiltBytes)
        fail("the pickle builds more than " + std::to_string(PickleLimits::kMaxBuiltBytes >> 20) +
             " MiB of values, the limit for one checkpoint");
}

void Parser::push(const PickleValue& v) {
    if (stack_.size() >= PickleLimits::kMaxStack)
        fail("more than " + std::to_string(PickleLimits::kMaxStack) + " values on the pickle stack");
    charge(kValueCost);
    stack_.push_back(v);
}

PickleValue Parser::pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
        fail("an opcode takes a value from an empty stack");
    PickleValue v = stack_.back();
    stack_.pop_back();
    return v;
}

PickleValue& Parser::top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
        fail("an opcode needs a value on an empty stack");
    return stack_.back();
}

std::vector<PickleValue> Parser::popMark() {
    if (marks_.empty()) fail("an opcode closes a MARK that was never opened");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
}

PickleValue Parser::newString(PickleKind kind, std::string_view text) {
    if (kind == PickleKind::Str && !isValidUtf8(text)) fail("a string that is not valid UTF-8: " + inQuotes(text));
    charge(kStringCost + text.size());
    PickleValue v;
    v.kind = kind;
    v.slot = static_cast<std::uint32_t>(doc_.strings.size());
    doc_.strings.emplace_back(text);
    return v;
}

int Parser::depthOf(const PickleValue& v) const {
    switch (v.kind) {
        case PickleKind::Tuple:
        case PickleKind::List:
        case PickleKind::Set:
        case PickleKind::Dict:
        case PickleKind::Object:
            return doc_.containers[v.slot].depth;
        default:
            return 0;
    }
}

PickleValue Parser::newContainer(PickleKind kind, std::vector<PickleValue> items) {
    charge(kContainerCost);
    int depth = 1;
    for (const PickleValue& item : items) depth = std::max(depth, 1 + depthOf(item));
    if (depth > PickleLimits::kMaxNesting)
        fail("containers nested deeper than " + std::to_string(PickleLimits::kMaxNesting));
    PickleValue v;
    v.kind = kind;
    v.slot = static_cast<std::uint32_t>(doc_.containers.size());
    PickleContainer c;
    c.kind = kind;
    c.items = std::move(items);
    c.depth = depth;
    doc_.containers.push_back(std::move(c));
    if (kind == PickleKind::Dict) {
        std::vector<PickleValue> pairs = std::move(doc_.containers.back().items);
        doc_.containers.back().items.clear();
        if (pairs.size() % 2 != 0) fail("DICT with an odd number of values (a key without its value)");
        insert(v, std::move(pairs), "DICT");
    }
    return v;
}

// The identity of a dict key, as Python compares them (True == 1 == 1.0).
std::string Parser::dictKey(const PickleValue& key) const {
    switch (key.kind) {
        case PickleKind::Str:
            return "s" + doc_.text(key);
        case PickleKind::Bytes:
            return "b" + doc_.text(key);
        case PickleKind::Int:
        case PickleKind::Bool:
            return "i" + std::to_string(key.integer);
        case PickleKind::None:
            return "n";
        case PickleKind::Float: {
            const double r = key.real;
            if (r == std::floor(r) && std::abs(r) < 9.0e18) return "i" + std::to_string(static_cast<std::int64_t>(r));
            return "f" + std::to_string(std::bit_cast<std::uint64_t>(r));
        }
        default:
            fail("a dict key of kind " + std::string(toString(key.kind)) + "; state dicts are keyed by strings");
    }
}

void Parser::insert(const PickleValue& target, std::vector<PickleValue> items, std::string_view opcode) {
    PickleContainer& c = doc_.containers[target.slot];
    int depth = c.depth;
    for (const PickleValue& item : items) {
        if (item.kind == target.kind && item.slot == target.slot)
            fail(std::string(opcode) + " puts a " + std::string(toString(target.kind)) + " inside itself");
        depth = std::max(depth, 1 + depthOf(item));
    }
    if (depth > PickleLimits::kMaxNesting)
        fail("containers nested deeper than " + std::to_string(PickleLimits::kMaxNesting));
    if (target.kind == PickleKind::Dict) {
        std::unordered_set<std::string>& keys = dictKeys_[target.slot];
        for (std::size_t i = 0; i < items.size(); i += 2) {
            std::string key = dictKey(items[i]);
            charge(kDictKeyCost + key.size());
            if (!keys.insert(std::move(key)).second)
                fail("the key " + describe(items[i]) +
                     " appears twice in one dict (readers disagree on which value wins)");
        }
    }
    PickleContainer& same = doc_.containers[target.slot];  // dictKeys_ does not move containers
    same.depth = depth;
    same.items.insert(same.items.end(), items.begin(), items.end());
}

std::string Parser::describe(const PickleValue& v) const {
    switch (v.kind) {
        case PickleKind::None:
            return "None";
        case PickleKind::Bool:
            return v.integer != 0 ? "True" : "False";
        case PickleKind::Float:
            return "float " + std::to_string(v.real);
        case PickleKind::Str:
            return "str " + inQuotes(doc_.text(v));
        case PickleKind::Int:
            return "int " + std::to_string(v.integer);
        case PickleKind::Global:
            return "'" + globalName(v) + "'";
        default:
            return "a " + std::string(toString(v.kind));
    }
}

const std::vector<PickleValue>& Parser::tupleItems(const PickleValue& v, std::string_view what) const {
    if (v.kind != PickleKind::Tuple) fail(std::string(what) + " is " + describe(v) + ", not a tuple");
    return doc_.containers[v.slot].items;
}

bool Parser::scalarOp(unsigned char code) {
    PickleValue v;
    switch (code) {
        case op::NONE:
            break;
        case op::NEWTRUE:
        case op::NEWFALSE:
            v.kind = PickleKind::Bool;
            v.integer = code == op::NEWTRUE ? 1 : 0;
            break;
        case op::BININT:
            v.kind = PickleKind::Int;
            v.integer = static_cast<std::int32_t>(static_cast<std::uint32_t>(littleEndian(4, "BININT")));
            break;
        case op::BININT1:
            v.kind = PickleKind::Int;
            v.integer = static_cast<std::int64_t>(littleEndian(1, "BININT1"));
            break;
        case op::BININT2:
            v.kind = PickleKind::Int;
            v.integer = static_cast<std::int64_t>(littleEndian(2, "BININT2"));
            break;
        case op::LONG1: {  // LONG1: n bytes, little-endian two's complement
            const auto n = static_cast<int>(littleEndian(1, "LONG1 length"));
            if (n > PickleLimits::kMaxLongBytes)
                fail("LONG1 integer of " + std::to_string(n) + " bytes; integers beyond 64 bits are refused");
            std::uint64_t raw = n == 0 ? 0 : littleEndian(n, "LONG1");
            if (n > 0 && n < 8 && (raw >> (8 * n - 1)) != 0) raw |= ~std::uint64_t{0} << (8 * n);  // sign-extend
            v.kind = PickleKind::Int;
            v.integer = static_cast<std::int64_t>(raw);
            break;
        }
        case op::INT: {  // INT: decimal text; "00"/"01" are protocol 0's False/True
            const std::string_view text = line("INT argument");
            if (text == "00" || text == "01") {
                v.kind = PickleKind::Bool;
                v.integer = text == "01" ? 1 : 0;
                break;
            }
            v.kind = PickleKind::Int;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v.integer);
            if (ec != std::errc() || end != text.data() + text.size() || text.empty())
                fail("INT argument " + inQuotes(text) + " is not a 64-bit decimal integer");
            break;
        }
        case op::BINFLOAT: {  // BINFLOAT: big-endian IEEE double (CPython Lib/pickle.py save_float)
            const std::string_view raw = take(8, "BINFLOAT");
            std::uint64_t bits = 0;
            for (const char c : raw) bits = (bits << 8) | static_cast<unsigned char>(c);
            v.kind = PickleKind::Float;
            v.real = std::bit_cast<double>(bits);
            break;
        }
        default:
            return false;
    }
    push(v);
    return true;
}

bool Parser::stringOp(unsigned char code) {
    PickleKind kind = PickleKind::Str;
    std::uint64_t length = 0;
    std::string_view name;
    switch (code) {
        case op::BINUNICODE:
            name = "BINUNICODE";
            length = littleEndian(4, name);
            break;
        case op::SHORT_BINUNICODE:
            name = "SHORT_BINUNICODE";
            length = littleEndian(1, name);
            break;
        case op::BINUNICODE8:
            name = "BINUNICODE8";
            length = littleEndian(8, name);
            break;
        case op::SHORT_BINSTRING:
            name = "SHORT_BINSTRING";
            length = littleEndian(1, name);
            break;
        case op::BINSTRING: {
            name = "BINSTRING";
            const auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(littleEndian(4, name)));
            if (n < 0) fail("BINSTRING with the negative length " + std::to_string(n));
            length = static_cast<std::uint64_t>(n);
            break;
        }
        case op::BINBYTES:
            kind = PickleKind::Bytes;
            name = "BINBYTES";
            length = littleEndian(4, name);
            break;
        case op::SHORT_BINBYTES:
            kind = PickleKind::Bytes;
            name = "SHORT_BINBYTES";
            length = littleEndian(1, name);
            break;
        case op::BINBYTES8:
            kind = PickleKind::Bytes;
            name = "BINBYTES8";
            length = littleEndian(8, name);
            break;
        default:
            return false;
    }
    if (length > PickleLimits::kMaxStringBytes)
        fail(std::string(name) + " of " + std::to_string(length) + " bytes; strings are limited to " +
             std::to_string(PickleLimits::kMaxStringBytes) + " bytes");
    push(newString(kind, take(length, name)));
    return true;
}

bool Parser::containerOp(unsigned char code) {
    switch (code) {
        case op::MARK:
            if (marks_.size() >= static_cast<std::size_t>(PickleLimits::kMaxNesting))
                fail("MARKs nested deeper than " + std::to_string(PickleLimits::kMaxNesting));
            marks_.push_back(stack_.size());
            return true;
        case op::EMPTY_TUPLE:
            push(newContainer(PickleKind::Tuple, {}));
            return true;
        case op::TUPLE:
            push(newContainer(PickleKind::Tuple, popMark()));
            return true;
        case op::TUPLE1:
        case op::TUPLE2:
        case op::TUPLE3: {
            std::vector<PickleValue> items(static_cast<std::size_t>(code - op::TUPLE1 + 1));
            for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
            push(newContainer(PickleKind::Tuple, std::move(items)));
            return true;
        }
        case op::EMPTY_LIST:
            push(newContainer(PickleKind::List, {}));
            return true;
        case op::LIST:
            push(newContainer(PickleKind::List, popMark()));
            return true;
        case op::EMPTY_DICT:
            push(newContainer(PickleKind::Dict, {}));
            return true;
        case op::DICT:
            push(newContainer(PickleKind::Dict, popMark()));
            return true;
        case op::EMPTY_SET:
            push(newContainer(PickleKind::Set, {}));
            return true;
        case op::FROZENSET:
            push(newContainer(PickleKind::Set, popMark()));
            return true;
        default:
            break;
    }
    // Additions to the container below: the target kind is checked (torch < 2.10 did not check
    // SETITEM's, CVE-2026-24747).
    std::vector<PickleValue> items;
    std::string_view name;
    PickleKind wanted = PickleKind::List;
    switch (code) {
        case op::APPEND:
            name = "APPEND";
            items.push_back(pop());
            break;
        case op::APPENDS:
            name = "APPENDS";
            items = popMark();
            break;
        case op::SETITEM: {
            name = "SETITEM";
            wanted = PickleKind::Dict;
            const PickleValue value = pop();
            const PickleValue key = pop();
            items = {key, value};
            break;
        }
        case op::SETITEMS:
            name = "SETITEMS";
            wanted = PickleKind::Dict;
            items = popMark();
            if (items.size() % 2 != 0) fail("SETITEMS with an odd number of values (a key without its value)");
            break;
        case op::ADDITEMS:
            name = "ADDITEMS";
            wanted = PickleKind::Set;
            items = popMark();
            break;
        default:
            return false;
    }
    const PickleValue target = top();
    if (target.kind != wanted)
        fail(std::string(name) + " on " + describe(target) + "; it applies only to a " + std::string(toString(wanted)));
    insert(target, std::move(items), name);
    return true;
}

bool Parser::memoOp(unsigned char code) {
    std::uint64_t index = 0;
    switch (code) {
        case op::BINPUT:
        case op::LONG_BINPUT:
        case op::MEMOIZE: {
            if (code == op::MEMOIZE)
                index = memo_.size();
            else
                index = littleEndian(code == op::BINPUT ? 1 : 4, code == op::BINPUT ? "BINPUT" : "LONG_BINPUT");
            const PickleValue v = top();
            if (memo_.size() >= PickleLimits::kMaxMemo)
                fail("more than " + std::to_string(PickleLimits::kMaxMemo) + " memo entries");
            charge(kMemoCost);
            if (!memo_.emplace(static_cast<std::uint32_t>(index), v).second)
                fail("memo index " + std::to_string(index) + " is defined twice");
            return true;
        }
        case op::BINGET:
        case op::LONG_BINGET: {
            index = littleEndian(code == op::BINGET ? 1 : 4, code == op::BINGET ? "BINGET" : "LONG_BINGET");
            const auto it = memo_.find(static_cast<std::uint32_t>(index));
            if (it == memo_.end()) fail("memo index " + std::to_string(index) + " is read before it is defined");
            push(it->second);  // the same value, not a copy (CPython semantics)
            return true;
        }
        default:
            return false;
    }
}

PickleValue Parser::resolve(std::string_view module, std::string_view name) {
    const std::optional<PickleValue> v = resolveGlobal(module, name);
    if (!v)
        fail("refused: the pickle names the global " + inQuotes(std::string(module) + "." + std::string(name), 120) +
             ", which a state dict does not need; only data is read, nothing is imported or called");
    return *v;
}

bool Parser::objectOp(unsigned char code) {
    switch (code) {
        case op::GLOBAL: {
            const std::string module(line("GLOBAL module"));
            const std::string name(line("GLOBAL name"));
            push(resolve(module, name));
            return true;
        }
        case op::STACK_GLOBAL: {
            const PickleValue name = pop();
            const PickleValue module = pop();
            if (module.kind != PickleKind::Str || name.kind != PickleKind::Str)
                fail("STACK_GLOBAL on " + describe(module) + " and " + describe(name) + ", not two strings");
            push(resolve(doc_.text(module), doc_.text(name)));
            return true;
        }
        case op::REDUCE:
            reduce();
            return true;
        case op::BUILD:
            build();
            return true;
        case op::NEWOBJ:
            newObject();
            return true;
        case op::BINPERSID:
            persistentId();
            return true;
        case op::PROTO: {
            const std::uint64_t protocol = littleEndian(1, "PROTO");
            if (protocol > 5) fail("pickle protocol " + std::to_string(protocol) + "; Python writes 0 to 5");
            return true;
        }
        case op::FRAME: {  // FRAME: a length hint (protocol 4); the opcodes inside are read as they come
            const std::uint64_t length = littleEndian(8, "FRAME");
            if (length > in_.size() - pos_)
                failTruncated("FRAME of " + std::to_string(length) + " bytes runs past the end of the pickle");
            return true;
        }
        default:
            return false;
    }
}

void Parser::refuseOp(unsigned char code) {
    const std::string name = opcodeName(code);
    switch (code) {
        case op::INST: {  // INST module\nname\n: instantiates a class
            const std::string module(line("INST module"));
            const std::string cls(line("INST name"));
            fail("refused: INST of " + inQuotes(module + "." + cls, 120) + " would instantiate a class");
        }
        case op::OBJ: {
            std::string what = "a class";
            if (!marks_.empty() && marks_.back() < stack_.size()) {
                const PickleValue& cls = stack_[marks_.back()];
                what = cls.kind == PickleKind::Global ? "'" + globalName(cls) + "'" : describe(cls);
            }
            fail("refused: OBJ would instantiate " + what);
        }
        case op::EXT1:
        case op::EXT2:
        case op::EXT4: {
            const int bytes = code == op::EXT1 ? 1 : code == op::EXT2 ? 2 : 4;
            const std::uint64_t ext = littleEndian(bytes, name);
            fail("refused: " + name + " names extension code " + std::to_string(ext) +
                 " of the copyreg registry, which would import a class");
        }
        case op::PERSID: {
            const std::string id(line("PERSID argument"));
            fail("refused: PERSID " + inQuotes(id) +
                 ", a text persistent id; torch writes storage references as BINPERSID tuples");
        }
        case op::NEWOBJ_EX:
            fail("refused: NEWOBJ_EX would instantiate a class with keyword arguments");
        case op::LONG4:
            fail("refused: LONG4; integers beyond 64 bits are not part of a state dict");
        default:
            break;
    }
    if (code == op::BYTEARRAY8 || code == op::NEXT_BUFFER || code == op::READONLY_BUFFER)
        fail("refused: " + name + " (protocol 5 out-of-band buffers) is not part of a torch checkpoint");
    if (name.rfind("byte 0x", 0) == 0) fail(name + " is not a pickle opcode");
    fail("refused: opcode " + name + " is not one torch writes");
}

void Parser::reduce() {
    const PickleValue args = pop();
    const PickleValue callable = pop();
    push(call(callable, args));
}

PickleValue Parser::call(const PickleValue& callable, const PickleValue& args) {
    if (callable.kind != PickleKind::Global)
        fail("refused: REDUCE of " + describe(callable) + "; only the rebuild functions of a state dict are read");
    const PickleGlobal g = globalOf(callable);
    const std::string name = globalName(callable);
    // Checked before the copy: a memoized tuple reused as arguments must not cost its length per use.
    const std::vector<PickleValue>& items = tupleItems(args, "REDUCE's argument");
    constexpr std::size_t kMaxArguments = 8;
    if (items.size() > kMaxArguments)
        fail("REDUCE of '" + name + "' with " + std::to_string(items.size()) + " arguments");
    const std::vector<PickleValue> a = items;
    const auto arity = [&](std::size_t lo, std::size_t hi) {
        if (a.size() < lo || a.size() > hi)
            fail("REDUCE of '" + name + "' with " + std::to_string(a.size()) + " arguments; it takes " +
                 std::to_string(lo) + (hi == lo ? "" : " to " + std::to_string(hi)));
    };
    switch (g) {
        case PickleGlobal::OrderedDict: {
            arity(0, 0);
            PickleValue d = newContainer(PickleKind::Dict, {});
            doc_.containers[d.slot].ordered = true;
            return d;
        }
        case PickleGlobal::RebuildTensor:
        case PickleGlobal::RebuildTensorV2:
        case PickleGlobal::RebuildTensorV3:
            return rebuildTensor(g, a);
        case PickleGlobal::RebuildParameter:
        case PickleGlobal::RebuildParameterWithState:
            return rebuildParameter(g, a);
        case PickleGlobal::RebuildFromTypeV2:
            arity(4, 4);
            return rebuildFromType(a);
        case PickleGlobal::Size: {
            arity(1, 1);
            const std::vector<PickleValue>& dims = tupleItems(a[0], "torch.Size's argument");
            if (dims.size() > 64) fail("torch.Size of " + std::to_string(dims.size()) + " dimensions");
            for (const PickleValue& d : dims)
                if (d.kind != PickleKind::Int) fail("torch.Size of " + describe(d) + ", not of ints");
            return a[0];
        }
        case PickleGlobal::Device: {
            arity(1, 2);
            if (a[0].kind != PickleKind::Str || doc_.text(a[0]).size() > 64)
                fail("torch.device of " + describe(a[0]) + ", not a device type");
            std::string device = doc_.text(a[0]);
            if (a.size() == 2 && a[1].kind == PickleKind::Int) device += ":" + std::to_string(a[1].integer);
            return newString(PickleKind::Str, device);
        }
        case PickleGlobal::CodecsEncode: {  // CPython Lib/pickle.py save_bytes for protocol < 3
            arity(2, 2);
            if (a[0].kind != PickleKind::Str || a[1].kind != PickleKind::Str ||
                (doc_.text(a[1]) != "latin1" && doc_.text(a[1]) != "latin-1"))
                fail("_codecs.encode with arguments other than (str, 'latin1')");
            std::string bytes;
            const std::u32string points = [&] {
                std::u32string out;
                const std::string& s = doc_.text(a[0]);
                for (std::size_t i = 0; i < s.size();) {
                    const auto c = static_cast<unsigned char>(s[i]);
                    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                    char32_t p = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
                    for (int k = 1; k < n; ++k) p = (p << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
                    out.push_back(p);
                    i += static_cast<std::size_t>(n);
                }
                return out;
            }();
            for (const char32_t p : points) {
                if (p > 0xFF) fail("_codecs.encode of a character beyond latin-1");
                bytes.push_back(static_cast<char>(p));
            }
            return newString(PickleKind::Bytes, bytes);
        }
        case PickleGlobal::Set: {
            arity(0, 1);
            if (a.empty()) return newContainer(PickleKind::Set, {});
            if (a[0].kind != PickleKind::List && a[0].kind != PickleKind::Tuple)
                fail("set() of " + describe(a[0]) + ", not a list");
            charge(doc_.containers[a[0].slot].items.size() * kValueCost);  // a copy, however often reused
            return newContainer(PickleKind::Set, doc_.containers[a[0].slot].items);
        }
        case PickleGlobal::NumpyDtype: {
            arity(3, 3);
            static constexpr std::array<std::string_view, 12> kCodes{"b1", "i1", "i2", "i4", "i8", "u1",
                                                                     "u2", "u4", "u8", "f2", "f4", "f8"};
            if (a[0].kind != PickleKind::Str ||
                std::find(kCodes.begin(), kCodes.end(), doc_.text(a[0])) == kCodes.end())
                fail("numpy.dtype of " + describe(a[0]) + "; only boolean, integer and float scalars are read");
            charge(sizeof(PickleDocument::NumpyDtypeInfo) + 16);
            PickleValue v;
            v.kind = PickleKind::NumpyDtype;
            v.slot = static_cast<std::uint32_t>(doc_.numpyDtypes.size());
            doc_.numpyDtypes.push_back({doc_.text(a[0]), '='});
            return v;
        }
        case PickleGlobal::NumpyScalar:
            arity(2, 2);
            return numpyScalar(a);
        default:
            fail("refused: REDUCE of '" + name + "'; it is not a function a state dict calls");
    }
}

// torch._utils._rebuild_tensor(storage, offset, size, stride),
// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata]),
// _rebuild_tensor_v3(..., backward_hooks, dtype[, metadata]) (torch/_tensor.py _reduce_ex_internal).
// Offsets and strides count elements of the tensor's dtype.
PickleValue Parser::rebuildTensor(PickleGlobal fn, const std::vector<PickleValue>& a) {
    const std::string name = std::string(toString(fn));
    const std::size_t lo = fn == PickleGlobal::RebuildTensor ? 4 : fn == PickleGlobal::RebuildTensorV2 ? 6 : 7;
    const std::size_t hi = fn == PickleGlobal::RebuildTensor ? 4 : lo + 1;
    if (a.size() < lo || a.size() > hi)
        fail("REDUCE of '" + name + "' with " + std::to_string(a.size()) + " arguments; it takes " +
             std::to_string(lo) + (hi == lo ? "" : " or " + std::to_string(hi)));
    if (a[0].kind != PickleKind::Storage) fail(name + "'s storage is " + describe(a[0]) + ", not a storage reference");
    const PickleStorage& storage = doc_.storages[a[0].slot];
    if (a[1].kind != PickleKind::Int || a[1].integer < 0)
        fail(name + "'s storage offset is " + describe(a[1]) + ", not an int >= 0");
    PickleTensor t;
    t.storage = a[0].slot;
    t.dtype = storage.dtype;
    t.offset = static_cast<std::uint64_t>(a[1].integer);
    const std::vector<PickleValue>& size = tupleItems(a[2], name + "'s size");
    const std::vector<PickleValue>& stride = tupleItems(a[3], name + "'s stride");
    if (size.size() > PickleLimits::kMaxRank)
        fail("a tensor of rank " + std::to_string(size.size()) + "; the limit is " +
             std::to_string(PickleLimits::kMaxRank));
    if (stride.size() != size.size())
        fail("a tensor with " + std::to_string(size.size()) + " sizes and " + std::to_string(stride.size()) +
             " strides");
    for (std::size_t i = 0; i < size.size(); ++i) {
        if (size[i].kind != PickleKind::Int || size[i].integer < 0 || size[i].integer > PickleLimits::kMaxDimension)
            fail("tensor size " + describe(size[i]) + " is not an int in 0.." +
                 std::to_string(PickleLimits::kMaxDimension));
        if (stride[i].kind != PickleKind::Int || stride[i].integer < 0)
            fail("tensor stride " + describe(stride[i]) + " is not an int >= 0 (torch has no negative strides)");
        t.shape.push_back(size[i].integer);
        t.strides.push_back(stride[i].integer);
    }
    if (fn != PickleGlobal::RebuildTensor) {
        if (a[4].kind != PickleKind::Bool) fail(name + "'s requires_grad is " + describe(a[4]) + ", not a bool");
        t.requiresGrad = a[4].integer != 0;
        if (a[5].kind != PickleKind::Dict || !doc_.containers[a[5].slot].items.empty())
            fail(name + "'s backward hooks are " + describe(a[5]) + ", not an empty dict");
    }
    std::size_t metadataAt = 6;
    if (fn == PickleGlobal::RebuildTensorV3) {
        if (!isGlobal(a[6], PickleGlobal::Dtype)) fail(name + "'s dtype is " + describe(a[6]) + ", not a torch dtype");
        t.dtype = static_cast<TorchDtype>(a[6].integer);
        if (!storage.untyped && t.dtype != storage.dtype)
            fail(name + " reads a " + std::string(toString(storage.dtype)) + " storage as " +
                 std::string(toString(t.dtype)));
        metadataAt = 7;
    }
    if (a.size() > metadataAt) {  // torch/_utils.py get_tensor_metadata: conj/neg bits
        const PickleValue& m = a[metadataAt];
        if (m.kind != PickleKind::Dict && m.kind != PickleKind::None)
            fail(name + "'s metadata is " + describe(m) + ", not a dict");
        if (m.kind == PickleKind::Dict) {
            const std::vector<PickleValue>& items = doc_.containers[m.slot].items;
            if (items.size() > 32) fail(name + "'s metadata has " + std::to_string(items.size() / 2) + " entries");
            for (std::size_t i = 0; i + 1 < items.size(); i += 2)
                if (items[i + 1].kind == PickleKind::Bool && items[i + 1].integer != 0)
                    fail("tensor metadata " + describe(items[i]) +
                         " is set (a conjugate or negative view); such tensors are not read");
        }
    }
    // Bounds: every element of the view inside the storage, in bytes, with checked arithmetic.
    const auto esize = static_cast<std::uint64_t>(elementBytes(t.dtype));
    std::uint64_t numel = 1;
    std::uint64_t last = t.offset;
    bool overflow = false;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
        const auto n = static_cast<std::uint64_t>(t.shape[i]);
        std::uint64_t reach = 0;
        overflow = overflow || !mulOk(numel, n, numel);
        if (n > 0) overflow = overflow || !mulOk(n - 1, static_cast<std::uint64_t>(t.strides[i]), reach);
        overflow = overflow || !addOk(last, reach, last);
    }
    std::uint64_t endByte = 0, contiguousBytes = 0;
    overflow = overflow || !mulOk(numel, esize, contiguousBytes);
    if (numel > 0) overflow = overflow || !addOk(last, 1, last) || !mulOk(last, esize, endByte);
    if (numel == 0) overflow = overflow || !mulOk(t.offset, esize, endByte);
    if (overflow) fail("a tensor whose size or extent overflows 64 bits");
    if (endByte > storage.byteSize)
        fail("a tensor (offset " + std::to_string(t.offset) + ", shape " + shapeToString(t.shape) + ", strides " +
             shapeToString(t.strides) + ") reaches byte " + std::to_string(endByte) + " of storage " +
             inQuotes(storage.key) + ", which holds " + std::to_string(storage.byteSize));
    if (contiguousBytes > storage.byteSize && contiguousBytes > PickleLimits::kMaxExpandedBytes)
        fail("a tensor of " + std::to_string(contiguousBytes) + " bytes viewing a storage of " +
             std::to_string(storage.byteSize) + " (stride 0 or overlapping strides) exceeds the " +
             std::to_string(PickleLimits::kMaxExpandedBytes >> 20) + " MiB limit for such views");
    t.numel = numel;
    if (doc_.tensors.size() >= PickleLimits::kMaxTensors)
        fail("more than " + std::to_string(PickleLimits::kMaxTensors) + " tensors");
    charge(sizeof(PickleTensor) + 32 * t.shape.size());
    PickleValue v;
    v.kind = PickleKind::Tensor;
    v.slot = static_cast<std::uint32_t>(doc_.tensors.size());
    doc_.tensors.push_back(std::move(t));
    return v;
}

// torch._utils._rebuild_parameter(data, requires_grad, backward_hooks) and
// _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state): the tensor itself.
PickleValue Parser::rebuildParameter(PickleGlobal fn, const std::vector<PickleValue>& a) {
    const std::string name = std::string(toString(fn));
    const std::size_t n = fn == PickleGlobal::RebuildParameter ? 3 : 4;
    if (a.size() != n)
        fail("REDUCE of '" + name + "' with " + std::to_string(a.size()) + " arguments; it takes " + std::to_string(n));
    if (a[0].kind != PickleKind::Tensor) fail(name + " of " + describe(a[0]) + ", not a tensor");
    if (a[1].kind != PickleKind::Bool) fail(name + "'s requires_grad is " + describe(a[1]) + ", not a bool");
    if (a[2].kind != PickleKind::Dict || !doc_.containers[a[2].slot].items.empty())
        fail(name + "'s backward hooks are " + describe(a[2]) + ", not an empty dict");
    if (n == 4 && a[3].kind != PickleKind::None && a[3].kind != PickleKind::Dict && a[3].kind != PickleKind::Tuple)
        fail(name + "'s state is " + describe(a[3]) + ", not a dict");
    doc_.tensors[a[0].slot].requiresGrad = a[1].integer != 0;
    return a[0];
}

// torch._tensor._rebuild_from_type_v2(func, new_type, args, state): a tensor with Python
// attributes (torch/_tensor.py Tensor.__reduce_ex__); the attributes are dropped.
PickleValue Parser::rebuildFromType(const std::vector<PickleValue>& a) {
    const bool knownFunc =
        isGlobal(a[0], PickleGlobal::RebuildTensor) || isGlobal(a[0], PickleGlobal::RebuildTensorV2) ||
        isGlobal(a[0], PickleGlobal::RebuildTensorV3) || isGlobal(a[0], PickleGlobal::RebuildParameter);
    if (!knownFunc) fail("_rebuild_from_type_v2 of " + describe(a[0]) + ", not a tensor rebuild function");
    if (!isGlobal(a[1], PickleGlobal::TensorType) && !isGlobal(a[1], PickleGlobal::ParameterType))
        fail("_rebuild_from_type_v2 to " + describe(a[1]) + ", not torch.Tensor or torch.nn.Parameter");
    if (a[3].kind != PickleKind::None && a[3].kind != PickleKind::Dict && a[3].kind != PickleKind::Tuple)
        fail("_rebuild_from_type_v2's state is " + describe(a[3]) + ", not a dict");
    const PickleValue t = call(a[0], a[2]);
    if (t.kind != PickleKind::Tensor) fail("_rebuild_from_type_v2 did not rebuild a tensor");
    return t;
}

// numpy.core.multiarray.scalar(dtype, bytes): a training step count or metric.
PickleValue Parser::numpyScalar(const std::vector<PickleValue>& a) {
    if (a[0].kind != PickleKind::NumpyDtype || a[1].kind != PickleKind::Bytes)
        fail("numpy scalar of " + describe(a[0]) + " and " + describe(a[1]) + ", not (dtype, bytes)");
    const PickleDocument::NumpyDtypeInfo& d = doc_.numpyDtypes[a[0].slot];
    std::string raw = doc_.text(a[1]);
    const auto size = static_cast<std::size_t>(d.code[1] - '0');
    if (raw.size() != size)
        fail("numpy scalar of dtype " + inQuotes(d.code) + " with " + std::to_string(raw.size()) + " bytes");
    if (d.byteOrder == '>') std::reverse(raw.begin(), raw.end());
    std::uint64_t bits = 0;
    for (std::size_t i = size; i-- > 0;) bits = (bits << 8) | static_cast<unsigned char>(raw[i]);
    PickleValue v;
    const char kind = d.code[0];
    if (kind == 'b') {
        v.kind = PickleKind::Bool;
        v.integer = bits != 0 ? 1 : 0;
    } else if (kind == 'f') {
        v.kind = PickleKind::Float;
        v.real = size == 8   ? std::bit_cast<double>(bits)
                 : size == 4 ? std::bit_cast<float>(static_cast<std::uint32_t>(bits))
                             : halfToFloat(static_cast<std::uint16_t>(bits));
    } else {
        v.kind = PickleKind::Int;
        if (kind == 'i' && size < 8 && (bits >> (8 * size - 1)) != 0) bits |= ~std::uint64_t{0} << (8 * size);
        if (kind == 'u' && size == 8 && bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            fail("numpy uint64 scalar beyond int64");
        v.integer = static_cast<std::int64_t>(bits);
    }
    return v;
}

void Parser::build() {
    const PickleValue state = pop();
    const PickleValue target = top();
    if (target.kind == PickleKind::Dict && doc_.containers[target.slot].ordered) {
        // module.state_dict() sets _metadata as an attribute (OrderedDict.__dict__.update): dropped.
        if (state.kind != PickleKind::Dict && state.kind != PickleKind::None)
            fail("BUILD on an OrderedDict with " + describe(state) + ", not an attribute dict");
        return;
    }
    if (target.kind == PickleKind::Object) {
        PickleContainer& object = doc_.containers[target.slot];
        if (state.kind != PickleKind::Dict || !object.items.empty())
            fail("BUILD on '" + std::string(toString(object.objectClass)) + "' with " + describe(state) +
                 ", not one attribute dict");
        if (depthOf(state) + 1 > PickleLimits::kMaxNesting)
            fail("containers nested deeper than " + std::to_string(PickleLimits::kMaxNesting));
        object.items.push_back(state);
        object.depth = depthOf(state) + 1;
        return;
    }
    if (target.kind == PickleKind::NumpyDtype) {  // numpy dtype __setstate__: (version, byte order, ...)
        const std::vector<PickleValue>& s = tupleItems(state, "numpy dtype state");
        const std::string order = s.size() >= 2 && s[1].kind == PickleKind::Str ? doc_.text(s[1]) : "";
        if (order != "<" && order != ">" && order != "|" && order != "=")
            fail("numpy dtype state without a byte order");
        doc_.numpyDtypes[target.slot].byteOrder = order[0];
        return;
    }
    fail("refused: BUILD on " + describe(target) +
         " (a __setstate__ call); it applies only to OrderedDict, numpy dtypes and Namespace");
}

void Parser::newObject() {
    const PickleValue args = pop();
    const PickleValue cls = pop();
    const bool allowed = isGlobal(cls, PickleGlobal::Namespace) || isGlobal(cls, PickleGlobal::LightningCheckpoint);
    if (!allowed)
        fail("refused: NEWOBJ of " + (cls.kind == PickleKind::Global ? "'" + globalName(cls) + "'" : describe(cls)) +
             ", which is not a class a checkpoint instantiates");
    if (!tupleItems(args, "NEWOBJ's argument").empty()) fail("NEWOBJ of '" + globalName(cls) + "' with arguments");
    PickleValue v = newContainer(PickleKind::Object, {});
    doc_.containers[v.slot].objectClass = globalOf(cls);
    push(v);
}

// torch/serialization.py _save.persistent_id / _legacy_save.persistent_id.
void Parser::persistentId() {
    const PickleValue id = pop();
    if (ids_ == PicklePersistentIds::None) fail("refused: BINPERSID in a pickle that holds no storages");
    const std::vector<PickleValue>& t = tupleItems(id, "BINPERSID's id");
    const std::size_t n = ids_ == PicklePersistentIds::Zip ? 5 : 6;
    if (!t.empty() && t[0].kind == PickleKind::Str && doc_.text(t[0]) == "module")
        fail("refused: a persistent id for a pickled module's source; only state dicts are read");
    if (t.size() != n || t[0].kind != PickleKind::Str || doc_.text(t[0]) != "storage")
        fail("BINPERSID of a " + std::to_string(t.size()) +
             "-tuple that is not ('storage', type, key, location, numel" + (n == 6 ? ", None)" : ")"));
    if (!isGlobal(t[1], PickleGlobal::Storage) && !isGlobal(t[1], PickleGlobal::UntypedStorage))
        fail("a storage of type " + describe(t[1]) + ", not a torch storage class");
    const auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 20 &&
               std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (t[2].kind != PickleKind::Str || !digits(doc_.text(t[2])))
        fail("a storage key " + describe(t[2]) + " that is not a decimal number");
    const auto printable = [](const std::string& s) {
        return s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7F; });
    };
    if (t[3].kind != PickleKind::Str || !printable(doc_.text(t[3])))
        fail("a storage location " + describe(t[3]) + " that is not a short device name");
    if (t[4].kind != PickleKind::Int || t[4].integer < 0)
        fail("a storage size " + describe(t[4]) + ", not an int >= 0");
    if (n == 6 && t[5].kind != PickleKind::None)
        fail("refused: a storage view (legacy view metadata); torch writes None there since 1.0");
    PickleStorage s;
    s.key = doc_.text(t[2]);
    s.location = doc_.text(t[3]);
    s.untyped = isGlobal(t[1], PickleGlobal::UntypedStorage);
    s.dtype = s.untyped ? TorchDtype::UInt8 : static_cast<TorchDtype>(t[1].integer);
    s.numel = static_cast<std::uint64_t>(t[4].integer);
    if (!mulOk(s.numel, static_cast<std::uint64_t>(elementBytes(s.dtype)), s.byteSize) ||
        s.byteSize > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("storage " + inQuotes(s.key) + " declares " + std::to_string(s.numel) + " elements, beyond any file");
    PickleValue v;
    v.kind = PickleKind::Storage;
    const auto found = storageByKey_.find(s.key);
    if (found != storageByKey_.end()) {
        const PickleStorage& first = doc_.storages[found->second];
        if (first.dtype != s.dtype || first.untyped != s.untyped || first.numel != s.numel)
            fail("storage " + inQuotes(s.key) + " is declared twice, as " + std::to_string(first.numel) + " " +
                 std::string(toString(first.dtype)) + " and as " + std::to_string(s.numel) + " " +
                 std::string(toString(s.dtype)) + " elements");
        v.slot = found->second;
    } else {
        charge(sizeof(PickleStorage) + 2 * kStringCost + s.key.size() + s.location.size());
        v.slot = static_cast<std::uint32_t>(doc_.storages.size());
        storageByKey_.emplace(s.key, v.slot);
        doc_.storages.push_back(std::move(s));
    }
    push(v);
}

PickleDocument Parser::run(std::size_t* consumed) {
    for (;;) {
        op_ = pos_;
        if (pos_ >= in_.size()) failTruncated("the pickle ends before its STOP opcode");
        const auto code = static_cast<unsigned char>(in_[pos_++]);
        if (code == op::STOP) {
            if (!marks_.empty()) fail("STOP with a MARK still open");
            if (stack_.size() != 1)
                fail("STOP with " + std::to_string(stack_.size()) + " values on the stack instead of one");
            doc_.root = stack_.back();
            if (consumed != nullptr) *consumed = pos_;
            return std::move(doc_);
        }
        if (scalarOp(code) || stringOp(code) || containerOp(code) || memoOp(code) || objectOp(code)) continue;
        refuseOp(code);
    }
}

}  // namespace

std::string_view toString(TorchDtype dtype) { return dtypeInfo(dtype).name; }
int elementBytes(TorchDtype dtype) { return dtypeInfo(dtype).bytes; }

std::string_view toString(PickleKind kind) {
    static constexpr std::array<std::string_view, 15> kNames{"None",   "bool",   "int",     "float",  "str",
                                                             "bytes",  "tuple",  "list",    "set",    "dict",
                                                             "object", "global", "storage", "tensor", "numpy dtype"};
    return kNames[static_cast<std::size_t>(kind)];
}

std::string_view toString(PickleGlobal global) {
    switch (global) {
        case PickleGlobal::OrderedDict:
            return "collections.OrderedDict";
        case PickleGlobal::RebuildTensor:
            return "torch._utils._rebuild_tensor";
        case PickleGlobal::RebuildTensorV2:
            return "torch._utils._rebuild_tensor_v2";
        case PickleGlobal::RebuildTensorV3:
            return "torch._utils._rebuild_tensor_v3";
        case PickleGlobal::RebuildParameter:
            return "torch._utils._rebuild_parameter";
        case PickleGlobal::RebuildParameterWithState:
            return "torch._utils._rebuild_parameter_with_state";
        case PickleGlobal::RebuildFromTypeV2:
            return "torch._tensor._rebuild_from_type_v2";
        case PickleGlobal::TensorType:
            return "torch.Tensor";
        case PickleGlobal::ParameterType:
            return "torch.nn.parameter.Parameter";
        case PickleGlobal::Storage:
            return "torch storage type";
        case PickleGlobal::UntypedStorage:
            return "torch.UntypedStorage";
        case PickleGlobal::Dtype:
            return "torch dtype";
        case PickleGlobal::Size:
            return "torch.Size";
        case PickleGlobal::Device:
            return "torch.device";
        case PickleGlobal::CodecsEncode:
            return "_codecs.encode";
        case PickleGlobal::Set:
            return "builtins.set";
        case PickleGlobal::NumpyDtype:
            return "numpy.dtype";
        case PickleGlobal::NumpyScalar:
            return "numpy.core.multiarray.scalar";
        case PickleGlobal::Namespace:
            return "argparse.Namespace";
        case PickleGlobal::LightningCheckpoint:
            return "pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint";
    }
    return "global";
}

PickleDocument parsePickle(std::string_view bytes, PicklePersistentIds ids, std::size_t* consumed) {
    return Parser(bytes, ids).run(consumed);
}

}  // namespace tessera
