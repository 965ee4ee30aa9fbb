#!/usr/bin/env python3
"""The tiled text-to-image job of `tessera-cli render --model random:flux-dev|random:flux-schnell`, written the way
a PyTorch user of diffusers writes it (the job ComfyUI-TiledDiffusion's MultiDiffusion does with FLUX.1):
diffusers' FluxTransformer2DModel at FLUX.1's real config with random weights (torch.manual_seed, PyTorch's default
init, drawn in bf16 on the GPU as bench/pytorch/torch_flux.py draws them), bf16, SDPA attention.

  text    not run: the T5 states [1, 512, 4096] (schnell 256) and CLIP's pooled [1, 768] are random fixed tensors
          drawn once before timing (N(0, 1), bf16), as bench/pytorch/torch_flux.py feeds them. Tessera encodes its
          prompt with CLIP-L and T5-XXL in its prepare, not in its sampling or decode, so neither side's text
          encoders are in sample_s, decode_s or total_s; text_s and encode_s are left empty here
  sample  --steps of flow matching's Euler on the whole latent canvas (16 x size/8 x size/8, float32), as
          Tessera's runFlux (core/sampling/TiledLoop.cpp) runs it; each step: tiles of the latent canvas
          (TilePlan's rule: edge tiles snapped inside), each tile packed into 2 x 2 patches ([B, (tile/16)^2, 64],
          FluxPipeline._pack_latents), --batch tiles per transformer call, one evaluation per tile (FLUX.1 is
          guidance-distilled: dev takes --guidance as an input, embedded; schnell none), the timestep sigma (the
          model multiplies by 1000), image ids (0, row, column) of the tile's own token grid and zero text ids
          (Tessera gives each tile local ids); every tile's velocity unpacked to 16 x tile/8 x tile/8
          (FluxPipeline._unpack_latents), weighted by Tessera's default Hann window, summed into the canvas and
          divided by the summed weights, then x += (sigma_next - sigma) v (FlowMatchEulerDiscreteScheduler.step;
          Tessera's default fusion "sample" blends x + dt v_t per tile, which is the same canvas)
  decode  AutoencoderKL with FLUX.1's VAE config (16 latent channels, scaling 0.3611, shift 0.1159, no quant
          convs), random weights, bf16: latents / 0.3611 + 0.1159 decoded whole (untiled: no vae.enable_tiling(),
          FluxPipeline's default)

The schedule is FluxPipeline's: sigmas np.linspace(1, 1/steps, steps) through FLUX.1-dev's
FlowMatchEulerDiscreteScheduler config (use_dynamic_shifting, base_shift 0.5, max_shift 1.15, base_image_seq_len 256,
max_image_seq_len 4096) with mu = calculate_shift(image_seq_len) computed from the TILE's token count
((tile/16)^2 = 4,096 for a 1024-px tile: mu 1.15), as Tessera does (FlowMatchOptions.imageSeqLen = the tile's
tokens: each tile is an image of its size to the model), then a final 0; schnell unshifted (shift 1).
The blend window is Tessera's "hann" (core/sampling/BlendWindow.cpp, docs/ENGINE_SEMANTICS.md "Blend windows"):
w(i) = 0.5 - 0.5 cos(2 pi (i + 0.5) / T) over the whole tile of T latent pixels (the overlap does not enter it),
the first half computed in float64 and mirrored, stored as float32; the 2-D map wy(y) wx(x); the normaliser the
sum of the float32 maps accumulated in float64.

--compile: the transformer through torch.compile (inductor, default mode, dynamic=False) and every transformer call
replayed from a CUDA graph captured per batch shape (torch.cuda.CUDAGraph), the best a PyTorch user can write. Without
it: eager (diffusers' default attention processor, F.scaled_dot_product_attention).

--batch takes a list (e.g. 1,2): one row set per batch, each after its own warm-up job; the CUDA graphs of one batch
are dropped before the next (the compiled code is kept). The last call of a step holds the remainder of the tiles
(9 tiles at batch 2: 4 calls of 2 and one of 1). Timed with CUDA events after one warm-up job at the full size (with
--compile: the whole job, --steps steps, so that every batch shape is compiled and captured before timing; without:
2 steps); prints one CSV line per timed job in torch_sd_tiled.py's columns (sample_s, decode_s, total_s = sample_s +
decode_s, s_per_step; cfg is 1: FLUX.1 has no classifier-free guidance here) and the peak device memory
(torch.cuda.max_memory_allocated over the timed jobs, and total - free after each). Device memory: the dev
transformer is 11.9 G parameters, 23.8 GB in bf16, beside the VAE, the CUDA graphs' pools and the 2048^2 decode's
activations (the peak columns say how much in all).

  PYTHONPATH=/path/to/diffusers/src python3 bench/pytorch/torch_flux_tiled.py --shape flux-dev --size 2048 \\
      --tile 1024 --overlap 128 --steps 20 --guidance 3.5 --batch 1,2 --compile
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Tessera's tile positions, and FLUX.1's T5 lengths: one copy each, in the per-call benches beside this file.
from torch_sd_unet import axis_positions  # noqa: E402
from torch_flux import TEXT_TOKENS  # noqa: E402

from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel  # noqa: E402
from diffusers.pipelines.flux.pipeline_flux import calculate_shift  # noqa: E402

# vae/config.json of black-forest-labs/FLUX.1-dev (and schnell: the same VAE).
FLUX_VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                act_fn="silu", latent_channels=16, norm_num_groups=32, sample_size=1024, scaling_factor=0.3611,
                shift_factor=0.1159, force_upcast=True, use_quant_conv=False, use_post_quant_conv=False)
# scheduler/scheduler_config.json of FLUX.1-dev and FLUX.1-schnell.
FLUX_SCHEDULER = {
    "flux-dev": dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                     base_image_seq_len=256, max_image_seq_len=4096),
    "flux-schnell": dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False),
}
CSV_HEADER = ("engine,shape,size,tile,overlap,steps,cfg,batch,tiles,text_s,encode_s,sample_s,decode_s,total_s,"
              "s_per_step,peak_alloc_mib,peak_used_mib,device")


def hann(tile, device):
    """Tessera's default blend window as a tile x tile float32 map (core/sampling/BlendWindow.cpp axisWindow, hann):
    0.5 - 0.5 cos(2 pi (i + 0.5) / T) over the whole tile, the first half computed in float64 and mirrored."""
    i = torch.arange((tile + 1) // 2, dtype=torch.float64)
    half = (0.5 - 0.5 * torch.cos(2.0 * torch.pi * (i + 0.5) / tile)).float()
    w = torch.cat([half, half[: tile // 2].flip(0)]).to(device)
    return w[:, None] * w[None, :]


def inverse_normaliser(tiles, tile, h, w, win):
    """1 / N(p), N = the sum of the tiles' float32 weights covering p, accumulated in float64 (BlendWeights)."""
    total = torch.zeros((h, w), dtype=torch.float64, device=win.device)
    for y, x in tiles:
        total[y:y + tile, x:x + tile] += win.double()
    return (1.0 / total).float()


