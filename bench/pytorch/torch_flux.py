#!/usr/bin/env python3
"""diffusers' FluxTransformer2DModel at FLUX.1's shapes, timed as `tessera-cli bench --shape flux-dev|flux-schnell`
times Tessera's transformer: random weights (torch.manual_seed, PyTorch's default init), bf16 on the GPU, one forward
of a tile batch timed with CUDA events after warm-up, median of --repeats; from it the transformer's share of one
step of the tiled job (tiles of the latent canvas in calls of --batch tiles, the last call the remainder, timed
apart). FLUX.1 is guidance-distilled: one evaluation per tile (dev takes the guidance scale as an input). Prints the
CSV columns of bench/pytorch/torch_sd_unet.py (Tessera's SD and FLUX rows share them).

Inputs as FluxPipeline passes them: packed latents [B, (tile/16)^2, 64] N(0,1), T5 states [B, T, 4096] N(0,1)
(T = 512 dev, 256 schnell), pooled CLIP [B, 768] N(0,1), timestep 0.5 (the model multiplies by 1000), guidance 3.5
(dev), image ids (0, row, column) of the tile's grid and zero text ids.

Modes (what a PyTorch user would write):
  eager          diffusers' default attention (F.scaled_dot_product_attention)
  graph          the same forward captured once per batch shape with torch.cuda.CUDAGraph and replayed
  compile+graph  torch.compile (inductor, default mode, dynamic=False), then the same capture

  PYTHONPATH=/path/to/diffusers/src python3 bench/pytorch/torch_flux.py --shape flux-dev --batch 1,4 \\
      --modes eager,compile+graph
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sd_unet import axis_positions, dense_peak_tflops, print_rows, time_forward  # noqa: E402

from diffusers import FluxTransformer2DModel  # noqa: E402

TEXT_TOKENS = {"flux-dev": 512, "flux-schnell": 256}


def inputs(shape, batch, latent, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    n = (latent // 2) ** 2
    t = TEXT_TOKENS[shape]
    bf = torch.bfloat16
    x = torch.randn(batch, n, 64, generator=g, device=device).to(bf)
    ctx = torch.randn(batch, t, 4096, generator=g, device=device).to(bf)
    pooled = torch.randn(batch, 768, generator=g, device=device).to(bf)
    ids = torch.zeros(latent // 2, latent // 2, 3, device=device)
    ids[..., 1] += torch.arange(latent // 2, device=device)[:, None]
    ids[..., 2] += torch.arange(latent // 2, device=device)[None, :]
    img_ids = ids.reshape(n, 3).to(bf)
    txt_ids = torch.zeros(t, 3, device=device, dtype=bf)
    timestep = torch.full((batch,), 0.5, device=device, dtype=bf)
    guidance = torch.full((batch,), 3.5, device=device, dtype=bf) if shape == "flux-dev" else None
    return dict(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled, timestep=timestep,
                img_ids=img_ids, txt_ids=txt_ids, guidance=guidance, return_dict=False)


def gflop_per_eval(model, shape, latent, device):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**inputs(shape, 1, latent, device, 0))
    return counter.get_total_flops() / 1e9


class Forward:
    def __init__(self, net, shape, mode, batch, latent, device, warmup):
        self.kw = inputs(shape, batch, latent, device, batch)
        self.net = net
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(max(warmup, 1)):
                self.eager()
            torch.cuda.synchronize()
            self.graph = None
            if mode != "eager":
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self.eager()
                torch.cuda.current_stream().wait_stream(side)
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.out = self.eager()
            torch.cuda.synchronize()
        self.prepare_s = time.perf_counter() - t0

    def eager(self):
        return self.net(**self.kw)[0]

    def __call__(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            with torch.no_grad():
                self.eager()


def row(args, net, mode, batch, gflop, device):
    latent, lt, lo = args.size // 8, args.tile // 8, args.overlap // 8
    tiles = len(axis_positions(latent, lt, lo)) ** 2
    b = min(batch, tiles)
    full, rest = tiles // b, tiles % b
    fwd = Forward(net, args.shape, mode, b, lt, device, args.warmup)
    f0 = time.perf_counter()
    fwd()
    torch.cuda.synchronize()
    first_run_s = fwd.prepare_s + (time.perf_counter() - f0)
    ms, host = time_forward(fwd, args.repeats)
    rest_ms = rest_host = 0.0
    if rest:
        rem = Forward(net, args.shape, mode, rest, lt, device, args.warmup)
        rest_ms, rest_host = time_forward(rem, args.repeats)
        del rem
    free, total = torch.cuda.mem_get_info()
    prepare_s = fwd.prepare_s
    del fwd
    sec = (full * ms + rest_ms) / 1e3
    tflops = gflop * 1e9 * tiles / sec / 1e12
    name = torch.cuda.get_device_name()
    peak = args.peak_tflops or dense_peak_tflops(name)
    return dict(engine="pytorch-" + mode, shape=args.shape, size=args.size, tile=args.tile, overlap=args.overlap,
                batch=batch, cfg=1.0, unet_batch=b, precision="bf16", steps=args.steps, tiles=tiles,
                forwards_per_step=full + (1 if rest else 0), seconds_per_step=sec, seconds_per_image=sec * args.steps,
                unet_evals_per_s=tiles / sec, forward_ms=float(ms), tflops=tflops,
                fraction_of_peak=tflops / peak if peak else "", peak_tflops_assumed=float(peak) if peak else "",
                peak_mib=(total - free) / 2**20, gflop_per_eval=gflop, host_enqueue_ms_per_step=full * host + rest_host,
                prepare_s=prepare_s, first_run_s=first_run_s, graphs=mode, repeats=args.repeats, device=name,
                note=f"torch {torch.__version__}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="flux-dev", choices=TEXT_TOKENS)
    p.add_argument("--size", type=int, default=2048, help="image pixels (latent 1/8)")
    p.add_argument("--tile", type=int, default=1024, help="tile pixels, a multiple of 16")
    p.add_argument("--overlap", type=int, default=128, help="overlap pixels, a multiple of 16")
    p.add_argument("--batch", default="1,4", help="tiles per transformer call")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--modes", default="eager,graph,compile+graph")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=None)
    args = p.parse_args()
    if args.size % 16 or args.tile % 16 or args.overlap % 16 or not 0 <= args.overlap < args.tile <= args.size:
        p.error("--size, --tile and --overlap multiples of 16, the overlap below the tile, the tile within the size")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    device = "cuda"
    torch.manual_seed(args.seed)
    torch.set_default_dtype(torch.bfloat16)  # FLUX.1's 11.9 G parameters drawn in bf16 on the device
    with torch.device(device):
        model = FluxTransformer2DModel(guidance_embeds=args.shape == "flux-dev").eval()
    torch.set_default_dtype(torch.float32)
    gflop = gflop_per_eval(model, args.shape, args.tile // 8, device)
    print(f"{args.shape}: {sum(q.numel() for q in model.parameters()) / 1e9:.2f} G parameters, "
          f"{gflop:.1f} GFLOP per evaluation", file=sys.stderr, flush=True)
    print_rows(p, args, model, lambda net, mode, b: row(args, net, mode, b, gflop, device))

if __name__ == "__main__":
    sys.exit(main())
