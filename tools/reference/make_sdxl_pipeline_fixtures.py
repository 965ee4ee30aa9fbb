#!/usr/bin/python3
"""Complete SDXL pipeline runs (text -> latents -> image) by diffusers' StableDiffusionXLPipeline on a
tiny random-weight SDXL-shaped pipeline, and a VAE decode alone, for tests/data/sdxlpipeline.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_sdxl_pipeline_fixtures.py OUTDIR [VOCAB_GZ]

VOCAB_GZ defaults to resources/clip/bpe_simple_vocab_16e6.txt.gz of this repository. Needs torch,
diffusers, transformers, safetensors; no network, no pickle. Layout of OUTDIR:

    cases.json              configs, cases (Tessera's scheduler name and Karras flag, the diffusers
                            scheduler class and its config, prompts, guidance, size, noise seed),
                            the VAE case, library versions, float32-vs-float64 distances, shapes
    pipeline/               StableDiffusionXLPipeline.save_pretrained (safetensors, weights F16):
                            unet/, vae/, text_encoder/ (CLIPTextModel), text_encoder_2/
                            (CLIPTextModelWithProjection), scheduler/ (EulerDiscreteScheduler),
                            model_index.json (force_zeros_for_empty_prompt true); without tokenizer/
                            and tokenizer_2/: Tessera's bundled CLIP vocabulary is the merges file
                            this script builds both tokenizers from (tokenizer_2 pads with "!")
    <case>.safetensors      start_noise [1,4,h,w] (x_T = start_noise * init_noise_sigma),
                            prompt_embeds / negative_prompt_embeds [1,77,D1+D2],
                            pooled_prompt_embeds / negative_pooled_prompt_embeds [1,P],
                            add_time_ids [2,6] and text_embeds [2,P] as the UNet's first call got
                            them (row 0 unconditional, row 1 conditional), latents [1,4,h,w] after
                            the last step, image [1,3,H,W] = vae.decode(latents / 0.13025) (not clamped)
    vae_decode.safetensors  latents [1,4,h,w] (scaled, as the UNet sees them), image [1,3,8h,8w]
                            = vae.decode(latents / scaling_factor)

Shape (stabilityai/stable-diffusion-xl-base-1.0's configs; diffusers StableDiffusionXLPipeline), small: two text encoders, CLIP's real
vocabulary (49408 ids, so real prompts tokenize as in SDXL) at widths 2 and 4 (F16 token tables
~0.6 MB), the second a CLIPTextModelWithProjection projecting to 6 (not square); a UNet with SDXL's
blocks (DownBlock2D then two CrossAttnDownBlock2D, mirrored), transformer depths [1, 1, 2] (the
last level and the mid block depth 2), linear projections, context 2 + 4 = 6, addition_embed_type
"text_time" with 8-wide sinusoids (6 + 6 x 8 = 54 into add_embedding); the SD VAE's four levels
(scale 8) at widths [8, 8, 16, 16] with SDXL's VAE settings (scaling_factor 0.13025, force_upcast).
Weights are drawn per parameter from a seeded generator and rounded to float16
(make_sd_pipeline_fixtures.randomize); references are computed in float64 from exactly those values
and stored as float32. Cases: Euler (leading spacing, no Karras), DPM++ 2M Karras and DDIM, 10 steps,
guidance 5, non-square sizes; an empty negative prompt is given to diffusers as None with
force_zeros_for_empty_prompt (zeros, text and pooled), which is what Tessera (and A1111) do for "".
Prompts hold no "!" (diffusers' tokenizer_2 reads it as its pad id 0, open_clip's as text) and no
emphasis brackets, and stay under 75 tokens.
"""
import json
import os
import platform
import shutil
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_sd_pipeline_fixtures import SCHEDULER, VAE as SD_VAE, randomize  # noqa: E402
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (AutoencoderKL, DDIMScheduler, DPMSolverMultistepScheduler, EulerDiscreteScheduler,  # noqa: E402
                       StableDiffusionXLPipeline, UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer  # noqa: E402

SEED = 2601
D1, D2, P, TIME_DIM = 2, 4, 6, 8
COMMON = dict(vocab_size=49408, max_position_embeddings=77, layer_norm_eps=1e-5, attention_dropout=0.0,
              bos_token_id=49406, eos_token_id=49407, pad_token_id=1)
TEXT1 = dict(COMMON, hidden_size=D1, intermediate_size=4 * D1, projection_dim=D1, num_attention_heads=1,
             num_hidden_layers=2, hidden_act="quick_gelu")
TEXT2 = dict(COMMON, hidden_size=D2, intermediate_size=4 * D2, projection_dim=P, num_attention_heads=2,
             num_hidden_layers=3, hidden_act="gelu")
UNET = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=[8, 16, 16], layers_per_block=1,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
            up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
            transformer_layers_per_block=[1, 1, 2], attention_head_dim=[2, 2, 4], norm_num_groups=8,
            cross_attention_dim=D1 + D2, use_linear_projection=True, upcast_attention=False,
            addition_embed_type="text_time", addition_time_embed_dim=TIME_DIM,
            projection_class_embeddings_input_dim=P + 6 * TIME_DIM)
