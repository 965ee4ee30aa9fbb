#!/usr/bin/env python3
"""softmax(Q K^T / sqrt(d)) V alone at the attention shapes of the SD UNets, through each of PyTorch's
SDPA backends (flash, memory-efficient, cuDNN), fp16, Q/K/V as diffusers lays them out ([B, S, H*D]
viewed as [B, H, S, D]). CUDA events, median (and min-max) of --repeats after --warmup calls; one CSV
line per shape x backend: shape,batch,heads,queries,keys,head_dim,backend,median_ms,min_ms,max_ms,tflops.
A backend that refuses a shape prints its error instead of a time. The same shapes as Tessera's
`TESSERA_FLASH_PERF=1 cuda_tst_flashattention perf` (at TESSERA_FLASH_PERF_BATCH) and the SD UNet's.

  python3 bench/pytorch/torch_attention.py --batch 16 --repeats 20
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, heads, queries, keys, head dim (batch from --batch unless given)
    ("sd15 self d40 4096", 8, 4096, 4096, 40),
    ("sd15 self d80 1024", 8, 1024, 1024, 80),
    ("sd15 self d160 256", 8, 256, 256, 160),
    ("sd15 cross d40 4096 x 77", 8, 4096, 77, 40),
    ("sd15 cross d80 1024 x 77", 8, 1024, 77, 80),
    ("sdxl self d64 4096", 10, 4096, 4096, 64),
    ("sdxl self d64 1024", 20, 1024, 1024, 64),
    ("sdxl cross d64 4096 x 77", 10, 4096, 77, 64),
]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16, help="images per call (CFG doubled tiles)")
    p.add_argument("--sdxl-batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    print("shape,batch,heads,queries,keys,head_dim,backend,median_ms,min_ms,max_ms,tflops")
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, heads, nq, nk, d in SHAPES:
        batch = a.sdxl_batch if name.startswith("sdxl") else a.batch
        q = torch.randn(batch, nq, heads * d, device="cuda", dtype=torch.float16, generator=g)
        k = torch.randn(batch, nk, heads * d, device="cuda", dtype=torch.float16, generator=g)
        v = torch.randn(batch, nk, heads * d, device="cuda", dtype=torch.float16, generator=g)
        qh, kh, vh = (t.view(batch, -1, heads, d).transpose(1, 2) for t in (q, k, v))
        flops = 4.0 * batch * heads * nq * nk * d
        for bname, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend):
                    med, lo, hi = time_ms(lambda: F.scaled_dot_product_attention(qh, kh, vh), a.warmup, a.repeats)
                print(f"{name},{batch},{heads},{nq},{nk},{d},{bname},{med:.4f},{lo:.4f},{hi:.4f},"
                      f"{flops / (med * 1e-3) / 1e12:.1f}")
            except Exception as e:  # a backend that does not take the shape
                print(f"{name},{batch},{heads},{nq},{nk},{d},{bname},refused: {str(e).splitlines()[0][:120]}")


if __name__ == "__main__":
    main()
