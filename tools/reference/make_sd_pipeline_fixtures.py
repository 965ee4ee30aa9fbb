#!/usr/bin/python3
"""Complete Stable Diffusion pipeline runs (text -> image) by diffusers' StableDiffusionPipeline on
tiny random-weight SD 1.x- and SD 2.x-shaped models, for tests/data/sdpipeline.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_sd_pipeline_fixtures.py \
        resources/clip/bpe_simple_vocab_16e6.txt.gz OUTDIR

Needs torch, diffusers, transformers, safetensors; no network, no pickle. Layout of OUTDIR:

    cases.json                      configs, cases, library versions, float32-vs-float64 distances
    <family>/model_index.json ...   the pipeline folder (save_pretrained, safetensors, weights F16)
                                    without tokenizer/: Tessera uses its bundled CLIP vocabulary,
                                    the same merges file this script builds the tokenizer from
    <case>.safetensors              start_noise [1,4,h,w] (x_T = start_noise * init_noise_sigma),
                                    prompt_embeds / negative_prompt_embeds [1,77,D],
                                    latents [1,4,h,w] after the last step, image [1,3,H,W]
                                    = vae.decode(latents / scaling_factor) (not clamped)

The text encoder keeps CLIP's real vocabulary (49408 ids, so real prompts tokenize as in SD) at a
width of 8, which keeps its token table (stored F16) under 1 MB. Weights are drawn per parameter
from a seeded generator and rounded to float16, and the references are computed in float64 from
exactly those values. Prompts use no emphasis brackets and stay under 75 tokens: there A1111's
conventions and diffusers' agree exactly (no weights, one chunk).
"""
import json
import os
import platform
import shutil
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

from diffusers import AutoencoderKL, DDIMScheduler, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer  # noqa: E402

WIDTH = 8  # text encoder hidden size = UNet cross_attention_dim
TEXT = dict(vocab_size=49408, hidden_size=WIDTH, intermediate_size=16, projection_dim=WIDTH, num_attention_heads=2,
            max_position_embeddings=77, layer_norm_eps=1e-5, attention_dropout=0.0, bos_token_id=49406,
            eos_token_id=49407, pad_token_id=1)
UNET = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=[16, 32],
            down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"], up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
            norm_num_groups=8, cross_attention_dim=WIDTH)
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
           up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 16, 16], layers_per_block=1,
           act_fn="silu", latent_channels=4, norm_num_groups=4, sample_size=64)
SCHEDULER = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                 clip_sample=False, set_alpha_to_one=False, steps_offset=1, timestep_spacing="leading")
FAMILIES = {
    "sd1": dict(seed=2101, text=dict(TEXT, num_hidden_layers=2, hidden_act="quick_gelu"), pad="<|endoftext|>",
                unet=dict(UNET, layers_per_block=1, attention_head_dim=2, use_linear_projection=False,
                          upcast_attention=False),
                prediction="epsilon"),
    "sd2": dict(seed=2102, text=dict(TEXT, num_hidden_layers=3, hidden_act="gelu"), pad="!",
                unet=dict(UNET, layers_per_block=1, attention_head_dim=[2, 4], use_linear_projection=True,
                          upcast_attention=True),
                prediction="v_prediction"),
}
# name -> family, scheduler, prompt, negative prompt, guidance, steps, width, height, noise seed
CASES = {
    "sd1_ddim_cfg": ("sd1", "ddim", "a photo of an astronaut riding a horse on mars", "blurry, low quality", 7.5, 10,
                     128, 96, 11),
    "sd1_ddim_nocfg": ("sd1", "ddim", "a watercolor painting of a lighthouse", "", 1.0, 10, 96, 64, 12),
    "sd1_euler_cfg": ("sd1", "euler", "a cat sitting on a red sofa, studio lighting", "", 5.0, 10, 64, 64, 13),
    "sd2_ddim_vpred": ("sd2", "ddim", "a castle on a hill at sunset, highly detailed", "ugly", 7.0, 10, 128, 96, 14),
}
NORM_STD, BIAS_STD = 0.2, 0.1


