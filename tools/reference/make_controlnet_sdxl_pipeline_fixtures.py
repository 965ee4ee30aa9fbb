#!/usr/bin/python3
"""Whole SDXL ControlNet runs by diffusers' StableDiffusionXLControlNetPipeline and
StableDiffusionXLControlNetImg2ImgPipeline on the tiny SDXL test pipeline
(tests/data/sdxlpipeline/pipeline) with a tiny random ControlNet of its shape, for
tests/data/controlnet/sdxlpipeline.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_controlnet_sdxl_pipeline_fixtures.py \
        tests/data/sdxlpipeline/pipeline OUTDIR [VOCAB_GZ]

VOCAB_GZ defaults to resources/clip/bpe_simple_vocab_16e6.txt.gz of this repository (both tokenizers
are built from it as make_sdxl_pipeline_fixtures.py builds them). Needs torch, diffusers,
transformers, safetensors; no network, no pickle. Layout of OUTDIR:

    cases.json              per case: pipeline, scheduler, prompts, guidance, steps, strength, sizes, the
                            ControlNet's scale / start / end, float32-vs-float64 distances, shapes
    net0/                   the ControlNet folder (config.json + diffusion_pytorch_model.safetensors,
                            weights F16; the references use exactly those values)
    <case>.safetensors      control_image [1,3,H,W] in [0, 1], step_latents [steps,4,h,w] (the latents
                            after each executed step, from callback_on_step_end), start [1,4,h,w]
                            (text-to-image: x_T / init_noise_sigma; image-to-image: the latents the first executed step
                            starts from), init_image [1,3,H,W] in [0, 1] (image-to-image; it is the
                            control image too, A1111's default), latents [1,4,h,w] after the last step

The ControlNet (ControlNetModel.from_unet of the pipeline's UNet: SDXL's text_time addition
embedding, three levels, transformer depths 1, 1, 2) has an uneven hint encoder (4, 6, 8, 10) and its
own random weights, every parameter drawn again after construction (zero convolutions start at zero)
and rounded to float16; the references run in float64 from those values. Control images are tensors
at exactly the image size (no resampling in prepare_control_image). Size conditioning is the image's
own size (original = target = the image, crop 0, 0), as Tessera's "image" SDXL size conditioning.
"""
import json
import os
import platform
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_controlnet_pipeline_fixtures import HINT_WIDTHS, randomize  # noqa: E402
from make_sd_pipeline_fixtures import SCHEDULER  # noqa: E402
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (AutoencoderKL, ControlNetModel, DDIMScheduler, EulerDiscreteScheduler,  # noqa: E402
                       StableDiffusionXLControlNetImg2ImgPipeline, StableDiffusionXLControlNetPipeline,
                       UNet2DConditionModel)
from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer  # noqa: E402

NET_SEED = 3201
SCHEDULERS = {"ddim": DDIMScheduler, "euler": EulerDiscreteScheduler}
# name -> pipeline, scheduler, prompt, negative, guidance, steps, strength (img2img), width, height,
#         seed, (scale, start, end)
CASES = {
    "xl_img2img_ddim": ("img2img", "ddim", "a red house in a snowy forest", "low quality", 5.0, 10, 0.6, 96, 64, 31,
                        (0.7, 0.1, 0.8)),
    "xl_txt2img_euler": ("txt2img", "euler", "a lighthouse on a cliff at dusk", "blurry", 4.0, 8, None, 64, 96, 32,
                         (1.2, 0.0, 0.6)),
    # The Euler text-to-image case taken apart: another scheduler, landscape, the ControlNet on throughout.
    "xl_txt2img_ddim": ("txt2img", "ddim", "a lighthouse on a cliff at dusk", "blurry", 4.0, 8, None, 64, 96, 32,
                        (1.2, 0.0, 0.6)),
    "xl_txt2img_euler_wide": ("txt2img", "euler", "a lighthouse on a cliff at dusk", "blurry", 4.0, 8, None, 96, 64,
                              32, (1.2, 0.0, 0.6)),
    "xl_txt2img_euler_whole": ("txt2img", "euler", "a lighthouse on a cliff at dusk", "blurry", 4.0, 8, None, 64, 96,
                               32, (1.0, 0.0, 1.0)),
}


