#!/usr/bin/python3
"""Writes the FLUX.1 fixtures of tests/data/flux with diffusers itself.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_flux_fixtures.py OUTDIR

Needs torch, numpy, diffusers (+ its imports), safetensors; no network, no text encoders (the
pipelines take the embeddings directly). CPU, float64 forwards, deterministic seeds. Layout of OUTDIR:

    cases.json                       configs, inputs, what each file holds, the float32 error of diffusers
                                     itself against its float64 run
    transformer/                     FluxTransformer2DModel.save_pretrained (diffusers layout, weights F16
                                     values stored F32-exact), FLUX.1-dev-shaped, tiny and odd: 3 heads of 20
                                     (axes 4 + 8 + 8), 2 double and 2 single blocks, text 48 wide, pooled 40
    transformer_<case>.safetensors   sample [B,16,h,w], sigma [B], guidance [B], pooled [B,40], text [B,7,48],
                                     output [B,16,h,w] (float64 forward, stored F32), hook.<module> outputs;
                                     schnell_output: the same weights without guidance_in, guidance_embeds False
    scheduler.json                   FlowMatchEulerDiscreteScheduler sigmas and timesteps: FLUX.1-dev's
                                     dynamic shift at several sizes and step counts, schnell's none, and the
                                     image-to-image start of FluxImg2ImgPipeline.get_timesteps
    vae/                             AutoencoderKL (16 latent channels, no quant convs, FLUX's scaling and shift)
    pipeline_t2i.safetensors         FluxPipeline with that transformer and VAE: prompt_embeds, pooled, the start
                                     latents (packed and unpacked), 4 steps, guidance 3.5: the final latents
                                     (packed, unpacked) and the decoded image in [0, 1] (float64 run)
    pipeline_i2i.safetensors         FluxImg2ImgPipeline, the same models, strength 0.6 of 6 steps, guidance
                                     2.5: init_image [1,3,H,W] in [0, 1], its latent mean after FLUX's shift
                                     and scale (init_latents), the noise, the start latents (the mean noised
                                     to the first executed sigma by the scheduler's scale_noise: the latents
                                     the pipeline is given, so that no posterior sample is drawn), the final
                                     latents and the decoded image

Module names, shapes and the forward are the spec of diffusers models/transformers/transformer_flux.py;
Tessera stores BFL's names and converts (core/models/flux/FluxWeights.cpp).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxImg2ImgPipeline, FluxPipeline,
                       FluxTransformer2DModel)
from diffusers.pipelines.flux.pipeline_flux import calculate_shift

SEED = 2711
INPUT_SEED = 93
TEXT_TOKENS = 7

CONFIG = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 2,
    "num_single_layers": 2,
    "attention_head_dim": 20,
    "num_attention_heads": 3,
    "joint_attention_dim": 48,
    "pooled_projection_dim": 40,
    "guidance_embeds": True,
    "axes_dims_rope": [4, 8, 8],
}
VAE_CONFIG = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "block_out_channels": [8, 8, 16, 16],
    "layers_per_block": 1,
    "latent_channels": 16,
    "norm_num_groups": 4,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
}
SCHEDULER_DEV = dict(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                     max_image_seq_len=4096, shift=3.0)
SCHEDULER_SCHNELL = dict(use_dynamic_shifting=False, shift=1.0)

# name -> (batch, latent h, latent w, sigmas, guidance scales)
INPUTS = {
    "square": (2, 6, 10, [0.73, 0.21], [3.5, 1.25]),
    "wide": (1, 4, 14, [0.5], [7.0]),
}
HOOKS = ["time_text_embed", "context_embedder", "x_embedder", "transformer_blocks.0", "transformer_blocks.1",
         "single_transformer_blocks.0", "single_transformer_blocks.1", "norm_out"]


def randomize(model, seed):
    """Every parameter random (norm weights around 1 so a q/k norm swap shows), values F16-exact."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in name and p.dim() == 1 and name.endswith("weight"):
                value = 1.0 + 0.3 * noise
            elif name.endswith("bias"):
                value = 0.1 * noise
            elif p.dim() == 1:
                value = 1.0 + 0.3 * noise
            else:
                fan_in = 1
                for s in p.shape[1:]:
                    fan_in *= s
                value = noise / fan_in ** 0.5
            p.copy_(value.to(torch.float16).to(p.dtype))


def f32(t):
    return t.detach().to(torch.float32).contiguous()


def pack(latents):
    b, c, h, w = latents.shape
    return FluxPipeline._pack_latents(latents, b, c, h, w)