def randomize(model, seed):
    norms = {name for name, m in model.named_modules() if isinstance(m, (torch.nn.GroupNorm, torch.nn.LayerNorm))}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            owner, _, kind = name.rpartition(".")
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if owner in norms:
                value = (1.0 + NORM_STD * noise) if kind == "weight" else NORM_STD * noise
            elif kind == "bias":
                value = BIAS_STD * noise
            elif "embedding" in name:
                value = noise  # token / position tables: unit scale, as trained CLIP tables roughly are
            else:
                fan_in = 1
                for s in p.shape[1:]:
                    fan_in *= s
                value = noise / fan_in ** 0.5
            p.copy_(value.to(torch.float16).to(p.dtype))


def build(family, spec, tokenizer):
    torch.manual_seed(spec["seed"])
    text = CLIPTextModel(CLIPTextConfig(**spec["text"]))
    unet = UNet2DConditionModel(**spec["unet"])
    vae = AutoencoderKL(**VAE)
    for i, m in enumerate((text, unet, vae)):
        randomize(m, spec["seed"] * 10 + i)
        m.eval()
    scheduler = DDIMScheduler(prediction_type=spec["prediction"], **SCHEDULER)
    return StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def run_case(pipe, scheduler_kind, prompt, negative, cfg, steps, width, height, seed, dtype):
    pipe.to(dtype)
    config = dict(pipe.scheduler.config)
    if scheduler_kind == "ddim":
        pipe.scheduler = DDIMScheduler.from_config(config)
    else:
        pipe.scheduler = EulerDiscreteScheduler.from_config(config, use_karras_sigmas=False)
    scale = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn((1, 4, height // scale, width // scale), generator=g, dtype=torch.float64)
    # prepare_latents multiplies given latents by init_noise_sigma, as it does its own draw.
    latents_in = noise.to(dtype)
    with torch.no_grad():
        cond, uncond = pipe.encode_prompt(prompt, "cpu", 1, cfg > 1.0, negative_prompt=negative)
        latents = pipe(prompt_embeds=cond, negative_prompt_embeds=uncond, guidance_scale=cfg,
                       num_inference_steps=steps, height=height, width=width, latents=latents_in.clone(),
                       output_type="latent").images
        image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
    out = {"start_noise": noise, "prompt_embeds": cond, "latents": latents, "image": image}
    if uncond is not None:
        out["negative_prompt_embeds"] = uncond
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gz, outdir = sys.argv[1], sys.argv[2]
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    hf = os.path.join(outdir, "_tokenizer")
    os.makedirs(hf, exist_ok=True)
    _, merges = write_hf_files(gz, hf)
    pipes = {}
    for family, spec in FAMILIES.items():
        pipes[family] = build(family, spec, load_tokenizer(CLIPTokenizer, hf, merges, spec["pad"]))
    cases = {}
    for name, (family, kind, prompt, negative, cfg, steps, width, height, seed) in CASES.items():
        pipe = pipes[family]
        ref = run_case(pipe, kind, prompt, negative, cfg, steps, width, height, seed, torch.float64)
        f32 = run_case(pipe, kind, prompt, negative, cfg, steps, width, height, seed, torch.float32)
        dist = {k: float((ref[k] - f32[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30)) for k in ref}
        save_file({k: v.to(torch.float32).contiguous() for k, v in ref.items()},
                  os.path.join(outdir, name + ".safetensors"))
        cases[name] = dict(family=family, scheduler=kind, prompt=prompt, negative_prompt=negative, cfg=cfg,
                           steps=steps, width=width, height=height, noise_seed=seed,
                           float32_max_rel_distance=dist,
                           shapes={k: list(v.shape) for k, v in ref.items()})
        print(name, "float32 vs float64 max rel:", dist)
    for family, pipe in pipes.items():
        folder = os.path.join(outdir, family)
        pipe.scheduler = DDIMScheduler(prediction_type=FAMILIES[family]["prediction"], **SCHEDULER)
        pipe.to(torch.float16)
        pipe.save_pretrained(folder, safe_serialization=True)
        shutil.rmtree(os.path.join(folder, "tokenizer"), ignore_errors=True)
    shutil.rmtree(hf)
    meta = dict(cases=cases, families={f: {k: v for k, v in s.items()} for f, s in FAMILIES.items()}, vae=VAE,
                scheduler=SCHEDULER, versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                                   transformers=transformers.__version__,
                                                   python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
