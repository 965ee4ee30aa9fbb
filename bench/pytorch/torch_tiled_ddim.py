#!/usr/bin/env python3
"""What a PyTorch user would write for tiled DDIM sampling, timed three ways.

Same network shape (diffusers UNet2DModel names and semantics, random weights), same tiling
(tile, overlap, Hann window, MultiDiffusion fusion), same DDIM schedule as `tessera-cli bench`:
  eager          fp16, channels_last, cudnn.benchmark
  graph          the whole denoising step captured once with torch.cuda.CUDAGraph, replayed per step
  compile+graph  torch.compile (inductor, default mode, dynamic=False) of the UNet, then the same capture
                 (max-autotune spent minutes per batch size autotuning; the default mode compiles in
                 about a minute per distinct batch shape)
Prints CSV with the same columns as tessera-cli bench. Times with CUDA events after warm-up.

  python3 bench/pytorch/torch_tiled_ddim.py --shape cifar --size 1024 --tile 64 --overlap 16 --batch 1,8,32 \
      --steps 20 --modes eager,graph,compile
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    # block_out_channels, down types, up types, attention head dim (None = one head)
    "cifar": dict(ch=[128, 256, 256, 256], down=["D", "A", "D", "D"], up=["U", "U", "A", "U"]),
    "church": dict(ch=[128, 128, 256, 256, 512, 512], down=["D", "D", "D", "D", "A", "D"],
                   up=["U", "A", "U", "U", "U", "U"]),
}


class Resnet(nn.Module):
    def __init__(self, cin, cout, temb, groups=32, eps=1e-6):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        s = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return s + h


class Attention(nn.Module):
    def __init__(self, c, groups=32, eps=1e-6):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=eps)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.group_norm(x).reshape(b, c, h * w).transpose(1, 2)
        q, k, v = self.to_q(t), self.to_k(t), self.to_v(t)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        else:  # older PyTorch (1.x): the same computation, unfused
            o = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(c), dim=-1) @ v
        o = self.to_out[0](o).transpose(1, 2).reshape(b, c, h, w)
        return o + x


class UNet2D(nn.Module):
    """diffusers UNet2DModel (google/ddpm style: freq_shift 1, flip false, downsample_padding 0)."""

    def __init__(self, ch, down, up, layers=2):
        super().__init__()
        c0, temb = ch[0], 4 * ch[0]
        self.c0 = c0
        self.conv_in = nn.Conv2d(3, c0, 3, padding=1)
        self.time_embedding = nn.Sequential(nn.Linear(c0, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.down_blocks = nn.ModuleList()
        skips = [c0]
        cin = c0
        for i, (c, kind) in enumerate(zip(ch, down)):
            blk = nn.Module()
            blk.resnets = nn.ModuleList([Resnet(cin if j == 0 else c, c, temb) for j in range(layers)])
            blk.attentions = nn.ModuleList([Attention(c) for _ in range(layers)]) if kind == "A" else None
            skips += [c] * layers
            blk.down = nn.Conv2d(c, c, 3, stride=2) if i < len(ch) - 1 else None
            if blk.down is not None:
                skips.append(c)
            self.down_blocks.append(blk)
            cin = c
        self.mid_res0 = Resnet(cin, cin, temb)
        self.mid_attn = Attention(cin)
        self.mid_res1 = Resnet(cin, cin, temb)
        rev = list(reversed(ch))
        self.up_blocks = nn.ModuleList()
        prev = rev[0]
        for i, (c, kind) in enumerate(zip(rev, up)):
            blk = nn.Module()
            res = []
            for j in range(layers + 1):
                s = skips.pop()
                res.append(Resnet((prev if j == 0 else c) + s, c, temb))
            blk.resnets = nn.ModuleList(res)
            blk.attentions = nn.ModuleList([Attention(c) for _ in range(layers + 1)]) if kind == "A" else None
            blk.up = nn.Conv2d(c, c, 3, padding=1) if i < len(ch) - 1 else None
            self.up_blocks.append(blk)
            prev = c
        self.conv_norm_out = nn.GroupNorm(32, c0, eps=1e-6)
        self.conv_out = nn.Conv2d(c0, 3, 3, padding=1)
        half = c0 // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / (half - 1))
        self.register_buffer("freqs", freqs)

    def forward(self, x, t):
        a = t.float()[:, None] * self.freqs[None]
        e = torch.cat([torch.sin(a), torch.cos(a)], dim=1).to(x.dtype)
        emb = self.time_embedding(e)
        h = self.conv_in(x)
        stack = [h]
        for blk in self.down_blocks:
            for j, r in enumerate(blk.resnets):
                h = r(h, emb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h)
                stack.append(h)
            if blk.down is not None:
                h = blk.down(F.pad(h, (0, 1, 0, 1)))
                stack.append(h)
        h = self.mid_res1(self.mid_attn(self.mid_res0(h, emb)), emb)
        for blk in self.up_blocks:
            for j, r in enumerate(blk.resnets):
                h = r(torch.cat([h, stack.pop()], dim=1), emb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h)
            if blk.up is not None:
                h = blk.up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.conv_norm_out(h)))


def unet_flops(model, tile):
    """2 x multiply-adds of convs, linears and attention matmuls for one tile evaluation."""
    flops = 0
    hooks = []

    def conv_hook(m, i, o):
        nonlocal flops
        flops += 2 * o.numel() // o.shape[0] * m.in_channels * m.kernel_size[0] * m.kernel_size[1]

    def attn_hook(m, i, o):
        nonlocal flops
        b, c, h, w = o.shape
        n = h * w
        flops += 2 * (4 * n * c * c + 2 * n * n * c)

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        if isinstance(m, Attention):
            hooks.append(m.register_forward_hook(attn_hook))
    with torch.no_grad():
        model(torch.zeros(1, 3, tile, tile), torch.tensor([10.0]))
    for hk in hooks:
        hk.remove()
    return flops


def tile_positions(length, tile, overlap):
    t = min(tile, length)
    s = tile - overlap
    pos, p = [], 0
    while p + t < length:
        pos.append(p)
        p += s
    pos.append(length - t)
    return sorted(set(pos))


def hann(t, device):
    i = torch.arange(t, dtype=torch.float64, device=device)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * (i + 0.5) / t)).float()


def ddim_coefficients(steps, tn=1000):
    betas = torch.linspace(1e-4, 0.02, tn, dtype=torch.float32)
    ac = torch.cumprod(1.0 - betas, dim=0).double()
    r = tn // steps
    ts = [k * r for k in range(steps - 1, -1, -1)]
    coef = []
    for t in ts:
        at = ac[t].item()
        ap = ac[t - r].item() if t - r >= 0 else 1.0
        # x0 = (x - sqrt(1-at) eps)/sqrt(at), clip; xprev = sqrt(ap) x0 + sqrt(1-ap) eps
        coef.append([t, 1 / math.sqrt(at), -math.sqrt(1 - at) / math.sqrt(at), math.sqrt(ap), math.sqrt(1 - ap)])
    return torch.tensor(coef, dtype=torch.float32)


class TiledDDIM:
    def __init__(self, model, size, tile, overlap, batch, steps, device, dtype=torch.float16):
        self.model, self.size, self.tile, self.batch, self.steps = model, size, tile, batch, steps
        self.dtype = dtype
        ys, xs = tile_positions(size, tile, overlap), tile_positions(size, tile, overlap)
        self.rects = [(y, x) for y in ys for x in xs]
        w1 = hann(tile, device)
        self.w = (w1[:, None] * w1[None, :])[None, None]  # [1,1,T,T]
        norm = torch.zeros(1, 1, size, size, device=device)
        for y, x in self.rects:
            norm[..., y:y + tile, x:x + tile] += self.w[0]
        self.inv_norm = 1.0 / norm
        # flat gather indices per batch: [B, 3, T, T] into the canvas [3, H, W]
        c = torch.arange(3, device=device)[:, None, None]
        iy = torch.arange(tile, device=device)[None, :, None]
        ix = torch.arange(tile, device=device)[None, None, :]
        self.batches = []
        for b0 in range(0, len(self.rects), batch):
            idx = torch.stack([(c * size + (y + iy)) * size + (x + ix) for y, x in self.rects[b0:b0 + batch]])
            self.batches.append(idx.reshape(-1))
        self.coef = ddim_coefficients(steps).to(device)
        self.x = torch.randn(3 * size * size, device=device, generator=torch.Generator(device).manual_seed(0))
        self.acc = torch.zeros_like(self.x)
        self.k = torch.zeros((), dtype=torch.long, device=device)
        self.wflat = self.w.expand(1, 3, tile, tile).reshape(-1)

    def step(self):
        """One denoising step; every per-step scalar read from device memory (capturable).

        No host synchronisation may happen here: `coef[k]` with a 0-d device tensor k copies k to
        the host (illegal while a stream captures), so the row is picked with index_select and its
        entries used as 0-d device tensors; gathers use index_select, not Python indexing."""
        cf = self.coef.index_select(0, self.k.view(1)).view(-1)  # [5] on the device
        t, a_x, a_eps, b_x0, b_eps = cf[0], cf[1], cf[2], cf[3], cf[4]  # 0-d views, no copy to host
        self.acc.zero_()
        for idx in self.batches:
            n = idx.numel() // (3 * self.tile * self.tile)
            xt = self.x.index_select(0, idx)
            inp = xt.view(n, 3, self.tile, self.tile).to(self.dtype).contiguous(memory_format=torch.channels_last)
            eps = self.model(inp, t.expand(n)).float().contiguous().view(-1)
            x0 = (a_x * xt + a_eps * eps).clamp_(-1, 1)
            xprev = b_x0 * x0 + b_eps * eps
            self.acc.index_add_(0, idx, xprev * self.wflat.repeat(n))
        self.x.copy_(self.acc * self.inv_norm.expand(1, 3, self.size, self.size).reshape(-1))
        self.k.add_(1)


def run(args, shape, batch, mode, device):
    torch.manual_seed(0)
    cuda = device.startswith("cuda")
    # fp16 on the GPU; the CPU path (a smoke test of the step's code, eager only) runs fp32,
    # since CPU convolutions have no fp16 kernels in older PyTorch.
    dtype = torch.float16 if cuda else torch.float32
    if not cuda and mode != "eager":
        raise SystemExit(f"mode {mode} needs CUDA (--device cuda)")
    cfg = SHAPES[shape]
    model = UNet2D(cfg["ch"], cfg["down"], cfg["up"])
    flops = unet_flops(model, args.tile)
    model = model.to(device).to(dtype).to(memory_format=torch.channels_last).eval()
    net = model
    if mode == "compile":
        # Default inductor mode: max-autotune(-no-cudagraphs) autotuned for minutes per batch size.
        net = torch.compile(model, dynamic=False)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    s = TiledDDIM(net, args.size, args.tile, args.overlap, batch, args.steps, device, dtype)
    tiles = len(s.rects)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        t0 = time.perf_counter()
        # warm-up: compile / cudnn.benchmark / capture, outside the timed region
        for _ in range(args.warmup):
            s.k.zero_()
            s.step()
        graph = None
        if mode in ("graph", "compile"):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                s.k.zero_()
                s.step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                s.step()
        sync()
        prepare_s = time.perf_counter() - t0
        totals, enqueue = [], []
        used = 0.0  # device memory in use by the process (context, cuDNN/cuBLAS, cache): as Tessera's peak
        for rep in range(args.repeats):
            s.k.zero_()
            sync()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            w0 = time.perf_counter()
            for _ in range(args.steps):
                h0 = time.perf_counter()
                if graph is not None:
                    graph.replay()
                else:
                    s.step()
                enqueue.append((time.perf_counter() - h0) * 1e3)
            if cuda:
                end.record()
                torch.cuda.synchronize()
                totals.append(start.elapsed_time(end) / 1e3)
                free, total = torch.cuda.mem_get_info()
                used = max(used, (total - free) / 2**20)
            else:
                totals.append(time.perf_counter() - w0)
    if not torch.isfinite(s.x).all():
        print(f"warning: non-finite values in the final canvas ({mode}, B={batch})", file=sys.stderr)
    sec = statistics.median(totals)
    evals = tiles * args.steps
    tflops = flops * evals / sec / 1e12
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    return dict(engine="pytorch-" + mode, shape=shape, size=args.size, tile=args.tile, overlap=args.overlap,
                batch=batch, precision="fp16" if cuda else "fp32", steps=args.steps, tiles=tiles,
                seconds_per_image=sec, tile_evals_per_s=evals / sec, tflops=tflops, peak_mib=peak,
                host_enqueue_ms_per_step=statistics.median(enqueue), prepare_s=prepare_s,
                gflop_per_eval=flops / 1e9, device_used_mib=used)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="cifar", choices=SHAPES)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--tile", type=int, default=64)
    p.add_argument("--overlap", type=int, default=16)
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--modes", default="eager,graph,compile")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="eager warm-up steps before capture/timing")
    p.add_argument("--device", default="cuda", help="cuda (fp16, all modes) or cpu (fp32 smoke test, eager)")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    device = args.device
    cols = ["engine", "shape", "size", "tile", "overlap", "batch", "precision", "steps", "tiles",
            "seconds_per_image", "tile_evals_per_s", "tflops", "peak_mib", "host_enqueue_ms_per_step",
            "prepare_s", "gflop_per_eval", "device_used_mib"]
    print(",".join(cols), flush=True)
    for mode in args.modes.split(","):
        for b in [int(v) for v in args.batch.split(",")]:
            r = run(args, args.shape, b, mode, device)
            print(",".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols), flush=True)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
