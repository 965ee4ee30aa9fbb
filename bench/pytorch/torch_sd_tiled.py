#!/usr/bin/env python3
"""The tiled text-to-image job of `tessera-cli render --model random:sd15|random:sd21`, written the way a
PyTorch user of diffusers writes it (the job A1111's Tiled Diffusion / ComfyUI's tilers do): random
weights at the real shapes (torch.manual_seed), fp16 on the GPU, channels_last, SDPA attention.

  text    CLIPTextModel on the prompt and the negative prompt (77 ids each)
  sample  --steps of DPMSolverMultistepScheduler (DPM++ 2M, Karras sigmas) on the whole latent canvas;
          each step: tiles of the latent canvas (TilePlan's rule: edge tiles snapped inside), --batch
          tiles per UNet call, each call on the doubled batch (unconditional, conditional) when
          cfg != 1, guidance combined per tile, the noise prediction blended with a Hann window
          (Mixture of Diffusers: Tessera's --fusion noise), then one scheduler step
  decode  AutoencoderKL.decode of the whole latent (untiled, as Tessera decodes)

--shape sdxl: the SDXL base UNet (2.57 B) with its two text encoders (CLIP ViT-L hidden_states[-2] and
OpenCLIP bigG with projection, 2048 wide, pooled 1280) and added_cond_kwargs per call (text_embeds,
time_ids = the whole image's size, as Tessera's default "image" size conditioning), 1024-px tiles; the VAE
decodes in fp32 (SDXL's VAE overflows in fp16: force_upcast, as diffusers does).
--strength X: the image-to-image upscale job of `tessera-cli bench --job --strength X` instead: a synthetic start
image (Tessera's formula) encoded by the VAE (untiled), the latents noised to the first of the last X of the steps
(diffusers' img2img rule, set_begin_index). --controlnet (sd15; strength 0.5 unless given): and a ControlNetModel of
control_v11f1e_sd15_tile's config (ControlNetModel.from_unet, conditioning widths 16, 32, 96, 256) run on each
tile batch before the UNet (diffusers' StableDiffusionControlNetImg2ImgPipeline: the same rows, hint = the start
image's crop in [0, 1], its residuals into the UNet); with --compile both as one compiled module in one graph.
--compile: the UNet through torch.compile (inductor, mode "max-autotune-no-cudagraphs" off: default mode)
and every UNet call replayed from a CUDA graph captured per batch shape (torch.cuda.CUDAGraph), the best a
PyTorch user can write. --vae-only: the decode (--encode: the encode) alone, untiled and with diffusers' own
tiled pass (vae.enable_tiling()), each after one warm-up pass, CUDA events, median/min/max of --repeats (at
least 3); CSV columns as `tessera-cli bench --shape vae` (--csv FILE writes them).

Timed with CUDA events after one warm-up job at a small canvas (with --compile: at the full size, so that
every batch shape is compiled and captured before timing); prints one CSV line per phase and the
peak device memory (torch.cuda.max_memory_allocated and total - free).

  PYTHONPATH=/path/to/diffusers/src python3 bench/pytorch/torch_sd_tiled.py --shape sd15 --size 2048 \\
      --tile 512 --overlap 64 --steps 20 --cfg 7 --batch 4
"""
import argparse
import os
import math
import time

import torch

from diffusers import AutoencoderKL, ControlNetModel, DPMSolverMultistepScheduler, UNet2DConditionModel
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

# The UNet shapes, native tiles and Tessera's tile positions: one copy, in the per-call bench beside this file.
from torch_sd_unet import CONFIGS as UNETS, NATIVE_TILE, axis_positions

TEXT = {
    "sd15": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 hidden_act="quick_gelu", projection_dim=768),
    "sd21": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=23, num_attention_heads=16,
                 hidden_act="gelu", projection_dim=512),
    "sdxl": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 hidden_act="quick_gelu", projection_dim=768),
}
TEXT2_SDXL = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                  hidden_act="gelu", projection_dim=1280)
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
           up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
           latent_channels=4, norm_num_groups=32)
SCHED = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
             steps_offset=1, use_karras_sigmas=True, algorithm_type="dpmsolver++", solver_order=2)


