#!/usr/bin/python3
"""Whole-pipeline references for an A1111 user's setup on the tiny SD 1.x test pipeline
(tests/data/sdpipeline/sd1): a kohya LoRA merged by diffusers' load_lora_weights + fuse_lora (its UNet part;
the text encoder's merged by peft), and an A1111 PNG whose parameters name a LoRA, an embedding, a separate VAE, a seed and A1111's default (GPU)
noise source, for tests/data/a1111png.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_a1111_png_fixtures.py \
        resources/clip/bpe_simple_vocab_16e6.txt.gz tests OUTDIR

(the second argument is the tests folder: tests/data/sdpipeline, tests/data/embeddings and
tests/data/sdfiles are read from it). Needs torch with a CUDA device (the GPU case draws its noise
with torch.randn on the device, as A1111 does), diffusers, transformers, peft, safetensors; no
network, no pickle. Layout of OUTDIR:

    cases.json               per case: the prompt as Tessera is given it (with its <lora:> tag), the
                             prompt diffusers is given (without it), the LoRA and its weight, the
                             embedding, the VAE, sampler settings, the noise source and seed, the
                             float32-vs-float64 distances; library versions
    <case>.safetensors       start_noise [1,4,h,w] as drawn (x_T = start_noise * init_noise_sigma),
                             prompt_embeds / negative_prompt_embeds, latents after the last step,
                             image [1,3,H,W] = vae.decode(latents / scaling_factor), not clamped
    a1111.png                the GPU case as A1111 saves it: the image (A1111's conversion,
                             255 * clamp((x + 1) / 2) truncated) with a tEXt "parameters" chunk in
                             A1111's infotext layout, hashes computed as A1111 computes them

Both cases run diffusers' EulerDiscreteScheduler from the pipeline's scheduler config (what Tessera's
"Euler" is on that model). The LoRA is tests/data/sdpipeline/lora/sd1_tiny.safetensors without its
one key that names no module of the model (Tessera lists that key in a note; diffusers would refuse
the file). The embedding is tests/data/embeddings/good/ti-embparams.safetensors loaded with
load_textual_inversion under its file name, as A1111 names embeddings; the VAE is the diffusers
folder of tests/data/sdfiles/vae, the same weights as its LDM-named ldm.safetensors the PNG names.
"""
import hashlib
import json
import os
import platform
import shutil
import struct
import sys
import zlib

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

import diffusers  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel  # noqa: E402
import peft  # noqa: E402
import transformers  # noqa: E402
from transformers import CLIPTextModel, CLIPTokenizer  # noqa: E402

UNMATCHED_PREFIX = "lora_unet_down_blocks_7_"
EMBEDDING = "ti-embparams"
# name -> prompt (diffusers'), negative, lora weight, embedding?, separate VAE?, noise source, cfg,
#         steps, width, height, seed
CASES = {
    "lora_cpu": ("a red fox in the snow at dawn", "blurry", 0.7, False, False, "cpu", 5.0, 10, 96, 64, 31),
    "a1111_gpu": ("a " + EMBEDDING + " fox on a green hill", "", 0.8, True, True, "gpu", 6.0, 10, 64, 48, 1234567),
}


