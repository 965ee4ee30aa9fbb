#!/usr/bin/python3
"""Whole ControlNet runs by diffusers' StableDiffusionControlNetPipeline and
StableDiffusionControlNetImg2ImgPipeline on the tiny SD 1.x test pipeline (tests/data/sdpipeline/sd1)
with tiny random ControlNets of its shape, for tests/data/controlnet/pipeline.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_controlnet_pipeline_fixtures.py \
        resources/clip/bpe_simple_vocab_16e6.txt.gz tests/data/sdpipeline/sd1 OUTDIR

Needs torch, diffusers, transformers, safetensors; no network, no pickle. Layout of OUTDIR:

    cases.json              per case: pipeline, prompts, guidance, steps, strength, sizes, the
                            ControlNets with their scale / start / end, float32-vs-float64 distances
    net<k>/                 ControlNet folders (config.json + diffusion_pytorch_model.safetensors,
                            weights F16; the references use exactly those values)
    <case>.safetensors      control_image [1,3,H,W] in [0, 1] (each ControlNet's: control_image.<k>),
                            start [1,4,h,w] (text-to-image: x_T / init_noise_sigma; image-to-image:
                            the latents the first executed step starts from), init_image [1,3,H,W]
                            in [0, 1] (image-to-image), prompt_embeds / negative_prompt_embeds,
                            latents [1,4,h,w] after the last step

The ControlNets differ from the UNet where a ControlNet may: an uneven hint encoder (4, 6, 8, 10:
a hint 8x the latent, the VAE's factor) and their own random weights. Every parameter is drawn
again after construction (zero convolutions and the hint encoder's conv_out start at zero), and
the references are computed in float64 from the float16-rounded values. Control images are
tensors at exactly the image size (no resampling in prepare_control_image).
"""
import json
import os
import platform
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

import diffusers  # noqa: E402
from diffusers import (AutoencoderKL, ControlNetModel, DDIMScheduler, StableDiffusionControlNetImg2ImgPipeline,  # noqa: E402
                       StableDiffusionControlNetPipeline, UNet2DConditionModel)
import transformers  # noqa: E402
from transformers import CLIPTextModel, CLIPTokenizer  # noqa: E402

NORM_STD, BIAS_STD = 0.2, 0.1
HINT_WIDTHS = (4, 6, 8, 10)
NET_SEEDS = (3101, 3102)
# name -> pipeline, prompt, negative, guidance, steps, strength (img2img), width, height, seed,
#         [(net, scale, start, end), ...]
CASES = {
    "txt2img_ddim": ("txt2img", "a lighthouse on a cliff at dusk", "blurry", 5.0, 10, None, 96, 64, 21,
                     [(0, 0.6, 0.2, 0.7)]),
    "img2img_ddim": ("img2img", "a red house in a snowy forest", "low quality", 6.0, 10, 0.6, 64, 64, 22,
                     [(0, 1.3, 0.0, 0.8)]),
    "txt2img_two_nets": ("txt2img", "a cat on a sofa", "", 4.0, 8, None, 64, 96, 23,
                         [(0, 0.7, 0.0, 0.5), (1, 0.9, 0.25, 1.0)]),
}


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
            else:
                fan_in = 1
                for s in p.shape[1:]:
                    fan_in *= s
                value = noise / fan_in ** 0.5
            p.copy_(value.to(torch.float16).to(p.dtype))


def make_net(unet, seed):
    net = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=HINT_WIDTHS)
    randomize(net, seed)
    return net.eval()


