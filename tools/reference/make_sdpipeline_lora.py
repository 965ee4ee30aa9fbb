#!/usr/bin/python3
"""A kohya-style LoRA for the tiny SD 1.x pipeline of tests/data/sdpipeline/sd1 (app tests of LoRA renders:
tests/app/tst_loracli.cpp, tests/core/tst_sdlora.cpp).

    /usr/bin/python3 tools/reference/make_sdpipeline_lora.py tests/data/sdpipeline/lora

Needs numpy only and is deterministic. Writes OUTDIR/sd1_tiny.safetensors: for every Linear / Conv2d
module sd-scripts trains in SD 1.x (kohya-ss sd-scripts networks/lora.py create_modules: the
Transformer2DModel's proj_in / proj_out, attn1 / attn2 to_q, to_k, to_v, to_out.0, ff.net.0.proj,
ff.net.2; with conv_dim, the resnets' 3x3 conv1 as LoCon; the text encoder's self_attn q/k/v/out_proj and
mlp fc1 / fc2), named "lora_unet_" / "lora_te_" + the module's diffusers / transformers path with every
"." replaced by "_", rank 2, lora_down / lora_up as float16, alpha (0-d, float32) 2 so that the scale
alpha / rank is 1; the values drawn from a fixed seed, large enough to change the tiny model's image.
One module names nothing in the model (lora_unet_down_blocks_7_attentions_0_proj_in: the model has two
down blocks), as files trained on other layouts do, for the "keys name nothing" note. The metadata says
ss_base_model_version "sd_v1" as kohya writes it for SD 1.x.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unet2d_ref import read_safetensors, write_safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PIPELINE = os.path.join(ROOT, "tests", "data", "sdpipeline", "sd1")
RANK = 2

UNET_SUFFIXES = ("proj_in.weight", "proj_out.weight", "attn1.to_q.weight", "attn1.to_k.weight", "attn1.to_v.weight",
                 "attn1.to_out.0.weight", "attn2.to_q.weight", "attn2.to_k.weight", "attn2.to_v.weight",
                 "attn2.to_out.0.weight", "ff.net.0.proj.weight", "ff.net.2.weight", "conv1.weight")
TEXT_SUFFIXES = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.out_proj.weight", "mlp.fc1.weight", "mlp.fc2.weight")


def underscored(path):
    return path.replace(".", "_")


def factors(rng, shape):
    """lora_down, lora_up for a weight of `shape` ([out, in] or [out, in, kh, kw])."""
    out, cin = shape[0], shape[1]
    kernel = tuple(shape[2:])
    down = rng.normal(0.0, 0.4, (RANK, cin) + kernel).astype(np.float16)
    up = rng.normal(0.0, 0.4, (out, RANK) + (1,) * len(kernel)).astype(np.float16)
    return down, up


def build():
    rng = np.random.RandomState(20240611)
    unet = read_safetensors(os.path.join(PIPELINE, "unet", "diffusion_pytorch_model.safetensors"))
    text = read_safetensors(os.path.join(PIPELINE, "text_encoder", "model.safetensors"))
    modules = []
    for name in sorted(unet):
        if name.endswith(UNET_SUFFIXES) and (name.endswith("conv1.weight") <= ("resnets" in name)):
            modules.append(("lora_unet_" + underscored(name[:-len(".weight")]), unet[name].shape))
    for name in sorted(text):
        if name.endswith(TEXT_SUFFIXES):
            path = name if name.startswith("text_model.") else "text_model." + name
            modules.append(("lora_te_" + underscored(path[:-len(".weight")]), text[name].shape))
    modules.append(("lora_unet_down_blocks_7_attentions_0_proj_in", (16, 16, 1, 1)))
    tensors = {}
    for stem, shape in modules:
        down, up = factors(rng, shape)
        tensors[stem + ".lora_down.weight"] = down
        tensors[stem + ".lora_up.weight"] = up
        tensors[stem + ".alpha"] = np.array(float(RANK), dtype=np.float32)
    return tensors, len(modules)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    tensors, count = build()
    path = os.path.join(outdir, "sd1_tiny.safetensors")
    write_safetensors(path, dict(sorted(tensors.items())),
                      {"ss_base_model_version": "sd_v1", "ss_network_module": "networks.lora",
                       "ss_network_dim": str(RANK), "ss_network_alpha": str(RANK)})
    print(f"{path}: {count} modules, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
