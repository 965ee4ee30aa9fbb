#!/usr/bin/python3
"""Diffusers pipeline folder -> one Stable Diffusion checkpoint in the original LDM (SGM for SDXL) layout.

    python3 tools/reference/make_single_file.py FOLDER OUT.safetensors --layout sd1|sd2|sdxl
    python3 tools/reference/make_single_file.py FOLDER OUT.safetensors --layout sd1 --random

The reverse of what core/models/sd/SingleFileCheckpoint.cpp (and diffusers' single_file_utils.py:
convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint, convert_ldm_clip_checkpoint,
convert_open_clip_checkpoint) do. Pure Python with numpy
(Debian's python3-numpy), so it runs on the build machines; safetensors is read and written by
hand (8-byte little-endian header length, JSON header padded with spaces to a multiple of 8,
raw little-endian bytes, tensors in name order).

FOLDER holds unet/, vae/ and text_encoder/ (config.json + diffusion_pytorch_model.safetensors or
model.safetensors; text encoder names with or without "text_model."); sdxl also text_encoder_2/
(CLIPTextModelWithProjection). With --random, FOLDER is first written: a tiny random pipeline of
that layout (seeded, deterministic, see TINY below), stored as F16 (UNet, text encoders) and F32
(VAE), the mix real "fp16" checkpoints show; for sdxl with model_index.json (a loadable folder).

sdxl (SGM's layout, Stability-AI/generative-models): the UNet's add_embedding.linear_1/2 become
label_emb.0.0/0.2, text_encoder goes under conditioner.embedders.0.transformer. in transformers'
names, text_encoder_2 under conditioner.embedders.1.model. as OpenCLIP (fused q/k/v in_proj, every
block, text_projection stored transposed as used by x @ W).

The file gets what real checkpoints carry besides the models, so that a loader has to ignore
them: LDM's schedule buffers (betas, alphas_cumprod, ...), a scale_factor scalar, EMA copies of a
few UNet tensors under model_ema.* (flattened names) with model_ema.decay / num_updates, SD1's
text position_ids (I64); for sd2 the OpenCLIP parts diffusers drops: a last transformer block
(resblocks.<N>, random: SD2 conditions on the penultimate block), text_projection and
logit_scale; for sdxl SGM's denoiser.sigmas, the first encoder's position_ids and the second's
logit_scale.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}

# ---------------------------------------------------------------------------------------------
# safetensors by hand


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        if entry["dtype"] == "BF16":  # numpy has no bfloat16: widen to float32 bits
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
        out[name] = array.reshape(entry["shape"]).copy()
    return out


def dtype_name(array):
    for name, t in DTYPES.items():
        if t is not None and array.dtype == np.dtype(t):
            return name
    raise ValueError(f"unsupported dtype {array.dtype}")


def write_safetensors(path, tensors, metadata=None):
    header = {}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype_name(array), "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


# ---------------------------------------------------------------------------------------------
# diffusers -> LDM names (single_file_utils.py convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint,
# convert_ldm_clip_checkpoint / convert_open_clip_checkpoint, read the other way)

UNET_FIXED = {
    "time_embedding.linear_1.": "time_embed.0.",
    "time_embedding.linear_2.": "time_embed.2.",
    "conv_in.": "input_blocks.0.0.",
    "conv_norm_out.": "out.0.",
    "conv_out.": "out.2.",
    "add_embedding.linear_1.": "label_emb.0.0.",  # SDXL's text-time embedding
    "add_embedding.linear_2.": "label_emb.0.2.",
}
UNET_RESNET = [("norm1.", "in_layers.0."), ("conv1.", "in_layers.2."), ("time_emb_proj.", "emb_layers.1."),
               ("norm2.", "out_layers.0."), ("conv2.", "out_layers.3."), ("conv_shortcut.", "skip_connection.")]


def rename_prefix(rest, table):
    for new, old in table:
        if rest.startswith(new):
            return old + rest[len(new):]
    raise ValueError(f"no LDM name for resnet tensor {rest!r}")


def unet_ldm_name(name, config):
    n = config["layers_per_block"]
    up_types = config["up_block_types"]
    for new, old in UNET_FIXED.items():
        if name.startswith(new):
            return old + name[len(new):]
    m = re.fullmatch(r"down_blocks\.(\d+)\.(resnets|attentions|downsamplers)\.(\d+)\.(.*)", name)
    if m:
        b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        if kind == "resnets":
            return f"input_blocks.{1 + b * (n + 1) + j}.0.{rename_prefix(rest, UNET_RESNET)}"
        if kind == "attentions":
            return f"input_blocks.{1 + b * (n + 1) + j}.1.{rest}"
        return f"input_blocks.{(b + 1) * (n + 1)}.0.op.{rest[len('conv.'):]}"
    m = re.fullmatch(r"mid_block\.(resnets|attentions)\.(\d+)\.(.*)", name)
    if m:
        if m[1] == "attentions":
            return f"middle_block.1.{m[3]}"
        return f"middle_block.{2 * int(m[2])}.{rename_prefix(m[3], UNET_RESNET)}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.(resnets|attentions|upsamplers)\.(\d+)\.(.*)", name)
    if m:
        b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        if kind == "resnets":
            return f"output_blocks.{b * (n + 1) + j}.0.{rename_prefix(rest, UNET_RESNET)}"
        if kind == "attentions":
            return f"output_blocks.{b * (n + 1) + j}.1.{rest}"
        slot = 2 if up_types[b].startswith("CrossAttn") else 1
        return f"output_blocks.{b * (n + 1) + n}.{slot}.{rest}"  # rest = conv.weight / conv.bias
    raise ValueError(f"no LDM name for UNet tensor {name!r}")


VAE_ATTENTION = {"group_norm.": "norm.", "to_q.": "q.", "to_k.": "k.", "to_v.": "v.", "to_out.0.": "proj_out."}


def vae_ldm_name(name, levels):
    side, _, rest = name.partition(".")
    if side in ("quant_conv", "post_quant_conv"):
        return name
    if rest.startswith("conv_norm_out."):
        return f"{side}.norm_out.{rest[len('conv_norm_out.'):]}"
    if rest.startswith(("conv_in.", "conv_out.")):
        return name
    m = re.fullmatch(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", rest)
    if m:
        return f"encoder.down.{m[1]}.block.{m[2]}.{m[3].replace('conv_shortcut', 'nin_shortcut')}"
    m = re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.(.*)", rest)
    if m:
        return f"encoder.down.{m[1]}.downsample.{m[2]}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", rest)
    if m:  # LDM numbers decoder levels by resolution, diffusers by execution order
        return f"decoder.up.{levels - 1 - int(m[1])}.block.{m[2]}.{m[3].replace('conv_shortcut', 'nin_shortcut')}"
    m = re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.(.*)", rest)
    if m:
        return f"decoder.up.{levels - 1 - int(m[1])}.upsample.{m[2]}"
    m = re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.*)", rest)
    if m:
        return f"{side}.mid.block_{int(m[1]) + 1}.{m[2].replace('conv_shortcut', 'nin_shortcut')}"
    m = re.fullmatch(r"mid_block\.attentions\.0\.(.*)", rest)
    if m:
        for new, old in VAE_ATTENTION.items():
            if m[1].startswith(new):
                return f"{side}.mid.attn_1.{old}{m[1][len(new):]}"
    raise ValueError(f"no LDM name for VAE tensor {name!r}")


def unet_to_ldm(tensors, config):
    return {"model.diffusion_model." + unet_ldm_name(k, config): v for k, v in tensors.items()}


def vae_to_ldm(tensors, config):
    out = {}
    for k, v in tensors.items():
        ldm = vae_ldm_name(k, len(config["block_out_channels"]))
        if ".mid.attn_1." in ldm and ldm.endswith(".weight") and ".norm." not in ldm:
            v = v.reshape(v.shape + (1, 1))  # LDM's AttnBlock: 1x1 convolutions
        out["first_stage_model." + ldm] = v
    return out


def text_names(tensors):
    """Text encoder tensors under transformers' flattened names (no "text_model." prefix)."""
    return {k[len("text_model."):] if k.startswith("text_model.") else k: v for k, v in tensors.items()}


