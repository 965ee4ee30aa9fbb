#!/usr/bin/python3
"""Writes the UNet2DConditionModel (SD 1.x / 2.x) fixtures of tests/data/unetcond with diffusers itself.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_unetcond_fixtures.py OUTDIR

Needs torch, diffusers (+ its imports), safetensors; no network. Every model is built from a config
dict with a fixed seed, CPU, deterministic algorithms. Layout of OUTDIR:

    cases.json                              what is where, configs, inputs, measured float32 error
    <case>/unet/config.json                 save_pretrained (diffusers folder layout)
    <case>/unet/diffusion_pytorch_model.safetensors   weights, stored as F16 (see WEIGHT_DTYPE)
    <case>/forward_<input>.safetensors      sample [B,4,h,w], timestep [B] (F32, integer values),
                                            encoder_hidden_states [B,77,X], output [B,4,h,w]
                                            (float64 forward, stored F32; cases.json gives the
                                            float32 forward's distance), and for the "square" input hook.<module>
                                            intermediates (float64 forward, stored F32)

Widths [16, 32], not [32, 64]: at [32, 64] one float32 checkpoint is ~3 MB, over the
2 MB fixture budget; [16, 32] keeps every structural feature (several heads, cross-attention width
unlike the block width, conv shortcuts, both projection kinds). The weights are stored as F16 (what
real SD checkpoints ship) and the references use exactly those F16-rounded values.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

from diffusers import UNet2DConditionModel

SEEDS = {"sd1": 1501, "sd2": 1502}
INPUT_SEED = 77
TOKENS = 77
WEIGHT_DTYPE = torch.float16

COMMON = {
    "sample_size": 16,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [16, 32],
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "norm_num_groups": 8,
}
CONFIGS = {
    # SD 1.x-like: 1x1-conv proj_in/proj_out, attention_head_dim 8 (= 8 heads per block: diffusers reads attention_head_dim as the head count, UNet2DConditionModel.__init__)
    "sd1": dict(COMMON, layers_per_block=1, cross_attention_dim=32, attention_head_dim=8,
                use_linear_projection=False, upcast_attention=False),
    # SD 2.x-like: Linear proj_in/proj_out, per-level heads [2, 4] (up blocks use them reversed),
    # upcast_attention, a context width (24) unlike every block width, two resnets per level
    "sd2": dict(COMMON, layers_per_block=2, cross_attention_dim=24, attention_head_dim=[2, 4],
                use_linear_projection=True, upcast_attention=True),
}
# name -> (batch, h, w, timesteps); batch 2 with different timesteps everywhere.
# "odd" is not divisible by 2^(levels-1): the up block upsamples to the skip's size (UNet2DConditionModel.forward, upsample_size).
INPUTS = {
    "square": (2, 16, 16, [10, 500]),
    "wide": (2, 16, 24, [999, 1]),
    "odd": (2, 9, 13, [250, 750]),
}
HOOKS = ["time_embedding", "conv_in", "down_blocks.0.attentions.0", "down_blocks.0", "down_blocks.1",
         "mid_block", "up_blocks.0", "up_blocks.1", "conv_norm_out"]

# weight = gain * N(0,1) / sqrt(fan_in); biases N(0, 0.1^2); norms gamma 1 + N(0, 0.2^2), beta N(0, 0.2^2).
GAIN_DEFAULT = 1.0
GAIN_QK = 1.5  # sharper attention than the default init, so a wrong softmax/scale shows
BIAS_STD = 0.1
NORM_STD = 0.2


def randomize(model, seed):
    """Deterministic random values for every parameter (in sorted name order), so every parameter,
    norms included, changes the output."""
    norms = {name for name, m in model.named_modules()
             if isinstance(m, (torch.nn.GroupNorm, torch.nn.LayerNorm))}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            owner, _, kind = name.rpartition(".")
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if owner in norms:
                value = (1.0 + NORM_STD * noise) if kind == "weight" else NORM_STD * noise
            elif kind == "bias":
                value = BIAS_STD * noise
            else:
                fan_in = 1
                for s in p.shape[1:]:
                    fan_in *= s
                gain = GAIN_QK if (".to_q." in name or ".to_k." in name) else GAIN_DEFAULT
                value = gain * noise / fan_in ** 0.5
            p.copy_(value.to(WEIGHT_DTYPE).to(p.dtype))  # values exactly representable on disk


def first_tensor(out):
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if hasattr(out, "sample"):
        return out.sample
    return out


def forward(model, dtype, sample, timestep, context, hooks=None):
    model.to(dtype)
    captured = {}
    handles = []
    modules = dict(model.named_modules())
    for name in hooks or []:
        handles.append(modules[name].register_forward_hook(
            lambda _m, _i, out, name=name: captured.__setitem__(name, first_tensor(out).detach().clone())))
    try:
        with torch.no_grad():
            out = model(sample.to(dtype), timestep, encoder_hidden_states=context.to(dtype)).sample
    finally:
        for h in handles:
            h.remove()
    return out, captured


def f32(t):
    return t.detach().to(torch.float32).contiguous()


def make_case(outdir, case, cfg):
    torch.manual_seed(SEEDS[case])
    model = UNet2DConditionModel(**cfg).eval()
    randomize(model, SEEDS[case])
    unet_dir = os.path.join(outdir, case, "unet")
    model.to(WEIGHT_DTYPE)
    model.save_pretrained(unet_dir, safe_serialization=True)
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(model.state_dict())
    info = {"unet": f"{case}/unet", "config": cfg, "parameters": n_params, "tensors": n_tensors,
            "weights_dtype": "F16", "inputs": {}}
    g = torch.Generator().manual_seed(INPUT_SEED + SEEDS[case])
    for inp, (b, h, w, steps) in INPUTS.items():
        sample = torch.randn((b, cfg["in_channels"], h, w), generator=g, dtype=torch.float32)
        context = torch.randn((b, TOKENS, cfg["cross_attention_dim"]), generator=g, dtype=torch.float32)
        timestep = torch.tensor(steps, dtype=torch.int64)
        hooks = HOOKS if inp == "square" else []
        out64, captured = forward(model, torch.float64, sample, timestep, context, hooks)
        out32, _ = forward(model, torch.float32, sample, timestep, context)
        swapped, _ = forward(model, torch.float64, sample, timestep.flip(0), context)
        # the timestep must visibly change the output, or a wrong time path could pass (warn, do not
        # abort: the other fixture scripts of the same run still write theirs)
        timestep_effect = ((out64 - swapped).abs().max() / out64.abs().max()).item()
        if not timestep_effect > 1e-2 or not torch.isfinite(out64).all():
            print(f"WARNING {case}/{inp}: timestep effect {timestep_effect:.2e} or non-finite output", flush=True)
        diff = (out32.double() - out64).abs().max().item()
        scale = out64.abs().max().item()
        tensors = {"sample": f32(sample), "timestep": f32(timestep), "encoder_hidden_states": f32(context),
                   "output": f32(out64)}
        for name, t in captured.items():
            tensors[f"hook.{name}"] = f32(t)
        save_file(tensors, os.path.join(outdir, case, f"forward_{inp}.safetensors"), metadata={"format": "pt"})
        info["inputs"][inp] = {"file": f"{case}/forward_{inp}.safetensors", "sample_shape": [b, cfg["in_channels"], h, w],
                               "timesteps": steps, "output_max_abs": scale,
                               "output_rms": out64.pow(2).mean().sqrt().item(),
                               "float32_vs_float64_max_abs": diff, "timestep_swap_effect": timestep_effect,
                               "hooks": sorted(captured)}
        print(f"{case}/{inp}: output max|y| {scale:.4f}, float32 vs float64 max|diff| {diff:.2e}", flush=True)
    print(f"{case}: {n_tensors} tensors, {n_params} parameters", flush=True)
    return info


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_unetcond_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    cases = {case: make_case(outdir, case, cfg) for case, cfg in CONFIGS.items()}
    doc = {"generator": "tools/reference/make_unetcond_fixtures.py", "torch": torch.__version__,
           "tokens": TOKENS, "tolerance_relative": 1e-4, "cases": cases}
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(outdir) for n in files)
    print(f"total {total} bytes", flush=True)
    if total >= 2_000_000:
        print("WARNING: fixtures over the 2 MB budget", flush=True)


if __name__ == "__main__":
    main()
