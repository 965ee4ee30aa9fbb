#!/usr/bin/python3
"""SDXL text conditioning by diffusers' StableDiffusionXLPipeline and transformers' CLIP models on a
tiny random SDXL-shaped pipeline, for tests/data/sdxltext.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_sdxl_text_fixtures.py OUTDIR [VOCAB_GZ]

VOCAB_GZ defaults to resources/clip/bpe_simple_vocab_16e6.txt.gz of this repository. Needs torch,
diffusers, transformers, safetensors; no network, no pickle. Layout of OUTDIR:

    cases.json                  configs, prompts, token ids (framed to 77 by both tokenizers, and
                                the untruncated content ids), encode_prompt cases, time-id settings,
                                library versions, float32-vs-float64 distances
    pipeline/                   StableDiffusionXLPipeline.save_pretrained (safetensors, weights F16):
                                unet/, vae/, text_encoder/ (CLIPTextModel), text_encoder_2/
                                (CLIPTextModelWithProjection), scheduler/, model_index.json; without
                                tokenizer/ and tokenizer_2/ (their vocabulary is the bundled one)
    tokenizer_files/tokenizer/, tokenizer_files/tokenizer_2/
                                the small JSON files save_pretrained wrote for each tokenizer (its pad
                                token: "<|endoftext|>" and "!"), without vocab.json / merges.txt /
                                tokenizer.json (megabytes, rebuilt from VOCAB_GZ by the test)
    prompts.safetensors         per prompt k: p<k>.hidden1 [1,77,D1] = text_encoder hidden_states[-2],
                                p<k>.hidden2 [1,77,D2] = text_encoder_2 hidden_states[-2],
                                p<k>.text_embeds [1,P] = text_encoder_2 output 0 (pooled, projected)
    encode.safetensors          per case c: c.prompt_embeds [1,77,D1+D2], c.pooled_prompt_embeds [1,P],
                                c.negative_prompt_embeds, c.negative_pooled_prompt_embeds
                                (encode_prompt with do_classifier_free_guidance=True)
    time_ids.safetensors        per setting s: s.add_time_ids [1,6] (_get_add_time_ids), s.add_embeds
                                [2, P + 6 * 8]: the input of unet.add_embedding (a forward pre-hook)
                                in a UNet call with text_embeds [zeros, pooled of case
                                "short_zero"] and time_ids [s, s]

The text encoders keep CLIP's real vocabulary (49408 ids, so real prompts tokenize as in SDXL) at
widths 3 and 6 (stored F16: the two token tables are ~0.9 MB); text_encoder_2's projection is 5
wide (not square, so a transposed projection cannot pass). Weights are drawn per parameter from a
seeded generator and rounded to float16 (make_sd_pipeline_fixtures.randomize); references are
computed in float64 from exactly those values and stored as float32. Prompts use no emphasis
brackets or BREAK, and the long one (~90 tokens) no comma, so A1111's chunking (first chunk = the
first 75 tokens) and diffusers' truncation agree on its first 77 rows and its pooled text.
"""
import json
import os
import platform
import shutil
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_sd_pipeline_fixtures import SCHEDULER, randomize  # noqa: E402
from make_tokenizer_fixtures import load_tokenizer, write_hf_files  # noqa: E402

import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel  # noqa: E402
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer  # noqa: E402

SEED = 2301
D1, D2, P, TIME_DIM = 3, 6, 5, 8
COMMON = dict(vocab_size=49408, max_position_embeddings=77, layer_norm_eps=1e-5, attention_dropout=0.0,
              bos_token_id=49406, eos_token_id=49407, pad_token_id=1)
TEXT1 = dict(COMMON, hidden_size=D1, intermediate_size=2 * D1, projection_dim=D1, num_attention_heads=1,
             num_hidden_layers=2, hidden_act="quick_gelu")
TEXT2 = dict(COMMON, hidden_size=D2, intermediate_size=2 * D2, projection_dim=P, num_attention_heads=2,
             num_hidden_layers=3, hidden_act="gelu")