def clip_to_ldm(tensors, prefix="cond_stage_model.transformer."):
    return {prefix + "text_model." + k: v for k, v in text_names(tensors).items()}


OPEN_CLIP_LAYER = [("layer_norm1.", "ln_1."), ("layer_norm2.", "ln_2."), ("mlp.fc1.", "mlp.c_fc."),
                   ("mlp.fc2.", "mlp.c_proj."), ("self_attn.out_proj.", "attn.out_proj.")]


def open_clip_to_ldm(tensors, config, rng, dtype, p="cond_stage_model.model.", sd2_extras=True):
    """CLIPTextModel(WithProjection) -> OpenCLIP under `p`; q/k/v fused into in_proj_*. sd2_extras:
    plus the block diffusers drops (a random last block) and a random text_projection (SD 2.x);
    otherwise the model's own text_projection.weight [P, D] is stored as OpenCLIP's [D, P] (SDXL).
    logit_scale either way."""
    t = text_names(tensors)
    out = {p + "token_embedding.weight": t.pop("embeddings.token_embedding.weight"),
           p + "positional_embedding": t.pop("embeddings.position_embedding.weight"),
           p + "ln_final.weight": t.pop("final_layer_norm.weight"),
           p + "ln_final.bias": t.pop("final_layer_norm.bias")}
    projection = t.pop("text_projection.weight", None)
    layers = config["num_hidden_layers"]
    for layer in range(layers):
        src = f"encoder.layers.{layer}."
        dst = f"{p}transformer.resblocks.{layer}."
        for part in ("weight", "bias"):
            out[dst + "attn.in_proj_" + part] = np.concatenate(
                [t.pop(f"{src}self_attn.{q}_proj.{part}") for q in ("q", "k", "v")], axis=0)
        for new, old in OPEN_CLIP_LAYER:
            for part in ("weight", "bias"):
                out[dst + old + part] = t.pop(src + new + part)
    if t:
        raise ValueError(f"text encoder tensors with no OpenCLIP name: {sorted(t)[:5]}")
    if sd2_extras:
        # The block SD 2.x never uses (diffusers' SD_2_TEXT_ENCODER_KEYS_TO_IGNORE), shaped as block 0.
        last = f"{p}transformer.resblocks.{layers}."
        for name in [k for k in out if k.startswith(f"{p}transformer.resblocks.0.")]:
            out[last + name[len(f'{p}transformer.resblocks.0.'):]] = random_like(out[name], rng, dtype)
        width = config["hidden_size"]
        out[p + "text_projection"] = rng.standard_normal((width, width)).astype(dtype) * dtype(0.05)
    else:
        if projection is None:
            raise ValueError("an SDXL second text encoder needs text_projection.weight (CLIPTextModelWithProjection)")
        out[p + "text_projection"] = np.ascontiguousarray(projection.T)
    out[p + "logit_scale"] = np.array(4.6052, dtype=np.float32)
    return out