def run_case(name, spec, parts, nets, dtype):
    kind, prompt, negative, cfg, steps, strength, width, height, seed, units = spec
    g = torch.Generator().manual_seed(seed)
    scale = 8
    # Inputs rounded to float32 first: the fixture stores them so, and the references use those values.
    def draw(shape, f):
        return f(shape, generator=g, dtype=torch.float64).to(torch.float32).to(torch.float64)
    start = draw((1, 4, height // scale, width // scale), torch.randn)
    controls = [draw((1, 3, height, width), torch.rand) for _ in units]
    init = draw((1, 3, height, width), torch.rand)
    used = [nets[u[0]].to(dtype) for u in units]
    common = dict(vae=parts["vae"].to(dtype), text_encoder=parts["text_encoder"].to(dtype),
                  tokenizer=parts["tokenizer"], unet=parts["unet"].to(dtype),
                  scheduler=DDIMScheduler.from_config(parts["scheduler"].config),
                  controlnet=used[0] if len(used) == 1 else used, safety_checker=None, feature_extractor=None,
                  requires_safety_checker=False)
    out = {}
    with torch.no_grad():
        if kind == "txt2img":
            pipe = StableDiffusionControlNetPipeline(**common)
        else:
            pipe = StableDiffusionControlNetImg2ImgPipeline(**common)
            # The image-to-image start: the init image's latent mean noised to the first executed
            # timestep (what the pipeline makes itself, here explicit so that an engine can start there).
            pipe.scheduler.set_timesteps(steps)
            timesteps, _ = pipe.get_timesteps(steps, strength, "cpu")
            z0 = pipe.vae.encode((2 * init - 1).to(dtype)).latent_dist.mean * pipe.vae.config.scaling_factor
            noise = torch.randn(z0.shape, generator=g, dtype=torch.float64).to(dtype)
            start = pipe.scheduler.add_noise(z0, noise, timesteps[:1]).to(torch.float32).to(torch.float64)
            out["init_image"] = init
            controls = [init for _ in units]  # the start image is the control image (A1111's default)
        cond, uncond = pipe.encode_prompt(prompt, "cpu", 1, cfg > 1.0, negative_prompt=negative)
        args = dict(prompt_embeds=cond, negative_prompt_embeds=uncond, guidance_scale=cfg, num_inference_steps=steps,
                    height=height, width=width, latents=start.to(dtype).clone(), output_type="latent",
                    controlnet_conditioning_scale=[u[1] for u in units] if len(units) > 1 else units[0][1],
                    control_guidance_start=[u[2] for u in units] if len(units) > 1 else units[0][2],
                    control_guidance_end=[u[3] for u in units] if len(units) > 1 else units[0][3])
        c = [x.to(dtype) for x in controls]
        if kind == "txt2img":
            latents = pipe(image=c[0] if len(c) == 1 else c, **args).images
        else:
            latents = pipe(image=init.to(dtype), control_image=c[0] if len(c) == 1 else c, strength=strength,
                           **args).images
    out.update({"start": start, "prompt_embeds": cond, "latents": latents})
    for k, x in enumerate(controls):
        out["control_image" if k == 0 else "control_image.%d" % k] = x
    if uncond is not None:
        out["negative_prompt_embeds"] = uncond
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gz, sd1, outdir = sys.argv[1:]
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    hf = os.path.join(outdir, "_tokenizer")
    os.makedirs(hf, exist_ok=True)
    _, merges = write_hf_files(gz, hf)
    parts = dict(tokenizer=load_tokenizer(CLIPTokenizer, hf, merges, "<|endoftext|>"),
                 text_encoder=CLIPTextModel.from_pretrained(os.path.join(sd1, "text_encoder")).eval(),
                 unet=UNet2DConditionModel.from_pretrained(os.path.join(sd1, "unet")).eval(),
                 vae=AutoencoderKL.from_pretrained(os.path.join(sd1, "vae")).eval(),
                 scheduler=DDIMScheduler.from_pretrained(os.path.join(sd1, "scheduler")))
    nets = [make_net(parts["unet"], s) for s in NET_SEEDS]
    cases = {}
    for name, spec in CASES.items():
        ref = run_case(name, spec, parts, nets, torch.float64)
        f32 = run_case(name, spec, parts, nets, torch.float32)
        dist = {k: float((ref[k] - f32[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30)) for k in ref}
        save_file({k: v.to(torch.float32).contiguous() for k, v in ref.items()},
                  os.path.join(outdir, name + ".safetensors"))
        kind, prompt, negative, cfg, steps, strength, width, height, seed, units = spec
        cases[name] = dict(pipeline=kind, prompt=prompt, negative_prompt=negative, cfg=cfg, steps=steps,
                           strength=strength, width=width, height=height, seed=seed,
                           controlnets=[dict(folder="net%d" % u[0], scale=u[1], start=u[2], end=u[3]) for u in units],
                           float32_max_rel_distance=dist, shapes={k: list(v.shape) for k, v in ref.items()})
        print(name, "float32 vs float64 max rel:", dist, flush=True)
    for k, net in enumerate(nets):
        net.to(torch.float16).save_pretrained(os.path.join(outdir, "net%d" % k), safe_serialization=True)
    for f in os.listdir(hf):
        os.remove(os.path.join(hf, f))
    os.rmdir(hf)
    meta = dict(cases=cases, hint_widths=list(HINT_WIDTHS), net_seeds=list(NET_SEEDS),
                versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                              transformers=transformers.__version__, python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