UNET = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=[4, 8], layers_per_block=1,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"], up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
            norm_num_groups=4, cross_attention_dim=D1 + D2, attention_head_dim=[1, 2],
            transformer_layers_per_block=[1, 2], use_linear_projection=True, upcast_attention=False,
            addition_embed_type="text_time", addition_time_embed_dim=TIME_DIM,
            projection_class_embeddings_input_dim=P + 6 * TIME_DIM)
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
           up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[4, 4], layers_per_block=1, act_fn="silu",
           latent_channels=4, norm_num_groups=2, sample_size=32, scaling_factor=0.13025, force_upcast=True)

LONG = ("a detailed oil painting of an old lighthouse on a rocky island at dusk with waves crashing against the "
        "stones and seagulls circling above the lantern room while a small fishing boat with a red sail returns "
        "to the harbour under a sky of purple and orange clouds and the first stars appear over the calm sea "
        "beyond the cliffs where a shepherd watches his flock near an ancient stone wall covered in moss and a lone "
        "fox runs across the golden field toward the dark forest at the edge of the quiet world")
PROMPTS = [
    "a photo of an astronaut riding a horse on mars",
    "A Photo of an ASTRONAUT riding a horse on Mars! wow!! !!!",  # tokenizer_2 reads each "!" as its pad id 0
    LONG,                                                           # over 75 tokens: diffusers truncates
    "blurry, low quality",
    "",
]
# name -> prompt index, negative prompt index (None: negative_prompt=None), force_zeros_for_empty_prompt
CASES = {
    "short_zero": (0, None, True),
    "bang_negative": (1, 3, True),
    "long_zero": (2, None, True),
    "short_empty_encoded": (0, None, False),  # force_zeros off: diffusers encodes "" as the negative
}
# name -> original_size, crops_coords_top_left, target_size (pixels, (h, w))
TIME_SETTINGS = {
    "square": ((1024, 1024), (0, 0), (1024, 1024)),
    "cropped": ((96, 128), (16, 8), (64, 80)),
}


def build(tokenizer, tokenizer_2):
    torch.manual_seed(SEED)
    text = CLIPTextModel(CLIPTextConfig(**TEXT1))
    text_2 = CLIPTextModelWithProjection(CLIPTextConfig(**TEXT2))
    unet = UNet2DConditionModel(**UNET)
    vae = AutoencoderKL(**VAE)
    for i, m in enumerate((text, text_2, unet, vae)):
        randomize(m, SEED * 10 + i)
        m.eval()
    # from_config keeps the keys the scheduler takes (SCHEDULER is written for DDIM: clip_sample, set_alpha_to_one).
    scheduler = EulerDiscreteScheduler.from_config(SCHEDULER)
    return StableDiffusionXLPipeline(vae=vae, text_encoder=text, text_encoder_2=text_2, tokenizer=tokenizer,
                                     tokenizer_2=tokenizer_2, unet=unet, scheduler=scheduler,
                                     force_zeros_for_empty_prompt=True, add_watermarker=False)