def random_like(array, rng, dtype):
    return (rng.standard_normal(array.shape) * 0.1).astype(dtype)


# ---------------------------------------------------------------------------------------------
# What real checkpoints carry besides the models


def ldm_extras(unet_ldm, layout, rng):
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=np.float64) ** 2
    alphas = np.cumprod(1.0 - betas)
    if layout == "sdxl":  # SGM's DiscreteDenoiser keeps the sigmas, not LDM's schedule buffers
        return {"denoiser.sigmas": np.sqrt((1.0 - alphas) / alphas).astype(np.float32),
                "conditioner.embedders.0.transformer.text_model.embeddings.position_ids":
                    np.arange(77, dtype=np.int64)[None]}
    extras = {
        "betas": betas.astype(np.float32),
        "alphas_cumprod": alphas.astype(np.float32),
        "alphas_cumprod_prev": np.concatenate([[1.0], alphas[:-1]]).astype(np.float32),
        "sqrt_alphas_cumprod": np.sqrt(alphas).astype(np.float32),
        "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - alphas).astype(np.float32),
        "log_one_minus_alphas_cumprod": np.log(1.0 - alphas).astype(np.float32),
        "scale_factor": np.array(0.18215, dtype=np.float32),
        "model_ema.decay": np.array(0.9999, dtype=np.float32),
        "model_ema.num_updates": np.array(470000, dtype=np.int64),
    }
    # EMA copies under flattened names (LDM's LitEma): model_ema.diffusion_modelinput_blocks00weight
    for name in sorted(unet_ldm)[:6]:
        flat = "model_ema." + "".join(name.split(".")[1:])
        extras[flat] = random_like(unet_ldm[name], rng, unet_ldm[name].dtype)
    if layout == "sd1":
        extras["cond_stage_model.transformer.text_model.embeddings.position_ids"] = np.arange(77, dtype=np.int64)[None]
    return extras


