#!/usr/bin/python3
"""Writes Tessera's correctness fixtures: small random diffusers-layout checkpoints under
tests/data/models/ and float64-reference golden outputs under tests/data/golden/.
Deterministic: the same bytes on every run. Run with Debian's PyTorch:

    /usr/bin/python3 tools/reference/make_fixtures.py [--models-only] [--check]

--models-only: checkpoints + forward goldens + philox + schedules, no sampling runs.
--check: also re-run the self-tests (coefficients vs the schedulers' step formulas, legacy load == current load).
tools/reference/README.md describes every file.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import unet2d_ref as R  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODELS = os.path.join(ROOT, "tests", "data", "models")
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")

# Channel widths of every fixture model, halved from [32, 64, 64]: at that width the three
# F32 checkpoints alone are 16 MB, over the 10 MB fixture budget. Every
# structural feature (groups, several heads, shortcuts, asymmetric padding...) is kept.
WIDTHS = [16, 32, 32]

COMMON = {
    "_class_name": "UNet2DModel", "_diffusers_version": "0.0.4", "sample_size": 32,
    "in_channels": 3, "out_channels": 3, "center_input_sample": False,
    "time_embedding_type": "positional", "act_fn": "silu", "mid_block_scale_factor": 1,
    "block_out_channels": WIDTHS, "norm_num_groups": 8,
    "down_block_types": ["DownBlock2D", "AttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
}
MODEL_CONFIGS = {
    # google/ddpm style
    "cifar_like": dict(COMMON, layers_per_block=1, attention_head_dim=None, downsample_padding=0,
                       freq_shift=1, flip_sin_to_cos=False, norm_eps=1e-6),
    "heads_pad1": dict(COMMON, layers_per_block=2, attention_head_dim=8, downsample_padding=1,
                       freq_shift=0, flip_sin_to_cos=True, norm_eps=1e-5,
                       resnet_time_scale_shift="scale_shift"),
    # same config and the same weights as cifar_like, attention saved as query/key/value/proj_attn
    "legacy_names": dict(COMMON, layers_per_block=1, attention_head_dim=None, downsample_padding=0,
                         freq_shift=1, flip_sin_to_cos=False, norm_eps=1e-6),
}
WEIGHT_SEEDS = {"cifar_like": 101, "heads_pad1": 202, "legacy_names": 101}
SCHEDULER_CONFIG = {
    "_class_name": "DDPMScheduler", "_diffusers_version": "0.0.4", "num_train_timesteps": 1000,
    "beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "clip_sample": True,
    "trained_betas": None, "variance_type": "fixed_small",
}

FORWARD_INPUT_SEED = 7
FORWARD_TIMESTEPS = [10, 500]
SAMPLE_SEED = 1234
SAMPLE_H, SAMPLE_W = 64, 96
TILE, OVERLAP = 32, 8
UNTILED_TILE = 96  # one tile of 64 x 96 covers the canvas


# Weight gains (std * sqrt(fan_in)) per kind of tensor; see random_weights.
# With larger gains (1.0, or sharper attention) the random net makes DDIM sampling chaotic: a float32
# engine's rounding grows to O(1) differences over 20 steps (measured at 64x96 untiled). These keep
# a float32-UNet run within ~1e-4 of the float64 golden (make_fixtures.py --check prints it).
GAINS = {"default": 0.25, "conv_in": 0.5, "qk": 1.0, "conv_out": 2.0, "temb": 1.0, "bias": 0.1, "conv_in_bias": 0.1,
         "norm_gamma": 0.2, "norm_beta": 0.2}


def random_weights(cfg, seed, gains=None):
    """normal * gain / sqrt(fan_in) weights, N(0, bias) biases, GroupNorm gamma 1 + N(0, norm_gamma),
    beta N(0, norm_beta): activations stay O(1) and every parameter matters."""
    g = dict(GAINS, **(gains or {}))
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in R.expected_keys(cfg).items():
        is_norm = any(s in name for s in ("norm1", "norm2", "group_norm", "conv_norm_out"))
        if is_norm and name.endswith(".weight"):
            a = 1.0 + g["norm_gamma"] * rng.standard_normal(shape)
        elif is_norm:
            a = g["norm_beta"] * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = g["conv_in_bias" if name.startswith("conv_in") else "bias"] * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            if name.startswith("conv_in"):
                gain = g["conv_in"]
            elif name.startswith("conv_out"):
                gain = g["conv_out"]
            elif ".to_q." in name or ".to_k." in name:
                gain = g["qk"]
            elif name.startswith("time_embedding.") or ".time_emb_proj." in name:
                gain = g["temb"]  # the timestep must visibly change the output
            else:
                gain = g["default"]
            a = gain * rng.standard_normal(shape) / math.sqrt(fan_in)
        out[name] = a.astype(np.float32)
    return out


def write_model(name):
    cfg_raw = MODEL_CONFIGS[name]
    cfg = R.resolve_config(cfg_raw)
    weights = random_weights(cfg, WEIGHT_SEEDS[name])
    if name == "legacy_names":
        weights = {R.to_legacy_name(k): v for k, v in weights.items()}
    folder = os.path.join(MODELS, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg_raw, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(folder, "scheduler_config.json"), "w") as f:
        json.dump(SCHEDULER_CONFIG, f, indent=2, sort_keys=True)
        f.write("\n")
    R.write_safetensors(os.path.join(folder, "diffusion_pytorch_model.safetensors"), weights, {"format": "pt"})
    return folder


def norm(a):
    return float(np.sqrt(np.sum(np.asarray(a, dtype=np.float64) ** 2)))


def describe(label, a):
    a = np.asarray(a, dtype=np.float64)
    assert np.isfinite(a).all(), f"{label}: non-finite values"
    print(f"  {label:40s} shape {list(a.shape)}  L2 {norm(a):10.4f}  rms {np.sqrt(np.mean(a * a)):.4f}"
          f"  min {a.min():+.4f}  max {a.max():+.4f}", flush=True)


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def forward_golden(name, model):
    rng = np.random.default_rng(FORWARD_INPUT_SEED)
    x = rng.standard_normal((2, 3, 32, 48)).astype(np.float32)
    t = np.array(FORWARD_TIMESTEPS, dtype=np.int64)
    y = model(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(t)).numpy()
    describe(f"forward {name} output", y)
    # The two batch entries must differ in more than their inputs: check the timestep matters.
    y_swap = model(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(t[::-1].copy())).numpy()
    assert norm(y - y_swap) > 1e-2 * norm(y), "timestep has no visible effect"
    y32 = R.UNet2DRef(model.cfg, {k: v.numpy().astype(np.float32) for k, v in model.w.items()},
                      torch.float32)(torch.from_numpy(x), torch.from_numpy(t)).numpy()
    print(f"    float32 forward vs golden: max |diff| {np.abs(y32 - y).max():.2e}")
    R.write_safetensors(os.path.join(GOLDEN, f"forward_{name}.safetensors"),
                        {"input": x, "timesteps": f32(t), "output": f32(y)}, {"format": "pt"})
    return y


def philox_golden():
    draws = [0, 1, 7]
    idx = np.arange(1024, dtype=np.uint64)
    normal = np.stack([R.philox_normal(SAMPLE_SEED, d, idx) for d in draws])
    cases = [  # seed, draw, index
        (1234, 0, 0), (1234, 0, 1), (1234, 1, 0), (1234, 7, 1023), (0, 0, 0),
        (0xFFFFFFFFFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF), ((1 << 40) + 5, R.INIT_NOISE_DRAW, (1 << 33) + 7),
        (0x0123456789ABCDEF, 3, 5 * 64 * 96 + 17),
    ]
    inputs, bits, bnorm = [], [], []
    for seed, draw, index in cases:
        inputs.append([seed & 0xFFFFFFFF, seed >> 32, draw, index & 0xFFFFFFFF, index >> 32])
        bits.append([int(v) for v in R.philox_bits(seed, draw, index)])
        bnorm.append(float(R.philox_normal(seed, draw, index)))
    kat_in = [[0, 0, 0, 0, 0, 0], [0xFFFFFFFF] * 6,
              [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0]]
    kat_out = [[int(v) for v in R.philox4x32_10(*k)] for k in kat_in]
    # Random123's published known-answer vectors for philox4x32_10
    assert kat_out == [[0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8],
                       [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD],
                       [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]], kat_out
    describe("philox normal seed 1234 draws 0,1,7", normal)
    print(f"  philox normal mean {normal.mean():+.4f} std {normal.std():.4f}")
    R.write_safetensors(os.path.join(GOLDEN, "philox_seed1234.safetensors"), {
        "normal": f32(normal), "draws": np.array(draws, dtype=np.uint32),
        "bits_inputs": np.array(inputs, dtype=np.uint32), "bits": np.array(bits, dtype=np.uint32),
        "bits_normal": f32(bnorm),
        "kat_counter_key": np.array(kat_in, dtype=np.uint32), "kat_output": np.array(kat_out, dtype=np.uint32),
    }, {"format": "pt"})


def coeff_matrix(sched):
    return np.array([[sched.coefficients(k)[f] for f in R.COEFF_FIELDS] for k in range(sched.steps)])


def schedules_golden():
    ddim = R.Scheduler("ddim", SCHEDULER_CONFIG, 20)
    ddpm = R.Scheduler("ddpm", SCHEDULER_CONFIG, 10)
    ddim50 = R.Scheduler("ddim", SCHEDULER_CONFIG, 50)
    R.write_safetensors(os.path.join(GOLDEN, "schedules.safetensors"), {
        "betas": f32(ddim.betas), "alphas_cumprod": f32(ddim.alphas_cumprod),
        "ddim20_timesteps": f32(ddim.timesteps), "ddim20_coefficients": f32(coeff_matrix(ddim)),
        "ddim50_timesteps": f32(ddim50.timesteps), "ddim50_coefficients": f32(coeff_matrix(ddim50)),
        "ddpm10_timesteps": f32(ddpm.timesteps), "ddpm10_coefficients": f32(coeff_matrix(ddpm)),
    }, {"format": "pt", "coefficient_columns": ",".join(R.COEFF_FIELDS)})
    print(f"  ddim20 timesteps {ddim.timesteps}")
    print(f"  ddpm10 timesteps {ddpm.timesteps}")
    return ddim, ddpm


def tileplan_golden():
    plan = R.tile_plan(SAMPLE_W, SAMPLE_H, TILE, OVERLAP)
    maps, N = R.blend_weights(plan, "hann")
    print(f"  tile plan {SAMPLE_W}x{SAMPLE_H} tile {TILE} overlap {OVERLAP}: xs {plan['xs']} ys {plan['ys']}"
          f" -> {len(plan['tiles'])} tiles")
    R.write_safetensors(os.path.join(GOLDEN, "tileplan_64x96_t32_o8_hann.safetensors"), {
        "xs": f32(plan["xs"]), "ys": f32(plan["ys"]),
        "axis_window": R.axis_window("hann", TILE, OVERLAP), "tile_weights": f32(maps[0]),
        "normalizer": f32(N),
    }, {"format": "pt"})
    return plan


def self_checks(sched_list):
    rng = np.random.default_rng(99)
    for s in sched_list:
        for k in range(s.steps):
            x, e, z = (rng.standard_normal((3, 8, 8)) * 1.5 for _ in range(3))
            a = R.apply_step(s.coefficients(k), x, e, z)
            b = s.step_direct(e, k, x, z)
            assert np.abs(a - b).max() < 1e-12, (s.kind, k, np.abs(a - b).max())
    print("  applyStep coefficients == step formulas (DDIM, DDPM): ok")


def run_sampling(model, ddim, ddpm, model32=None):
    runs = []
    for sched, tag in ((ddim, "ddim20"), (ddpm, "ddpm10")):
        for mode, tile, fusion in (("untiled", None, "sample"), ("tiled_sample", TILE, "sample"),
                                   ("tiled_noise", TILE, "noise")):
            t0 = time.time()
            rec = {}
            x = R.sample(model, sched, SAMPLE_SEED, SAMPLE_H, SAMPLE_W, tile=tile, overlap=OVERLAP if tile else 0,
                         window="hann", fusion=fusion, record=rec)
            name = f"sample_cifar_like_{tag}_{mode}"
            describe(name + " x_final", x)
            frac_clipped = float(np.mean(np.abs(x) >= 1.0 - 1e-6))
            print(f"    |x|=1 fraction {frac_clipped:.3f}   ({time.time() - t0:.1f} s)", flush=True)
            R.write_safetensors(os.path.join(GOLDEN, name + ".safetensors"), {
                "x_final": f32(x), "x_step0": f32(rec["x_after_step"][0][None]),
                "timesteps": f32(sched.timesteps)}, {"format": "pt"})
            runs.append((name, x))
            if model32 is not None:
                # Calibration: the same run with the UNet in float32 (what a float32 engine can reach).
                x32 = R.sample(model32, sched, SAMPLE_SEED, SAMPLE_H, SAMPLE_W, tile=tile,
                               overlap=OVERLAP if tile else 0, window="hann", fusion=fusion)
                d = np.abs(x32 - x)
                print(f"    float32-UNet run vs golden: max |diff| {d.max():.2e}  rms {np.sqrt(np.mean(d * d)):.2e}",
                      flush=True)
    return dict(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reduction order; the machine is shared
    t_start = time.time()
    os.makedirs(MODELS, exist_ok=True)
    os.makedirs(GOLDEN, exist_ok=True)

    print("models:")
    models = {}
    for name in MODEL_CONFIGS:
        folder = write_model(name)
        models[name] = R.UNet2DRef.from_folder(folder)
        nparams = sum(int(v.numel()) for v in models[name].w.values())
        print(f"  {name}: {len(models[name].w)} tensors, {nparams} parameters")

    print("forward goldens:")
    t0 = time.time()
    outs = {name: forward_golden(name, m) for name, m in models.items()}
    assert np.array_equal(outs["cifar_like"], outs["legacy_names"]), "legacy names load differently"
    print(f"  legacy_names output == cifar_like output: ok   ({time.time() - t0:.1f} s)")

    print("philox, schedules, tile plan:")
    philox_golden()
    ddim, ddpm = schedules_golden()
    tileplan_golden()
    self_checks([ddim, ddpm, R.Scheduler("ddim", SCHEDULER_CONFIG, 20, eta=0.7),
                 R.Scheduler("ddpm", dict(SCHEDULER_CONFIG, variance_type="fixed_large"), 10)])

    if not args.models_only:
        print("sampling (cifar_like, 64x96, seed 1234):")
        m32 = R.UNet2DRef.from_folder(os.path.join(MODELS, "cifar_like"), torch.float32) if args.check else None
        runs = run_sampling(models["cifar_like"], ddim, ddpm, m32)
        for tag in ("ddim20", "ddpm10"):
            u = runs[f"sample_cifar_like_{tag}_untiled"]
            for mode in ("tiled_sample", "tiled_noise"):
                d = runs[f"sample_cifar_like_{tag}_{mode}"] - u
                print(f"  {tag} {mode} vs untiled: rms diff {np.sqrt(np.mean(d * d)):.4f}")
        if args.check:
            # Untiled == one tile covering the whole canvas, through the tiled code path.
            x1 = R.sample(models["cifar_like"], ddim, SAMPLE_SEED, SAMPLE_H, SAMPLE_W, tile=UNTILED_TILE,
                          overlap=0, window="hann", fusion="sample")
            x2 = R.sample(models["cifar_like"], ddim, SAMPLE_SEED, SAMPLE_H, SAMPLE_W, tile=UNTILED_TILE,
                          overlap=0, window="hann", fusion="noise")
            for lab, xx in (("sample", x1), ("noise", x2)):
                dd = np.abs(xx - runs["sample_cifar_like_ddim20_untiled"]).max()
                print(f"  one tile of 64x96 ({lab}) vs untiled: max |diff| {dd:.2e}")
                assert dd < 1e-9

    print(f"done in {time.time() - t_start:.1f} s")


if __name__ == "__main__":
    main()
