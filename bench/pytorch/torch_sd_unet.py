#!/usr/bin/env python3
"""diffusers' UNet2DConditionModel at Stable Diffusion 1.5 / 2.1 / XL base shapes, timed as `tessera-cli bench
--shape sd15|sd21|sdxl` times Tessera's: random weights (torch.manual_seed), fp16 on the GPU, one forward of
a tile batch (doubled when guidance is on, cfg != 1) timed with CUDA events after warm-up, median of
--repeats; from it the UNet's share of one step of the tiled job (tiles of the latent canvas in calls
of --batch tiles, the last call the remainder, timed apart). Prints the same CSV columns as Tessera's
SD rows (app/cli/bench/UNetBench.cpp sdBenchCsvHeader; tests/app/tst_bench.cpp checks they agree). SDXL's
forward also takes added_cond_kwargs: text_embeds [B, 1280] N(0,1) and time_ids (1024, 1024, 0, 0, 1024, 1024), as
Tessera's bench feeds its 2816-wide text_embeds_time.

Modes (what a PyTorch user would write):
  eager          diffusers' default attention processor (AttnProcessor2_0: F.scaled_dot_product_attention),
                 channels_last, cudnn.benchmark
  graph          the same forward captured once per batch shape with torch.cuda.CUDAGraph and replayed
  compile+graph  torch.compile (inductor, default mode, dynamic=False) of the UNet, then the same capture
                 (compiles once per distinct batch shape: about a minute or more each)

Columns as Tessera's: prepare_s = the row's warm-up forwards (cudnn.benchmark, compilation) and capture;
first_run_s = prepare_s plus the first timed-path forward; peak_mib = device memory in use by then
(total - free, as Tessera); gflop_per_eval = torch.utils.flop_counter on one sample (math attention,
so Q K^T and P V are counted as the matmuls they are); graphs = the mode.

  PYTHONPATH=/path/to/diffusers/src python3 bench/pytorch/torch_sd_unet.py --shape sd15 --batch 1,2,4 \\
      --modes eager,graph,compile+graph --cfg 7
"""
import argparse
import statistics
import sys
import time

import torch

from diffusers import UNet2DConditionModel

# unet/config.json of the published checkpoints (runwayml/stable-diffusion-v1-5, stabilityai/stable-diffusion-2-1,
# stabilityai/stable-diffusion-xl-base-1.0); the rest are the
# constructor's defaults, which are SD 1.x's.
CONFIGS = {
    "sd15": dict(sample_size=64, cross_attention_dim=768, attention_head_dim=8, use_linear_projection=False,
                 upcast_attention=False),
    "sd21": dict(sample_size=96, cross_attention_dim=1024, attention_head_dim=[5, 10, 20, 20],
                 use_linear_projection=True, upcast_attention=True),
    "sdxl": dict(sample_size=128, block_out_channels=[320, 640, 1280],
                 down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                 up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                 cross_attention_dim=2048, attention_head_dim=[5, 10, 20], transformer_layers_per_block=[1, 2, 10],
                 use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=256,
                 projection_class_embeddings_input_dim=2816),
}
NATIVE_TILE = {"sd15": 512, "sd21": 768, "sdxl": 1024}
COLS = ["engine", "shape", "size", "tile", "overlap", "batch", "cfg", "unet_batch", "precision", "steps", "tiles",
        "forwards_per_step", "seconds_per_step", "seconds_per_image", "unet_evals_per_s", "forward_ms", "tflops",
        "fraction_of_peak", "peak_tflops_assumed", "peak_mib", "gflop_per_eval", "host_enqueue_ms_per_step",
        "prepare_s", "first_run_s", "graphs", "repeats", "device", "note"]
CONTEXT_TOKENS = 77


