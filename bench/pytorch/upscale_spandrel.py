#!/usr/bin/env python3
"""The PyTorch peer of `tessera-cli bench --shape upscale`: an upscale model loaded through spandrel
(github:chaiNNer-org/spandrel; by default an RRDBNet of 4x-UltraSharp's shape, 64 features, 23 blocks, x4,
PyTorch's default initialisation, its state dict loaded back through spandrel's ModelLoader as a user's
file is), run the way a PyTorch user runs it at its best: fp16, channels_last, cudnn.benchmark, on a
W x H image of uniform noise (default 1024x1024, seed 0).

Tiling as ComfyUI's ImageUpscaleWithModel (comfy/utils.py tiled_scale_multidim), written in torch: tiles
of --tiles input pixels at 0, t - o, 2 (t - o), ... below S - o, the last one short, overlap 32, each
tile's output clamped to [0, 1] (spandrel's ImageModelDescriptor) and weighted by ComfyUI's feather mask
(the o x scale rows/columns nearest each edge scaled by (k + 1) / (o x scale), all four sides), summed,
divided by the summed masks; an image that fits one tile (tile 0: always) runs once. The blending runs on
the GPU in float32 (ComfyUI blends on the CPU: the GPU is the faster choice for the peer), then the whole
image goes to a float32 host tensor, as Tessera's ends in host memory.

Modes: eager (spandrel's descriptor per tile) and graph (per tile shape, the model's forward and clamp
captured once in a torch.cuda.CUDAGraph after a warm-up on a side stream, replayed per tile: the shapes
are a full tile and the short ones at the right and bottom edges).

Per (tile, mode): --warmup untimed images (the first one's wall time is first_s: cudnn.benchmark's search,
the captures), then --repeats timed ones, wall time per image (synchronised: from the host input to the
host output); median, min, max; tiles/s; TFLOP/s of the executed tiles (the model's convolutions at each
tile's size: 2 x C_in x C_out x k^2 per output pixel, as ModelGraph::flops counts) and the fraction of
--peak-tflops; the peak device memory in use (total - free, every process's, sampled every 2 ms on a
thread) and torch.cuda.max_memory_allocated / max_memory_reserved in the note. CSV columns as
`tessera-cli bench --shape upscale` (--csv FILE writes them too).

  PYTHONPATH=/path/to/spandrel/libs/spandrel python3 bench/pytorch/upscale_spandrel.py --size 1024 \\
      --tiles 256,384,512,768,0 --modes eager,graph
"""
import argparse
import itertools
import statistics
import threading
import time

import torch

import spandrel

CSV = ("engine,model,size,scale,tile,overlap,batch,precision,graphs,tiles,seconds_per_image,min_s,max_s,repeats,"
       "tiles_per_s,tflops,fraction_of_peak,peak_tflops_assumed,peak_mib,gflop_per_image,work_factor,first_s,"
       "forward_share,device,note")
# Dense fp16/bf16 tensor peaks (TFLOP/s) as app/cli/bench/BenchTable.cpp knows them.
PEAKS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0),
         ("L40S", 362.0), ("A10G", 70.0), ("RTX 4090", 165.0)]


def random_rrdbnet(features, blocks, seed):
    """spandrel's RRDBNet (ESRGAN's old layout) with PyTorch's default initialisation, saved as a state dict
    and loaded back through spandrel's ModelLoader (detection and hyperparameters as for a user's file)."""
    from spandrel.architectures.ESRGAN import ESRGAN
    torch.manual_seed(seed)
    net = ESRGAN(in_nc=3, out_nc=3, num_filters=features, num_blocks=blocks, scale=4)
    return spandrel.ModelLoader().load_from_state_dict(net.state_dict())


class ConvFlops:
    """FLOPs of the model's convolutions on an h x w input, 2 x C_in / groups x C_out x k^2 per output pixel
    (as ModelGraph::flops counts), each conv's output size from a forward of a copy on the meta device
    (nan where the architecture's forward does not run there)."""

    def __init__(self, model, in_channels):
        with torch.device("meta"):
            self.meta = type(model)(**model.hyperparameters)
        self.in_channels, self.total, self.cache = in_channels, 0.0, {}
        for m in self.meta.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.register_forward_hook(self.hook)

    def hook(self, mod, _inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1]
        self.total += 2.0 * mod.in_channels / mod.groups * mod.out_channels * k * out.shape[-2] * out.shape[-1]

    def __call__(self, h, w):
        if (h, w) not in self.cache:
            self.total = 0.0
            try:
                with torch.no_grad():
                    self.meta(torch.empty((1, self.in_channels, h, w), device="meta"))
                self.cache[(h, w)] = self.total
            except (RuntimeError, NotImplementedError):
                self.cache[(h, w)] = float("nan")
        return self.cache[(h, w)]