def sha256(path, skip=0):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(skip)
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def addnet_hash(path):
    """A1111's hash of a LoRA .safetensors without sshs_model_hash (modules/hashes.py addnet_hash_safetensors):
    sha256 of the bytes after the header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    return sha256(path, 8 + n)


def draw_noise(source, seed, shape):
    """A1111's start noise for one image (modules/rng.py randn): torch.manual_seed(seed), then torch.randn of
    [4, h, w] on the CPU ("CPU") or on the device ("GPU")."""
    torch.manual_seed(seed)
    if source == "cpu":
        x = torch.randn(shape)
    else:
        x = torch.randn(shape, device="cuda").cpu()
    return x[None].to(torch.float64)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(path, image, parameters):
    """A1111's save (modules/images.py save_image_with_geninfo): the sample as 255 * clamp((x + 1) / 2)
    truncated to uint8 (modules/processing.py), the parameters in a tEXt chunk."""
    x = ((image[0].clamp(-1, 1) + 1) / 2 * 255).to(torch.uint8).permute(1, 2, 0).contiguous()
    h, w = x.shape[:2]
    rows = b"".join(b"\x00" + bytes(x[r].flatten().tolist()) for r in range(h))
    data = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            png_chunk(b"tEXt", b"parameters\x00" + parameters.encode("latin-1")) +
            png_chunk(b"IDAT", zlib.compress(rows, 9)) + png_chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def merge_text_encoder_lora(text_encoder, lora, weight, dtype):
    """The text encoder's part of a kohya LoRA merged by peft (get_peft_model + merge_and_unload). diffusers'
    own text-encoder loader cannot be used: it matches module names with "text_model.", which transformers 5
    leaves out. A1111's multiplier scales the delta, so lora_alpha = alpha * weight (peft's scaling is
    lora_alpha / r)."""
    te = {k[len("lora_te_"):]: v for k, v in lora.items() if k.startswith("lora_te_")}
    stems = sorted({k.split(".")[0] for k in te})
    ranks = {te[s + ".lora_down.weight"].shape[0] for s in stems}
    alphas = {float(te[s + ".alpha"]) for s in stems}
    assert len(ranks) == 1 and len(alphas) == 1, (ranks, alphas)
    rank, alpha = ranks.pop(), alphas.pop()
    config = peft.LoraConfig(r=rank, lora_alpha=alpha * weight, lora_dropout=0.0,
                             target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"])
    model = peft.get_peft_model(text_encoder, config).to(dtype)
    loaded = set()
    with torch.no_grad():
        for path, module in model.named_modules():
            if not hasattr(module, "lora_A") or "default" not in module.lora_A:
                continue
            tail = path[path.index("encoder.layers."):]
            stem = "text_model_" + tail.replace(".", "_")
            module.lora_A["default"].weight.copy_(te[stem + ".lora_down.weight"].to(dtype))
            module.lora_B["default"].weight.copy_(te[stem + ".lora_up.weight"].to(dtype))
            loaded.add(stem)
    assert loaded == set(stems), sorted(set(stems) ^ loaded)
    return model.merge_and_unload().eval()


def make_pipe(parts, lora, weight, embedding, vae, dtype):
    text_encoder = merge_text_encoder_lora(parts["text_encoder"].to(dtype), lora, weight, dtype)
    pipe = StableDiffusionPipeline(vae=(vae if vae is not None else parts["vae"]).to(dtype),
                                   text_encoder=text_encoder, tokenizer=parts["tokenizer"],
                                   unet=parts["unet"].to(dtype),
                                   scheduler=EulerDiscreteScheduler.from_config(parts["scheduler_config"]),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.load_lora_weights({k: v for k, v in lora.items() if k.startswith("lora_unet_")})
    pipe.fuse_lora(components=["unet"], lora_scale=weight)
    if embedding is not None:
        pipe.load_textual_inversion(embedding, token=EMBEDDING)
    return pipe.to(dtype)


def fresh_parts(sd1, tokenizer):
    return dict(tokenizer=tokenizer,
                text_encoder=CLIPTextModel.from_pretrained(os.path.join(sd1, "text_encoder")).eval(),
                unet=UNet2DConditionModel.from_pretrained(os.path.join(sd1, "unet")).eval(),
                vae=AutoencoderKL.from_pretrained(os.path.join(sd1, "vae")).eval(),
                scheduler_config=EulerDiscreteScheduler.load_config(os.path.join(sd1, "scheduler")))


def run_case(spec, paths, tokenizer_factory, dtype):
    prompt, negative, weight, use_embedding, use_vae, source, cfg, steps, width, height, seed = spec
    lora = {k: v for k, v in load_file(paths["lora"]).items() if not k.startswith(UNMATCHED_PREFIX)}
    vae = AutoencoderKL.from_pretrained(paths["vae_diffusers"]).eval() if use_vae else None
    pipe = make_pipe(fresh_parts(paths["sd1"], tokenizer_factory()), lora, weight,
                     paths["embedding"] if use_embedding else None, vae, dtype)
    noise = draw_noise(source, seed, (4, height // 8, width // 8))
    with torch.no_grad():
        cond, uncond = pipe.encode_prompt(prompt, "cpu", 1, cfg > 1.0, negative_prompt=negative)
        latents = pipe(prompt_embeds=cond, negative_prompt_embeds=uncond, guidance_scale=cfg,
                       num_inference_steps=steps, height=height, width=width, latents=noise.to(dtype).clone(),
                       output_type="latent").images
        image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
    out = {"start_noise": noise, "prompt_embeds": cond, "latents": latents, "image": image}
    if uncond is not None:
        out["negative_prompt_embeds"] = uncond
    return {k: v.detach().to(torch.float64) for k, v in out.items()}


def infotext(spec, hashes):
    """A1111's infotext (modules/processing.py create_infotext) for the GPU case: the prompt with its LoRA
    tag, then the generation parameters in A1111's order; no RNG entry (A1111 writes none for its default,
    GPU)."""
    prompt, negative, weight, _, _, _, cfg, steps, width, height, seed = spec
    lines = [prompt + " <lora:sd1_tiny:%g>" % weight]
    if negative:
        lines.append("Negative prompt: " + negative)
    params = ["Steps: %d" % steps, "Sampler: Euler", "Schedule type: Automatic", "CFG scale: %g" % cfg,
              "Seed: %d" % seed, "Size: %dx%d" % (width, height), "VAE hash: " + hashes["vae"][:10],
              "VAE: ldm.safetensors", 'Lora hashes: "sd1_tiny: %s"' % hashes["lora"][:12],
              'TI hashes: "%s: %s"' % (EMBEDDING, hashes["embedding"][:12]), "Version: v1.10.1"]
    lines.append(", ".join(params))
    return "\n".join(lines)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gz, tests, outdir = sys.argv[1:]
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    data = os.path.join(tests, "data")
    paths = dict(sd1=os.path.join(data, "sdpipeline", "sd1"),
                 lora=os.path.join(data, "sdpipeline", "lora", "sd1_tiny.safetensors"),
                 embedding=os.path.join(data, "embeddings", "good", EMBEDDING + ".safetensors"),
                 vae_diffusers=os.path.join(data, "sdfiles", "vae", "diffusers"),
                 vae_file=os.path.join(data, "sdfiles", "vae", "ldm.safetensors"))
    hf = os.path.join(outdir, "_tokenizer")
    os.makedirs(hf, exist_ok=True)
    _, merges = write_hf_files(gz, hf)

    def tokenizer_factory():
        return load_tokenizer(CLIPTokenizer, hf, merges, "<|endoftext|>")

    hashes = dict(lora=addnet_hash(paths["lora"]), embedding=sha256(paths["embedding"]), vae=sha256(paths["vae_file"]))
    cases = {}
    for name, spec in CASES.items():
        ref = run_case(spec, paths, tokenizer_factory, torch.float64)
        f32 = run_case(spec, paths, tokenizer_factory, torch.float32)
        dist = {k: float((ref[k] - f32[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30)) for k in ref}
        save_file({k: v.to(torch.float32).contiguous() for k, v in ref.items()},
                  os.path.join(outdir, name + ".safetensors"))
        prompt, negative, weight, use_embedding, use_vae, source, cfg, steps, width, height, seed = spec
        cases[name] = dict(prompt=prompt, tessera_prompt=prompt + " <lora:sd1_tiny:%g>" % weight,
                           negative_prompt=negative, lora="sd1_tiny", lora_weight=weight,
                           embedding=EMBEDDING if use_embedding else None,
                           vae="ldm.safetensors" if use_vae else None, sampler="euler", noise_source=source,
                           cfg=cfg, steps=steps, width=width, height=height, seed=seed,
                           float32_max_rel_distance=dist, shapes={k: list(v.shape) for k, v in ref.items()})
        print(name, "float32 vs float64 max rel:", dist)
        if name == "a1111_gpu":
            text = infotext(spec, hashes)
            cases[name]["parameters"] = text
            write_png(os.path.join(outdir, "a1111.png"), ref["image"], text)
    shutil.rmtree(hf)
    meta = dict(cases=cases, hashes=hashes,
                versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                              transformers=transformers.__version__, peft=peft.__version__,
                              cuda_device=torch.cuda.get_device_name(0), python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