def read_text_encoder(folder, sub):
    config = json.load(open(os.path.join(folder, sub, "config.json")))
    tensors = read_safetensors(os.path.join(folder, sub, "model.safetensors"))
    tensors.pop("text_model.embeddings.position_ids", None)
    tensors.pop("embeddings.position_ids", None)
    return config, tensors


def convert(folder, layout, rng=None):
    rng = rng or np.random.default_rng(20240)
    unet_cfg = json.load(open(os.path.join(folder, "unet", "config.json")))
    vae_cfg = json.load(open(os.path.join(folder, "vae", "config.json")))
    unet = read_safetensors(os.path.join(folder, "unet", "diffusion_pytorch_model.safetensors"))
    vae = read_safetensors(os.path.join(folder, "vae", "diffusion_pytorch_model.safetensors"))
    text_cfg, text = read_text_encoder(folder, "text_encoder")

    out = unet_to_ldm(unet, unet_cfg)
    out.update(vae_to_ldm(vae, vae_cfg))
    text_dtype = next(iter(text.values())).dtype.type
    if layout == "sdxl":
        text2_cfg, text2 = read_text_encoder(folder, "text_encoder_2")
        out.update(clip_to_ldm(text, "conditioner.embedders.0.transformer."))
        out.update(open_clip_to_ldm(text2, text2_cfg, rng, text_dtype, "conditioner.embedders.1.model.",
                                    sd2_extras=False))
    else:
        out.update(clip_to_ldm(text) if layout == "sd1" else open_clip_to_ldm(text, text_cfg, rng, text_dtype))
    extras = ldm_extras({k: v for k, v in out.items() if k.startswith("model.diffusion_model.")}, layout, rng)
    clash = set(extras) & set(out)
    if clash:
        raise ValueError(f"extra tensors clash with model tensors: {sorted(clash)}")
    out.update(extras)
    return out


# ---------------------------------------------------------------------------------------------
# --random: a tiny diffusers pipeline folder of the layout (names as diffusers/transformers write them)

