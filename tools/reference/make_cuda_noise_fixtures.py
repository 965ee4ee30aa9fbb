#!/usr/bin/python3
"""Writes tests/data/noise/cuda_randn.json for tests/cuda/tst_torchcudarandn.cpp: torch.randn on a CUDA
generator, on the GPU this runs on, as fingerprints of the float32 outputs.

    python3 tools/reference/make_cuda_noise_fixtures.py [OUT.json]

Needs torch with CUDA and a GPU. OUT.json defaults to tests/data/noise/cuda_randn.json. The committed
file was made on an NVIDIA H200 (132 SMs x 2048 threads, T = 270,336) with torch 2.11.0+cu130.

torch lays a CUDA randn over a grid sized from the GPU (aten/src/ATen/native/cuda/DistributionTemplates.h
calc_execution_policy): tensors of more than T = multiProcessorCount * (maxThreadsPerMultiProcessor / 256)
* 256 elements take other values on a GPU with another T. The file records the GPU's SM count,
threads per SM and T; the test runs only on a GPU with the same T and skips elsewhere.

Cases, for seeds 0, 42 and 2^32 + 5, each from torch.Generator("cuda").manual_seed(seed):
[4, 64, 64] twice from one generator (the second call at Philox offset 4), [4, 256, 320] (more than T
on most GPUs: components .y and beyond), [1, 4, 128, 128] and [4, 128, 128]. An output is stored as
the SHA-256 of its float32 little-endian bytes plus samples [index, float bits]: the first and last 16
values, the values around T, 2T and 3T, and 32 spread positions. Deterministic.
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch

SEEDS = [0, 42, 2**32 + 5]
CASES = [("4x64x64 twice", [[4, 64, 64], [4, 64, 64]]), ("4x256x320", [[4, 256, 320]]),
         ("1x4x128x128", [[1, 4, 128, 128]]), ("4x128x128", [[4, 128, 128]])]


def threads_per_sm(props):
    value = getattr(props, "max_threads_per_multi_processor", None)
    if value is None:
        sys.exit("this torch does not report max_threads_per_multi_processor; use torch 2.2 or later")
    return int(value)


def fingerprint(tensor, t):
    flat = tensor.detach().to("cpu").contiguous().view(-1).numpy().astype("<f4")
    n = flat.size
    picks = set(range(min(16, n))) | set(range(max(0, n - 16), n))
    for k in (1, 2, 3):
        picks |= {i for i in range(k * t - 2, k * t + 2) if 0 <= i < n}
    picks |= {int(i) for i in np.random.RandomState(n % 1000).randint(0, n, 32)}
    bits = flat.view(np.uint32)
    return {"count": int(n), "sha256": hashlib.sha256(flat.tobytes()).hexdigest(),
            "samples": [[i, int(bits[i])] for i in sorted(picks)]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                             "tests", "data", "noise", "cuda_randn.json")
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    props = torch.cuda.get_device_properties(0)
    sms = int(props.multi_processor_count)
    per_sm = threads_per_sm(props)
    t = sms * (per_sm // 256) * 256
    cases = []
    for seed in SEEDS:
        for name, calls in CASES:
            g = torch.Generator("cuda").manual_seed(seed)
            outputs = []
            for shape in calls:
                x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
                entry = {"shape": shape, **fingerprint(x, t)}
                if hasattr(g, "get_offset"):
                    entry["offset_after"] = int(g.get_offset())
                outputs.append(entry)
            cases.append({"name": name, "seed": seed, "outputs": outputs})
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": props.name,
           "multi_processor_count": sms, "max_threads_per_multi_processor": per_sm, "thread_cap": t,
           "cases": cases}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(json.dumps({k: v for k, v in doc.items() if k != "cases"})[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"{props.name}: {sms} SMs x {per_sm} threads, T = {t}; {len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