def hann(tile, overlap, device):
    # Tessera's `hann` window (docs/ENGINE_SEMANTICS.md, core/sampling/BlendWindow.cpp): a Hann over the whole
    # tile, w(i) = 0.5 - 0.5 cos(2 pi (i + 0.5) / T), whatever the overlap (the overlap decides where tiles lie,
    # not the window's shape).
    del overlap
    i = torch.arange(tile, device=device, dtype=torch.float64)
    w = (0.5 - 0.5 * torch.cos(2 * math.pi * (i + 0.5) / tile)).to(torch.float32)
    return w[:, None] * w[None, :]


VAE_SCALE = {"sd15": 0.18215, "sd21": 0.18215, "sdxl": 0.13025}
# The released VAE configs' sample_size (SD 1.5: 512, SD 2.1-768: 768, SDXL: 1024). diffusers' tiled decode takes its
# tile size from it; AutoencoderKL's default (32) would make 32-px tiles, thousands of them at 2048 px, a decode that
# does not finish in minutes.
VAE_SAMPLE_SIZE = {"sd15": 512, "sd21": 768, "sdxl": 1024}


class ControlledUNet(torch.nn.Module):
    """A ControlNet and the UNet as one module (what StableDiffusionControlNetImg2ImgPipeline runs per call):
    the ControlNet on the same rows, its residuals added into the UNet's skips and mid block."""

    def __init__(self, controlnet, unet):
        super().__init__()
        self.controlnet, self.unet = controlnet, unet

    def forward(self, sample, t, encoder_hidden_states=None, added_cond_kwargs=None, hint=None):
        down, mid = self.controlnet(sample, t, encoder_hidden_states=encoder_hidden_states, controlnet_cond=hint,
                                    conditioning_scale=1.0, return_dict=False)
        return self.unet(sample, t, encoder_hidden_states=encoder_hidden_states, added_cond_kwargs=added_cond_kwargs,
                         down_block_additional_residuals=down, mid_block_additional_residual=mid)


class GraphedUNet:
    """The UNet (compiled or not; or a ControlledUNet) replayed from one CUDA graph per input shape: static
    input buffers, a capture after warm-up on a side stream, copies in and a replay per call."""

    def __init__(self, unet):
        self.unet, self.graphs = unet, {}

    def _call(self, static):
        kwargs = dict(encoder_hidden_states=static["context"], added_cond_kwargs=static["added"])
        if static["hint"] is not None:
            kwargs["hint"] = static["hint"]
        return self.unet(static["sample"], static["t"], **kwargs)

    def __call__(self, sample, t, context, added, hint=None):
        key = (tuple(sample.shape), tuple(context.shape), None if added is None else tuple(added["text_embeds"].shape))
        if key not in self.graphs:
            static = dict(sample=sample.clone(), t=t.clone(), context=context.clone(),
                          added=None if added is None else {k: v.clone() for k, v in added.items()},
                          hint=None if hint is None else hint.clone())
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self._call(static)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static["out"] = self._call(static).sample
            self.graphs[key] = (g, static)
        g, static = self.graphs[key]
        static["sample"].copy_(sample)
        static["t"].copy_(t)
        static["context"].copy_(context)
        if hint is not None:
            static["hint"].copy_(hint)
        if added is not None:
            for k, v in added.items():
                static["added"][k].copy_(v)
        g.replay()
        return static["out"]


def call_unet(unet, sample, t, context, pooled, size, hint=None):
    added = None
    if pooled is not None:
        ids = torch.tensor([size, size, 0, 0, size, size], device=sample.device, dtype=sample.dtype)
        added = {"text_embeds": pooled.contiguous(), "time_ids": ids.expand(sample.shape[0], -1).contiguous()}
    if isinstance(unet, GraphedUNet):
        # A graph replays device work only: the timestep lives on the device too.
        return unet(sample, torch.as_tensor(t, device=sample.device), context.contiguous(), added, hint)
    if hint is not None:
        return unet(sample, t, encoder_hidden_states=context, added_cond_kwargs=added, hint=hint).sample
    return unet(sample, t, encoder_hidden_states=context, added_cond_kwargs=added).sample


def synthetic_start_image(size, device):
    """Tessera's bench start image (app/cli/bench/JobBench.cpp syntheticStartImage), [1, 3, size, size] in [-1, 1]."""
    y = torch.arange(size, device=device, dtype=torch.float32)[:, None]
    x = torch.arange(size, device=device, dtype=torch.float32)[None, :]
    planes = [0.8 * torch.sin(0.011 * x * (c + 1) + 0.007 * y) * torch.cos(0.005 * y * (3 - c)) for c in range(3)]
    return torch.stack(planes)[None]