VAE = dict(SD_VAE, scaling_factor=0.13025, force_upcast=True)
GUIDANCE = 5.0
STEPS = 10
# Tessera's scheduler name -> (diffusers class, the keyword arguments from_config gets over SCHEDULER,
# Karras sigmas). SCHEDULER states timestep_spacing "leading", steps_offset 1.
SCHEDULERS = {
    "euler": (EulerDiscreteScheduler, {"use_karras_sigmas": False}, False),
    "dpmpp_2m_karras": (DPMSolverMultistepScheduler,
                        {"algorithm_type": "dpmsolver++", "solver_order": 2, "solver_type": "midpoint",
                         "use_karras_sigmas": True}, True),
    "ddim": (DDIMScheduler, {}, False),
}
# name -> scheduler, prompt, negative prompt ("" = None for diffusers: zeros), width, height, noise seed
CASES = {
    "euler_cfg": ("euler", "a photo of an astronaut riding a horse on mars", "blurry, low quality", 96, 64, 41),
    "dpmpp_2m_karras_cfg": ("dpmpp_2m_karras", "a castle on a hill at sunset, highly detailed", "ugly, deformed",
                            64, 96, 42),
    "ddim_empty_negative": ("ddim", "a watercolor painting of a lighthouse by the sea", "", 96, 64, 43),
}
VAE_CASE = dict(name="vae_decode", height=8, width=12, seed=44)


def build(tokenizer, tokenizer_2):
    torch.manual_seed(SEED)
    text = CLIPTextModel(CLIPTextConfig(**TEXT1))
    text_2 = CLIPTextModelWithProjection(CLIPTextConfig(**TEXT2))
    unet = UNet2DConditionModel(**UNET)
    vae = AutoencoderKL(**VAE)
    for i, m in enumerate((text, text_2, unet, vae)):
        randomize(m, SEED * 10 + i)
        m.eval()
    scheduler = EulerDiscreteScheduler.from_config(SCHEDULER)
    return StableDiffusionXLPipeline(vae=vae, text_encoder=text, text_encoder_2=text_2, tokenizer=tokenizer,
                                     tokenizer_2=tokenizer_2, unet=unet, scheduler=scheduler,
                                     force_zeros_for_empty_prompt=True, add_watermarker=False)


def set_scheduler(pipe, kind):
    cls, kwargs, _ = SCHEDULERS[kind]
    pipe.scheduler = cls.from_config(SCHEDULER, **kwargs)


def run_case(pipe, kind, prompt, negative, width, height, seed, dtype):
    pipe.to(dtype)
    set_scheduler(pipe, kind)
    scale = pipe.vae_scale_factor
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn((1, 4, height // scale, width // scale), generator=g, dtype=torch.float64)
    captured = []

    def first_call(_module, _args, kwargs):
        if not captured:
            added = kwargs["added_cond_kwargs"]
            captured.append((added["time_ids"].clone(), added["text_embeds"].clone()))

    hook = pipe.unet.register_forward_pre_hook(first_call, with_kwargs=True)
    try:
        with torch.no_grad():
            cond, uncond, pooled, uncond_pooled = pipe.encode_prompt(
                prompt, device="cpu", num_images_per_prompt=1, do_classifier_free_guidance=True,
                negative_prompt=negative or None)
            # prepare_latents multiplies given latents by init_noise_sigma, as it does its own draw.
            latents = pipe(prompt_embeds=cond, negative_prompt_embeds=uncond, pooled_prompt_embeds=pooled,
                           negative_pooled_prompt_embeds=uncond_pooled, guidance_scale=GUIDANCE,
                           num_inference_steps=STEPS, height=height, width=width, latents=noise.to(dtype).clone(),
                           output_type="latent").images
            image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
    finally:
        hook.remove()
    if len(captured) != 1:
        raise RuntimeError("the UNet was never called")
    time_ids, text_embeds = captured[0]
    out = {"start_noise": noise, "prompt_embeds": cond, "negative_prompt_embeds": uncond,
           "pooled_prompt_embeds": pooled, "negative_pooled_prompt_embeds": uncond_pooled,
           "add_time_ids": time_ids, "text_embeds": text_embeds, "latents": latents, "image": image}
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


def run_vae(pipe, dtype):
    pipe.to(dtype)
    g = torch.Generator().manual_seed(VAE_CASE["seed"])
    latents = torch.randn((1, 4, VAE_CASE["height"], VAE_CASE["width"]), generator=g, dtype=torch.float64)
    with torch.no_grad():
        image = pipe.vae.decode(latents.to(dtype) / pipe.vae.config.scaling_factor).sample
    return {"latents": latents, "image": image.detach().to(torch.float64)}


def max_rel(a, b):
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))


