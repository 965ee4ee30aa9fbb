#!/usr/bin/python3
"""Writes the scheduler fixtures of tests/core/tst_sdschedulers.cpp: diffusers' own DDIM, DDPM, Euler,
Euler ancestral, DPM++ 2M (DPMSolverMultistepScheduler, dpmsolver++, order 2, midpoint), DPM++ 2M SDE
(the same class, sde-dpmsolver++), Heun, LMS (order 4), DPM2 (KDPM2DiscreteScheduler) and DPM++ SDE
(DPMSolverSDEScheduler, its Brownian tree replaced by recorded draws) and UniPC (UniPCMultistepScheduler,
order 2, bh2) schedulers with Stable Diffusion's scheduler configuration, stepped on
small random tensors in float32 on the CPU.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_scheduler_fixtures.py OUTDIR [STEMS]

STEMS (comma-separated variant stems, e.g. dpmpp_2m_sde,dpmpp_2m_sde_karras) rewrites only those files
and keeps cases.json's other entries (each entry names the torch it was made with).

OUTDIR belongs at tests/data/schedulers. No model is involved: the "model outputs" are random tensors,
so every value below is the scheduler's arithmetic alone. SD's configuration (what diffusers' SD
pipelines run after repairing old configs): scaled_linear betas 0.00085 .. 0.012 over 1000 timesteps,
steps_offset 1, clip_sample false (DDIM, DDPM), set_alpha_to_one false (DDIM), eta 0 (DDIM).

Layout:
    OUTDIR/cases.json      one entry per file: scheduler (Tessera's name), diffusers class, the full
                           diffusers config, prediction type, spacing, Karras flag, step counts, and per
                           step count the image-to-image begin index (absent when nothing would run)
    OUTDIR/<file>.safetensors   (F32), for every step count N in cases.json's "steps", prefix "nN.":
        nN.timesteps        [E]       scheduler.timesteps after set_timesteps(N) (int64 ones as float32);
                                      E = N model evaluations, 2N - 1 for Heun, DPM2 and DPM++ SDE (steps below are evaluations)
        nN.sigmas           [E+1]     scheduler.sigmas (Euler, Euler a, DPM++ 2M (SDE), Heun, LMS)
        nN.init_noise_sigma [1]
        text-to-image run (begin index none, as StableDiffusionPipeline):
        nN.samples          [N+1, *S] samples[0] = randn * init_noise_sigma; samples[k+1] = step k's prev_sample
        nN.model_inputs     [N, *S]   scale_model_input(samples[k], t_k)
        nN.model_outputs    [N, *S]   the random "model output" given to step k (epsilon or v)
        nN.noise            [N, *S]   the N(0,1) tensor step k drew through randn_tensor (zeros: none drawn)
        nN.pred_x0          [N, *S]   step k's x0 prediction (pred_original_sample; DPM++: model_outputs[-1])
        image-to-image run (strength 0.75 as StableDiffusionImg2ImgPipeline: begin b = N - int(N * 0.75),
        set_begin_index(b), add_noise at timesteps[b]; only where b < N):
        nN.i2i.begin        [1]       b
        nN.i2i.original     [*S]      the clean latent
        nN.i2i.start_noise  [*S]      the noise given to add_noise
        nN.i2i.samples      [N-b+1, *S]  samples[0] = add_noise(original, start_noise, timesteps[b:b+1])
        nN.i2i.model_inputs, nN.i2i.model_outputs, nN.i2i.noise, nN.i2i.pred_x0   [N-b, *S] as above
S = SHAPE. The ancestral noise is diffusers' own draw: randn_tensor is replaced, in every scheduler module,
by a function that draws from this script's generator and records what it returned.
No pickle anywhere. Deterministic (fixed seeds, deterministic algorithms, one thread).
"""
import json
import math
import os
import sys

import torch

try:
    from safetensors.torch import save_file
