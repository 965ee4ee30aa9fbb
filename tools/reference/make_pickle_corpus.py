#!/usr/bin/env python3
"""Hostile and crafted PyTorch checkpoints for Tessera's restricted checkpoint reader
(core/formats/Pickle.h, core/formats/TorchCheckpoint.h).

    python3 tools/reference/make_pickle_corpus.py OUTDIR [--fuzz-seeds SEEDDIR]

OUTDIR belongs at tests/data/pickles/hostile; SEEDDIR at tests/fuzz/corpus/fuzz_torch_checkpoint.
Needs only Python's standard library (no torch, no numpy): valid files are written by pickle itself
(protocol 2, as torch.save does: torch/serialization.py DEFAULT_PROTOCOL) through a Pickler whose
persistent_id emits torch's storage references (torch/serialization.py _save.persistent_id), with
stand-in modules named torch, torch._utils, ... so that GLOBAL opcodes name exactly what torch's
do. Hostile pickles are written opcode by opcode (CPython Lib/pickletools.py). Zip archives are
written by hand as torch's writer lays them out (caffe2/serialize/inline_container.cc: stored
entries, data aligned to 64 bytes with an "FB" extra field, ZIP64 end records), so single fields
can be made to lie.

expected.json maps each file to what the reader must do with it: {"refused": <text the message
must contain>} or {"tensors": {name: {dtype, shape, sha256 of the contiguous little-endian
values}}, "skipped": [names of non-tensor leaves]}. The script is deterministic.
"""
import _codecs
import collections
import copyreg
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import types
import zlib

# --------------------------------------------------------------------------------------------
# Stand-ins for the globals torch's pickles name. pickle writes GLOBAL '<__module__> <__qualname__>'
# after checking that the name imports to the same object, so each lives in a registered module.


def _module(name):
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(_module(parent), child, sys.modules[name])
    return sys.modules[name]


def _stand_in(module, name, kind="function"):
    obj = (lambda *a: None) if kind == "function" else type(name, (), {})
    obj.__module__ = module
    obj.__qualname__ = name
    obj.__name__ = name
    setattr(_module(module), name, obj)
    return obj


_rebuild_tensor = _stand_in("torch._utils", "_rebuild_tensor")
_rebuild_tensor_v2 = _stand_in("torch._utils", "_rebuild_tensor_v2")
_rebuild_parameter = _stand_in("torch._utils", "_rebuild_parameter")
_rebuild_parameter_with_state = _stand_in("torch._utils", "_rebuild_parameter_with_state")
_rebuild_from_type_v2 = _stand_in("torch._tensor", "_rebuild_from_type_v2")
TorchTensorType = _stand_in("torch", "Tensor", "class")
TorchSize = _stand_in("torch", "Size", "class")
numpy_scalar = _stand_in("numpy.core.multiarray", "scalar")
numpy_dtype = _stand_in("numpy", "dtype", "class")
Namespace = _stand_in("argparse", "Namespace", "class")
# argparse.Namespace pickles as NEWOBJ + BUILD (copyreg.__reduce_ex__ with protocol 2).
Namespace.__reduce_ex__ = lambda self, protocol: (copyreg.__newobj__, (Namespace,), dict(self.__dict__))

# name: (storage class name, struct code, element bytes)
DTYPES = {
    "float32": ("FloatStorage", "f", 4),
    "float64": ("DoubleStorage", "d", 8),
    "float16": ("HalfStorage", "e", 2),
    "bfloat16": ("BFloat16Storage", None, 2),
    "int64": ("LongStorage", "q", 8),
    "bool": ("BoolStorage", "?", 1),
}
STORAGE_TYPES = {d: _stand_in("torch", s, "class") for d, (s, _, _) in DTYPES.items()}


class Storage:
    """A storage of `dtype` holding `values` (little-endian on disk)."""

    def __init__(self, dtype, values):
        self.dtype = dtype
        self.values = list(values)
        code = DTYPES[dtype][1]
        if code is None:  # bfloat16: the top half of float32
            self.data = b"".join(struct.pack("<f", v)[2:] for v in self.values)
        else:
            self.data = struct.pack("<%d%s" % (len(self.values), code), *self.values)

    @property
    def numel(self):
        return len(self.values)


class Tensor:
    def __init__(self, storage, offset, shape, stride, requires_grad=False):
        self.storage, self.offset, self.shape, self.stride = storage, offset, tuple(shape), tuple(stride)
        self.requires_grad = requires_grad

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2, (self.storage, self.offset, self.shape, self.stride, self.requires_grad,
                                     collections.OrderedDict()))

    def contiguous_bytes(self):
        esize = DTYPES[self.storage.dtype][2]
        out = bytearray()
        count = 1
        for n in self.shape:
            count *= n
        for flat in range(count):
            element, rest = self.offset, flat
            for n, s in reversed(list(zip(self.shape, self.stride))):
                element += (rest % n) * s
                rest //= n
            out += self.storage.data[element * esize:(element + 1) * esize]
        return bytes(out)


