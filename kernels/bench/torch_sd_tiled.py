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

Timed with CUDA events after one warm-up job at a small canvas; prints one CSV line per phase and the
peak device memory (torch.cuda.max_memory_allocated and total - free).

  PYTHONPATH=/path/to/diffusers/src python3 kernels/bench/torch_sd_tiled.py --shape sd15 --size 2048 \\
      --tile 512 --overlap 64 --steps 20 --cfg 7 --batch 4
"""
import argparse
import math
import time

import torch

from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, UNet2DConditionModel
from transformers import CLIPTextConfig, CLIPTextModel

UNETS = {
    "sd15": dict(sample_size=64, cross_attention_dim=768, attention_head_dim=8, use_linear_projection=False,
                 upcast_attention=False),
    "sd21": dict(sample_size=96, cross_attention_dim=1024, attention_head_dim=[5, 10, 20, 20],
                 use_linear_projection=True, upcast_attention=True),
}
TEXT = {
    "sd15": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 hidden_act="quick_gelu", projection_dim=768),
    "sd21": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=23, num_attention_heads=16,
                 hidden_act="gelu", projection_dim=512),
}
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
           up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
           latent_channels=4, norm_num_groups=32)
SCHED = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
             steps_offset=1, use_karras_sigmas=True, algorithm_type="dpmsolver++", solver_order=2)


def axis_positions(length, tile, overlap):
    if length <= tile:
        return [0]
    stride = tile - overlap
    n = math.ceil((length - tile) / stride) + 1
    return [min(i * stride, length - tile) for i in range(n)]


def hann(tile, overlap, device):
    w = torch.ones(tile, device=device, dtype=torch.float32)
    if overlap > 0:
        ramp = 0.5 - 0.5 * torch.cos(math.pi * (torch.arange(overlap, device=device) + 0.5) / overlap)
        w[:overlap] = ramp
        w[-overlap:] = ramp.flip(0)
    return w[:, None] * w[None, :]


def job(models, shape, size, tile, overlap, steps, cfg, batch, events):
    unet, vae, text = models
    dev = "cuda"
    ids = torch.randint(0, 49406, (2, 77), generator=torch.Generator().manual_seed(1)).to(dev)
    ids[:, 0], ids[:, -1] = 49406, 49407
    events["start"].record()
    with torch.no_grad():
        ctx = text(ids).last_hidden_state.half()          # [negative, prompt]
        events["text"].record()
        sched = DPMSolverMultistepScheduler(prediction_type="v_prediction" if shape == "sd21" else "epsilon", **SCHED)
        sched.set_timesteps(steps)
        h = w = size // 8
        t_lat, o_lat = tile // 8, overlap // 8
        latents = torch.randn((1, 4, h, w), generator=torch.Generator(dev).manual_seed(0), device=dev,
                              dtype=torch.float32) * sched.init_noise_sigma
        tiles = [(y, x) for y in axis_positions(h, t_lat, o_lat) for x in axis_positions(w, t_lat, o_lat)]
        win = hann(t_lat, o_lat, dev)
        norm = torch.zeros((h, w), device=dev)
        for y, x in tiles:
            norm[y:y + t_lat, x:x + t_lat] += win
        guided = cfg != 1.0
        for t in sched.timesteps:
            acc = torch.zeros_like(latents)
            for first in range(0, len(tiles), batch):
                group = tiles[first:first + batch]
                xs = torch.cat([latents[:, :, y:y + t_lat, x:x + t_lat] for y, x in group]).half()
                xs = sched.scale_model_input(xs, t)
                n = len(group)
                if guided:
                    inp = torch.cat([xs, xs]).contiguous(memory_format=torch.channels_last)
                    c = torch.cat([ctx[0:1].expand(n, -1, -1), ctx[1:2].expand(n, -1, -1)])
                    out = unet(inp, t, encoder_hidden_states=c).sample.float()
                    u, p = out[:n], out[n:]
                    eps = u + cfg * (p - u)
                else:
                    eps = unet(xs.contiguous(memory_format=torch.channels_last), t,
                               encoder_hidden_states=ctx[1:2].expand(n, -1, -1)).sample.float()
                for i, (y, x) in enumerate(group):
                    acc[:, :, y:y + t_lat, x:x + t_lat] += eps[i:i + 1] * win
            latents = sched.step(acc / norm, t, latents).prev_sample
        events["sample"].record()
        image = vae.decode((latents / 0.18215).half()).sample
        events["decode"].record()
    return image, len(tiles)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=["sd15", "sd21"], default="sd15")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--tile", type=int)
    ap.add_argument("--overlap", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cfg", type=float, default=7.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    tile = a.tile or (768 if a.shape == "sd21" else 512)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    unet = UNet2DConditionModel(**UNETS[a.shape]).half().cuda().eval().to(memory_format=torch.channels_last)
    vae = AutoencoderKL(**VAE).half().cuda().eval()
    text = CLIPTextModel(CLIPTextConfig(vocab_size=49408, max_position_embeddings=77, **TEXT[a.shape])).half().cuda().eval()
    models = (unet, vae, text)
    names = ["start", "text", "sample", "decode"]
    # Warm-up: one small job (cudnn.benchmark picks its algorithms for the tile shape).
    ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
    job(models, a.shape, tile + 64 if tile + 64 <= a.size else tile, tile, a.overlap, 2, a.cfg, a.batch, ev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    print("engine,shape,size,tile,overlap,steps,cfg,batch,tiles,text_s,sample_s,decode_s,total_s,s_per_step,"
          "peak_alloc_mib,peak_used_mib,device")
    for _ in range(a.repeats):
        ev = {k: torch.cuda.Event(enable_timing=True) for k in names}
        wall = time.perf_counter()
        image, tiles = job(models, a.shape, a.size, tile, a.overlap, a.steps, a.cfg, a.batch, ev)
        torch.cuda.synchronize()
        wall = time.perf_counter() - wall
        free, total = torch.cuda.mem_get_info()
        t = [ev[names[i]].elapsed_time(ev[names[i + 1]]) / 1000 for i in range(3)]
        print("pytorch-eager,%s,%d,%d,%d,%d,%g,%d,%d,%.3f,%.3f,%.3f,%.3f,%.4f,%.0f,%.0f,%s" % (
            a.shape, a.size, tile, a.overlap, a.steps, a.cfg, a.batch, tiles, t[0], t[1], t[2], sum(t),
            t[1] / a.steps, torch.cuda.max_memory_allocated() / 2**20, (total - free) / 2**20,
            torch.cuda.get_device_name()))
        assert torch.isfinite(image).all(), "non-finite image"
        print("wall_s %.3f" % wall)


if __name__ == "__main__":
    main()
