#!/usr/bin/python3
"""PyTorch .ckpt Stable Diffusion checkpoints and separate VAE files, for the single-file loader's
restricted-reader path and `--vae` (core/formats/TensorFile.h, core/models/sd/SingleFileVae.h).

    /usr/bin/python3 tools/reference/make_sd_ckpt_fixtures.py [OUTDIR]

OUTDIR defaults to tests/data/sdfiles next to this repository's tools/. Needs torch (Debian 12's
python3-torch 1.13 is enough) and numpy; no network. Every .ckpt/.pt is written by torch.save itself
(zip format), so its opcodes, persistent ids and records are what users' files hold. make_single_file.py
beside this script gives the safetensors reader/writer and the diffusers -> LDM VAE names.

Files:
  sd1.ckpt             tests/data/singlefile/sd1.safetensors as a training run saves it: every tensor
                       (same names, dtypes and values: F16 UNet and text encoder, F32 VAE, the I64
                       position_ids) under "state_dict", beside "epoch", "global_step" and
                       "pytorch-lightning_version" (CompVis' and Stability's releases look like this).
  hostile.ckpt         a small state dict under "state_dict" and, beside it, an object whose
                       __reduce__ names os.system (what a malicious checkpoint does: torch.load without
                       weights_only would run it). The pickle therefore holds GLOBAL 'posix system'
                       (on Linux) and REDUCE; the file is never loaded here.
  vae/ldm.safetensors  a VAE of tests/data/sdpipeline/sd1/vae's configuration (block_out_channels
                       [8, 8, 16, 16], one resnet per block, GroupNorm 4, 4 latent channels) with its own
                       random weights (seed 7, F32), in the original LDM names without a prefix
                       (encoder.down.0.block.0..., mid.attn_1 q/k/v/proj_out as 1x1 convolutions), as
                       vae-ft-mse-840000-ema-pruned.safetensors and sdxl_vae.safetensors hold them.
  vae/ldm.pt           the same tensors as a .pt the way the kl-f8 releases ship: under "state_dict",
                       with a "loss." discriminator tensor and "model_ema.decay" / "model_ema.num_updates"
                       that A1111's load_vae_dict drops, and "global_step".
  vae/diffusers/       the same weights as a diffusers AutoencoderKL folder (config.json: the pipeline's;
                       diffusion_pytorch_model.safetensors in diffusers' names), for a pipeline folder
                       whose vae/ holds them.
Two runs give byte-identical files.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_single_file as msf  # noqa: E402

DATA = os.path.join(HERE, "..", "..", "tests", "data")
VAE_SEED = 7


class RunsACommand:
    """What a malicious pickle carries: unpickling it calls os.system."""

    def __reduce__(self):
        return (os.system, ("echo this checkpoint ran a command",))


def to_torch(array):
    return torch.from_numpy(np.ascontiguousarray(array).copy())


def save(obj, path):
    torch.save(obj, path)  # zip format; the archive is named after the file's stem


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(DATA, "sdfiles"))
    os.makedirs(os.path.join(out, "vae", "diffusers"), exist_ok=True)

    # The SD 1.x checkpoint as a .ckpt.
    source = msf.read_safetensors(os.path.join(DATA, "singlefile", "sd1.safetensors"))
    state = {name: to_torch(source[name]) for name in sorted(source)}
    save({"epoch": 6, "global_step": 470000, "pytorch-lightning_version": "1.4.2", "state_dict": state},
         os.path.join(out, "sd1.ckpt"))

    # A checkpoint that would run a command when unpickled.
    hostile_state = {"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3)}
    save({"state_dict": hostile_state, "callbacks": RunsACommand()}, os.path.join(out, "hostile.ckpt"))

    # The separate VAE: the pipeline's configuration, its own weights.
    config_path = os.path.join(DATA, "sdpipeline", "sd1", "vae", "config.json")
    with open(config_path) as f:
        config = json.load(f)
    weights = msf.random_tensors(msf.vae_shapes(config), np.random.default_rng(VAE_SEED), np.float32)
    ldm = {k[len("first_stage_model."):]: v for k, v in msf.vae_to_ldm(weights, config).items()}
    msf.write_safetensors(os.path.join(out, "vae", "ldm.safetensors"), ldm, {"format": "pt"})
    released = {name: to_torch(ldm[name]) for name in sorted(ldm)}
    released["loss.discriminator.main.0.weight"] = torch.zeros(8, 3, 4, 4)
    released["loss.logvar"] = torch.zeros(())
    released["model_ema.decay"] = torch.tensor(0.9999)
    released["model_ema.num_updates"] = torch.tensor(1000, dtype=torch.int32)
    save({"global_step": 840000, "state_dict": released}, os.path.join(out, "vae", "ldm.pt"))
    shutil.copyfile(config_path, os.path.join(out, "vae", "diffusers", "config.json"))
    msf.write_safetensors(os.path.join(out, "vae", "diffusers", "diffusion_pytorch_model.safetensors"), weights,
                          {"format": "pt"})
    for root, _, files in sorted(os.walk(out)):
        for name in sorted(files):
            path = os.path.join(root, name)
            print(f"{os.path.relpath(path, out)}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