def job(models, shape, size, tile, overlap, steps, cfg, batch, events, strength=None):  # noqa: C901
    """strength: an image-to-image upscale with the ControlNet the UNet carries (a ControlledUNet)."""
    unet, vae, text = models
    dev = "cuda"
    ids = torch.randint(0, 49406, (2, 77), generator=torch.Generator().manual_seed(1)).to(dev)
    ids[:, 0], ids[:, -1] = 49406, 49407
    events["start"].record()
    with torch.no_grad():
        pooled = None
        if shape == "sdxl":
            text1, text2 = text
            out1 = text1(ids, output_hidden_states=True)
            out2 = text2(ids, output_hidden_states=True)
            ctx = torch.cat([out1.hidden_states[-2], out2.hidden_states[-2]], dim=-1).half()
            pooled = out2.text_embeds.half()                # [negative, prompt]
        else:
            ctx = text(ids).last_hidden_state.half()          # [negative, prompt]
        events["text"].record()
        sched = DPMSolverMultistepScheduler(prediction_type="v_prediction" if shape == "sd21" else "epsilon", **SCHED)
        sched.set_timesteps(steps)
        h = w = size // 8
        t_lat, o_lat = tile // 8, overlap // 8
        noise = torch.randn((1, 4, h, w), generator=torch.Generator(dev).manual_seed(0), device=dev,
                            dtype=torch.float32)
        timesteps, control = sched.timesteps, None
        if strength is None:
            latents = noise * sched.init_noise_sigma
        else:
            # diffusers' img2img: the last int(steps * strength) steps, from the start image's latents noised
            # to the first of them.
            start = synthetic_start_image(size, dev)
            vae_dtype = next(vae.parameters()).dtype
            z0 = vae.encode(start.to(vae_dtype)).latent_dist.mean.float() * VAE_SCALE[shape]
            begin = steps - min(int(steps * strength), steps)
            timesteps = sched.timesteps[begin * sched.order:]
            sched.set_begin_index(begin * sched.order)
            latents = sched.add_noise(z0, noise, timesteps[:1])
            control = ((start + 1) / 2).half().contiguous(memory_format=torch.channels_last)
        events["encode"].record()
        tiles = [(y, x) for y in axis_positions(h, t_lat, o_lat) for x in axis_positions(w, t_lat, o_lat)]
        win = hann(t_lat, o_lat, dev)
        norm = torch.zeros((h, w), device=dev)
        for y, x in tiles:
            norm[y:y + t_lat, x:x + t_lat] += win
        guided = cfg != 1.0
        for t in timesteps:
            acc = torch.zeros_like(latents)
            for first in range(0, len(tiles), batch):
                group = tiles[first:first + batch]
                xs = torch.cat([latents[:, :, y:y + t_lat, x:x + t_lat] for y, x in group]).half()
                xs = sched.scale_model_input(xs, t)
                n = len(group)
                hint = None
                if control is not None:
                    hint = torch.cat([control[:, :, 8 * y:8 * (y + t_lat), 8 * x:8 * (x + t_lat)] for y, x in group])
                    hint = (torch.cat([hint, hint]) if guided else hint).contiguous(memory_format=torch.channels_last)
                if guided:
                    inp = torch.cat([xs, xs]).contiguous(memory_format=torch.channels_last)
                    c = torch.cat([ctx[0:1].expand(n, -1, -1), ctx[1:2].expand(n, -1, -1)])
                    pc = None if pooled is None else torch.cat([pooled[0:1].expand(n, -1), pooled[1:2].expand(n, -1)])
                    out = call_unet(unet, inp, t, c, pc, size, hint).float()
                    u, p = out[:n], out[n:]
                    eps = u + cfg * (p - u)
                else:
                    pc = None if pooled is None else pooled[1:2].expand(n, -1)
                    eps = call_unet(unet, xs.contiguous(memory_format=torch.channels_last), t,
                                    ctx[1:2].expand(n, -1, -1), pc, size, hint).float()
                for i, (y, x) in enumerate(group):
                    acc[:, :, y:y + t_lat, x:x + t_lat] += eps[i:i + 1] * win
            latents = sched.step(acc / norm, t, latents).prev_sample
        events["sample"].record()
        vae_dtype = next(vae.parameters()).dtype
        image = vae.decode((latents / VAE_SCALE[shape]).to(vae_dtype)).sample
        events["decode"].record()
    return image, len(tiles)