def contiguous(storage, shape, offset=0):
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return Tensor(storage, offset, shape, stride)


class Parameter:
    def __init__(self, tensor, state=None):
        self.tensor, self.state = tensor, state

    def __reduce_ex__(self, protocol):
        if self.state is None:
            return (_rebuild_parameter, (self.tensor, True, collections.OrderedDict()))
        return (_rebuild_parameter_with_state, (self.tensor, True, collections.OrderedDict(), self.state))


class TensorWithAttributes:
    """A tensor with a Python attribute: torch._tensor._rebuild_from_type_v2 (torch/_tensor.py)."""

    def __init__(self, tensor, state):
        self.tensor, self.state = tensor, state

    def __reduce_ex__(self, protocol):
        t = self.tensor
        args = (t.storage, t.offset, t.shape, t.stride, False, collections.OrderedDict())
        return (_rebuild_from_type_v2, (_rebuild_tensor_v2, TorchTensorType, args, self.state))


class SizeValue(tuple):
    def __reduce_ex__(self, protocol):
        return (TorchSize, (tuple(self),))


class NumpyFloat64:
    """numpy.float64(x) as numpy pickles it with protocol 2."""

    class _Dtype:
        def __reduce_ex__(self, protocol):
            return (numpy_dtype, ("f8", False, True), (3, "<", None, None, None, -1, -1, 0))

    def __init__(self, value):
        self.value = value

    def __reduce_ex__(self, protocol):
        raw = struct.pack("<d", self.value).decode("latin1")
        return (numpy_scalar, (self._Dtype(), _Latin1Bytes(raw)))


class _Latin1Bytes:
    def __init__(self, text):
        self.text = text

    def __reduce_ex__(self, protocol):
        return (_codecs.encode, (self.text, "latin1"))


def namespace(**attributes):
    ns = Namespace()
    ns.__dict__.update(attributes)
    return ns


class TorchPickler(pickle.Pickler):
    """torch/serialization.py _save: storages become persistent ids, keys in first-seen order."""

    def __init__(self, file, legacy=False, protocol=2):
        super().__init__(file, protocol=protocol)
        self.keys = {}
        self.legacy = legacy

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        if id(obj) not in self.keys:
            # legacy root keys are str(storage._cdata), a pointer: any decimal number
            self.keys[id(obj)] = (str(140000000 + 4096 * len(self.keys)) if self.legacy else str(len(self.keys)), obj)
        key = self.keys[id(obj)][0]
        pid = ("storage", STORAGE_TYPES[obj.dtype], key, "cpu", obj.numel)
        return pid + (None,) if self.legacy else pid


def torch_pickle(obj, legacy=False, protocol=2):
    buffer = io.BytesIO()
    pickler = TorchPickler(buffer, legacy=legacy, protocol=protocol)
    pickler.dump(obj)
    return buffer.getvalue(), [(key, storage) for key, storage in pickler.keys.values()]


# --------------------------------------------------------------------------------------------
# Containers


def zip_archive(records, align=64, zip64=True):
    """A zip laid out as PyTorchStreamWriter writes it. records: [(name, bytes, method)]."""
    out = bytearray()
    central = bytearray()
    for name, data, method in records:
        raw = name.encode()
        stored = zlib.compress(data)[2:-4] if method == 8 else data
        header_offset = len(out)
        extra = b""
        if align:
            start = header_offset + 30 + len(raw)
            pad = (-(start + 4)) % align
            extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\3\4", 20, 0, method, 0, 0x21, crc, len(stored), len(data),
                           len(raw), len(extra)) + raw + extra + stored
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\1\2", 20, 20, 0, method, 0, 0x21, crc, len(stored),
                               len(data), len(raw), 0, 0, 0, 0, 0, header_offset) + raw
    directory_offset = len(out)
    out += central
    end = len(out)
    if zip64:
        out += struct.pack("<4sQHHIIQQQQ", b"PK\6\6", 44, 45, 45, 0, 0, len(records), len(records), len(central),
                           directory_offset)
        out += struct.pack("<4sIQI", b"PK\6\7", 0, end, 1)
    out += struct.pack("<4sHHHHIIH", b"PK\5\6", 0, 0, len(records), len(records), len(central), directory_offset, 0)
    return bytes(out)


def torch_zip(pickle_bytes, storages, archive="archive", byteorder="little", extra_records=(), method=0):
    records = [(archive + "/data.pkl", pickle_bytes, method), (archive + "/byteorder", byteorder.encode(), 0)]
    for key, storage in storages:
        data = storage.data if byteorder == "little" else swapped(storage)
        records.append((archive + "/data/" + key, data, 0))
    records.append((archive + "/version", b"3\n", 0))
    records.extend(extra_records)
    return zip_archive(records)


def swapped(storage):
    esize = DTYPES[storage.dtype][2]
    return b"".join(storage.data[i:i + esize][::-1] for i in range(0, len(storage.data), esize))


MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"