def comfy_tiles(h, w, tile, overlap):
    """ComfyUI tiled_scale_multidim's tiles: (y, x, height, width) in input pixels."""
    if tile <= 0 or (h <= tile and w <= tile):
        return [(0, 0, h, w)]

    def axis(size):
        if size <= tile:
            return [(0, size)]
        spans = []
        for p in range(0, size - overlap, tile - overlap):
            pos = max(0, min(size - overlap, p))
            spans.append((pos, min(tile, size - pos)))
        return spans

    return [(y, x, th, tw) for (y, th), (x, tw) in itertools.product(axis(h), axis(w))]


def feather_mask(th, tw, feather, device):
    """ComfyUI's mask of one output tile of th x tw pixels."""
    mask = torch.ones((1, 1, th, tw), device=device)
    for d, n in ((2, th), (3, tw)):
        if feather >= n:
            continue
        for t in range(feather):
            a = (t + 1) / feather
            mask.narrow(d, t, 1).mul_(a)
            mask.narrow(d, n - 1 - t, 1).mul_(a)
    return mask


class GraphedModel:
    """The model's forward and clamp replayed from one CUDA graph per input shape, the graphs sharing one
    memory pool (they never run at once, and each output is consumed before the next replay). Captured
    thread-locally: the memory sampler's thread queries the device meanwhile."""

    def __init__(self, model):
        self.model, self.graphs, self.pool = model, {}, torch.cuda.graph_pool_handle()

    def __call__(self, x):
        key = tuple(x.shape)
        if key not in self.graphs:
            static_in = x.clone().contiguous(memory_format=torch.channels_last)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):  # cudnn.benchmark's search and the allocator's warm-up, outside the capture
                    self.model(static_in).clamp_(0, 1)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool, capture_error_mode="thread_local"):
                static_out = self.model(static_in).clamp_(0, 1)
            self.graphs[key] = (g, static_in, static_out)
        g, static_in, static_out = self.graphs[key]
        static_in.copy_(x)
        g.replay()
        return static_out


def upscale(run, image, scale, tile, overlap, out_dev, div_dev, masks):
    """One image through ComfyUI-style tiling; the result in out_dev (float32, on the GPU)."""
    _, _, h, w = image.shape
    tiles = comfy_tiles(h, w, tile, overlap)
    if len(tiles) == 1:
        out_dev.copy_(run(image))
        return len(tiles)
    out_dev.zero_()
    div_dev.zero_()
    feather = overlap * scale
    for y, x, th, tw in tiles:
        ps = run(image[:, :, y:y + th, x:x + tw]).float()
        key = (th * scale, tw * scale)
        if key not in masks:
            masks[key] = feather_mask(key[0], key[1], feather, image.device)
        mask = masks[key]
        ys, xs = y * scale, x * scale
        out_dev[:, :, ys:ys + key[0], xs:xs + key[1]].add_(ps * mask)
        div_dev[:, :, ys:ys + key[0], xs:xs + key[1]].add_(mask)
    out_dev.div_(div_dev)
    return len(tiles)


class PeakSampler:
    """The device memory in use (total - free, every process's) at its peak, sampled every 2 ms."""

    def __init__(self):
        self.peak, self.stop = 0, False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.002)

    def finish(self):
        self.stop = True
        self.thread.join()
        free, total = torch.cuda.mem_get_info()
        return max(self.peak, total - free) / 2**20