except ImportError:  # Debian's python3-torch comes without safetensors: the format is small enough to write
    def save_file(tensors, path, metadata=None):
        """safetensors' layout: u64 little-endian header length, JSON header, then the raw F32 data."""
        header, blobs, offset = {}, [], 0
        if metadata:
            header["__metadata__"] = metadata
        for name in sorted(tensors):
            data = tensors[name].to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
            header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                            "data_offsets": [offset, offset + len(data)]}
            blobs.append(data)
            offset += len(data)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for blob in blobs:
                f.write(blob)

import diffusers
from diffusers import (
    DDIMScheduler,
    DDPMScheduler,
    DPMSolverMultistepScheduler,
    DPMSolverSDEScheduler,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    HeunDiscreteScheduler,
    KDPM2DiscreteScheduler,
    LMSDiscreteScheduler,
    UniPCMultistepScheduler,
)
from diffusers.schedulers import (
    scheduling_ddim,
    scheduling_ddpm,
    scheduling_dpmsolver_multistep,
    scheduling_euler_ancestral_discrete,
    scheduling_euler_discrete,
)

SHAPE = [1, 2, 2, 2]
STEPS = [1, 2, 10, 20, 25]
STRENGTH = 0.75
PREDICTIONS = ["epsilon", "v_prediction"]
SPACINGS = ["leading", "trailing", "linspace"]

SD_BETAS = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "steps_offset": 1,
}

# (file stem, Tessera scheduler name, class, Karras flag or None, class-specific keyword arguments)
VARIANTS = [
    ("ddim", "ddim", DDIMScheduler, None, {"clip_sample": False, "set_alpha_to_one": False}),
    ("ddpm", "ddpm", DDPMScheduler, None, {"clip_sample": False, "variance_type": "fixed_small"}),
    ("euler", "euler", EulerDiscreteScheduler, False, {"use_karras_sigmas": False}),
    ("euler_karras", "euler", EulerDiscreteScheduler, True, {"use_karras_sigmas": True}),
    ("euler_a", "euler_a", EulerAncestralDiscreteScheduler, None, {}),
    ("dpmpp_2m", "dpmpp_2m", DPMSolverMultistepScheduler, False,
     {"algorithm_type": "dpmsolver++", "solver_order": 2, "solver_type": "midpoint", "use_karras_sigmas": False}),
    ("dpmpp_2m_karras", "dpmpp_2m", DPMSolverMultistepScheduler, True,
     {"algorithm_type": "dpmsolver++", "solver_order": 2, "solver_type": "midpoint", "use_karras_sigmas": True}),
    ("dpmpp_2m_sde", "dpmpp_2m_sde", DPMSolverMultistepScheduler, False,
     {"algorithm_type": "sde-dpmsolver++", "solver_order": 2, "solver_type": "midpoint", "use_karras_sigmas": False}),
    ("dpmpp_2m_sde_karras", "dpmpp_2m_sde", DPMSolverMultistepScheduler, True,
     {"algorithm_type": "sde-dpmsolver++", "solver_order": 2, "solver_type": "midpoint", "use_karras_sigmas": True}),
    ("heun", "heun", HeunDiscreteScheduler, False, {"use_karras_sigmas": False}),
    ("lms", "lms", LMSDiscreteScheduler, False, {"use_karras_sigmas": False}),
    ("lms_karras", "lms", LMSDiscreteScheduler, True, {"use_karras_sigmas": True}),
    ("dpm2", "dpm2", KDPM2DiscreteScheduler, False, {"use_karras_sigmas": False}),
    ("dpm2_karras", "dpm2", KDPM2DiscreteScheduler, True, {"use_karras_sigmas": True}),
    ("dpmpp_sde", "dpmpp_sde", DPMSolverSDEScheduler, False, {"use_karras_sigmas": False}),
    ("dpmpp_sde_karras", "dpmpp_sde", DPMSolverSDEScheduler, True, {"use_karras_sigmas": True}),
    # diffusers' defaults: order 2, bh2, predict_x0, lower_order_final, the corrector on every step.
    ("unipc", "unipc", UniPCMultistepScheduler, False,
     {"solver_order": 2, "solver_type": "bh2", "use_karras_sigmas": False}),
    ("unipc_karras", "unipc", UniPCMultistepScheduler, True,
     {"solver_order": 2, "solver_type": "bh2", "use_karras_sigmas": True}),
]
# Heun, DPM2 and DPM++ SDE take two model evaluations per step (the class's `order`): every "step" below is one
# entry of scheduler.timesteps (2N - 1 of them), and an image-to-image run begins at evaluation
# b * order, as StableDiffusionImg2ImgPipeline slices timesteps[t_start * order:].
# DPM2's and DPM++ SDE's tables interleave σ apart from the evaluations' own (Tessera lists those).
SIGMA_TABLES = ("euler", "euler_a", "dpmpp_2m", "dpmpp_2m_sde", "heun", "lms", "unipc")