def pack(x):
    """[n, C, H, W] -> [n, (H/2)(W/2), 4C]: FluxPipeline._pack_latents."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(n, (h // 2) * (w // 2), c * 4)


def unpack(x, h, w):
    """[n, (H/2)(W/2), 4C] -> [n, C, H, W]: FluxPipeline._unpack_latents."""
    n, _, c4 = x.shape
    return x.reshape(n, h // 2, w // 2, c4 // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(n, c4 // 4, h, w)


def image_ids(latent, device):
    """(0, row, column) of a tile's own token grid, [(latent/2)^2, 3] bf16: FluxPipeline._prepare_latent_image_ids."""
    ids = torch.zeros(latent // 2, latent // 2, 3)
    ids[..., 1] += torch.arange(latent // 2)[:, None]
    ids[..., 2] += torch.arange(latent // 2)[None, :]
    return ids.reshape(-1, 3).to(device=device, dtype=torch.bfloat16)


def flux_sigmas(shape, steps, tile_tokens, device):
    """FluxPipeline's schedule with the tile's token count: sigmas (steps + 1, the last 0) on the device."""
    sched = FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER[shape])
    c = sched.config
    mu = calculate_shift(tile_tokens, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                         c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), device=device, mu=mu)
    return sched.sigmas, mu


def run_transformer(net, kw):
    return net(hidden_states=kw["hidden_states"], encoder_hidden_states=kw["encoder_hidden_states"],
               pooled_projections=kw["pooled_projections"], timestep=kw["timestep"], img_ids=kw["img_ids"],
               txt_ids=kw["txt_ids"], guidance=kw["guidance"], return_dict=False)[0]


class GraphedFlux:
    """The transformer (compiled) replayed from one CUDA graph per batch shape: static input buffers, a capture after
    warm-up on a side stream, copies in and a replay per call. The output buffer is the graph's: it is overwritten by
    the next replay of the same shape, after the work enqueued before that replay has read it."""

    def __init__(self, net):
        self.net, self.graphs = net, {}

    def __call__(self, **kw):
        key = tuple(kw["hidden_states"].shape)
        if key not in self.graphs:
            static = {k: None if v is None else v.clone() for k, v in kw.items()}
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # compilation (once per shape), cuBLAS and cuDNN choices
                    run_transformer(self.net, static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static["out"] = run_transformer(self.net, static)
            self.graphs[key] = (graph, static)
        graph, static = self.graphs[key]
        for k, v in kw.items():
            if v is not None:
                static[k].copy_(v)
        graph.replay()
        return static["out"]


def call_transformer(net, **kw):
    if isinstance(net, GraphedFlux):
        return net(**kw)
    return run_transformer(net, kw)


def job(models, cond, shape, size, tile, overlap, steps, guidance, batch, events, device="cuda"):
    """One text-to-image job; events: objects with record() named start, sample, decode. Returns the image (bf16,
    [1, 3, size, size]) and the tile count."""
    net, vae = models
    ctx, pooled = cond
    bf = torch.bfloat16
    events["start"].record()
    with torch.no_grad():
        h = w = size // 8
        t_lat, o_lat = tile // 8, overlap // 8
        tiles = [(y, x) for y in axis_positions(h, t_lat, o_lat) for x in axis_positions(w, t_lat, o_lat)]
        win = hann(t_lat, device)
        inv_norm = inverse_normaliser(tiles, t_lat, h, w, win)
        sigmas, _ = flux_sigmas(shape, steps, (t_lat // 2) ** 2, device)
        # The conditioning of a call of n tiles: the text states and pooled vector repeated, the guidance scale
        # (dev), the tile's ids and zero text ids (FluxPipeline's inputs; the text ids [T, 3], image ids [N, 3]).
        img_ids = image_ids(t_lat, device)
        txt_ids = torch.zeros(ctx.shape[1], 3, device=device, dtype=bf)
        calls = {}
        for first in range(0, len(tiles), batch):
            n = len(tiles[first:first + batch])
            if n not in calls:
                calls[n] = dict(encoder_hidden_states=ctx.expand(n, -1, -1).contiguous(),
                                pooled_projections=pooled.expand(n, -1).contiguous(), img_ids=img_ids,
                                txt_ids=txt_ids,
                                guidance=torch.full((n,), guidance, device=device, dtype=torch.float32)
                                if shape == "flux-dev" else None)
        latents = torch.randn((1, 16, h, w), generator=torch.Generator(device).manual_seed(0), device=device,
                              dtype=torch.float32)  # FLUX's start noise is unscaled (init_noise_sigma 1)
        for k in range(steps):
            sigma = sigmas[k:k + 1]
            acc = torch.zeros_like(latents)
            for first in range(0, len(tiles), batch):
                group = tiles[first:first + batch]
                n = len(group)
                xs = torch.cat([latents[:, :, y:y + t_lat, x:x + t_lat] for y, x in group]).to(bf)
                v = call_transformer(net, hidden_states=pack(xs), timestep=sigma.expand(n), **calls[n])
                v = unpack(v, t_lat, t_lat).float()
                for i, (y, x) in enumerate(group):
                    acc[:, :, y:y + t_lat, x:x + t_lat] += v[i:i + 1] * win
            latents = latents + (sigmas[k + 1] - sigma) * (acc * inv_norm)
        events["sample"].record()
        z = latents / vae.config.scaling_factor + vae.config.shift_factor
        image = vae.decode(z.to(next(vae.parameters()).dtype)).sample
        events["decode"].record()
    return image, len(tiles)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=list(TEXT_TOKENS), default="flux-dev")
    ap.add_argument("--size", type=int, default=2048, help="square image pixels (latent 1/8), a multiple of 16")
    ap.add_argument("--tile", type=int, default=1024, help="tile pixels, a multiple of 16")
    ap.add_argument("--overlap", type=int, default=128, help="overlap pixels, a multiple of 16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--guidance", type=float, default=3.5, help="flux-dev: the embedded guidance scale")
    ap.add_argument("--batch", default="1", help="tiles per transformer call; a list (1,2) gives a row set each")
    ap.add_argument("--repeats", type=int, default=1, help="timed jobs per batch")
    ap.add_argument("--compile", action="store_true", help="torch.compile + a CUDA graph per batch shape")
    ap.add_argument("--seed", type=int, default=0, help="the random weights' and conditioning's seed")
    a = ap.parse_args()
    if a.size % 16 or a.tile % 16 or a.overlap % 16 or not 0 <= a.overlap < a.tile <= a.size:
        ap.error("--size, --tile and --overlap multiples of 16, the overlap below the tile, the tile within the size")
    if a.steps < 1 or a.repeats < 1:
        ap.error("--steps and --repeats at least 1")
    try:
        batches = [int(b) for b in a.batch.split(",") if b]
    except ValueError:
        ap.error("--batch: whole numbers separated by commas")
    if not batches or min(batches) < 1:
        ap.error("--batch: whole numbers of at least 1")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    dev = "cuda"
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = os.environ.get("TORCH_CUDNN_BENCHMARK", "1") != "0"
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)  # FLUX.1's 11.9 G parameters drawn in bf16 on the device
    with torch.device(dev):
        model = FluxTransformer2DModel(guidance_embeds=a.shape == "flux-dev").eval()
    torch.set_default_dtype(torch.float32)
    vae = AutoencoderKL(**FLUX_VAE).to(device=dev, dtype=torch.bfloat16).eval()
    g = torch.Generator(device=dev).manual_seed(a.seed + 1)
    ctx = torch.randn(1, TEXT_TOKENS[a.shape], 4096, generator=g, device=dev).to(torch.bfloat16)
    pooled = torch.randn(1, 768, generator=g, device=dev).to(torch.bfloat16)
    compiled = torch.compile(model, dynamic=False) if a.compile else None
    net = GraphedFlux(compiled) if a.compile else model
    lt, lo = a.tile // 8, a.overlap // 8
    tiles = len(axis_positions(a.size // 8, lt, lo)) ** 2
    sigmas, mu = flux_sigmas(a.shape, a.steps, (lt // 2) ** 2, dev)
    print("%s: %.2f G parameters, VAE %.1f M; %d tiles of %d px (%d tokens each), mu %.4f, sigmas %s; built in %.1f s"
          % (a.shape, sum(p.numel() for p in model.parameters()) / 1e9, sum(p.numel() for p in vae.parameters()) / 1e6,
             tiles, a.tile, (lt // 2) ** 2, mu, " ".join("%.4f" % s for s in sigmas.tolist()),
             time.perf_counter() - t0), flush=True)
    if a.shape == "flux-dev":
        print("guidance %g embedded (one evaluation per tile); text encoders not run (fixed random states)" %
              a.guidance, flush=True)
    engine = "pytorch-compile+graph" if a.compile else "pytorch-eager"
    names = ["start", "sample", "decode"]
    print(CSV_HEADER, flush=True)
    failures = 0
    for batch in batches:
        try:
            # Warm-up: with --compile the whole job (every batch shape compiled and captured); eager, 2 steps at the
            # full size (cuDNN's and cuBLAS's choices for the tile and decode shapes).
            ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
            t0 = time.perf_counter()
            job((net, vae), (ctx, pooled), a.shape, a.size, a.tile, a.overlap, a.steps if a.compile else 2,
                a.guidance, batch, ev)
            torch.cuda.synchronize()
            print("warmup_s %.1f (batch %d)" % (time.perf_counter() - t0, batch), flush=True)
            torch.cuda.reset_peak_memory_stats()
            for _ in range(a.repeats):
                ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
                wall = time.perf_counter()
                image, n = job((net, vae), (ctx, pooled), a.shape, a.size, a.tile, a.overlap, a.steps, a.guidance,
                               batch, ev)
                torch.cuda.synchronize()
                wall = time.perf_counter() - wall
                free, total = torch.cuda.mem_get_info()
                sample = ev["start"].elapsed_time(ev["sample"]) / 1000
                decode = ev["sample"].elapsed_time(ev["decode"]) / 1000
                print("%s,%s,%d,%d,%d,%d,1,%d,%d,,,%.3f,%.3f,%.3f,%.4f,%.0f,%.0f,%s" % (
                    engine, a.shape, a.size, a.tile, a.overlap, a.steps, batch, n, sample, decode, sample + decode,
                    sample / a.steps, torch.cuda.max_memory_allocated() / 2**20, (total - free) / 2**20,
                    torch.cuda.get_device_name()), flush=True)
                assert torch.isfinite(image).all(), "non-finite image"
                print("wall_s %.3f" % wall, flush=True)
                del image
        except torch.cuda.OutOfMemoryError as e:
            failures += 1
            print("%s,%s,%d,%d,%d,%d,1,%d,%d,,,failed: out of memory: %s,,,,,,%s" % (
                engine, a.shape, a.size, a.tile, a.overlap, a.steps, batch, tiles,
                str(e).splitlines()[0][:160].replace(",", ";"), torch.cuda.get_device_name()), flush=True)
        if isinstance(net, GraphedFlux):
            net.graphs.clear()  # the next batch's rows without this one's graph pools
        torch.cuda.empty_cache()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