def bench_row(a, descriptor, image, tile, mode, host_out, flops_of):
    scale = descriptor.scale
    dev = image.device
    model = descriptor.model
    out_dev = torch.empty((1, descriptor.output_channels, image.shape[2] * scale, image.shape[3] * scale),
                          device=dev, dtype=torch.float32)
    div_dev = torch.empty((1, 1, out_dev.shape[2], out_dev.shape[3]), device=dev, dtype=torch.float32)
    masks = {}
    if mode == "graph":
        run = GraphedModel(model)
    else:
        def run(x):
            return descriptor(x.contiguous(memory_format=torch.channels_last))
    tiles = comfy_tiles(image.shape[2], image.shape[3], tile, a.overlap)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    sampler = PeakSampler()
    seconds, first = [], 0.0
    try:
        with torch.no_grad():
            for i in range(a.warmup + a.repeats):
                t0 = time.perf_counter()
                upscale(run, image, scale, tile, a.overlap, out_dev, div_dev, masks)
                host_out.copy_(out_dev)  # synchronises: the image is in host memory
                s = time.perf_counter() - t0
                if i == 0:
                    first = s
                if i >= a.warmup:
                    seconds.append(s)
    finally:
        used = sampler.finish()
    assert torch.isfinite(host_out).all(), "non-finite image"
    flops = sum(flops_of(th, tw) for _, _, th, tw in tiles)
    whole = flops_of(image.shape[2], image.shape[3])
    med = statistics.median(seconds)
    tflops = flops / med / 1e12
    name = torch.cuda.get_device_name()
    pk = a.peak_tflops or next((v for k, v in PEAKS if all(p in name for p in k.split())), None)
    shown_tile = tile if len(tiles) > 1 else max(image.shape[2], image.shape[3])
    note = "%s; alloc peak %.0f MiB, reserved peak %.0f MiB" % (
        "whole image" if len(tiles) == 1 else "ComfyUI tiles (last ones short)",
        torch.cuda.max_memory_allocated() / 2**20, torch.cuda.max_memory_reserved() / 2**20)
    del run, masks, out_dev, div_dev
    torch.cuda.empty_cache()
    return "pytorch-upscale-%s,\"%s\",%dx%d,%d,%d,%d,1,fp16,%s,%d,%.5g,%.5g,%.5g,%d,%.5g,%.4g,%s,%s,%.5g,%.5g,%.4g,%.4g,,%s,\"%s\"" % (
        mode, a.model_name, image.shape[3], image.shape[2], scale, shown_tile, a.overlap if len(tiles) > 1 else 0,
        "on" if mode == "graph" else "off", len(tiles), med, min(seconds), max(seconds), len(seconds),
        len(tiles) / med, tflops, "%.4g" % (tflops / pk) if pk else "", "%.4g" % pk if pk else "", used,
        flops / 1e9, flops / whole, first, name, note)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1024", help="W or WxH input pixels (default 1024)")
    ap.add_argument("--tiles", default="256,384,512,768,0", help="input tile sizes; 0 = the whole image")
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--modes", default="eager,graph", help="eager, graph (a CUDA graph per tile shape)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=23)
    ap.add_argument("--upscale-model", help="a model file spandrel reads, instead of the random RRDBNet")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-tflops", type=float, help="the GPU's dense fp16 tensor peak (default: known by name)")
    ap.add_argument("--csv", help="also write the rows to this file")
    a = ap.parse_args()
    w, _, h = a.size.partition("x")
    w, h = int(w), int(h or w)
    torch.backends.cudnn.benchmark = True
    if a.upscale_model:
        descriptor = spandrel.ModelLoader().load_from_file(a.upscale_model)
        a.model_name = "%s (%s)" % (descriptor.architecture.name, a.upscale_model)
    else:
        descriptor = random_rrdbnet(a.features, a.blocks, a.seed)
        a.model_name = "ESRGAN %dx, %d features, %d blocks" % (descriptor.scale, a.features, a.blocks)
    assert descriptor.supports_half, "the model does not run in fp16 (spandrel supports_half)"
    descriptor.cuda().eval().half()
    descriptor.model.to(memory_format=torch.channels_last)
    gen = torch.Generator().manual_seed(a.seed + 1)
    image = torch.rand((1, descriptor.input_channels, h, w), generator=gen).cuda().half()
    host_out = torch.empty((1, descriptor.output_channels, h * descriptor.scale, w * descriptor.scale),
                           dtype=torch.float32)
    print("spandrel %s, torch %s, CUDA %s, cuDNN %s, %s" % (spandrel.__version__, torch.__version__,
                                                           torch.version.cuda, torch.backends.cudnn.version(),
                                                           torch.cuda.get_device_name()), flush=True)
    flops_of = ConvFlops(descriptor.model, descriptor.input_channels)
    rows = [CSV]
    print(CSV, flush=True)
    for tile in [int(t) for t in a.tiles.split(",")]:
        for mode in a.modes.split(","):
            try:
                row = bench_row(a, descriptor, image, tile, mode, host_out, flops_of)
            except (torch.OutOfMemoryError, RuntimeError) as e:
                torch.cuda.empty_cache()
                row = "pytorch-upscale-%s,\"%s\",%dx%d,%d,%d,%d,1,fp16,%s,,failed,,,%d,,,,,,,,,,%s,\"%s\"" % (
                    mode, a.model_name, w, h, descriptor.scale, tile, a.overlap, "on" if mode == "graph" else "off",
                    a.repeats, torch.cuda.get_device_name(), str(e).split("\n")[0][:160].replace('"', "'"))
            print(row, flush=True)
            rows.append(row)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
