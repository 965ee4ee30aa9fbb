#!/usr/bin/python3
"""diffusers' own verdict on the single-file checkpoints of tests/data/singlefile.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_singlefile_fixtures.py OUTDIR

Needs torch, diffusers, transformers, safetensors and numpy; no network; make_single_file.py beside
this script. For each layout (sd1, sd2) it takes the committed checkpoint and the diffusers folder it
was made from (tests/data/singlefile/<layout>.safetensors and <layout>/ next to this repository's
tools/; when they are absent, it makes them again with make_single_file.py --random and the same
seeds), then:

  1. loads the folder's models with diffusers / transformers (UNet2DConditionModel, AutoencoderKL,
     CLIPTextModel .from_pretrained with output_loading_info): the folder is a real diffusers folder
     when nothing is missing or unexpected;
  2. runs diffusers' single-file converters on the checkpoint (infer_diffusers_model_type,
     convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint, and convert_ldm_clip_checkpoint (sd1)
     or convert_open_clip_checkpoint (sd2)) and compares every converted tensor with the folder
     model's state dict: names, shapes and values exactly (float32).

Writes OUTDIR/cases.json (a few KB): per layout the checkpoint's sha256 (so the C++ test knows these
are the bytes it loads), the model type diffusers infers, and for each model the keys missing,
unexpected and mismatched. Nothing is raised on a mismatch: the report is the result.
core/models/sd/SingleFileCheckpoint.cpp maps the same files the other way (tests/core/tst_singlefile.cpp), so
the two together tie Tessera's LDM names to diffusers' converters.
"""
import hashlib
import json
import os
import platform
import sys
import tempfile

import numpy
import torch
from safetensors.torch import load_file

import diffusers
import transformers
from diffusers import AutoencoderKL, UNet2DConditionModel
from diffusers.loaders.single_file_utils import (
    convert_ldm_clip_checkpoint,
    convert_ldm_unet_checkpoint,
    convert_ldm_vae_checkpoint,
    convert_open_clip_checkpoint,
    infer_diffusers_model_type,
)
from transformers import CLIPTextModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_single_file  # noqa: E402

DATA = os.path.join(HERE, "..", "..", "tests", "data", "singlefile")
SEEDS = {"sd1": 1, "sd2": 2}  # make_single_file.py's --random defaults


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sources(layout, scratch):
    """The committed checkpoint and folder, or the same made again."""
    checkpoint = os.path.join(DATA, layout + ".safetensors")
    folder = os.path.join(DATA, layout)
    if os.path.isfile(checkpoint) and os.path.isdir(folder):
        return checkpoint, folder, "committed"
    folder = os.path.join(scratch, layout)
    checkpoint = os.path.join(scratch, layout + ".safetensors")
    make_single_file.make_random_folder(folder, layout, SEEDS[layout])
    make_single_file.write_safetensors(checkpoint, make_single_file.convert(folder, layout), {"format": "pt"})
    return checkpoint, folder, "made again"


def without_text_model(state):
    """transformers >= 5.6 flattens CLIPTextModel (no "text_model." prefix): compare without it."""
    return {k[len("text_model."):] if k.startswith("text_model.") else k: v for k, v in state.items()}


def compare(converted, reference):
    converted, reference = without_text_model(converted), without_text_model(reference)
    mismatched = []
    for name in sorted(set(converted) & set(reference)):
        a, b = converted[name], reference[name]
        if tuple(a.shape) != tuple(b.shape) or not torch.equal(a.float(), b.float()):
            mismatched.append(name)
    return {
        "compared": len(set(converted) & set(reference)),
        "missing": sorted(set(reference) - set(converted)),
        "unexpected": sorted(set(converted) - set(reference)),
        "mismatched": mismatched,
    }


def loading_info(info):
    return {key: sorted(str(k) for k in info.get(key, [])) for key in ("missing_keys", "unexpected_keys", "mismatched_keys")}


def check(layout, scratch):
    checkpoint, folder, origin = sources(layout, scratch)
    # Values are compared as float32 whatever dtype each library loads them in.
    unet, unet_info = UNet2DConditionModel.from_pretrained(os.path.join(folder, "unet"), output_loading_info=True)
    vae, vae_info = AutoencoderKL.from_pretrained(os.path.join(folder, "vae"), output_loading_info=True)
    text, text_info = CLIPTextModel.from_pretrained(os.path.join(folder, "text_encoder"), output_loading_info=True)
    ckpt = load_file(checkpoint)
    if layout == "sd1":
        text_converted = convert_ldm_clip_checkpoint(ckpt)
    else:
        text_converted = convert_open_clip_checkpoint(text, ckpt, prefix="cond_stage_model.model.")
    return {
        "checkpoint": os.path.basename(checkpoint),
        "origin": origin,
        "sha256": sha256(checkpoint),
        "model_type": infer_diffusers_model_type(ckpt),
        "folder_load": {"unet": loading_info(unet_info), "vae": loading_info(vae_info),
                        "text_encoder": loading_info(text_info)},
        "conversion": {
            "unet": compare(convert_ldm_unet_checkpoint(ckpt, dict(unet.config)), unet.state_dict()),
            "vae": compare(convert_ldm_vae_checkpoint(ckpt, dict(vae.config)), vae.state_dict()),
            "text_encoder": compare(text_converted, text.state_dict()),
        },
    }


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as scratch:
        cases = {layout: check(layout, scratch) for layout in ("sd1", "sd2")}
    cases["versions"] = {"torch": torch.__version__, "diffusers": diffusers.__version__,
                         "transformers": transformers.__version__, "numpy": numpy.__version__,
                         "python": platform.python_version()}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1, sort_keys=True)
        f.write("\n")
    for layout in ("sd1", "sd2"):
        c = cases[layout]
        problems = {m: {k: len(v) for k, v in r.items() if k != "compared" and v} for m, r in c["conversion"].items()}
        print(f"{layout}: {c['origin']}, model_type {c['model_type']}, conversion problems {problems}")


if __name__ == "__main__":
    main()