def run_case(spec, parts, net, dtype):
    kind, sched, prompt, negative, cfg, steps, strength, width, height, seed, (scale, start_f, end_f) = spec
    g = torch.Generator().manual_seed(seed)
    vae_scale = 8

    def draw(shape, f):
        return f(shape, generator=g, dtype=torch.float64).to(torch.float32).to(torch.float64)

    start = draw((1, 4, height // vae_scale, width // vae_scale), torch.randn)
    control = draw((1, 3, height, width), torch.rand)
    init = draw((1, 3, height, width), torch.rand)
    common = dict(vae=parts["vae"].to(dtype), text_encoder=parts["text_encoder"].to(dtype),
                  text_encoder_2=parts["text_encoder_2"].to(dtype), tokenizer=parts["tokenizer"],
                  tokenizer_2=parts["tokenizer_2"], unet=parts["unet"].to(dtype), controlnet=net.to(dtype),
                  scheduler=SCHEDULERS[sched].from_config(SCHEDULER), force_zeros_for_empty_prompt=True,
                  add_watermarker=False)
    out = {}
    with torch.no_grad():
        if kind == "txt2img":
            pipe = StableDiffusionXLControlNetPipeline(**common)
        else:
            pipe = StableDiffusionXLControlNetImg2ImgPipeline(requires_aesthetics_score=False, **common)
            # The image-to-image start: the init image's latent mean noised to the first executed
            # timestep (what the pipeline makes itself, here explicit so that an engine can start there).
            pipe.scheduler.set_timesteps(steps)
            timesteps, _ = pipe.get_timesteps(steps, strength, "cpu")
            z0 = pipe.vae.encode((2 * init - 1).to(dtype)).latent_dist.mean * pipe.vae.config.scaling_factor
            noise = torch.randn(z0.shape, generator=g, dtype=torch.float64).to(dtype)
            start = pipe.scheduler.add_noise(z0, noise, timesteps[:1]).to(torch.float32).to(torch.float64)
            out["init_image"] = init
            control = init  # the start image is the control image (A1111's default)
        cond, uncond, pooled, uncond_pooled = pipe.encode_prompt(
            prompt, device="cpu", num_images_per_prompt=1, do_classifier_free_guidance=True,
            negative_prompt=negative or None)
        steps_seen = []

        def record(_pipe, _i, _t, kwargs):
            steps_seen.append(kwargs["latents"].detach().clone())
            return kwargs

        args = dict(callback_on_step_end=record, prompt_embeds=cond, negative_prompt_embeds=uncond,
                    pooled_prompt_embeds=pooled, negative_pooled_prompt_embeds=uncond_pooled, guidance_scale=cfg, num_inference_steps=steps,
                    height=height, width=width, latents=start.to(dtype).clone(), output_type="latent",
                    controlnet_conditioning_scale=scale, control_guidance_start=start_f, control_guidance_end=end_f,
                    original_size=(height, width), target_size=(height, width), crops_coords_top_left=(0, 0))
        if kind == "txt2img":
            latents = pipe(image=control.to(dtype), **args).images
        else:
            latents = pipe(image=init.to(dtype), control_image=control.to(dtype), strength=strength, **args).images
    out.update({"start": start, "control_image": control, "latents": latents,
                "step_latents": torch.cat(steps_seen, dim=0)})
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    pipeline, outdir = sys.argv[1:3]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    gz = sys.argv[3] if len(sys.argv) == 4 else os.path.join(repo, "resources", "clip", "bpe_simple_vocab_16e6.txt.gz")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    hf = os.path.join(outdir, "_tokenizer")
    os.makedirs(hf, exist_ok=True)
    _, merges = write_hf_files(gz, hf)
    f32 = torch.float32
    parts = dict(tokenizer=load_tokenizer(CLIPTokenizer, hf, merges, "<|endoftext|>"),
                 tokenizer_2=load_tokenizer(CLIPTokenizer, hf, merges, "!"),
                 text_encoder=CLIPTextModel.from_pretrained(os.path.join(pipeline, "text_encoder"),
                                                            torch_dtype=f32).eval(),
                 text_encoder_2=CLIPTextModelWithProjection.from_pretrained(os.path.join(pipeline, "text_encoder_2"),
                                                                            torch_dtype=f32).eval(),
                 unet=UNet2DConditionModel.from_pretrained(os.path.join(pipeline, "unet"), torch_dtype=f32).eval(),
                 vae=AutoencoderKL.from_pretrained(os.path.join(pipeline, "vae"), torch_dtype=f32).eval())
    for f in os.listdir(hf):
        os.remove(os.path.join(hf, f))
    os.rmdir(hf)
    net = ControlNetModel.from_unet(parts["unet"], conditioning_embedding_out_channels=HINT_WIDTHS)
    randomize(net, NET_SEED)
    net.eval()
    cases = {}
    for name, spec in CASES.items():
        ref = run_case(spec, parts, net, torch.float64)
        low = run_case(spec, parts, net, torch.float32)
        dist = {k: float((ref[k] - low[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30)) for k in ref}
        save_file({k: v.to(torch.float32).contiguous() for k, v in ref.items()},
                  os.path.join(outdir, name + ".safetensors"))
        kind, sched, prompt, negative, cfg, steps, strength, width, height, seed, (scale, start, end) = spec
        cases[name] = dict(pipeline=kind, scheduler=sched, prompt=prompt, negative_prompt=negative, cfg=cfg,
                           steps=steps, strength=strength, width=width, height=height, seed=seed,
                           controlnet=dict(folder="net0", scale=scale, start=start, end=end),
                           float32_max_rel_distance=dist, shapes={k: list(v.shape) for k, v in ref.items()})
        print(name, "float32 vs float64 max rel:", dist, flush=True)
    net.to(torch.float16).save_pretrained(os.path.join(outdir, "net0"), safe_serialization=True)
    meta = dict(generator="tools/reference/make_controlnet_sdxl_pipeline_fixtures.py", cases=cases,
                hint_widths=list(HINT_WIDTHS), net_seed=NET_SEED,
                versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                              transformers=transformers.__version__, python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