TINY = {
    # Widths 4 and 8 with GroupNorm groups of 4 keep every structural feature (conv shortcuts in
    # both models, a downsampler and an upsampler, cross-attention wider than a block) at ~20 KB.
    "unet": {"block_out_channels": [4, 8], "layers_per_block": 1, "cross_attention_dim": 12,
             "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
             "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "norm_num_groups": 4,
             "in_channels": 4, "out_channels": 4, "sample_size": 8},
    "unet_sd1": {"attention_head_dim": 2, "use_linear_projection": False, "upcast_attention": False},
    "unet_sd2": {"attention_head_dim": [1, 2], "use_linear_projection": True, "upcast_attention": True,
                 "layers_per_block": 2},
    # SDXL's shape in small: a first level without attention, depths per level (the mid block and
    # the first up block take 2), linear projections, the text-time embedding over the second
    # encoder's 6-wide projection and 6 size ids of 4 (add_embedding input 6 + 24 = 30), context
    # 12 + 16 = 28.
    "unet_sdxl": {"down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
                  "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"], "attention_head_dim": [1, 2],
                  "transformer_layers_per_block": [1, 2], "use_linear_projection": True,
                  "cross_attention_dim": 28, "addition_embed_type": "text_time", "addition_time_embed_dim": 4,
                  "projection_class_embeddings_input_dim": 30, "sample_size": 16},
    "vae": {"block_out_channels": [4, 8], "layers_per_block": 1, "latent_channels": 4, "norm_num_groups": 4,
            "in_channels": 3, "out_channels": 3, "sample_size": 16, "scaling_factor": 0.18215,
            "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2},
    "text": {"vocab_size": 64, "hidden_size": 12, "intermediate_size": 24, "num_hidden_layers": 2,
             "num_attention_heads": 2, "max_position_embeddings": 77, "layer_norm_eps": 1e-5,
             "bos_token_id": 62, "eos_token_id": 63, "pad_token_id": 1, "projection_dim": 12},
    "text_2": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
               "projection_dim": 6},
}


class Names:
    def __init__(self):
        self.shapes = {}

    def norm(self, p, c):
        self.shapes[p + ".weight"] = (c,)
        self.shapes[p + ".bias"] = (c,)

    def conv(self, p, o, i, k):
        self.shapes[p + ".weight"] = (o, i, k, k)
        self.shapes[p + ".bias"] = (o,)

    def linear(self, p, o, i, bias=True):
        self.shapes[p + ".weight"] = (o, i)
        if bias:
            self.shapes[p + ".bias"] = (o,)


def unet_shapes(c):
    s = Names()
    ch, n, x = c["block_out_channels"], c["layers_per_block"], c["cross_attention_dim"]
    t = 4 * ch[0]
    depth = c.get("transformer_layers_per_block", 1)
    depth = depth if isinstance(depth, list) else [depth] * len(ch)

    def resnet(p, cin, cout):
        s.norm(p + ".norm1", cin)
        s.conv(p + ".conv1", cout, cin, 3)
        s.linear(p + ".time_emb_proj", cout, t)
        s.norm(p + ".norm2", cout)
        s.conv(p + ".conv2", cout, cout, 3)
        if cin != cout:
            s.conv(p + ".conv_shortcut", cout, cin, 1)

    def transformer(p, w, blocks):
        s.norm(p + ".norm", w)
        for proj in ("proj_in", "proj_out"):
            if c["use_linear_projection"]:
                s.linear(f"{p}.{proj}", w, w)
            else:
                s.conv(f"{p}.{proj}", w, w, 1)
        for k in range(blocks):
            b = f"{p}.transformer_blocks.{k}"
            for attn, kv in (("attn1", w), ("attn2", x)):
                s.linear(f"{b}.{attn}.to_q", w, w, bias=False)
                s.linear(f"{b}.{attn}.to_k", w, kv, bias=False)
                s.linear(f"{b}.{attn}.to_v", w, kv, bias=False)
                s.linear(f"{b}.{attn}.to_out.0", w, w)
            for k2 in (1, 2, 3):
                s.norm(f"{b}.norm{k2}", w)
            s.linear(b + ".ff.net.0.proj", 8 * w, w)
            s.linear(b + ".ff.net.2", w, 4 * w)

    s.conv("conv_in", ch[0], c["in_channels"], 3)
    s.linear("time_embedding.linear_1", t, ch[0])
    s.linear("time_embedding.linear_2", t, t)
    if c.get("addition_embed_type") == "text_time":
        s.linear("add_embedding.linear_1", t, c["projection_class_embeddings_input_dim"])
        s.linear("add_embedding.linear_2", t, t)
    levels = len(ch)
    for b, kind in enumerate(c["down_block_types"]):
        for j in range(n):
            resnet(f"down_blocks.{b}.resnets.{j}", (ch[b - 1] if b else ch[0]) if j == 0 else ch[b], ch[b])
            if kind.startswith("CrossAttn"):
                transformer(f"down_blocks.{b}.attentions.{j}", ch[b], depth[b])
        if b < levels - 1:
            s.conv(f"down_blocks.{b}.downsamplers.0.conv", ch[b], ch[b], 3)
    resnet("mid_block.resnets.0", ch[-1], ch[-1])
    transformer("mid_block.attentions.0", ch[-1], depth[-1])
    resnet("mid_block.resnets.1", ch[-1], ch[-1])
    rev = ch[::-1]
    for i, kind in enumerate(c["up_block_types"]):
        out, prev, skip_last = rev[i], rev[max(i - 1, 0)], rev[min(i + 1, levels - 1)]
        for j in range(n + 1):
            resnet(f"up_blocks.{i}.resnets.{j}", (prev if j == 0 else out) + (skip_last if j == n else out), out)
            if kind.startswith("CrossAttn"):
                transformer(f"up_blocks.{i}.attentions.{j}", out, depth[levels - 1 - i])
        if i < levels - 1:
            s.conv(f"up_blocks.{i}.upsamplers.0.conv", out, out, 3)
    s.norm("conv_norm_out", ch[0])
    s.conv("conv_out", c["out_channels"], ch[0], 3)
    return s.shapes


