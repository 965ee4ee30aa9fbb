#!/usr/bin/python3
"""Writes the SDXL-shaped UNet2DConditionModel fixtures of tests/data/sdxlunet with diffusers itself.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_sdxl_unet_fixtures.py OUTDIR

Needs torch, diffusers (+ its imports), safetensors; no network. The model is built from a config
dict with a fixed seed, CPU, deterministic algorithms; weights randomised and stored as F16 exactly as
make_unetcond_fixtures.py does (its `randomize` is reused). Layout of OUTDIR:

    cases.json                              config, parameter/tensor counts, inputs, measured float32 error
    unet/config.json                        save_pretrained (diffusers folder layout)
    unet/diffusion_pytorch_model.safetensors   weights (F16)
    forward_<input>.safetensors             sample [B,4,h,w], timestep [B] (F32, integer values),
                                            encoder_hidden_states [B,77,80], text_embeds [B,48] (the
                                            pooled text), time_ids [B,6] (F32), text_embeds_time [B,96]
                                            (text_embeds ++ the UNet's own add_time_proj of the ids,
                                            float32 as diffusers computes it), output [B,4,h,w] (float64
                                            forward, stored F32); for "square" also hook.<module>
                                            intermediates (float64 forward, stored F32)

SDXL's shape, small (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json; diffusers
UNet2DConditionModel with addition_embed_type "text_time"): three levels, DownBlock2D then two
CrossAttnDownBlock2D (up mirrored), two resnets per level, transformer depth [1, 2, 2] (up blocks reversed,
the mid block the last entry), heads [2, 4, 4], Linear projections, cross-attention 80 wide (= 32 + 48,
the two tiny text encoders of make_sdxl_text_fixtures.py), addition_embed_type "text_time" with 8-wide
sinusoids and a 48 + 6 x 8 = 96-wide add_embedding input. Widths [8, 16, 16] (not [32, 64, 64]): at
[32, 64, 64] the F16 weights alone are 7 MB (3.5 M parameters), far over the 2 MB fixture budget; at
[8, 16, 16] they are about 0.55 MB and every structural feature stays (a conv shortcut in the down path,
several heads, a depth-2 transformer at two levels, the skip stack of 9).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

from diffusers import UNet2DConditionModel

from make_unetcond_fixtures import f32, first_tensor, randomize

SEED = 1601
INPUT_SEED = 88
TOKENS = 77
POOLED = 48
TIME_DIM = 8

CONFIG = {
    "sample_size": 16,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [8, 16, 16],
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "layers_per_block": 2,
    "transformer_layers_per_block": [1, 2, 2],
    "attention_head_dim": [2, 4, 4],
    "cross_attention_dim": 80,
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": TIME_DIM,
    "projection_class_embeddings_input_dim": POOLED + 6 * TIME_DIM,
    "norm_num_groups": 8,
}
# name -> (batch, h, w, timesteps, time ids per sample: orig h, orig w, crop top, crop left, target h, target w).
# Batch 2 with different timesteps and different time ids everywhere; "wide" is not square.
INPUTS = {
    "square": (2, 16, 16, [10, 500], [[1024, 1024, 0, 0, 1024, 1024], [768, 1344, 64, 32, 512, 768]]),
    "wide": (2, 16, 24, [999, 1], [[512, 768, 0, 0, 512, 768], [2048, 2048, 256, 512, 1024, 1024]]),
}
HOOKS = ["time_embedding", "add_embedding", "conv_in", "down_blocks.1.attentions.0", "down_blocks.2", "mid_block",
         "up_blocks.0", "up_blocks.1", "conv_norm_out"]


def text_embeds_time(model, text_embeds, time_ids):
    """diffusers get_aug_embed's add_embeds for "text_time", before its cast to the model dtype."""
    time_embeds = model.add_time_proj(time_ids.flatten()).reshape((text_embeds.shape[0], -1))
    return torch.concat([text_embeds.to(time_embeds.dtype), time_embeds], dim=-1)


def forward(model, dtype, sample, timestep, context, text_embeds, time_ids, hooks=None):
    model.to(dtype)
    captured = {}
    handles = []
    modules = dict(model.named_modules())
    for name in hooks or []:
        handles.append(modules[name].register_forward_hook(
            lambda _m, _i, out, name=name: captured.__setitem__(name, first_tensor(out).detach().clone())))
    added = {"text_embeds": text_embeds.to(dtype), "time_ids": time_ids}
    try:
        with torch.no_grad():
            out = model(sample.to(dtype), timestep, encoder_hidden_states=context.to(dtype),
                        added_cond_kwargs=added).sample
    finally:
        for h in handles:
            h.remove()
    return out, captured