def save(outdir, name, tensors):
    save_file({k: v.to(torch.float32).contiguous() for k, v in tensors.items()},
              os.path.join(outdir, name + ".safetensors"), metadata={"format": "pt"})


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    outdir = sys.argv[1]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    gz = sys.argv[2] if len(sys.argv) == 3 else os.path.join(repo, "resources", "clip", "bpe_simple_vocab_16e6.txt.gz")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    hf = os.path.join(outdir, "_tokenizer")
    os.makedirs(hf, exist_ok=True)
    _, merges = write_hf_files(gz, hf)
    pipe = build(load_tokenizer(CLIPTokenizer, hf, merges, "<|endoftext|>"), load_tokenizer(CLIPTokenizer, hf, merges, "!"))
    shutil.rmtree(hf)
    cases = {}
    for name, (kind, prompt, negative, width, height, seed) in CASES.items():
        ref = run_case(pipe, kind, prompt, negative, width, height, seed, torch.float64)
        f32 = run_case(pipe, kind, prompt, negative, width, height, seed, torch.float32)
        dist = {k: max_rel(ref[k], f32[k]) for k in ref if ref[k].abs().max() > 0}
        save(outdir, name, ref)
        cls, kwargs, karras = SCHEDULERS[kind]
        cases[name] = dict(scheduler="dpmpp_2m" if kind == "dpmpp_2m_karras" else kind, karras=karras,
                           diffusers_scheduler=cls.__name__, scheduler_kwargs=kwargs, timestep_spacing="leading",
                           prompt=prompt, negative_prompt=negative,
                           diffusers_negative_prompt=negative or None, cfg=GUIDANCE, steps=STEPS, width=width,
                           height=height, noise_seed=seed, float32_max_rel_distance=dist,
                           shapes={k: list(v.shape) for k, v in ref.items()})
        print(name, "float32 vs float64 max rel:", dist, flush=True)
    vae_ref, vae_f32 = run_vae(pipe, torch.float64), run_vae(pipe, torch.float32)
    save(outdir, VAE_CASE["name"], vae_ref)
    vae_case = dict(VAE_CASE, float32_max_rel_distance=max_rel(vae_ref["image"], vae_f32["image"]),
                    shapes={k: list(v.shape) for k, v in vae_ref.items()})
    print("vae_decode float32 vs float64 max rel:", vae_case["float32_max_rel_distance"], flush=True)
    folder = os.path.join(outdir, "pipeline")
    pipe.scheduler = EulerDiscreteScheduler.from_config(SCHEDULER)
    pipe.to(torch.float16)
    pipe.save_pretrained(folder, safe_serialization=True)
    for sub in ("tokenizer", "tokenizer_2"):
        shutil.rmtree(os.path.join(folder, sub), ignore_errors=True)
    meta = dict(generator="tools/reference/make_sdxl_pipeline_fixtures.py", tolerance_relative=1e-4, cases=cases,
                vae_case=vae_case, text_encoder=TEXT1, text_encoder_2=TEXT2, unet=UNET, vae=VAE, scheduler=SCHEDULER,
                seed=SEED, versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                         transformers=transformers.__version__, python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(outdir) for n in files)
    print(f"total {total} bytes", flush=True)
    if total >= 2_000_000:
        print("WARNING: fixtures over the 2 MB budget", flush=True)


if __name__ == "__main__":
    main()