def vae_shapes(c):
    s = Names()
    ch, n, lat = c["block_out_channels"], c["layers_per_block"], c["latent_channels"]

    def resnet(p, cin, cout):
        s.norm(p + ".norm1", cin)
        s.conv(p + ".conv1", cout, cin, 3)
        s.norm(p + ".norm2", cout)
        s.conv(p + ".conv2", cout, cout, 3)
        if cin != cout:
            s.conv(p + ".conv_shortcut", cout, cin, 1)

    def mid(p, w):
        resnet(p + ".resnets.0", w, w)
        s.norm(p + ".attentions.0.group_norm", w)
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            s.linear(f"{p}.attentions.0.{proj}", w, w)
        resnet(p + ".resnets.1", w, w)

    levels = len(ch)
    s.conv("encoder.conv_in", ch[0], c["in_channels"], 3)
    for i in range(levels):
        for j in range(n):
            resnet(f"encoder.down_blocks.{i}.resnets.{j}", (ch[i - 1] if i else ch[0]) if j == 0 else ch[i], ch[i])
        if i < levels - 1:
            s.conv(f"encoder.down_blocks.{i}.downsamplers.0.conv", ch[i], ch[i], 3)
    mid("encoder.mid_block", ch[-1])
    s.norm("encoder.conv_norm_out", ch[-1])
    s.conv("encoder.conv_out", 2 * lat, ch[-1], 3)
    s.conv("quant_conv", 2 * lat, 2 * lat, 1)
    s.conv("post_quant_conv", lat, lat, 1)
    s.conv("decoder.conv_in", ch[-1], lat, 3)
    mid("decoder.mid_block", ch[-1])
    rev = ch[::-1]
    for i in range(levels):
        for j in range(n + 1):
            resnet(f"decoder.up_blocks.{i}.resnets.{j}", (rev[i - 1] if i else rev[0]) if j == 0 else rev[i], rev[i])
        if i < levels - 1:
            s.conv(f"decoder.up_blocks.{i}.upsamplers.0.conv", rev[i], rev[i], 3)
    s.norm("decoder.conv_norm_out", ch[0])
    s.conv("decoder.conv_out", c["out_channels"], ch[0], 3)
    return s.shapes