# randn_tensor replacement: draws from GENERATOR[0], records every tensor it returns in DRAWS.
GENERATOR = [None]
DRAWS = []


def recording_randn(shape, generator=None, device=None, dtype=None, layout=None):
    del generator, device, layout  # the script's own generator, on the CPU
    t = torch.randn(tuple(shape), generator=GENERATOR[0], dtype=torch.float32)
    DRAWS.append(t.clone())
    return t.to(dtype) if dtype is not None else t


for module in (scheduling_ddim, scheduling_ddpm, scheduling_dpmsolver_multistep,
               scheduling_euler_ancestral_discrete, scheduling_euler_discrete):
    if not hasattr(module, "randn_tensor"):
        sys.exit(f"{module.__name__} has no randn_tensor to replace; the script needs updating")
    module.randn_tensor = recording_randn


def jsonable(value):
    """Config values as strict JSON: non-finite floats (lambda_min_clipped = -inf) become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def f32(t):
    if not torch.is_tensor(t):
        t = torch.tensor(t)
    return t.detach().to(torch.float32).clone().contiguous()


def run_steps(scheduler, sample, begin, gen):
    """Steps begin .. N-1 from `sample`; returns the stacked per-step tensors."""
    samples, inputs, outputs, noises, x0s = [sample.clone()], [], [], [], []
    if isinstance(scheduler, DPMSolverSDEScheduler):
        # Its Brownian tree (torchsde) replaced by plain draws, recorded like randn_tensor's: the
        # fixture proves the arithmetic with the noise injected, not torchsde's sequence.
        scheduler.noise_sampler = lambda sigma, sigma_next: recording_randn(SHAPE)
    for k in range(begin, len(scheduler.timesteps)):
        t = scheduler.timesteps[k]
        model_input = scheduler.scale_model_input(sample, t)
        model_output = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
        DRAWS.clear()
        out = scheduler.step(model_output, t, sample)
        if len(DRAWS) > 1:
            raise RuntimeError(f"{type(scheduler).__name__} drew {len(DRAWS)} noise tensors in one step")
        noise = DRAWS[0] if DRAWS else torch.zeros(SHAPE)
        if isinstance(scheduler, (DPMSolverMultistepScheduler, UniPCMultistepScheduler)):
            x0 = scheduler.model_outputs[-1]
        else:
            x0 = out.pred_original_sample
        sample = out.prev_sample
        samples.append(sample.clone())
        inputs.append(model_input.clone())
        outputs.append(model_output)
        noises.append(noise)
        x0s.append(x0.clone())
    return {
        "samples": torch.stack(samples),
        "model_inputs": torch.stack(inputs),
        "model_outputs": torch.stack(outputs),
        "noise": torch.stack(noises),
        "pred_x0": torch.stack(x0s),
    }


def make_file(outdir, stem, name, cls, karras, extra, prediction, spacing, seed):
    kwargs = dict(SD_BETAS, prediction_type=prediction, timestep_spacing=spacing, **extra)
    tensors = {}
    begins = {}
    config = None
    for n in STEPS:
        gen = torch.Generator().manual_seed(seed * 100 + n)
        GENERATOR[0] = gen
        p = f"n{n}."

        scheduler = cls(**kwargs)
        config = {k: jsonable(v) for k, v in dict(scheduler.config).items() if not k.startswith("_")}
        scheduler.set_timesteps(n)
        tensors[p + "timesteps"] = f32(scheduler.timesteps)
        if hasattr(scheduler, "sigmas") and name in SIGMA_TABLES:
            tensors[p + "sigmas"] = f32(scheduler.sigmas)
        tensors[p + "init_noise_sigma"] = f32([float(scheduler.init_noise_sigma)])
        start = torch.randn(SHAPE, generator=gen, dtype=torch.float32) * scheduler.init_noise_sigma
        for key, value in run_steps(scheduler, start, 0, gen).items():
            tensors[p + key] = f32(value)

        # image-to-image: a fresh scheduler, as a pipeline call would have
        begin = n - min(int(n * STRENGTH), n)
        if begin >= n:
            continue
        begin *= cls.order
        begins[str(n)] = begin
        scheduler = cls(**kwargs)
        scheduler.set_timesteps(n)
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(begin)
        original = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
        start_noise = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
        noisy = scheduler.add_noise(original, start_noise, scheduler.timesteps[begin:begin + 1])
        tensors[p + "i2i.begin"] = f32([float(begin)])
        tensors[p + "i2i.original"] = f32(original)
        tensors[p + "i2i.start_noise"] = f32(start_noise)
        for key, value in run_steps(scheduler, noisy, begin, gen).items():
            tensors[p + "i2i." + key] = f32(value)

    file = f"{stem}_{prediction}_{spacing}.safetensors"
    save_file(tensors, os.path.join(outdir, file), metadata={"format": "pt"})
    info = {
        "file": file, "scheduler": name, "class": cls.__name__, "prediction_type": prediction,
        "timestep_spacing": spacing, "steps": STEPS, "i2i_begin": begins, "seed": seed, "config": config,
        "torch": torch.__version__,
    }
    if karras is not None:
        info["use_karras_sigmas"] = karras
    finite = all(bool(torch.isfinite(v).all()) for v in tensors.values())
    if not finite:
        raise RuntimeError(f"{file}: a tensor holds NaN or infinity")
    print(f"{file}: {len(tensors)} tensors, i2i begins {begins}")
    return info


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: make_scheduler_fixtures.py OUTDIR [STEM,STEM...]\n"
                 "  with stems, only those variants' files are written; cases.json keeps the other entries")
    outdir = sys.argv[1]
    only = set(sys.argv[2].split(",")) if len(sys.argv) == 3 else None
    if only and not only <= {v[0] for v in VARIANTS}:
        sys.exit(f"unknown variant stems: {sorted(only - {v[0] for v in VARIANTS})}")
    os.makedirs(outdir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    kept, torch_version = {}, torch.__version__
    if only:
        with open(os.path.join(outdir, "cases.json")) as f:
            previous = json.load(f)
        kept = {e["file"]: e for e in previous["files"]}
        torch_version = previous["torch"]  # the kept files'; the rewritten ones name their own
    files = []
    seed = 2000
    for stem, name, cls, karras, extra in VARIANTS:
        for prediction in PREDICTIONS:
            for spacing in SPACINGS:
                seed += 1  # every file's seed stays the same whichever variants are written
                file = f"{stem}_{prediction}_{spacing}.safetensors"
                if only and stem not in only:
                    if file in kept:
                        files.append(kept[file])
                    continue
                files.append(make_file(outdir, stem, name, cls, karras, extra, prediction, spacing, seed))

    summary = {
        "generator": "tools/reference/make_scheduler_fixtures.py",
        "torch": torch_version, "diffusers": diffusers.__version__,
        "shape": SHAPE, "steps": STEPS, "strength": STRENGTH, "sd_betas": SD_BETAS,
        "files": files,
    }
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True, default=str, allow_nan=False)
        f.write("\n")

    total = sum(os.path.getsize(os.path.join(outdir, x)) for x in os.listdir(outdir))
    print(f"{len(files)} files; total fixture size: {total} bytes (about 2.9 MB expected)")


if __name__ == "__main__":
    main()