def legacy_file(state_pickle, storages, counts=None):
    """torch/serialization.py _legacy_save: magic, protocol, sys_info, state, keys, storages."""
    out = bytearray(MAGIC)
    out += pickle.dumps(1001, protocol=2)
    out += pickle.dumps({"protocol_version": 1001, "little_endian": True,
                         "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    out += state_pickle
    keys = sorted(key for key, _ in storages)
    out += pickle.dumps(keys, protocol=2)
    by_key = dict(storages)
    for key in keys:
        count = (counts or {}).get(key, by_key[key].numel)
        out += struct.pack("<q", count) + by_key[key].data
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Raw opcodes (CPython Lib/pickletools.py)


def g(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def s(text):
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def i(value):
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    if -2 ** 31 <= value < 2 ** 31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes(8, "little", signed=True)
    return b"\x8a\x08" + raw


def t(*items):
    return b"(" + b"".join(items) + b"t"


def ints(values):
    return t(*[i(v) for v in values])


def pid(key="0", storage="FloatStorage", numel=16, legacy=False):
    return t(s("storage"), g("torch", storage), s(key), s("cpu"), i(numel), *([b"N"] if legacy else [])) + b"Q"


def rebuild(key="0", storage="FloatStorage", numel=16, offset=0, shape=(16,), stride=(1,), legacy=False):
    return (g("torch._utils", "_rebuild_tensor_v2") +
            t(pid(key, storage, numel, legacy), i(offset), ints(shape), ints(stride), b"\x89",
              g("collections", "OrderedDict") + b")R") + b"R")


def state(*entries):
    """PROTO 2, {entries...}, STOP: entries are (name, value opcodes)."""
    return b"\x80\x02}(" + b"".join(s(name) + value for name, value in entries) + b"u."


def float_storage(n=16, seed=1.0):
    return Storage("float32", [seed * (k + 1) / 8 for k in range(n)])


def one_tensor_zip(pickle_bytes, numel=16, **kwargs):
    return torch_zip(pickle_bytes, [("0", float_storage(numel))], **kwargs)


# --------------------------------------------------------------------------------------------
# The corpus


def valid_files():
    """name -> (bytes, state dict as written, skipped names)."""
    files = {}
    base = Storage("float32", [0.25 * k - 3 for k in range(24)])
    views = collections.OrderedDict()
    views["base"] = contiguous(base, (4, 6))
    views["transposed"] = Tensor(base, 0, (6, 4), (1, 6))
    views["rows"] = Tensor(base, 6, (2, 6), (6, 1))
    views["every_other"] = Tensor(base, 1, (4, 3), (6, 2))
    views["expanded"] = Tensor(Storage("float32", [1.5, -2.0, 7.25]), 0, (4, 3), (0, 1))
    views["scalar"] = Tensor(base, 5, (), ())
    views["empty"] = Tensor(base, 24, (0, 3), (3, 1))
    data, storages = torch_pickle(views)
    files["ok_views_aliased.pth"] = (torch_zip(data, storages), views, [])

    dtypes = collections.OrderedDict()
    dtypes["half"] = contiguous(Storage("float16", [0.5, -1.25, 65504.0, 2.0 ** -24]), (2, 2))
    dtypes["bf16"] = contiguous(Storage("bfloat16", [1.0, -3.5, 256.0]), (3,))
    dtypes["double"] = contiguous(Storage("float64", [1.0 / 3, -2.5e-10]), (2,))
    dtypes["long"] = contiguous(Storage("int64", [-(2 ** 40), 7, 0]), (3,))
    dtypes["mask"] = contiguous(Storage("bool", [True, False]), (2,))
    data, storages = torch_pickle(dtypes)
    files["ok_big_endian.pth"] = (torch_zip(data, storages, byteorder="big"), dtypes, [])

    data, storages = torch_pickle(views, protocol=4)
    files["ok_protocol4.pth"] = (torch_zip(data, storages), views, [])

    plain = collections.OrderedDict()
    plain["conv.weight"] = contiguous(float_storage(18, 0.5), (2, 1, 3, 3))
    plain["conv.bias"] = contiguous(float_storage(2, -1.0), (2,))
    wrapped = {
        "params_ema": plain,
        "params": collections.OrderedDict(("module." + k, Parameter(v)) for k, v in plain.items()),
        "step": 1200,
        "best": NumpyFloat64(31.25),
        "shape": SizeValue((2, 3)),
        "args": namespace(lr=0.0002, arch="compact"),
        "tagged": TensorWithAttributes(contiguous(float_storage(4, 2.0), (4,)), {"note": "ema"}),
        "with_state": Parameter(contiguous(float_storage(3, 3.0), (3,)), {"tag": 1}),
    }
    data, storages = torch_pickle(wrapped)
    flat = collections.OrderedDict()
    for k, v in plain.items():
        flat["params_ema." + k] = v
    for k, v in plain.items():
        flat["params.module." + k] = v
    flat["tagged"] = wrapped["tagged"].tensor
    flat["with_state"] = wrapped["with_state"].tensor
    files["ok_training_wrappers.pth"] = (torch_zip(data, storages, archive="model"), flat,
                                         ["step", "best", "shape", "args"])

    data, storages = torch_pickle(views, legacy=True)
    files["ok_legacy_views.pth"] = (legacy_file(data, storages), views, [])

    # Memo indices far apart (a memo sized by index would need 16 GiB): a hash map takes them.
    huge = (b"\x80\x02}r\xf0\xff\xff\xff(" + s("w") +
            g("torch._utils", "_rebuild_tensor_v2") + b"r\x00\x00\x00\x80" +
            t(pid(), i(0), ints((4, 4)), ints((4, 1)), b"\x89", g("collections", "OrderedDict") + b")R") + b"R" +
            s("same") + b"j\x00\x00\x00\x80" +
            t(pid(), i(4), ints((3,)), ints((1,)), b"\x89", g("collections", "OrderedDict") + b")R") + b"Ru.")
    # torch._utils._rebuild_tensor_v3 over an UntypedStorage (numel counts bytes; torch/_tensor.py writes
    # it for dtypes without a typed storage) and the 4-argument _rebuild_tensor of old files.
    halves = Storage("float16", [0.5 * k - 4 for k in range(32)])
    v3 = (b"\x80\x02}(" + s("h") + g("torch._utils", "_rebuild_tensor_v3") +
          t(t(s("storage"), g("torch.storage", "UntypedStorage"), s("0"), s("cpu"), i(64)) + b"Q", i(2), ints((3, 5)),
            ints((1, 3)), b"\x89", g("collections", "OrderedDict") + b")R", g("torch", "float16")) + b"R" +
          s("old") + g("torch._utils", "_rebuild_tensor") +
          t(t(s("storage"), g("torch", "HalfStorage"), s("1"), s("cpu"), i(32)) + b"Q", i(30), ints((2,)), ints((1,))) +
          b"Ru.")
    files["ok_rebuild_v3_untyped.pth"] = (torch_zip(v3, [("0", halves), ("1", halves)]), {
        "h": Tensor(halves, 2, (3, 5), (1, 3)), "old": Tensor(halves, 30, (2,), (1,))}, [])
    files["ok_memo_huge_index.pth"] = (one_tensor_zip(huge), {
        "w": contiguous(float_storage(), (4, 4)), "same": Tensor(float_storage(), 4, (3,), (1,))}, [])
    return files


def hostile_files():
    """name -> (bytes, text the refusal must contain)."""
    h = {}
    tensor = ("w", rebuild())

    def zipped(pickle_bytes, numel=16, **kw):
        return one_tensor_zip(pickle_bytes, numel, **kw)

    # Code execution through GLOBAL + REDUCE, the classic __reduce__ payloads.
    for module, name in [("os", "system"), ("posix", "system"), ("nt", "system"), ("builtins", "eval"),
                         ("builtins", "exec"), ("__builtin__", "eval"), ("subprocess", "Popen"),
                         ("subprocess", "check_output"), ("builtins", "getattr"), ("torch", "load"),
                         ("torch.serialization", "load"), ("collections", "UserDict")]:
        payload = b"\x80\x02" + g(module, name) + t(s("echo pwned")) + b"R."
        h["global_%s_%s.pth" % (module.strip("_"), name)] = (zipped(payload), "'%s.%s'" % (module, name))
    h["global_inside_state.pth"] = (zipped(state(tensor, ("x", g("os", "system") + t(s("id")) + b"R"))), "'os.system'")
    h["global_legacy_os_system.pth"] = (
        legacy_file(state(("w", rebuild(key="1", legacy=True)), ("x", g("os", "system") + t(s("id")) + b"R")),
                    [("1", float_storage())]), "'os.system'")
    keys_payload = bytearray(legacy_file(state(("w", rebuild(key="1", legacy=True))), [("1", float_storage())]))
    h["global_in_legacy_key_list.pth"] = (
        bytes(keys_payload).replace(pickle.dumps(["1"], protocol=2),
                                    b"\x80\x02" + g("os", "system") + t(s("id")) + b"R."), "'os.system'")
    h["stack_global_os_system.pth"] = (
        zipped(b"\x80\x04\x8c\x02os\x8c\x06system\x93" + t(s("id")) + b"R."), "'os.system'")
    h["inst_os_system.pth"] = (zipped(b"\x80\x02(" + s("id") + b"ios\nsystem\n."), "INST of 'os.system'")
    h["obj_ordered_dict.pth"] = (zipped(b"\x80\x02(" + g("collections", "OrderedDict") + b"o."), "OBJ")
    h["newobj_rebuild_function.pth"] = (
        zipped(b"\x80\x02" + g("torch._utils", "_rebuild_tensor_v2") + b")\x81."), "NEWOBJ of 'torch._utils._rebuild_tensor_v2'")
    h["newobj_ex.pth"] = (zipped(b"\x80\x04" + g("argparse", "Namespace") + b")}\x92."), "NEWOBJ_EX")
    h["newobj_user_class.pth"] = (zipped(b"\x80\x02" + g("exploit", "Payload") + b")\x81."), "'exploit.Payload'")
    h["build_setstate_on_tensor.pth"] = (
        zipped(state(("w", rebuild() + b"}(" + s("__setstate__") + s("x") + b"ub"))), "BUILD on a tensor")
    h["build_on_dict.pth"] = (zipped(b"\x80\x02}}(" + s("__dict__") + s("x") + b"ub."), "BUILD on a dict")
    h["build_on_storage_type.pth"] = (zipped(b"\x80\x02" + g("torch", "FloatStorage") + b"}b."), "BUILD on 'torch.FloatStorage'")
    h["reduce_storage_type.pth"] = (zipped(b"\x80\x02" + g("torch", "FloatStorage") + b")R."), "REDUCE of 'torch.FloatStorage'")
    h["reduce_string.pth"] = (zipped(b"\x80\x02" + s("os.system") + t(s("id")) + b"R."), "REDUCE of str 'os.system'")
    # One memoized 1000-tuple passed as the arguments of 1000 calls: refused before any copy.
    h["reduce_args_amplified.pth"] = (
        zipped(b"\x80\x02" + g("collections", "OrderedDict") + b"q\x00(" + b"K\x01" * 1000 + b"tq\x01(" +
               b"h\x00h\x01R" * 1000 + b"l."), "with 1000 arguments")
    h["reduce_ordered_dict_args.pth"] = (zipped(b"\x80\x02" + g("collections", "OrderedDict") + t(s("x")) + b"R."),
                                         "'collections.OrderedDict' with 1 arguments")
    for code, name in [(b"\x82\x01", "EXT1"), (b"\x83\x01\x00", "EXT2"), (b"\x84\x01\x00\x00\x00", "EXT4")]:
        h["%s.pth" % name.lower()] = (zipped(b"\x80\x02" + code + b")R."), name)
    h["persid_text.pth"] = (zipped(b"\x80\x02P0\n."), "PERSID")
    h["persid_module_source.pth"] = (
        zipped(b"\x80\x02" + t(s("module"), g("torch", "FloatStorage"), s("evil.py"), s("import os")) + b"Q."), "module")
    h["persid_not_storage.pth"] = (zipped(b"\x80\x02" + i(7) + b"Q."), "BINPERSID's id is int 7")
    h["persid_path_key.pth"] = (zipped(state(("w", rebuild(key="../../etc/passwd")))), "not a decimal number")
    h["persid_numpy_type.pth"] = (
        zipped(b"\x80\x02" + t(s("storage"), g("collections", "OrderedDict"), s("0"), s("cpu"), i(16)) + b"Q."),
        "not a torch storage class")
    h["buffer_opcodes.pth"] = (zipped(b"\x80\x05\x97."), "NEXT_BUFFER")
    h["unknown_opcode.pth"] = (zipped(b"\x80\x02\xff."), "byte 0xff is not a pickle opcode")
    h["text_get.pth"] = (zipped(b"\x80\x02]p0\ng0\n."), "PUT")
    h["pop_opcode.pth"] = (zipped(b"\x80\x02]]0."), "POP")

    # Memo abuse
    h["memo_get_unset.pth"] = (zipped(b"\x80\x02h\x05."), "memo index 5 is read before it is defined")
    h["memo_get_huge_index.pth"] = (zipped(b"\x80\x02j\xf0\xff\xff\xff."), "memo index 4294967280")
    h["memo_redefined.pth"] = (zipped(b"\x80\x02]q\x00]q\x00."), "memo index 0 is defined twice")
    h["memo_self_list.pth"] = (zipped(b"\x80\x02]q\x00h\x00a."), "inside itself")
    h["memo_cyclic_dict.pth"] = (
        zipped(b"\x80\x02}q\x00(" + s("w") + rebuild() + s("a") + b"}q\x01" + s("back") + b"h\x00su."),
        "also reached through another key")
    # Billion laughs: dict k holds dict k-1 under ten keys, 40 levels: 10^39 tensor names for a
    # reader that copies memo references or walks every path.
    laughs = b"}q\x01(" + s("w") + rebuild() + b"u"
    for level in range(1, 40):
        laughs = (b"}q" + bytes([level + 1]) + b"(" + s("0") + laughs +
                  b"".join(s(str(k)) + b"h" + bytes([level]) for k in range(1, 10)) + b"u")
    h["billion_laughs.pth"] = (zipped(b"\x80\x02}q\x00(" + s("x") + laughs + b"u."), "also reached through another key")
    # Nesting bombs
    h["nested_marks.pth"] = (zipped(b"\x80\x02" + b"(" * 5000 + b"t" * 5000 + b"."), "MARKs nested deeper than 64")
    h["nested_tuples.pth"] = (zipped(b"\x80\x02)" + b"\x85" * 5000 + b"."), "nested deeper than 64")
    h["nested_lists.pth"] = (zipped(b"\x80\x02" + b"]" * 100 + b"a" * 99 + b"."), "nested deeper than 64")
    h["nested_dicts.pth"] = (zipped(b"\x80\x02}" + (s("k") + b"}") * 99 + b"s" * 99 + b"."), "nested deeper than 64")
    # Containers misused (CVE-2026-24747: SETITEM on a non-dict)
    h["setitem_on_list.pth"] = (zipped(b"\x80\x02]" + s("k") + s("v") + b"s."), "SETITEM on a list")
    h["setitems_on_tensor.pth"] = (zipped(state(("w", rebuild() + b"(" + s("k") + s("v") + b"u"))),
                                   "SETITEMS on a tensor")
    h["append_on_dict.pth"] = (zipped(b"\x80\x02}" + s("v") + b"a."), "APPEND on a dict")
    h["setitems_odd.pth"] = (zipped(b"\x80\x02}(" + s("k") + b"u."), "odd number")
    h["duplicate_key.pth"] = (zipped(state(tensor, ("w", rebuild(offset=1, shape=(15,))))), "appears twice")
    h["duplicate_flat_name.pth"] = (zipped(state(("a.w", rebuild()), ("a", b"}" + s("w") + rebuild() + b"s"))),
                                    "two tensors are named 'a.w'")
    h["not_a_dict.pth"] = (zipped(b"\x80\x02" + rebuild() + b"."), "not a dict of tensors")
    h["stop_missing.pth"] = (zipped(b"\x80\x02}"), "ends before its STOP")
    h["stop_early.pth"] = (zipped(b"\x80\x02}.}."), "bytes after the pickle's STOP")
    h["stack_underflow.pth"] = (zipped(b"\x80\x02R."), "empty stack")
    # Numbers and strings
    h["long4.pth"] = (zipped(b"\x80\x02\x8b\x00\x00\x00\x40" + b"\x01" * 16 + b"."), "LONG4")
    h["long1_wide.pth"] = (zipped(b"\x80\x02\x8a\x20" + b"\xff" * 32 + b"."), "LONG1 integer of 32 bytes")
    h["string_past_end.pth"] = (zipped(b"\x80\x02X\xff\xff\x0f\x00abc."), "runs past the end of the pickle")
    h["string_too_long.pth"] = (zipped(b"\x80\x02X\xff\xff\xff\x7fabc."), "strings are limited to")
    h["string_invalid_utf8.pth"] = (zipped(b"\x80\x02X\x02\x00\x00\x00\xc3\x28."), "not valid UTF-8")
    h["protocol_6.pth"] = (zipped(b"\x80\x06}."), "pickle protocol 6")
    # Lying sizes: a storage that would need 1 TB, shorter and longer records, views outside storages
    tb = 2 ** 38  # float32 elements: 1 TiB
    h["lying_storage_1tb.pth"] = (zipped(state(("w", rebuild(numel=tb, shape=(2 ** 19, 2 ** 19), stride=(2 ** 19, 1))))),
                                  "1099511627776 bytes) but its record holds 64 bytes")
    h["lying_storage_short.pth"] = (zipped(state(("w", rebuild(numel=17, shape=(17,))))), "holds 64 bytes")
    h["lying_storage_long.pth"] = (zipped(state(("w", rebuild(numel=8, shape=(8,))))), "holds 64 bytes")
    h["lying_storage_overflow.pth"] = (zipped(state(("w", rebuild(numel=2 ** 62, shape=(1,))))), "beyond any file")
    h["lying_legacy_count.pth"] = (legacy_file(state(("w", rebuild(key="1", legacy=True))), [("1", float_storage())],
                                               counts={"1": 2 ** 40}), "16 float32 elements (64 bytes) but the file counts 1099511627776")
    h["lying_legacy_numel.pth"] = (legacy_file(state(("w", rebuild(key="1", numel=2 ** 38, legacy=True))),
                                               [("1", float_storage())]), "declared with 274877906944 float32 elements (1099511627776 bytes)")
    h["view_offset_outside.pth"] = (zipped(state(("w", rebuild(offset=10, shape=(8,))))), "reaches byte 72")
    h["view_stride_outside.pth"] = (zipped(state(("w", rebuild(shape=(4, 4), stride=(5, 1))))), "reaches byte 76")
    h["view_negative_stride.pth"] = (zipped(state(("w", rebuild(shape=(4,), stride=(-1,))))), "no negative strides")
    h["view_negative_offset.pth"] = (zipped(state(("w", rebuild(offset=-4, shape=(4,))))), "not an int >= 0")
    h["view_shape_overflow.pth"] = (zipped(state(("w", rebuild(shape=(2 ** 31 - 1,) * 3, stride=(0, 0, 0))))),
                                    "overflows 64 bits")
    h["view_stride0_huge.pth"] = (zipped(state(("w", rebuild(shape=(2 ** 20, 2 ** 20), stride=(0, 0))))),
                                  "limit for such views")
    h["view_rank_9.pth"] = (zipped(state(("w", rebuild(shape=(1,) * 9, stride=(1,) * 9)))), "rank 9")
    h["view_strides_mismatch.pth"] = (zipped(state(("w", rebuild(shape=(4, 4), stride=(4,))))), "2 sizes and 1 strides")
    h["storage_two_dtypes.pth"] = (zipped(state(tensor, ("h", rebuild(storage="HalfStorage", numel=32, shape=(32,))))),
                                   "declared twice")
    h["storage_missing_record.pth"] = (zipped(state(("w", rebuild(key="7")))), "has no record")
    h["tensor_metadata_neg.pth"] = (
        zipped(state(("w", g("torch._utils", "_rebuild_tensor_v2") +
                      t(pid(), i(0), ints((16,)), ints((1,)), b"\x89", g("collections", "OrderedDict") + b")R",
                        b"}" + s("neg") + b"\x88s") + b"R"))), "'neg' is set")
    h["tensor_hooks.pth"] = (
        zipped(state(("w", g("torch._utils", "_rebuild_tensor_v2") +
                      t(pid(), i(0), ints((16,)), ints((1,)), b"\x89", b"}" + i(1) + s("hook") + b"s") + b"R"))),
        "backward hooks")
    # Zip structure
    good = state(tensor)
    h["zip_deflated_pickle.pth"] = (one_tensor_zip(good, method=8), "compressed (deflate)")
    bomb = zip_archive([("archive/data.pkl", good, 0), ("archive/data/0", b"\0" * (1 << 22), 8)])
    h["zip_bomb_deflate.pth"] = (bomb, "compressed (deflate)")
    h["zip_torchscript.pth"] = (torch_zip(good, [("0", float_storage())],
                                          extra_records=[("archive/constants.pkl", b"\x80\x02).", 0)]), "TorchScript")
    h["zip_no_data_pkl.pth"] = (zip_archive([("archive/version", b"3\n", 0)]), "no 'archive/data.pkl' record")
    h["zip_two_folders.pth"] = (torch_zip(good, [("0", float_storage())],
                                          extra_records=[("other/data.pkl", good, 0)]), "outside the archive folder")
    h["zip_no_folder.pth"] = (zip_archive([("data.pkl", good, 0)]), "not inside an archive folder")
    h["zip_duplicate_data_pkl.pth"] = (torch_zip(good, [("0", float_storage())],
                                                 extra_records=[("archive/data.pkl", good, 0)]), "appears twice")
    h["tar_format.pth"] = (b"storages" + b"\0" * 249 + b"ustar\x0000" + b"\0" * 255, "tar-format")
    h["not_a_checkpoint.pth"] = (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not a PyTorch checkpoint")
    h["pickle_without_magic.pth"] = (good, "without the legacy checkpoint magic number")
    h["legacy_protocol_1000.pth"] = (MAGIC + pickle.dumps(1000, protocol=2) + b"\x80\x02}.", "legacy protocol version 1000")
    h["legacy_storage_view.pth"] = (
        legacy_file(state(("w", g("torch._utils", "_rebuild_tensor_v2") +
                           t(t(s("storage"), g("torch", "FloatStorage"), s("1"), s("cpu"), i(16), t(s("2"), i(0), i(4))) +
                             b"Q", i(0), ints((4,)), ints((1,)), b"\x89", g("collections", "OrderedDict") + b")R") +
                           b"R")), [("1", float_storage())]), "storage view")
    h["legacy_key_not_used.pth"] = (legacy_file(state(("w", rebuild(key="1", legacy=True))),
                                                [("1", float_storage()), ("2", float_storage())]),
                                    "which the state does not use")
    h["legacy_trailing_bytes.pth"] = (legacy_file(state(("w", rebuild(key="1", legacy=True))),
                                                  [("1", float_storage())]) + b"\0" * 7, "7 bytes after the last storage")
    return h


def zip_mutations(h):
    """Single lying fields in an otherwise valid torch zip."""
    good = state(("w", rebuild()), ("b", rebuild(offset=8, shape=(8,))))
    archive = one_tensor_zip(good)
    directory = archive.index(b"PK\1\2")
    records = []
    p = directory
    while archive[p:p + 4] == b"PK\1\2":
        n, x, c = struct.unpack_from("<HHH", archive, p + 28)
        records.append((p, archive[p + 46:p + 46 + n].decode()))
        p += 46 + n + x + c
    central = dict((name, at) for at, name in records)

    def patched(edits):
        out = bytearray(archive)
        for at, fmt, value in edits:
            struct.pack_into(fmt, out, at, value)
        return bytes(out)

    data0 = central["archive/data/0"]
    size0 = struct.unpack_from("<I", archive, data0 + 24)[0]
    # data/0 claims to run over the version record and into the directory
    h["zip_size_past_directory.pth"] = (patched([(data0 + 20, "<I", size0 + 4096), (data0 + 24, "<I", size0 + 4096)]),
                                        "runs into the central directory")
    # data/0 claims 40 bytes more: it now overlaps the version record's local header
    h["zip_overlapping_entries.pth"] = (patched([(data0 + 20, "<I", size0 + 40), (data0 + 24, "<I", size0 + 40)]),
                                        "overlap")
    # two central entries pointing at one local header
    version = central["archive/version"]
    offset0 = struct.unpack_from("<I", archive, data0 + 42)[0]
    h["zip_shared_local_header.pth"] = (patched([(version + 42, "<I", offset0)]), "names another entry")
    h["zip_sizes_disagree.pth"] = (patched([(data0 + 20, "<I", size0 - 1)]), "stored with")
    h["zip_method_in_local_header.pth"] = (patched([(offset0 + 8, "<H", 8)]), "in its local header")
    h["zip_encrypted.pth"] = (patched([(data0 + 8, "<H", 1)]), "encrypted")
    end = archive.rindex(b"PK\5\6")
    h["zip_end_entry_count.pth"] = (patched([(end + 10, "<H", 3), (end + 8, "<H", 3)]), "disagrees")
    z64 = archive.rindex(b"PK\6\6")
    h["zip64_directory_offset.pth"] = (patched([(z64 + 48, "<Q", 2 ** 40), (end + 16, "<I", 0xFFFFFFFF)]),
                                       "does not end where the end record starts")
    no_locator = bytearray(archive)
    locator = archive.rindex(b"PK\6\7")
    no_locator[locator:locator + 4] = b"XXXX"
    struct.pack_into("<I", no_locator, end + 16, 0xFFFFFFFF)
    h["zip64_marker_without_locator.pth"] = (bytes(no_locator), "no ZIP64 locator")
    h["zip_truncated_half.pth"] = (archive[:len(archive) // 2], "no zip end-of-central-directory record")
    h["zip_truncated_tail.pth"] = (archive[:-1], "no zip end-of-central-directory record")
    legacy = legacy_file(state(("w", rebuild(key="1", legacy=True))), [("1", float_storage())])
    h["legacy_truncated_storage.pth"] = (legacy[:-5], "runs past the end of the file")
    h["legacy_truncated_pickle.pth"] = (legacy[:80], "truncated")


def main():
    args = sys.argv[1:]
    seeds = None
    if "--fuzz-seeds" in args:
        at = args.index("--fuzz-seeds")
        seeds = args[at + 1]
        del args[at:at + 2]
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    expected = {}
    for name, (data, tensors, skipped) in valid_files().items():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        expected[name] = {
            "tensors": {k: {"dtype": v.storage.dtype, "shape": list(v.shape),
                            "sha256": hashlib.sha256(v.contiguous_bytes()).hexdigest()} for k, v in tensors.items()},
            "skipped": skipped,
        }
    hostile = hostile_files()
    zip_mutations(hostile)
    for name, (data, refusal) in hostile.items():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        expected[name] = {"refused": refusal}
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(outdir, n)) for n in expected)
    print("%d files (%d valid, %d hostile), %d bytes" % (len(expected), len(expected) - len(hostile), len(hostile), total))
    if seeds:
        write_fuzz_seeds(seeds, outdir, expected)


def write_fuzz_seeds(seeds, outdir, expected):
    """Seeds for tests/fuzz/fuzz_torch_checkpoint.cpp: first byte odd = a whole file; even = a
    pickle the target wraps into an archive with storages data/0..3 of 16 float32 each."""
    os.makedirs(seeds, exist_ok=True)
    small = sorted(n for n in expected if os.path.getsize(os.path.join(outdir, n)) <= 4096)
    for name in small:
        with open(os.path.join(outdir, name), "rb") as f:
            data = f.read()
        with open(os.path.join(seeds, "file_" + name[:-4]), "wb") as f:
            f.write(b"\x01" + data)
    pickles = {
        "pickle_views": state(("a", rebuild()), ("t", rebuild(shape=(4, 4), stride=(1, 4))),
                              ("e", rebuild(key="1", shape=(3, 16), stride=(0, 1))),
                              ("s", rebuild(key="2", offset=5, shape=(), stride=())),
                              ("h", rebuild(key="3", storage="HalfStorage", numel=32, shape=(2, 16), stride=(16, 1)))),
        "pickle_nested": b"\x80\x02}(" + s("params_ema") + b"}(" + s("w") + rebuild() + b"u" + s("step") + i(5) + b"u.",
        "pickle_parameter": b"\x80\x02}(" + s("w") + g("torch._utils", "_rebuild_parameter") +
                            t(rebuild(), b"\x88", g("collections", "OrderedDict") + b")R") + b"Ru.",
        "pickle_memo": b"\x80\x02}q\x00(" + s("w") + rebuild() + b"q\x01" + s("v") + b"h\x01u.",
    }
    for name, data in pickles.items():
        with open(os.path.join(seeds, name), "wb") as f:
            f.write(b"\x00" + data)


if __name__ == "__main__":
    main()