def text_shapes(c):
    s = Names()
    d, inner = c["hidden_size"], c["intermediate_size"]
    s.shapes["embeddings.token_embedding.weight"] = (c["vocab_size"], d)
    s.shapes["embeddings.position_embedding.weight"] = (c["max_position_embeddings"], d)
    for layer in range(c["num_hidden_layers"]):
        p = f"encoder.layers.{layer}"
        s.norm(p + ".layer_norm1", d)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s.linear(f"{p}.self_attn.{proj}", d, d)
        s.norm(p + ".layer_norm2", d)
        s.linear(p + ".mlp.fc1", inner, d)
        s.linear(p + ".mlp.fc2", d, inner)
    s.norm("final_layer_norm", d)
    if "CLIPTextModelWithProjection" in c.get("architectures", []):
        s.linear("text_projection", c["projection_dim"], d, bias=False)
    return s.shapes


def random_tensors(shapes, rng, dtype):
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if re.search(r"norm[^.]*\.weight$", name):
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            values = rng.uniform(-1.0, 1.0, shape) / np.sqrt(fan_in)
        out[name] = values.astype(dtype)
    return out


def write_config(path, config):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def make_random_folder(folder, layout, seed):
    rng = np.random.default_rng(seed)
    unet_cfg = dict(TINY["unet"], **TINY["unet_" + layout], _class_name="UNet2DConditionModel")
    vae_cfg = dict(TINY["vae"], _class_name="AutoencoderKL")
    text_cfg = dict(TINY["text"], architectures=["CLIPTextModel"], model_type="clip_text_model",
                    hidden_act="gelu" if layout == "sd2" else "quick_gelu")
    parts = [("unet", unet_cfg, unet_shapes(unet_cfg), np.float16, "diffusion_pytorch_model"),
             ("vae", vae_cfg, vae_shapes(vae_cfg), np.float32, "diffusion_pytorch_model"),
             ("text_encoder", text_cfg, text_shapes(text_cfg), np.float16, "model")]
    if layout == "sdxl":
        vae_cfg.update(scaling_factor=0.13025, force_upcast=True)
        text2_cfg = dict(TINY["text"], **TINY["text_2"], architectures=["CLIPTextModelWithProjection"],
                         model_type="clip_text_model", hidden_act="gelu")
        parts.append(("text_encoder_2", text2_cfg, text_shapes(text2_cfg), np.float16, "model"))
        write_config(os.path.join(folder, "model_index.json"), {
            "_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": True,
            "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
            "text_encoder": ["transformers", "CLIPTextModel"],
            "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
            "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "CLIPTokenizer"],
            "scheduler": ["diffusers", "EulerDiscreteScheduler"]})
    for sub, config, shapes, dtype, stem in parts:
        tensors = random_tensors(shapes, rng, dtype)
        if sub == "text_encoder_2":  # transformers' unflattened names, beside text_encoder's flattened ones
            tensors = {(k if k == "text_projection.weight" else "text_model." + k): v for k, v in tensors.items()}
        write_config(os.path.join(folder, sub, "config.json"), config)
        write_safetensors(os.path.join(folder, sub, stem + ".safetensors"), tensors, {"format": "pt"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--layout", choices=["sd1", "sd2", "sdxl"], required=True)
    parser.add_argument("--random", action="store_true", help="first write a tiny random pipeline at FOLDER")
    parser.add_argument("--seed", type=int, default=None,
                        help="--random's seed (default: 1 for sd1, 2 for sd2, 3 for sdxl)")
    args = parser.parse_args()
    if args.random:
        make_random_folder(args.folder, args.layout, args.seed if args.seed is not None else
                           {"sd1": 1, "sd2": 2, "sdxl": 3}[args.layout])
    tensors = convert(args.folder, args.layout)
    write_safetensors(args.out, tensors, {"format": "pt"})
    print(f"{args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    sys.exit(main())