def unpack(packed, h, w):
    return FluxPipeline._unpack_latents(packed, h * 8, w * 8, 8)


def image_ids(h, w):
    return FluxPipeline._prepare_latent_image_ids(1, h // 2, w // 2, "cpu", torch.float64)


def forward(model, inputs, hooks=None):
    batch, h, w, sigmas, scales = inputs["shape"]
    captured = {}
    handles = []
    for name in hooks or []:
        def hook(_m, _i, out, name=name):
            if isinstance(out, tuple):
                for k, t in enumerate(out):
                    captured[f"hook.{name}.{k}"] = f32(t)
            else:
                captured[f"hook.{name}"] = f32(out)
        handles.append(model.get_submodule(name).register_forward_hook(hook))
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        out = model(hidden_states=pack(inputs["sample"].to(dtype)), encoder_hidden_states=inputs["text"].to(dtype),
                    pooled_projections=inputs["pooled"].to(dtype), timestep=inputs["sigma"].to(dtype),
                    img_ids=image_ids(h, w).to(dtype), txt_ids=torch.zeros(TEXT_TOKENS, 3, dtype=dtype),
                    guidance=inputs["guidance"].to(dtype) if model.config.guidance_embeds else None,
                    return_dict=False)[0]
    for handle in handles:
        handle.remove()
    return unpack(out, h, w), captured


def make_inputs(name, shape):
    batch, h, w, sigmas, scales = shape
    g = torch.Generator().manual_seed(INPUT_SEED + len(name))
    return {
        "shape": shape,
        "sample": torch.randn(batch, 16, h, w, generator=g, dtype=torch.float64),
        "text": torch.randn(batch, TEXT_TOKENS, CONFIG["joint_attention_dim"], generator=g, dtype=torch.float64),
        "pooled": torch.randn(batch, CONFIG["pooled_projection_dim"], generator=g, dtype=torch.float64),
        "sigma": torch.tensor(sigmas, dtype=torch.float64),
        "guidance": torch.tensor(scales, dtype=torch.float64),
    }


def scheduler_cases():
    cases = []
    for variant, cfg in (("dev", SCHEDULER_DEV), ("schnell", SCHEDULER_SCHNELL)):
        for steps, height, width in ((4, 1024, 1024), (28, 1024, 1024), (20, 512, 512), (20, 1024, 768),
                                     (20, 2048, 2048), (7, 48, 80)):
            s = FlowMatchEulerDiscreteScheduler(**cfg)
            seq = (height // 16) * (width // 16)
            mu = calculate_shift(seq, 256, 4096, 0.5, 1.15)
            s.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu if cfg["use_dynamic_shifting"] else None)
            case = {"variant": variant, "steps": steps, "height": height, "width": width, "image_seq_len": seq,
                    "mu": mu, "sigmas": s.sigmas.tolist(), "timesteps": s.timesteps.tolist()}
            # FluxImg2ImgPipeline.get_timesteps: the first step run and its (shifted) sigma.
            for strength in (0.3, 0.6, 1.0):
                init_timestep = min(steps * strength, steps)
                t_start = int(max(steps - init_timestep, 0))
                case[f"img2img_{strength}"] = {"start_index": t_start, "start_sigma": float(s.sigmas[t_start])}
            cases.append(case)
    return cases


def image_to_image(model, vae, outdir):
    """FluxImg2ImgPipeline from an explicit start (its get_timesteps and scale_noise), portrait."""
    pipe = FluxImg2ImgPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_DEV), vae=vae.double(),
                               text_encoder=None, tokenizer=None, text_encoder_2=None, tokenizer_2=None,
                               transformer=model.double())
    g = torch.Generator().manual_seed(INPUT_SEED + 200)
    height, width, steps, strength, guidance = 64, 48, 6, 0.6, 2.5
    init = torch.rand(1, 3, height, width, generator=g, dtype=torch.float64)
    prompt = torch.randn(1, TEXT_TOKENS, CONFIG["joint_attention_dim"], generator=g, dtype=torch.float64)
    pooled = torch.randn(1, CONFIG["pooled_projection_dim"], generator=g, dtype=torch.float64)
    noise = torch.randn(1, 16, height // 8, width // 8, generator=g, dtype=torch.float64)
    seq = (height // 16) * (width // 16)
    mu = calculate_shift(seq, 256, 4096, 0.5, 1.15)
    pipe.scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    timesteps, _ = pipe.get_timesteps(steps, strength, "cpu")
    with torch.no_grad():
        mean = pipe.vae.encode(2 * init - 1).latent_dist.mean
        z0 = (mean - vae.config.shift_factor) * vae.config.scaling_factor
        start = pipe.scheduler.scale_noise(z0, timesteps[:1], noise)
        common = dict(image=init, strength=strength, prompt_embeds=prompt, pooled_prompt_embeds=pooled,
                      latents=pack(start), height=height, width=width, num_inference_steps=steps,
                      guidance_scale=guidance)
        latents = pipe(**common, output_type="latent").images
        image = pipe(**common, output_type="pt").images
    save_file({"init_image": f32(init), "prompt_embeds": f32(prompt), "pooled": f32(pooled), "noise": f32(noise),
               "init_latents": f32(z0), "start": f32(start), "latents": f32(unpack(latents, height // 8, width // 8)),
               "image": f32(image)},
              os.path.join(outdir, "pipeline_i2i.safetensors"))
    return {"height": height, "width": width, "steps": steps, "strength": strength, "guidance_scale": guidance,
            "first_timestep": float(timesteps[0]), "executed_steps": len(timesteps), "mu": mu}


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(SEED)
    model = FluxTransformer2DModel(**CONFIG).eval()
    randomize(model, SEED)
    model.save_pretrained(os.path.join(outdir, "transformer"), safe_serialization=True)
    schnell = FluxTransformer2DModel(**{**CONFIG, "guidance_embeds": False}).eval()
    state = {k: v for k, v in model.state_dict().items() if "guidance_embedder" not in k}
    schnell.load_state_dict(state, strict=True)
    report = {"generator": "tools/reference/make_flux_fixtures.py", "config": CONFIG, "text_tokens": TEXT_TOKENS,
              "inputs": {}, "float32_error": {}}
    for name, shape in INPUTS.items():
        inputs = make_inputs(name, shape)
        out64, hooks = forward(model.double(), inputs, HOOKS if name == "square" else None)
        out32, _ = forward(model.float(), inputs)
        schnell64, _ = forward(schnell.double(), inputs)
        tensors = {k: f32(v) for k, v in inputs.items() if k != "shape"}
        tensors.update({"output": f32(out64), "schnell_output": f32(schnell64)})
        tensors.update(hooks)
        save_file(tensors, os.path.join(outdir, f"transformer_{name}.safetensors"))
        report["inputs"][name] = {"batch": shape[0], "latent_height": shape[1], "latent_width": shape[2],
                                  "sigmas": shape[3], "guidance": shape[4]}
        report["float32_error"][name] = float((out32.double() - out64).abs().max())

    report["scheduler_cases"] = len(scheduler_cases())
    with open(os.path.join(outdir, "scheduler.json"), "w") as f:
        json.dump(scheduler_cases(), f, indent=1)

    torch.manual_seed(SEED + 1)
    vae = AutoencoderKL(**VAE_CONFIG).eval()
    randomize(vae, SEED + 1)
    vae.save_pretrained(os.path.join(outdir, "vae"), safe_serialization=True)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_DEV)
    pipe = FluxPipeline(scheduler=scheduler, vae=vae.double(), text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=model.double())
    g = torch.Generator().manual_seed(INPUT_SEED + 100)
    height, width, steps = 48, 80, 4
    start = torch.randn(1, 16, height // 8, width // 8, generator=g, dtype=torch.float64)
    prompt = torch.randn(1, TEXT_TOKENS, CONFIG["joint_attention_dim"], generator=g, dtype=torch.float64)
    pooled = torch.randn(1, CONFIG["pooled_projection_dim"], generator=g, dtype=torch.float64)
    common = dict(prompt_embeds=prompt, pooled_prompt_embeds=pooled, latents=pack(start), height=height, width=width,
                  num_inference_steps=steps, guidance_scale=3.5)
    with torch.no_grad():
        latents = pipe(**common, output_type="latent").images
        image = pipe(**common, output_type="pt").images
    save_file({"prompt_embeds": f32(prompt), "pooled": f32(pooled), "start": f32(start),
               "start_packed": f32(pack(start)), "latents_packed": f32(latents),
               "latents": f32(unpack(latents, height // 8, width // 8)), "image": f32(image)},
              os.path.join(outdir, "pipeline_t2i.safetensors"))
    report["pipeline_t2i"] = {"height": height, "width": width, "steps": steps, "guidance_scale": 3.5,
                              "scheduler": SCHEDULER_DEV, "sigmas": scheduler.sigmas.tolist()}
    report["pipeline_i2i"] = image_to_image(model, vae, outdir)
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    print(json.dumps(report["float32_error"]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/flux")