def encode_texts(pipe):
    """Each prompt through both encoders as encode_prompt runs them (framed to 77, hidden_states[-2])."""
    out = {}
    for k, prompt in enumerate(PROMPTS):
        for tag, tok, enc in (("1", pipe.tokenizer, pipe.text_encoder), ("2", pipe.tokenizer_2, pipe.text_encoder_2)):
            ids = tok(prompt, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
            res = enc(ids, output_hidden_states=True)
            out[f"p{k}.hidden{tag}"] = res.hidden_states[-2]
            if tag == "2":
                out[f"p{k}.text_embeds"] = res[0]
    return out


def encode_cases(pipe):
    out = {}
    for name, (p, n, zeros) in CASES.items():
        pipe.register_to_config(force_zeros_for_empty_prompt=zeros)
        embeds, neg, pooled, neg_pooled = pipe.encode_prompt(
            PROMPTS[p], device="cpu", num_images_per_prompt=1, do_classifier_free_guidance=True,
            negative_prompt=None if n is None else PROMPTS[n])
        out.update({f"{name}.prompt_embeds": embeds, f"{name}.pooled_prompt_embeds": pooled,
                    f"{name}.negative_prompt_embeds": neg, f"{name}.negative_pooled_prompt_embeds": neg_pooled})
    pipe.register_to_config(force_zeros_for_empty_prompt=True)
    return out


def time_id_cases(pipe, pooled):
    """_get_add_time_ids, and what the UNet feeds add_embedding for them (captured by a pre-hook)."""
    captured = []
    hook = pipe.unet.add_embedding.register_forward_pre_hook(lambda module, args: captured.append(args[0].clone()))
    dtype = pooled.dtype
    out = {}
    try:
        for name, (original, crop, target) in TIME_SETTINGS.items():
            ids = pipe._get_add_time_ids(original, crop, target, dtype=dtype, text_encoder_projection_dim=P)
            text_embeds = torch.cat([torch.zeros_like(pooled), pooled])
            g = torch.Generator().manual_seed(7)
            sample = torch.randn((2, 4, 8, 8), generator=g, dtype=torch.float64).to(dtype)
            context = torch.randn((2, 77, D1 + D2), generator=g, dtype=torch.float64).to(dtype)
            captured.clear()
            pipe.unet(sample, torch.tensor(500.0, dtype=dtype), encoder_hidden_states=context,
                      added_cond_kwargs={"text_embeds": text_embeds, "time_ids": torch.cat([ids, ids])})
            assert len(captured) == 1, "add_embedding ran %d times" % len(captured)
            out[f"{name}.add_time_ids"] = ids
            out[f"{name}.add_embeds"] = captured[0]
    finally:
        hook.remove()
    return out


def run_all(pipe, dtype):
    pipe.to(dtype)
    with torch.no_grad():
        prompts = encode_texts(pipe)
        encode = encode_cases(pipe)
        times = time_id_cases(pipe, encode["short_zero.pooled_prompt_embeds"])
    return [{k: v.detach().to(torch.float64) for k, v in part.items()} for part in (prompts, encode, times)]


def token_ids(pipe):
    ids = []
    for prompt in PROMPTS:
        row = {}
        for tag, tok in (("1", pipe.tokenizer), ("2", pipe.tokenizer_2)):
            row["framed" + tag] = tok(prompt, padding="max_length", max_length=77, truncation=True).input_ids
            row["content" + tag] = tok(prompt, add_special_tokens=False).input_ids
        ids.append(row)
    return ids


def max_rel(a, b):
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))


def keep_tokenizer_json(folder, outdir):
    """The small files save_pretrained wrote for each tokenizer (pad token, special tokens)."""
    for sub in ("tokenizer", "tokenizer_2"):
        dst = os.path.join(outdir, "tokenizer_files", sub)
        os.makedirs(dst, exist_ok=True)
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            src = os.path.join(folder, sub, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(dst, name))
        shutil.rmtree(os.path.join(folder, sub))


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
    ref = run_all(pipe, torch.float64)
    f32 = run_all(pipe, torch.float32)
    distances = {k: max_rel(r[k], f[k]) for r, f in zip(ref, f32) for k in r if r[k].abs().max() > 0}
    for part, name in zip(ref, ("prompts", "encode", "time_ids")):
        save_file({k: v.to(torch.float32).contiguous() for k, v in part.items()},
                  os.path.join(outdir, name + ".safetensors"))
    folder = os.path.join(outdir, "pipeline")
    pipe.to(torch.float16)
    pipe.save_pretrained(folder, safe_serialization=True)
    keep_tokenizer_json(folder, outdir)
    meta = dict(prompts=PROMPTS, ids=token_ids(pipe),
                cases={k: dict(prompt=p, negative_prompt=n, force_zeros_for_empty_prompt=z)
                       for k, (p, n, z) in CASES.items()},
                time_settings={k: dict(original_size=o, crops_coords_top_left=c, target_size=t)
                               for k, (o, c, t) in TIME_SETTINGS.items()},
                text_encoder=TEXT1, text_encoder_2=TEXT2, unet=UNET, vae=VAE, seed=SEED,
                float32_max_rel_distance=distances,
                versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                              transformers=transformers.__version__, python=platform.python_version()))
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("float32 vs float64, largest max rel distance:", max(distances.values()))


if __name__ == "__main__":
    main()
