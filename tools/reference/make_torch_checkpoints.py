#!/usr/bin/env python3
"""Real PyTorch checkpoint files for Tessera's restricted checkpoint reader (core/formats/TorchCheckpoint.h).

    python3 tools/reference/make_torch_checkpoints.py OUTDIR

OUTDIR belongs at tests/data/pickles/torch. Needs torch; no network. Each file is written by torch.save
itself (torch/serialization.py _save and _legacy_save), so the opcodes, persistent ids, storage layout and
zip records are exactly what users' files hold. expected.json lists, per file, every tensor the state dict
holds after flattening nested dicts with "." (the path of keys), with its dtype, shape, stride, storage
offset and the SHA-256 of its values as contiguous little-endian bytes, and what torch.load(weights_only=True)
made of the file (accepted, or the start of its refusal).

Files:
  plain_zip.pth          {name: float32 tensor}, zip format, the default archive name (the file's stem)
  plain_bytesio.pth      the same saved through io.BytesIO (archive name "archive")
  plain_legacy.pth       the same, legacy format (_use_new_zipfile_serialization=False)
  dtypes.pth             float16, bfloat16, float64, int64 and bool tensors, a 0-d tensor and an empty one
  views.pth              tensors sharing one storage: a transpose, a slice with an offset, a strided
                         view (every other column), a view of the whole, and an expand (stride 0)
  nested.pth             {"params_ema": {...}, "params": {...}, "iter": 5, "note": "text", "lr": 0.5,
                         "shape": torch.Size}: the wrappers training tools write around state dicts
  parameters.pth         dict(module.named_parameters()) (torch._utils._rebuild_parameter) with
                         "module."-prefixed keys (DataParallel)
  views_legacy.pth       views.pth in the legacy format (storages written once, views by offset)
"""
import hashlib
import io
import json
import os
import sys
from collections import OrderedDict

import torch


def tensors(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, prefix + str(k) + ".")
    elif isinstance(obj, torch.Tensor):
        yield prefix[:-1], obj


def describe(obj):
    out = {}
    for name, t in tensors(obj):
        c = t.detach().contiguous().reshape(-1)
        raw = c.view(torch.uint8).numpy().tobytes() if c.numel() else b""
        out[name] = {
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "storage_offset": t.storage_offset(),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
    return out


def weights_only_verdict(path):
    try:
        torch.load(path, weights_only=True)
        return "accepted"
    except Exception as e:  # noqa: BLE001 - the refusal's text is what is recorded
        return "refused: " + str(e).splitlines()[0][:200]


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    g = torch.Generator().manual_seed(7)

    plain = OrderedDict()
    plain["conv.weight"] = torch.randn((4, 3, 3, 3), generator=g)
    plain["conv.bias"] = torch.randn((4,), generator=g)
    plain["fc.weight"] = torch.randn((5, 7), generator=g)

    dtypes = OrderedDict()
    dtypes["half"] = torch.randn((3, 5), generator=g).half()
    dtypes["bfloat16"] = torch.randn((2, 3), generator=g).bfloat16()
    dtypes["double"] = torch.randn((4,), generator=g).double()
    dtypes["long"] = torch.arange(-3, 6, dtype=torch.int64)
    dtypes["bool"] = torch.tensor([True, False, True])
    dtypes["scalar"] = torch.tensor(2.5)
    dtypes["empty"] = torch.zeros((0, 4))

    base = torch.randn((6, 8), generator=g)
    views = OrderedDict()
    views["base"] = base
    views["transposed"] = base.t()
    views["rows_2_to_4"] = base[2:5]
    views["every_other_column"] = base[:, ::2]
    views["flat"] = base.view(48)
    views["expanded"] = torch.randn((1, 5), generator=g).expand(3, 5)

    nested = {
        "params_ema": OrderedDict((k, v.clone()) for k, v in plain.items()),
        "params": OrderedDict((k, v * 2) for k, v in plain.items()),
        "iter": 5,
        "note": "text",
        "lr": 0.5,
        "shape": torch.Size([2, 3]),
    }

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.PReLU(4))
    params = OrderedDict(("module." + k, v) for k, v in module.named_parameters())

    files = {
        "plain_zip.pth": (plain, True),
        "dtypes.pth": (dtypes, True),
        "views.pth": (views, True),
        "nested.pth": (nested, True),
        "parameters.pth": (params, True),
        "plain_legacy.pth": (plain, False),
        "views_legacy.pth": (views, False),
    }
    expected = {}
    for name, (obj, zipped) in files.items():
        path = os.path.join(outdir, name)
        torch.save(obj, path, _use_new_zipfile_serialization=zipped)
        expected[name] = {"tensors": describe(obj), "zip": zipped, "weights_only": weights_only_verdict(path)}
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    with open(os.path.join(outdir, "plain_bytesio.pth"), "wb") as f:
        f.write(buffer.getvalue())
    expected["plain_bytesio.pth"] = {"tensors": describe(plain), "zip": True,
                                     "weights_only": weights_only_verdict(os.path.join(outdir, "plain_bytesio.pth"))}
    expected["_torch"] = torch.__version__
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    for name in sorted(expected):
        if not name.startswith("_"):
            print(name, len(expected[name]["tensors"]), expected[name]["weights_only"])


if __name__ == "__main__":
    main()