def effect(a, b):
    return ((a - b).abs().max() / a.abs().max()).item()


def make_input(outdir, model, name, spec, g):
    b, h, w, steps, ids = spec
    sample = torch.randn((b, CONFIG["in_channels"], h, w), generator=g, dtype=torch.float32)
    context = torch.randn((b, TOKENS, CONFIG["cross_attention_dim"]), generator=g, dtype=torch.float32)
    pooled = torch.randn((b, POOLED), generator=g, dtype=torch.float32)
    timestep = torch.tensor(steps, dtype=torch.int64)
    time_ids = torch.tensor(ids, dtype=torch.float32)
    hooks = HOOKS if name == "square" else []
    out64, captured = forward(model, torch.float64, sample, timestep, context, pooled, time_ids, hooks)
    out32, _ = forward(model, torch.float32, sample, timestep, context, pooled, time_ids)
    with torch.no_grad():
        vector = text_embeds_time(model, pooled, time_ids)
    # The time ids and the pooled text must visibly change the output, or a wrong text-time path
    # could pass (warn, do not abort: the other fixture scripts of the same run still write theirs).
    swapped_ids, _ = forward(model, torch.float64, sample, timestep, context, pooled, time_ids.flip(0))
    swapped_text, _ = forward(model, torch.float64, sample, timestep, context, pooled.flip(0), time_ids)
    ids_effect, text_effect = effect(out64, swapped_ids), effect(out64, swapped_text)
    if not (ids_effect > 1e-3 and text_effect > 1e-3) or not torch.isfinite(out64).all():
        print(f"WARNING {name}: time-id effect {ids_effect:.2e}, text effect {text_effect:.2e} or non-finite output",
              flush=True)
    diff = (out32.double() - out64).abs().max().item()
    scale = out64.abs().max().item()
    tensors = {"sample": f32(sample), "timestep": f32(timestep), "encoder_hidden_states": f32(context),
               "text_embeds": f32(pooled), "time_ids": f32(time_ids), "text_embeds_time": f32(vector),
               "output": f32(out64)}
    for hook, t in captured.items():
        tensors[f"hook.{hook}"] = f32(t)
    save_file(tensors, os.path.join(outdir, f"forward_{name}.safetensors"), metadata={"format": "pt"})
    print(f"{name}: output max|y| {scale:.4f}, float32 vs float64 max|diff| {diff:.2e}, "
          f"time-id effect {ids_effect:.2e}, text effect {text_effect:.2e}", flush=True)
    return {"file": f"forward_{name}.safetensors", "sample_shape": [b, CONFIG["in_channels"], h, w],
            "timesteps": steps, "time_ids": ids, "output_max_abs": scale,
            "output_rms": out64.pow(2).mean().sqrt().item(), "float32_vs_float64_max_abs": diff,
            "time_ids_swap_effect": ids_effect, "text_embeds_swap_effect": text_effect, "hooks": sorted(captured)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_sdxl_unet_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(SEED)
    model = UNet2DConditionModel(**CONFIG).eval()
    randomize(model, SEED)
    model.to(torch.float16)
    model.save_pretrained(os.path.join(outdir, "unet"), safe_serialization=True)
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(model.state_dict())
    g = torch.Generator().manual_seed(INPUT_SEED)
    inputs = {name: make_input(outdir, model, name, spec, g) for name, spec in INPUTS.items()}
    doc = {"generator": "tools/reference/make_sdxl_unet_fixtures.py", "torch": torch.__version__, "tokens": TOKENS,
           "tolerance_relative": 1e-4, "unet": "unet", "config": CONFIG, "parameters": n_params,
           "tensors": n_tensors, "weights_dtype": "F16", "inputs": inputs}
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"{n_tensors} tensors, {n_params} parameters", flush=True)
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(outdir) for n in files)
    print(f"total {total} bytes", flush=True)
    if total >= 2_000_000:
        print("WARNING: fixtures over the 2 MB budget", flush=True)


if __name__ == "__main__":
    main()