def axis_positions(length, tile, overlap):
    """core/sampling/TilePlan.cpp TilePlan::axisPositions: edge tiles snapped inside, never shrunk."""
    effective = min(tile, length)
    stride = tile - overlap
    pos = [0]
    if effective < tile or stride <= 0:
        return pos
    p = stride
    while p + effective < length:
        pos.append(p)
        p += stride
    if pos[-1] + effective < length:
        pos.append(length - effective)
    return sorted(set(pos))


def dense_peak_tflops(name):
    """app/cli/bench/BenchTable.cpp denseTensorPeakTflops: datasheet dense fp16/bf16 tensor peak."""
    if "H100" in name:
        return 756.0 if "PCIe" in name else (835.0 if "NVL" in name else 989.0)
    for part, peak in (("H200", 989.0), ("GH200", 989.0), ("A100", 312.0), ("L40S", 362.0), ("A10G", 70.0),
                       ("RTX 4090", 165.0)):
        if part in name:
            return peak
    return None


def inputs(unet, batch, latent, device, seed):
    """sample, timestep, context and (SDXL) added_cond_kwargs, else None."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(batch, 4, latent, latent, generator=g, device=device).half().contiguous(
        memory_format=torch.channels_last)
    t = torch.full((batch,), 500, dtype=torch.long, device=device)
    ctx = torch.randn(batch, CONTEXT_TOKENS, unet.config.cross_attention_dim, generator=g, device=device).half()
    added = None
    if unet.config.addition_embed_type == "text_time":
        pooled = unet.config.projection_class_embeddings_input_dim - 6 * unet.config.addition_time_embed_dim
        size = float(latent * 8)
        added = {"text_embeds": torch.randn(batch, pooled, generator=g, device=device).half(),
                 "time_ids": torch.tensor([[size, size, 0.0, 0.0, size, size]] * batch, device=device).half()}
    return x, t, ctx, added


def gflop_per_eval(unet, latent, device):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    x, t, ctx, added = inputs(unet, 1, latent, device, 0)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        unet(x, t, encoder_hidden_states=ctx, added_cond_kwargs=added, return_dict=False)
    return counter.get_total_flops() / 1e9


class Forward:
    """One batch shape in one mode: the callable that runs (or replays) the forward."""

    def __init__(self, net, mode, batch, latent, device, warmup):
        self.x, self.t, self.ctx, self.added = inputs(net_of(net), batch, latent, device, batch)
        self.net = net
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(max(warmup, 1)):  # cudnn.benchmark, compilation
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
        return self.net(self.x, self.t, encoder_hidden_states=self.ctx, added_cond_kwargs=self.added,
                        return_dict=False)[0]

    def __call__(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            with torch.no_grad():
                self.eager()


def net_of(net):
    """The nn.Module behind a torch.compile wrapper (for its config)."""
    return getattr(net, "_orig_mod", net)


def time_forward(fn, repeats):
    """Median GPU ms (CUDA events around each forward, each waited for) and median host ms."""
    gpu, host = [], []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        h0 = time.perf_counter()
        fn()
        h1 = time.perf_counter()
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end))
        host.append((h1 - h0) * 1e3)
    return statistics.median(gpu), statistics.median(host)


def row(args, net, mode, batch, gflop, device):
    latent, lt, lo = args.size // 8, args.tile // 8, args.overlap // 8
    tiles = len(axis_positions(latent, lt, lo)) ** 2
    guidance = args.cfg != 1.0
    factor = 2 if guidance else 1
    b = min(batch, tiles)
    full, rest = tiles // b, tiles % b
    fwd = Forward(net, mode, b * factor, lt, device, args.warmup)
    f0 = time.perf_counter()
    fwd()
    torch.cuda.synchronize()
    first_run_s = fwd.prepare_s + (time.perf_counter() - f0)
    ms, host = time_forward(fwd, args.repeats)
    rest_ms = rest_host = 0.0
    if rest:
        rem = Forward(net, mode, rest * factor, lt, device, args.warmup)
        rest_ms, rest_host = time_forward(rem, args.repeats)
        del rem
    prepare_s = fwd.prepare_s
    free, total = torch.cuda.mem_get_info()
    del fwd
    sec = (full * ms + rest_ms) / 1e3
    evals = tiles * factor
    tflops = gflop * 1e9 * evals / sec / 1e12
    name = torch.cuda.get_device_name()
    peak = args.peak_tflops or dense_peak_tflops(name)
    return dict(engine="pytorch-" + mode, shape=args.shape, size=args.size, tile=args.tile, overlap=args.overlap,
                batch=batch, cfg=float(args.cfg), unet_batch=b * factor, precision="fp16", steps=args.steps,
                tiles=tiles, forwards_per_step=full + (1 if rest else 0), seconds_per_step=sec,
                seconds_per_image=sec * args.steps, unet_evals_per_s=evals / sec, forward_ms=float(ms), tflops=tflops,
                fraction_of_peak=tflops / peak if peak else "", peak_tflops_assumed=float(peak) if peak else "",
                peak_mib=(total - free) / 2**20, gflop_per_eval=gflop, host_enqueue_ms_per_step=full * host + rest_host,
                prepare_s=prepare_s, first_run_s=first_run_s, graphs=mode, repeats=args.repeats, device=name,
                note=f"torch {torch.__version__}")


def csv_field(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="sd15", choices=CONFIGS)
    p.add_argument("--size", type=int, default=2048, help="image pixels (latent 1/8)")
    p.add_argument("--tile", type=int, default=None, help="tile pixels (default 512 sd15, 768 sd21, 1024 sdxl)")
    p.add_argument("--overlap", type=int, default=None, help="overlap pixels (default tile/8)")
    p.add_argument("--batch", default="1,2,4", help="tiles per UNet call")
    p.add_argument("--cfg", type=float, default=7.0, help="guidance scale; not 1: two evaluations per tile")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--modes", default="eager,graph,compile+graph")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3, help="untimed forwards per batch shape")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=None)
    args = p.parse_args()
    args.tile = args.tile or NATIVE_TILE[args.shape]
    args.overlap = args.tile // 8 if args.overlap is None else args.overlap
    if args.size % 8 or args.tile % 64 or args.overlap % 8 or not 0 <= args.overlap < args.tile <= args.size:
        p.error("--size a multiple of 8, --tile a multiple of 64 no larger than --size, --overlap a multiple of 8 "
                "below --tile (pixels)")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    device = "cuda"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    with torch.device(device):
        unet = UNet2DConditionModel(**CONFIGS[args.shape])
    unet = unet.half().to(memory_format=torch.channels_last).eval()
    gflop = gflop_per_eval(unet, args.tile // 8, device)
    print(f"{args.shape}: {sum(q.numel() for q in unet.parameters()) / 1e6:.1f} M parameters, "
          f"{gflop:.1f} GFLOP per evaluation", file=sys.stderr, flush=True)
    print_rows(p, args, unet, lambda net, mode, b: row(args, net, mode, b, gflop, device))


def print_rows(parser, args, model, make_row):
    """The CSV header, then a row per (mode, batch): make_row(net, mode, batch), the model compiled once for
    compile+graph; a batch that runs out of device memory is a row saying so."""
    print(",".join(COLS), flush=True)
    compiled = None
    for mode in args.modes.split(","):
        if mode not in ("eager", "graph", "compile+graph"):
            parser.error(f"--modes: {mode!r} is not one of eager, graph, compile+graph")
        if mode == "compile+graph" and compiled is None:
            compiled = torch.compile(model, dynamic=False)
        net = compiled if mode == "compile+graph" else model
        for b in [int(v) for v in args.batch.split(",")]:
            try:
                r = make_row(net, mode, b)
            except torch.cuda.OutOfMemoryError as e:
                r = {c: "" for c in COLS}
                r.update(engine="pytorch-" + mode, shape=args.shape, batch=b, graphs=mode,
                         note="failed: out of memory: " + str(e).splitlines()[0])
            print(",".join(csv_field(r[c]) for c in COLS), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
