#!/usr/bin/python3
"""Textual-inversion embedding fixtures of tests/data/embeddings (core/models/clip/TextualInversionFile.h,
tests/core/tst_embeddings.cpp).

    /usr/bin/python3 tools/reference/make_embedding_fixtures.py OUTDIR

OUTDIR belongs at tests/data/embeddings. Every file's name starts with "ti-": tests/data is the models
folder of the test pipelines (tests/data/sdpipeline/sd1 lies in it), so its embeddings/ is searched by
every run of them, and no test prompt should name a fixture by accident. Needs numpy and torch (Debian 12's python3-torch 1.13 is
enough); deterministic. It writes one small file per format A1111 reads
(modules/textual_inversion/textual_inversion.py EmbeddingDatabase.load_from_file and
create_embedding_from_data), for the tiny text encoders of tests/data/sdpipeline/sd1 (width 8) and
tests/data/sdxlpipeline (clip_l width 2, clip_g width 4), and files A1111 would not use:

  good/ti-a1111.pt          torch.save of A1111's Embedding.save dict: string_to_param {"*": [3, 8]},
                         string_to_token, name, step, sd_checkpoint, sd_checkpoint_name (zip format)
  good/ti-a1111param.pt     the same with an nn.Parameter (requires_grad), as a training run saves it
  good/ti-legacy.pt         string_to_param {"*": [2, 8]} in torch's legacy (non-zip) format
  good/ti-embparams.safetensors   {"emb_params": [2, 8]} (float16)
  good/ti-concept.bin       diffusers' concept file {"<cat-toy>": [8]} (one vector)
  good/ti-sdxl.safetensors  {"clip_l": [2, 2], "clip_g": [2, 4]}
  bad/ti-wide.safetensors   {"emb_params": [1, 1024]}: an SD 2.x width
  bad/ti-huge.safetensors   {"emb_params": [76, 8]}: more vectors than one 75-token chunk holds
  bad/ti-two.safetensors    two tensors, neither string_to_param nor clip_l/clip_g
  bad/ti-nan.safetensors    a NaN value
  bad/ti-int.safetensors    an I64 tensor
  bad/ti-mismatch.safetensors  clip_l [2, 2] and clip_g [3, 4]
  bad/ti-evil.pt            a torch.save zip whose pickle would call os.system (written, never loaded)
  bad/ti-paramdict.pt       string_to_param as a torch.nn.ParameterDict (a class the restricted reader
                         refuses; A1111 unwraps its _parameters)
  bad/ti-empty.pt           zero bytes (A1111 skips empty files)

Every file is the same bytes on every run but legacy.pt, whose storage keys torch takes from memory
addresses. cases.json lists every good file's name, vector count, widths by encoder key, values (row-major float32
as read back, float16 rounded where stored so) and the sha256 of the whole file (A1111's TI hash is its
first 12 hex digits).
"""
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np
import torch


def safetensors_bytes(tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        dtype = {np.float32: "F32", np.float16: "F16", np.int64: "I64"}[array.dtype.type]
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def torch_bytes(obj, zip_format=True):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zip_format)
    return buf.getvalue()


def a1111_dict(vec, name):
    # modules/textual_inversion/textual_inversion.py Embedding.save
    return {
        "string_to_token": {"*": 265},
        "string_to_param": {"*": vec},
        "name": name,
        "step": 100,
        "sd_checkpoint": "0123456789",
        "sd_checkpoint_name": "tiny",
    }


def main(out):
    rng = np.random.RandomState(20241129)
    cases = []

    def good(rel, data, vectors, by_encoder):
        path = os.path.join(out, rel)
        write(path, data)
        cases.append({
            "file": rel,
            "name": os.path.splitext(os.path.basename(rel))[0],
            "vectors": vectors,
            "encoders": {k: {"width": int(v.shape[-1]), "values": [float(x) for x in v.astype(np.float32).ravel()]}
                         for k, v in by_encoder.items()},
            "sha256": hashlib.sha256(data).hexdigest(),
        })

    v = rng.standard_normal((3, 8)).astype(np.float32)
    good("good/ti-a1111.pt", torch_bytes(a1111_dict(torch.from_numpy(v.copy()), "a1111")), 3, {"": v})
    v = rng.standard_normal((1, 8)).astype(np.float32)
    param = torch.nn.Parameter(torch.from_numpy(v.copy()), requires_grad=True)
    good("good/ti-a1111param.pt", torch_bytes(a1111_dict(param, "a1111param")), 1, {"": v})
    v = rng.standard_normal((2, 8)).astype(np.float32)
    good("good/ti-legacy.pt", torch_bytes(a1111_dict(torch.from_numpy(v.copy()), "legacy"), zip_format=False), 2, {"": v})
    v = rng.standard_normal((2, 8)).astype(np.float16)
    good("good/ti-embparams.safetensors", safetensors_bytes({"emb_params": v}), 2, {"": v})
    v = rng.standard_normal((8,)).astype(np.float32)
    good("good/ti-concept.bin", torch_bytes({"<cat-toy>": torch.from_numpy(v.copy())}), 1, {"": v.reshape(1, 8)})
    l = rng.standard_normal((2, 2)).astype(np.float32)
    g = rng.standard_normal((2, 4)).astype(np.float32)
    good("good/ti-sdxl.safetensors", safetensors_bytes({"clip_g": g, "clip_l": l}), 2, {"clip_l": l, "clip_g": g})

    write(os.path.join(out, "bad/ti-wide.safetensors"),
          safetensors_bytes({"emb_params": rng.standard_normal((1, 1024)).astype(np.float32)}))
    write(os.path.join(out, "bad/ti-huge.safetensors"),
          safetensors_bytes({"emb_params": rng.standard_normal((76, 8)).astype(np.float32)}))
    write(os.path.join(out, "bad/ti-two.safetensors"),
          safetensors_bytes({"a": np.ones((1, 8), np.float32), "b": np.ones((1, 8), np.float32)}))
    nan = np.ones((1, 8), np.float32)
    nan[0, 3] = np.nan
    write(os.path.join(out, "bad/ti-nan.safetensors"), safetensors_bytes({"emb_params": nan}))
    write(os.path.join(out, "bad/ti-int.safetensors"), safetensors_bytes({"emb_params": np.ones((1, 8), np.int64)}))
    write(os.path.join(out, "bad/ti-mismatch.safetensors"),
          safetensors_bytes({"clip_l": np.ones((2, 2), np.float32), "clip_g": np.ones((3, 4), np.float32)}))
    # GLOBAL 'posix system', the argument, REDUCE: what a malicious .pt holds, as the data.pkl of a
    # torch.save zip. Only written, never loaded.
    evil = b"\x80\x02" + b"cposix\nsystem\n" + b"X\x0a\x00\x00\x00echo pwned\x85R" + b"."
    source = zipfile.ZipFile(io.BytesIO(torch_bytes({"name": "evil"})))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for info in source.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=(2024, 1, 1, 0, 0, 0))
            z.writestr(entry, evil if info.filename.endswith("/data.pkl") else source.read(info))
    write(os.path.join(out, "bad/ti-evil.pt"), buf.getvalue())
    pd = torch.nn.ParameterDict({"*": torch.nn.Parameter(torch.ones(1, 8))})
    write(os.path.join(out, "bad/ti-paramdict.pt"), torch_bytes({"string_to_param": pd, "name": "paramdict"}))
    write(os.path.join(out, "bad/ti-empty.pt"), b"")

    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"generator": "tools/reference/make_embedding_fixtures.py", "torch": torch.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