VAE_CSV = ("engine,shape,size,pass,mode,precision,median_ms,min_ms,max_ms,repeats,first_s,peak_used_mib,budget_mib,"
           "untiled_mib,largest_tensor,choice,device")


def vae_bench(vae, shape, size, repeats, encode=False, modes=("untiled", "diffusers-tiled"), csv=None):
    """One size x size decode (or encode): untiled, then diffusers' tiled pass (vae.enable_tiling()), each after
    one untimed warm-up pass (timed apart as first_s: cudnn.benchmark's algorithm search), then `repeats` passes
    timed with CUDA events (synchronised before each); median, min, max. Peak device memory in use (total - free,
    every process's) sampled after each pass and torch.cuda.max_memory_allocated. The CSV columns are
    `tessera-cli bench --shape vae`'s (budget, estimate and largest tensor empty here)."""
    dtype = next(vae.parameters()).dtype
    gen = torch.Generator("cuda").manual_seed(0)
    if encode:
        x = (0.5 * torch.randn((1, 3, size, size), generator=gen, device="cuda")).clamp(-1, 1).to(dtype)
        run = lambda: vae.encode(x).latent_dist.mean
    else:
        x = torch.randn((1, 4, size // 8, size // 8), generator=gen, device="cuda").to(dtype)
        run = lambda: vae.decode(x).sample
    precision = "fp32" if dtype == torch.float32 else ("bf16" if dtype == torch.bfloat16 else "fp16")
    rows = [VAE_CSV]
    print(VAE_CSV, flush=True)
    for mode in modes:
        if mode == "diffusers-tiled":
            vae.enable_tiling()
        times, used = [], 0
        try:
            with torch.no_grad():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                run()  # warm-up (cudnn.benchmark times its algorithms here)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                for _ in range(repeats):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize()
                    a.record()
                    run()
                    b.record()
                    torch.cuda.synchronize()
                    times.append(a.elapsed_time(b))
                    free, total = torch.cuda.mem_get_info()
                    used = max(used, total - free)
            times.sort()
            row = "pytorch-vae,%s,%d,%s,%s,%s,%.2f,%.2f,%.2f,%d,%.3f,%.0f,,,,%s (alloc peak %.0f MiB),%s" % (
                shape, size, "encode" if encode else "decode", mode, precision, times[len(times) // 2], times[0],
                times[-1], repeats, first, used / 2**20, mode, torch.cuda.max_memory_allocated() / 2**20,
                torch.cuda.get_device_name())
        except (torch.OutOfMemoryError, RuntimeError) as e:
            row = "pytorch-vae,%s,%d,%s,%s,%s,failed,,,%d,,,,,,\"%s\",%s" % (
                shape, size, "encode" if encode else "decode", mode, precision, repeats,
                str(e).split("\n")[0][:160].replace('"', "'"), torch.cuda.get_device_name())
            torch.cuda.empty_cache()
        print(row, flush=True)
        rows.append(row)
        vae.disable_tiling()
    if csv:
        with open(csv, "w") as f:
            f.write("\n".join(rows) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=["sd15", "sd21", "sdxl"], default="sd15")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--tile", type=int)
    ap.add_argument("--overlap", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cfg", type=float, default=7.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile + a CUDA graph per batch shape")
    ap.add_argument("--controlnet", action="store_true", help="sd15: an image-to-image upscale with a ControlNet")
    ap.add_argument("--strength", type=float, help="an image-to-image upscale job at this strength (--controlnet: 0.5)")
    ap.add_argument("--vae-only", action="store_true", help="time the VAE decode alone (untiled, diffusers tiled)")
    ap.add_argument("--encode", action="store_true", help="--vae-only: time the encoder instead")
    ap.add_argument("--vae-modes", default="untiled,diffusers-tiled", help="--vae-only: which of untiled, diffusers-tiled")
    ap.add_argument("--csv", help="--vae-only: also write the CSV rows to this file")
    a = ap.parse_args()
    tile = a.tile or NATIVE_TILE[a.shape]
    torch.manual_seed(0)
    # TORCH_CUDNN_BENCHMARK=0: no algorithm search per new input shape (diffusers' tiled decode meets a few).
    torch.backends.cudnn.benchmark = os.environ.get("TORCH_CUDNN_BENCHMARK", "1") != "0"
    # SDXL's VAE overflows in fp16 (force_upcast): diffusers decodes it in fp32.
    vae = AutoencoderKL(**VAE, sample_size=VAE_SAMPLE_SIZE[a.shape]).cuda().eval()
    vae = vae.float() if a.shape == "sdxl" else vae.half()
    if a.vae_only:
        vae_bench(vae, a.shape, a.size, max(a.repeats, 3), a.encode, a.vae_modes.split(","), a.csv)
        return
    unet = UNet2DConditionModel(**UNETS[a.shape]).half().cuda().eval().to(memory_format=torch.channels_last)
    strength = a.strength if a.strength is not None else (0.5 if a.controlnet else None)
    if a.controlnet:
        if a.shape != "sd15":
            raise SystemExit("--controlnet times an SD 1.5 ControlNet: give --shape sd15")
        net = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(16, 32, 96, 256))
        # from_unet starts the zero convolutions at zero; a trained ControlNet's are not.
        with torch.no_grad():
            for m in net.controlnet_down_blocks:
                m.weight.normal_(0, 0.02)
            net.controlnet_mid_block.weight.normal_(0, 0.02)
        net = net.half().cuda().eval().to(memory_format=torch.channels_last)
        unet = ControlledUNet(net, unet)
    if a.compile:
        unet = GraphedUNet(torch.compile(unet, dynamic=False))
    tcfg = dict(vocab_size=49408, max_position_embeddings=77)
    if a.shape == "sdxl":
        text = (CLIPTextModel(CLIPTextConfig(**tcfg, **TEXT["sdxl"])).half().cuda().eval(),
                CLIPTextModelWithProjection(CLIPTextConfig(**tcfg, **TEXT2_SDXL)).half().cuda().eval())
    else:
        text = CLIPTextModel(CLIPTextConfig(**tcfg, **TEXT[a.shape])).half().cuda().eval()
    models = (unet, vae, text)
    names = ["start", "text", "encode", "sample", "decode"]
    engine = "pytorch-compile+graph" if a.compile else "pytorch-eager"
    # Warm-up: one small job (cudnn.benchmark picks its algorithms for the tile shape); compiled, the whole
    # job once (every batch shape compiled and captured).
    ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
    warm = a.size if a.compile else (tile + 64 if tile + 64 <= a.size else tile)
    t0 = time.perf_counter()
    job(models, a.shape, warm, tile, a.overlap, 2 if strength is None else 4, a.cfg, a.batch, ev, strength)
    torch.cuda.synchronize()
    print("warmup_s %.1f" % (time.perf_counter() - t0))
    torch.cuda.reset_peak_memory_stats()
    print("engine,shape,size,tile,overlap,steps,cfg,batch,tiles,text_s,encode_s,sample_s,decode_s,total_s,s_per_step,"
          "peak_alloc_mib,peak_used_mib,device")
    if strength is not None:
        engine += ("+controlnet" if a.controlnet else "") + "-img2img-strength-%g" % strength
    for _ in range(a.repeats):
        ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
        wall = time.perf_counter()
        image, tiles = job(models, a.shape, a.size, tile, a.overlap, a.steps, a.cfg, a.batch, ev, strength)
        torch.cuda.synchronize()
        wall = time.perf_counter() - wall
        free, total = torch.cuda.mem_get_info()
        t = [ev[names[i]].elapsed_time(ev[names[i + 1]]) / 1000 for i in range(4)]
        executed = a.steps if strength is None else min(int(a.steps * strength), a.steps)
        print("%s,%s,%d,%d,%d,%d,%g,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.0f,%.0f,%s" % (
            engine, a.shape, a.size, tile, a.overlap, a.steps, a.cfg, a.batch, tiles, t[0], t[1], t[2], t[3], sum(t),
            t[2] / executed, torch.cuda.max_memory_allocated() / 2**20, (total - free) / 2**20,
            torch.cuda.get_device_name()))
        assert torch.isfinite(image).all(), "non-finite image"
        print("wall_s %.3f" % wall)


if __name__ == "__main__":
    main()
