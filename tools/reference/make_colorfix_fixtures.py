#!/usr/bin/python3
"""sd-webui-controlnet's tile_colorfix / tile_colorfix+sharp correction, run by the extension's own
code on random tensors with odd sizes, for tests/data/controlnet/colorfix.

    /usr/bin/python3 tools/reference/make_colorfix_fixtures.py EXTENSION/scripts/hook.py \
        tests/data/controlnet/colorfix [COMMIT]

EXTENSION: a checkout of github.com/Mikubill/sd-webui-controlnet (COMMIT, recorded in cases.json:
the one the committed fixtures were made from). Needs torch (Debian's python3-torch)
and numpy; deterministic (torch.manual_seed). What runs, unchanged, from scripts/hook.py:
  the module functions predict_start_from_noise, predict_noise_from_start, blur and register_schedule
  (taken out of the file with ast, so that none of its A1111 imports is needed), and the body of
  UnetHook.hook.forward's "Post-processing for color fix" loop (the source between that comment and
  "Post-processing for restore", dedented, exec'd with the names it reads: outer, param, h, x,
  timesteps, cond_mark, is_in_high_res_fix, self). extract_into_tensor is CompVis ldm's
  (ldm/modules/diffusionmodules/util.py), which the file imports through ldm.models.diffusion.ddpm.
The tensors are float64 (the tables float32, as register_schedule makes them, widened by .to(x_t)),
so the expected outputs are a float64 reference rounded to float32 once.

Writes OUTDIR/cases.json (per case: name, preprocessor, threshold_a, threshold_b, weight, the
timesteps and cond_mark per row, shape) and OUTDIR/colorfix.safetensors: "ddpm_table" [2, 1000]
(sqrt_recip_alphas_cumprod, sqrt_recipm1_alphas_cumprod as registered), and per case "<name>.eps",
".x", ".latent" (the inputs, float32) and ".out" (the corrected output).
"""
import ast
import json
import os
import sys
import textwrap
import types
from functools import partial

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unet2d_ref import write_safetensors  # noqa: E402


def extract_into_tensor(a, t, x_shape):
    # CompVis ldm/modules/diffusionmodules/util.py extract_into_tensor
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


def load_hook(path):
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source)
    wanted = {"predict_start_from_noise", "predict_noise_from_start", "blur", "register_schedule"}
    names = {"torch": torch, "np": np, "partial": partial, "extract_into_tensor": extract_into_tensor}
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), names)
            found.add(node.name)
    assert found == wanted, found
    lines = source.splitlines()
    begin = next(i for i, s in enumerate(lines) if "# Post-processing for color fix" in s)
    end = next(i for i, s in enumerate(lines) if "# Post-processing for restore" in s)
    body = textwrap.dedent("\n".join(lines[begin:end]))
    assert "colorfix" in body and "blur(x0_prd, k)" in body, body
    return names, compile(body, path + " (color fix)", "exec")


def run_case(names, block, ldm, name, threshold_a, threshold_b, weight, eps, x, latent, timesteps, cond_mark):
    param = types.SimpleNamespace(
        used_hint_cond_latent=latent,
        preprocessor={"name": name, "threshold_a": threshold_a, "threshold_b": threshold_b},
        weight=weight,
        disabled_by_hr_option=lambda hr: False,
    )
    outer = types.SimpleNamespace(control_params=[param], sd_ldm=ldm)
    scope = dict(names)
    scope.update(outer=outer, h=eps, x=x, timesteps=timesteps, cond_mark=cond_mark, is_in_high_res_fix=False,
                 self=types.SimpleNamespace(is_in_high_res_fix=False))
    exec(block, scope)
    return scope["h"]


def main():
    hook, outdir = sys.argv[1], sys.argv[2]
    commit = sys.argv[3] if len(sys.argv) > 3 else "unknown"
    names, block = load_hook(hook)
    ldm = types.SimpleNamespace()
    names["register_schedule"](ldm)
    table = torch.stack([ldm.sqrt_recip_alphas_cumprod, ldm.sqrt_recipm1_alphas_cumprod]).numpy().astype(np.float32)
    torch.manual_seed(20240611)
    # (case name, preprocessor, Variation, Sharpness, weight, rows' timesteps, rows' cond_mark, C, H, W)
    cases = [
        ("plain_k8", "tile_colorfix", 8.0, 1.0, 1.0, [999.0, 500.5, 1.5], [1, 0, 1], 4, 13, 21),
        ("plain_k3_w06", "tile_colorfix", 3.0, 1.0, 0.6, [761.49, 0.3], [1, 0], 4, 9, 7),
        ("plain_k5_w13", "tile_colorfix", 5.0, 1.0, 1.3, [250.5, 12.0, 980.7], [0, 1, 1], 4, 11, 17),
        ("sharp_k8_s1", "tile_colorfix+sharp", 8.0, 1.0, 1.0, [999.0, 999.0, 421.5, 421.5], [1, 0, 1, 0], 4, 15, 19),
        ("sharp_k4_s2_w07", "tile_colorfix+sharp", 4.0, 2.0, 0.7, [33.5, 640.2], [0, 1], 4, 10, 13),
        ("sharp_k32_s05", "tile_colorfix+sharp", 32.0, 0.5, 1.0, [120.6, 120.6], [1, 0], 4, 12, 9),
    ]
    tensors = {"ddpm_table": table}
    listing = []
    for case, name, a, b, w, ts, marks, C, H, W in cases:
        B = len(ts)
        eps = torch.randn(B, C, H, W).float()
        x = (torch.randn(B, C, H, W) * 1.7).float()
        latent = (torch.randn(B, C, H, W) * 0.9 + 0.2).float()
        t = torch.tensor(ts, dtype=torch.float64)
        mark = torch.tensor(marks, dtype=torch.float64).reshape(B, 1, 1, 1)
        out = run_case(names, block, ldm, name, a, b, w, eps.double(), x.double(), latent.double(), t, mark)
        tensors[case + ".eps"] = eps.numpy()
        tensors[case + ".x"] = x.numpy()
        tensors[case + ".latent"] = latent.numpy()
        tensors[case + ".out"] = out.float().numpy()
        listing.append({"name": case, "preprocessor": name, "threshold_a": a, "threshold_b": b, "weight": w,
                        "timesteps": ts, "cond_mark": marks, "shape": [B, C, H, W]})
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"source": "sd-webui-controlnet scripts/hook.py (color fix)", "commit": commit, "cases": listing},
                  f, indent=1)
        f.write("\n")
    write_safetensors(os.path.join(outdir, "colorfix.safetensors"), tensors)


if __name__ == "__main__":
    main()
