#!/usr/bin/python3
"""Writes the AutoencoderKL fixtures of tests/core/tst_vae.cpp: tiny random diffusers AutoencoderKL
models (save_pretrained, float32 safetensors) and their decoder / encoder outputs, computed by diffusers
itself in float32 on the CPU.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_vae_fixtures.py OUTDIR

OUTDIR belongs at tests/data/vae. Layout:
    OUTDIR/cases.json                      what every case is (config summary, tensor shapes, counts)
    OUTDIR/<case>/vae/config.json          AutoencoderKL.save_pretrained
    OUTDIR/<case>/vae/diffusion_pytorch_model.safetensors
    OUTDIR/<case>/io.safetensors           inputs and reference outputs (F32):
        decode_latent   [B, latent_channels, h, w]   random normal
        decode_image    vae.decode(decode_latent).sample  (post_quant_conv + decoder, no scaling)
        encode_image    [B, in_channels, H, W]       uniform in [-1, 1]
        encode_moments  quant_conv(encoder(encode_image)), [B, 2*latent_channels, H/f, W/f]
        encode_mean     vae.encode(encode_image).latent_dist.mean
        encode_logvar   vae.encode(encode_image).latent_dist.logvar  (clamped to [-30, 20])
No pickle anywhere. Deterministic (fixed seeds, deterministic algorithms, one thread).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

from diffusers import AutoencoderKL

# Widths are kept small so that all fixtures stay well under 2 MB (every case's parameter count and
# file sizes are printed and written to cases.json).
CASES = {
    # two levels (scale factor 2), one resnet per encoder block (two per decoder block),
    # 4 channels per group at 32 wide, mid-block attention; batch 2 and a non-square size
    "kl2": {
        "seed": 1501,
        "config": {
            "in_channels": 3, "out_channels": 3,
            "down_block_types": ["DownEncoderBlock2D"] * 2,
            "up_block_types": ["UpDecoderBlock2D"] * 2,
            "block_out_channels": [16, 32], "layers_per_block": 1, "act_fn": "silu",
            "latent_channels": 4, "norm_num_groups": 8, "sample_size": 32,
            "scaling_factor": 0.18215,
        },
        "decode_latent": [2, 4, 16, 24],
        "encode_image": [2, 3, 32, 48],
    },
    # SD-like: four levels (scale factor 8), layers_per_block 2 (three resnets per decoder block),
    # shortcuts where the width changes, mid_block_add_attention left at its default (true)
    "kl4": {
        "seed": 1502,
        "config": {
            "in_channels": 3, "out_channels": 3,
            "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4,
            "block_out_channels": [8, 8, 16, 16], "layers_per_block": 2, "act_fn": "silu",
            "latent_channels": 4, "norm_num_groups": 4, "sample_size": 64,
            "scaling_factor": 0.13025, "force_upcast": False,
        },
        "decode_latent": [1, 4, 6, 10],
        "encode_image": [1, 3, 48, 80],
    },
    # no mid-block attention, no quant_conv / post_quant_conv, 8 latent channels, shift_factor set
    "kl_plain": {
        "seed": 1503,
        "config": {
            "in_channels": 3, "out_channels": 3,
            "down_block_types": ["DownEncoderBlock2D"] * 2,
            "up_block_types": ["UpDecoderBlock2D"] * 2,
            "block_out_channels": [8, 16], "layers_per_block": 1, "act_fn": "silu",
            "latent_channels": 8, "norm_num_groups": 4, "sample_size": 32,
            "scaling_factor": 0.5, "shift_factor": 0.1,
            "mid_block_add_attention": False, "use_quant_conv": False, "use_post_quant_conv": False,
        },
        "decode_latent": [1, 8, 10, 14],
        "encode_image": [1, 3, 20, 28],
    },
}


def perturb_norms(model, generator):
    """GroupNorm starts as gamma 1, beta 0; perturb both so that a swapped or ignored affine shows."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.GroupNorm):
                module.weight.add_(0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))


def make_case(outdir, name, case):
    torch.manual_seed(case["seed"])
    vae = AutoencoderKL(**case["config"]).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    perturb_norms(vae, gen)

    latent = torch.randn(case["decode_latent"], generator=gen, dtype=torch.float32)
    image = torch.rand(case["encode_image"], generator=gen, dtype=torch.float32) * 2.0 - 1.0

    with torch.no_grad():
        decoded = vae.decode(latent).sample
        posterior = vae.encode(image).latent_dist
        moments = posterior.parameters
        mean = posterior.mean
        logvar = posterior.logvar

    case_dir = os.path.join(outdir, name)
    vae.save_pretrained(os.path.join(case_dir, "vae"), safe_serialization=True)
    tensors = {
        "decode_latent": latent, "decode_image": decoded, "encode_image": image,
        "encode_moments": moments, "encode_mean": mean, "encode_logvar": logvar,
    }
    tensors = {k: v.detach().to(torch.float32).clone().contiguous() for k, v in tensors.items()}  # clone: mean is a view of moments
    save_file(tensors, os.path.join(case_dir, "io.safetensors"), metadata={"format": "pt"})

    state = vae.state_dict()
    params = sum(v.numel() for v in state.values())
    info = {
        "config": case["config"],
        "seed": case["seed"],
        "tensor_count": len(state),
        "parameter_count": params,
        "shapes": {k: list(v.shape) for k, v in tensors.items()},
        "stats": {k: {"min": float(v.min()), "max": float(v.max()), "rms": float(v.pow(2).mean().sqrt())}
                  for k, v in tensors.items()},
    }
    print(f"{name}: {len(state)} tensors, {params} parameters; "
          + ", ".join(f"{k} {list(v.shape)} rms {info['stats'][k]['rms']:.4f}" for k, v in tensors.items()))
    return info


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_vae_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    import diffusers
    summary = {
        "generator": "tools/reference/make_vae_fixtures.py",
        "torch": torch.__version__, "diffusers": diffusers.__version__,
        "cases": {name: make_case(outdir, name, case) for name, case in CASES.items()},
    }
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
        f.write("\n")

    total = 0
    for root, _, files in os.walk(outdir):
        for file in files:
            total += os.path.getsize(os.path.join(root, file))
    print(f"total fixture size: {total} bytes (about 1.45 MB expected)")


if __name__ == "__main__":
    main()
