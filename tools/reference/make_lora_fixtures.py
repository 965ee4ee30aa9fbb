#!/usr/bin/python3
"""LoRA / LyCORIS fixtures of tests/data/lora (core/models/lora, tests/core/tst_lora.cpp).

    /usr/bin/python3 tools/reference/make_lora_fixtures.py OUTDIR
    PYTHONPATH=<diffusers>/src python3 tools/reference/make_lora_fixtures.py OUTDIR --check-diffusers DIR

OUTDIR belongs at tests/data/lora. The default mode needs torch and numpy only (Debian 12's python3-torch
1.13 is enough) and is deterministic. It writes tiny LoRA files of every format Tessera reads and, for
each case, the merged float32 weights the upstream formulas give, computed in float64 and rounded once
(per LoRA) to float32:

  LoRA / LoCon  A1111 extensions-builtin/Lora/network_lora.py NetworkModuleLora.calc_updown and
                lyco_helpers.py rebuild_conventional (dyn_dim included) / rebuild_cp_decomposition
                (lora_mid); kohya-ss sd-scripts networks/lora.py LoRAModule (scale alpha / rank);
                peft tuners/lora/layer.py Linear.get_delta_weight (lora_A = down, lora_B = up)
  LoHa          A1111 network_hada.py NetworkModuleHada.calc_updown, lyco_helpers.py make_weight_cp
  LoKr          A1111 network_lokr.py make_kron; ComfyUI comfy/weight_adapter/lokr.py calculate_weight
                (scale alpha / dim only when a factor is low-rank)
  full / norm   A1111 network_full.py, network_norm.py (diff, diff_b, w_norm, b_norm)
  DoRA          LyCORIS lycoris/modules/locon.py apply_weight_decompose (default), A1111 network.py
                NetworkModule.apply_weight_decompose + finalize_updown, ComfyUI
                comfy/weight_adapter/base.py weight_decompose, peft tuners/lora/dora.py
                (lora_magnitude_vector)
  multipliers   A1111 network.py finalize_updown: W + updown * calc_scale() * multiplier(), text-encoder
                modules with the te multiplier, UNet modules with the unet multiplier

Key names follow kohya-ss sd-scripts networks/lora.py create_modules ("lora_unet_" / "lora_te_" /
"lora_te1_" / "lora_te2_" + module path with "." -> "_"; SDXL UNet paths are the LDM / SGM ones of
library/sdxl_model_util.py make_unet_conversion_map), diffusers/PEFT ("unet." + path + ".lora_A.weight")
and diffusers' attention-processor form (loaders/lora_conversion_utils.py _convert_unet_lora_key output:
"attn1.processor.to_q_lora.down.weight", "mlp.fc1.lora_linear_layer.down.weight").

The models are tiny diffusers UNet2DConditionModel / transformers CLIPTextModel(WithProjection) configs
(cases.json "models", in their own config.json terms). Only the tensors a case touches matter: their base
values are a fixed pattern of their name (base_tensor below; tst_lora.cpp computes the same bits), so
no base weights are stored. Layout of OUTDIR:

  cases.json            models, cases (LoRA files with multipliers, DoRA convention, the file keys that
                        name nothing in the model, modules merged), file hashes (sha256 of the whole
                        file and A1111's "addnet" hash: sha256 of the bytes after the safetensors header)
  <lora>.safetensors    the LoRA files (F16 and F32 factors, 0-d alphas); sd1_kohya_wrapped.pt is
                        torch.save({"state_dict": ...}) (zip format)
  expected/<case>.safetensors   the merged tensors a case touches, "<component>/<tensor name>" (F32)

--check-diffusers DIR (where diffusers, peft and transformers import; run it on a machine that has them;
DIR belongs at tests/data/lora/diffusers, which tst_lora.cpp reads when present) builds the same tiny
models with diffusers / transformers, sets the touched tensors to the same base pattern, loads each
diffusers-compatible case's UNet modules with StableDiffusion(XL)Pipeline.load_lora_weights (keys that
name nothing in the model left out: diffusers refuses them), fuses them with
fuse_lora(lora_scale=<unet multiplier>), and writes
  DIR/merged.safetensors      the fused tensors, "<case>:<component>/<tensor name>"
  DIR/report.json             per case the tensors that agree with expected/ (float32 rounding) and those
                              that differ, each with its known cause in diffusers (or "unexplained")
  DIR/kohya_to_diffusers.json for synthetic kohya key sets of every Linear / Conv2d module sd-scripts
                              targets (SD1, SD2, SDXL tiny configs; SDXL UNet names in SGM form), the
                              diffusers module each becomes through diffusers' _maybe_map_sgm_blocks_to_diffusers
                              + _convert_non_diffusers_lora_to_diffusers
The text encoders are checked by that key conversion only: diffusers 0.40's text-encoder loader matches
module names with "text_model." (transformers 5 leaves it out) and cannot tell the format of a kohya
text-encoder set without out_proj or MLP modules. The committed check ran diffusers 0.40.0.dev0, peft
0.21.0, transformers 5.17.0 and torch 2.11.0.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unet2d_ref import read_safetensors, write_safetensors  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Tiny models, in diffusers' / transformers' config terms
# ----------------------------------------------------------------------------------------------

CLIP_COMMON = {"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100, "max_position_embeddings": 77,
               "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}

MODELS = {
    # SD 1.x's shape: 1x1-conv projections, one head count for every level, CLIP ViT-L's activation.
    "sd1": {
        "family": "sd1",
        "unet": {"_class_name": "UNet2DConditionModel", "sample_size": 16, "block_out_channels": [16, 32],
                 "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
                 "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "layers_per_block": 1,
                 "norm_num_groups": 8, "cross_attention_dim": 32, "attention_head_dim": 8},
        "text_encoder": dict(CLIP_COMMON, hidden_size=32, intermediate_size=64, hidden_act="quick_gelu",
                             architectures=["CLIPTextModel"]),
    },
    # SD 2.x's shape: Linear projections, per-level heads, upcast attention, a wider text encoder (gelu).
    "sd2": {
        "family": "sd2",
        "unet": {"_class_name": "UNet2DConditionModel", "sample_size": 16, "block_out_channels": [16, 32],
                 "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
                 "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "layers_per_block": 1,
                 "norm_num_groups": 8, "cross_attention_dim": 48, "attention_head_dim": [2, 4],
                 "use_linear_projection": True, "upcast_attention": True},
        "text_encoder": dict(CLIP_COMMON, hidden_size=48, intermediate_size=96, hidden_act="gelu",
                             architectures=["CLIPTextModel"]),
    },
    # SDXL base's shape (tests/core/tst_sdxlunet.cpp tinyConfig): three levels, no attention in down 0 /
    # up 2, transformer depth [1, 2, 2], text-time embedding; CLIP-L-like and bigG-like text encoders.
    "sdxl": {
        "family": "sdxl",
        "unet": {"_class_name": "UNet2DConditionModel", "sample_size": 16, "block_out_channels": [8, 16, 16],
                 "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                 "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                 "layers_per_block": 2, "transformer_layers_per_block": [1, 2, 2], "attention_head_dim": [2, 4, 4],
                 "use_linear_projection": True, "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
                 "projection_class_embeddings_input_dim": 96, "norm_num_groups": 8, "cross_attention_dim": 80},
        "text_encoder": dict(CLIP_COMMON, hidden_size=32, intermediate_size=64, hidden_act="quick_gelu",
                             architectures=["CLIPTextModel"]),
        "text_encoder_2": dict(CLIP_COMMON, hidden_size=48, intermediate_size=192, hidden_act="gelu",
                               projection_dim=48, architectures=["CLIPTextModelWithProjection"]),
    },
}

COMPONENTS = ("unet", "text_encoder", "text_encoder_2")
TEXT_KEYS = ("lora_te", "text_encoder", "text_model")  # text-encoder keys in kohya / diffusers files


def fnv1a32(text):
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def base_tensor(component, name, shape):
    """The base value of a touched tensor: element i of "<component>/<name>" is
    ((fnv1a32(key) + i * 2654435761) mod 2^32 / 2^32 - 0.5) / 4, exact in float64, rounded once to float32."""
    n = int(np.prod(shape)) if len(shape) else 1
    h = np.uint64(fnv1a32(component + "/" + name))
    i = np.arange(n, dtype=np.uint64)
    k = (h + i * np.uint64(2654435761)) % np.uint64(1 << 32)
    v = (k.astype(np.float64) / float(1 << 32) - 0.5) * 0.25
    return v.astype(np.float32).reshape(shape)


# ----------------------------------------------------------------------------------------------
# Module shapes of the tiny models (diffusers / transformers parameter names)
# ----------------------------------------------------------------------------------------------

def unet_shapes(cfg):
    """(module path) -> weight shape for the Linear / Conv2d / norm modules of UNet2DConditionModel
    (diffusers models/unets/unet_2d_condition.py) that the fixtures touch or enumerate."""
    ch = cfg["block_out_channels"]
    L = cfg["layers_per_block"]
    ctx = cfg["cross_attention_dim"]
    temb = 4 * ch[0]
    linear_proj = cfg.get("use_linear_projection", False)
    depth = cfg.get("transformer_layers_per_block", 1)
    depth = depth if isinstance(depth, list) else [depth] * len(ch)
    out = {}

    def resnet(p, cin, cout):
        out[p + ".norm1"] = [cin]
        out[p + ".conv1"] = [cout, cin, 3, 3]
        out[p + ".time_emb_proj"] = [cout, temb]
        out[p + ".norm2"] = [cout]
        out[p + ".conv2"] = [cout, cout, 3, 3]
        if cin != cout:
            out[p + ".conv_shortcut"] = [cout, cin, 1, 1]

    def transformer(p, c, n):
        out[p + ".norm"] = [c]
        out[p + ".proj_in"] = [c, c] if linear_proj else [c, c, 1, 1]
        for t in range(n):
            b = f"{p}.transformer_blocks.{t}"
            for a, kv in (("attn1", c), ("attn2", ctx)):
                out[f"{b}.{a}.to_q"] = [c, c]
                out[f"{b}.{a}.to_k"] = [c, kv]
                out[f"{b}.{a}.to_v"] = [c, kv]
                out[f"{b}.{a}.to_out.0"] = [c, c]
            for k in ("norm1", "norm2", "norm3"):
                out[f"{b}.{k}"] = [c]
            out[f"{b}.ff.net.0.proj"] = [8 * c, c]
            out[f"{b}.ff.net.2"] = [c, 4 * c]
        out[p + ".proj_out"] = [c, c] if linear_proj else [c, c, 1, 1]

    out["conv_in"] = [ch[0], 4, 3, 3]
    out["time_embedding.linear_1"] = [temb, ch[0]]
    out["time_embedding.linear_2"] = [temb, temb]
    if cfg.get("addition_embed_type") == "text_time":
        out["add_embedding.linear_1"] = [temb, cfg["projection_class_embeddings_input_dim"]]
        out["add_embedding.linear_2"] = [temb, temb]
    cin = ch[0]
    for i, kind in enumerate(cfg["down_block_types"]):
        c = ch[i]
        for j in range(L):
            resnet(f"down_blocks.{i}.resnets.{j}", cin if j == 0 else c, c)
            if kind == "CrossAttnDownBlock2D":
                transformer(f"down_blocks.{i}.attentions.{j}", c, depth[i])
        if i < len(ch) - 1:
            out[f"down_blocks.{i}.downsamplers.0.conv"] = [c, c, 3, 3]
        cin = c
    resnet("mid_block.resnets.0", ch[-1], ch[-1])
    transformer("mid_block.attentions.0", ch[-1], depth[-1])
    resnet("mid_block.resnets.1", ch[-1], ch[-1])
    rev = list(reversed(ch))
    rdepth = list(reversed(depth))
    prev = ch[-1]
    for i, kind in enumerate(cfg["up_block_types"]):
        c = rev[i]
        skip_in = rev[min(i + 1, len(ch) - 1)]
        for j in range(L + 1):
            res_skip = skip_in if j == L else c
            res_in = prev if j == 0 else c
            resnet(f"up_blocks.{i}.resnets.{j}", res_in + res_skip, c)
            if kind == "CrossAttnUpBlock2D":
                transformer(f"up_blocks.{i}.attentions.{j}", c, rdepth[i])
        if i < len(ch) - 1:
            out[f"up_blocks.{i}.upsamplers.0.conv"] = [c, c, 3, 3]
        prev = c
    out["conv_norm_out"] = [ch[0]]
    out["conv_out"] = [4, ch[0], 3, 3]
    return out


def clip_shapes(cfg):
    """(module path) -> weight shape of transformers' CLIPTextModel(WithProjection) modules."""
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    out = {}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"text_model.encoder.layers.{layer}"
        for k in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{p}.self_attn.{k}"] = [d, d]
        out[p + ".layer_norm1"] = [d]
        out[p + ".mlp.fc1"] = [f, d]
        out[p + ".mlp.fc2"] = [d, f]
        out[p + ".layer_norm2"] = [d]
    out["text_model.final_layer_norm"] = [d]
    return out


def module_shapes(model):
    m = MODELS[model]
    shapes = {"unet": unet_shapes(m["unet"]), "text_encoder": clip_shapes(m["text_encoder"])}
    if "text_encoder_2" in m:
        shapes["text_encoder_2"] = clip_shapes(m["text_encoder_2"])
    return shapes


# ----------------------------------------------------------------------------------------------
# diffusers path -> LDM / SGM path (kohya-ss sd-scripts library/sdxl_model_util.py
# make_unet_conversion_map; diffusers loaders/single_file_utils.py convert_ldm_unet_checkpoint)
# ----------------------------------------------------------------------------------------------

RESNET_LDM = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
              "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}


def ldm_path(path, cfg):
    L = cfg["layers_per_block"]
    parts = path.split(".")
    fixed = {"conv_in": "input_blocks.0.0", "conv_out": "out.2", "conv_norm_out": "out.0",
             "time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
             "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}
    if path in fixed:
        return fixed[path]

    def inner(kind, rest):
        if kind == "resnets":
            return ".".join([RESNET_LDM[rest[0]]] + rest[1:])
        return ".".join(rest)

    if parts[0] == "down_blocks":
        i, kind, j = int(parts[1]), parts[2], int(parts[3])
        if kind == "downsamplers":
            return f"input_blocks.{(L + 1) * (i + 1)}.0.op"
        slot = "0" if kind == "resnets" else "1"
        return f"input_blocks.{(L + 1) * i + j + 1}.{slot}." + inner(kind, parts[4:])
    if parts[0] == "mid_block":
        kind, j = parts[1], int(parts[2])
        block = 2 * j if kind == "resnets" else 1
        return f"middle_block.{block}." + inner(kind, parts[3:])
    if parts[0] == "up_blocks":
        i, kind, j = int(parts[1]), parts[2], int(parts[3])
        if kind == "upsamplers":
            attention = cfg["up_block_types"][i] == "CrossAttnUpBlock2D"
            return f"output_blocks.{(L + 1) * i + L}.{2 if attention else 1}.conv"
        slot = "0" if kind == "resnets" else "1"
        return f"output_blocks.{(L + 1) * i + j}.{slot}." + inner(kind, parts[4:])
    raise ValueError(path)


# ----------------------------------------------------------------------------------------------
# Delta formulas in float64
# ----------------------------------------------------------------------------------------------

def rebuild_conventional(up, down, shape, dyn=None):
    """A1111 lyco_helpers.py rebuild_conventional."""
    up = up.reshape(up.shape[0], -1)
    down = down.reshape(down.shape[0], -1)
    if dyn is not None:
        up = up[:, :dyn]
        down = down[:dyn, :]
    return (up @ down).reshape(shape)


def rebuild_cp(up, down, mid):
    """A1111 lyco_helpers.py rebuild_cp_decomposition."""
    up = up.reshape(up.shape[0], -1)
    down = down.reshape(down.shape[0], -1)
    return torch.einsum("n m k l, i n, m j -> i j k l", mid, up, down)


def make_weight_cp(t, wa, wb):
    """A1111 lyco_helpers.py make_weight_cp."""
    temp = torch.einsum("i j k l, j r -> i r k l", t, wb)
    return torch.einsum("i j k l, i r -> r j k l", temp, wa)


def make_kron(shape, w1, w2):
    """A1111 network_lokr.py make_kron."""
    if len(w2.shape) == 4:
        w1 = w1.unsqueeze(2).unsqueeze(2)
    return torch.kron(w1, w2.contiguous()).reshape(shape)


def delta_of(mod, weight_shape, dyn=None):
    """(delta, scale) of one module, A1111's calc_updown before finalize_updown."""
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in mod["values"].items()}
    kind = mod["kind"]
    alpha = float(t["alpha"]) if "alpha" in t else None
    if kind == "lora":
        up, down = t["up"], t["down"]
        r = down.shape[0]
        if "mid" in t:
            d = rebuild_cp(up, down, t["mid"])
        else:
            d = rebuild_conventional(up, down, [up.shape[0], -1], dyn)
        return d.reshape(weight_shape), (alpha / r if alpha is not None else 1.0)
    if kind == "loha":
        w1a, w1b, w2a, w2b = t["w1a"], t["w1b"], t["w2a"], t["w2b"]
        if "t1" in t:
            d1 = make_weight_cp(t["t1"], w1a, w1b)
            d2 = make_weight_cp(t["t2"], w2a, w2b)
        else:
            d1 = rebuild_conventional(w1a, w1b, [w1a.shape[0], -1])
            d2 = rebuild_conventional(w2a, w2b, [w2a.shape[0], -1])
        return (d1 * d2).reshape(weight_shape), (alpha / w1b.shape[0] if alpha is not None else 1.0)
    if kind == "lokr":
        dim = None
        if "w1" in t:
            w1 = t["w1"]
        else:
            w1 = t["w1a"] @ t["w1b"]
            dim = t["w1b"].shape[0]
        if "w2" in t:
            w2 = t["w2"]
        elif "t2" in t:
            w2 = make_weight_cp(t["t2"], t["w2a"], t["w2b"])
            dim = t["w2b"].shape[0]
        else:
            w2 = t["w2a"] @ t["w2b"]
            dim = t["w2b"].shape[0]
        scale = alpha / dim if (alpha is not None and dim is not None) else 1.0
        return make_kron(weight_shape, w1, w2), scale
    if kind in ("full", "norm"):
        return t["diff"].reshape(weight_shape), 1.0
    raise ValueError(kind)


def axis_norm(v, axis):
    """L2 norm per output row (axis 0) or per input channel (axis 1), broadcastable to v."""
    if axis == 0:
        return v.reshape(v.shape[0], -1).norm(dim=1).reshape(v.shape[0], *[1] * (v.dim() - 1))
    return (v.transpose(0, 1).reshape(v.shape[1], -1).norm(dim=1, keepdim=True)
            .reshape(v.shape[1], *[1] * (v.dim() - 1)).transpose(0, 1))


FLT_EPS = float(np.finfo(np.float32).eps)


def apply_dora(convention, w, d, scale, mult, m):
    """W after a DoRA module. w, d: float64 [out, in, ...]; m: the dora_scale (or PEFT magnitude) tensor."""
    if convention == "peft":
        # peft tuners/lora/dora.py: magnitude [out] over the norm of W + scaling * delta per output row;
        # diffusers' fuse_lora(lora_scale) scales `scaling`.
        v = w + (mult * scale) * d
        return v * (m.reshape(-1, *[1] * (w.dim() - 1)) / axis_norm(v, 0))
    # dora_scale is [out, 1, ...] (LyCORIS wd_on_out) or [1, in, ...]; torch broadcasting does the rest.
    out_axis = m.shape[0] == w.shape[0] and m.numel() == w.shape[0]
    v = w + scale * d
    if convention == "lycoris":
        # LyCORIS lycoris/modules/locon.py get_merged_weight / apply_weight_decompose (wd_on_out from the shape)
        k = m / (axis_norm(v, 0 if out_axis else 1) + FLT_EPS)
        if mult != 1:
            k = mult * (k - 1) + 1
        return v * k
    if convention == "comfyui":
        # ComfyUI comfy/weight_adapter/base.py weight_decompose
        n = axis_norm(w, 0) if out_axis else axis_norm(v, 1)
        calc = v * (m / (n + FLT_EPS))
        if mult != 1.0:
            return w + mult * (calc - w)
        return calc
    if convention == "a1111":
        # A1111 network.py apply_weight_decompose (norm per input channel, no eps), then W + mult * updown
        updown = v * (m / axis_norm(v, 1)) - w
        return w + mult * updown
    raise ValueError(convention)


# ----------------------------------------------------------------------------------------------
# LoRA files
# ----------------------------------------------------------------------------------------------

class Gen:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def t(self, shape, std=0.3, dtype=np.float32):
        x = (torch.randn(shape, generator=self.g, dtype=torch.float64) * std).numpy().astype(np.float32)
        return x.astype(dtype)

    def pos(self, shape, dtype=np.float32):
        x = (torch.rand(shape, generator=self.g, dtype=torch.float64) * 0.5 + 0.75).numpy().astype(np.float32)
        return x.astype(dtype)


def underscored(path):
    return path.replace(".", "_")


class LoraBuilder:
    """Collects modules: each a target (component, module path), a kind and its tensors by role,
    written under the file's key spelling."""

    def __init__(self, model, seed):
        self.model = model
        self.shapes = module_shapes(model)
        self.gen = Gen(seed)
        self.modules = []
        self.tensors = {}
        self.extra_keys = []

    def shape(self, comp, path):
        return self.shapes[comp][path]

    def kohya_stem(self, comp, path, sgm=False):
        if comp == "unet":
            p = ldm_path(path, MODELS[self.model]["unet"]) if sgm else path
            return "lora_unet_" + underscored(p)
        te = {"text_encoder": "lora_te1_" if "text_encoder_2" in self.shapes else "lora_te_",
              "text_encoder_2": "lora_te2_"}[comp]
        return te + underscored(path)

    def add(self, comp, path, kind, keys, values, diffusers=True):
        """keys: role -> file key; values: role -> numpy array as stored (its dtype is the file's)."""
        for role, key in keys.items():
            self.tensors[key] = values[role]
        self.modules.append({"comp": comp, "path": path, "kind": kind, "keys": keys,
                             "values": {r: np.asarray(v, dtype=np.float32) for r, v in values.items()},
                             "diffusers": diffusers})

    # --- kohya LoRA / LoCon ---
    def lora(self, comp, path, rank, alpha=None, dtype=np.float16, sgm=False, mid=False, conv_down_kernel=True,
             stem=None, dora=None, style="kohya", diffusers=True):
        shape = self.shape(comp, path)
        out, cin = shape[0], shape[1]
        k = shape[2:] if len(shape) == 4 else []
        g = self.gen
        values = {}
        if mid:
            values["mid"] = g.t([rank, rank] + k, dtype=dtype)
            values["down"] = g.t([rank, cin, 1, 1], dtype=dtype)
            values["up"] = g.t([out, rank, 1, 1], dtype=dtype)
        elif len(shape) == 4 or conv_down_kernel == "4d":
            kk = k if (len(shape) == 4 and conv_down_kernel is True) else [1, 1]
            values["down"] = g.t([rank, cin] + kk, dtype=dtype)
            values["up"] = g.t([out, rank, 1, 1], dtype=dtype)
        else:
            values["down"] = g.t([rank, cin], dtype=dtype)
            values["up"] = g.t([out, rank], dtype=dtype)
        if alpha is not None:
            values["alpha"] = np.array(alpha, dtype=dtype)
        if dora is not None:
            values["dora"] = g.pos(dora(out, cin, len(shape)), dtype=dtype)
        stem = stem or self.kohya_stem(comp, path, sgm)
        if style == "kohya":
            names = {"up": ".lora_up.weight", "down": ".lora_down.weight", "mid": ".lora_mid.weight",
                     "alpha": ".alpha", "dora": ".dora_scale"}
        elif style == "peft":
            names = {"up": ".lora_B.weight", "down": ".lora_A.weight", "dora": ".lora_magnitude_vector"}
        elif style == "processor":
            names = {"up": "_lora.up.weight", "down": "_lora.down.weight"}
        elif style == "dotted":
            names = {"up": ".lora.up.weight", "down": ".lora.down.weight"}
        elif style == "linear_layer":
            names = {"up": ".lora_linear_layer.up.weight", "down": ".lora_linear_layer.down.weight"}
        else:
            raise ValueError(style)
        keys = {r: stem + names[r] for r in values}
        self.add(comp, path, "lora", keys, values, diffusers=diffusers and not mid)

    def loha(self, comp, path, rank, alpha, tucker=False, dtype=np.float32):
        shape = self.shape(comp, path)
        out, cin = shape[0], shape[1]
        k = shape[2:]
        g = self.gen
        if tucker:
            values = {"w1a": g.t([rank, out]), "w1b": g.t([rank, cin]), "t1": g.t([rank, rank] + k),
                      "w2a": g.t([rank, out]), "w2b": g.t([rank, cin]), "t2": g.t([rank, rank] + k)}
        else:
            flat = int(np.prod(shape[1:]))
            values = {"w1a": g.t([out, rank]), "w1b": g.t([rank, flat]),
                      "w2a": g.t([out, rank]), "w2b": g.t([rank, flat])}
        values = {r: v.astype(dtype) for r, v in values.items()}
        values["alpha"] = np.array(alpha, dtype=np.float32)
        stem = self.kohya_stem(comp, path)
        names = {"w1a": ".hada_w1_a", "w1b": ".hada_w1_b", "w2a": ".hada_w2_a", "w2b": ".hada_w2_b",
                 "t1": ".hada_t1", "t2": ".hada_t2", "alpha": ".alpha"}
        self.add(comp, path, "loha", {r: stem + names[r] for r in values}, values, diffusers=False)

    def lokr(self, comp, path, factors, alpha=None):
        """factors: role -> shape (w1 | w1a+w1b, w2 | w2a+w2b [+ t2])."""
        g = self.gen
        values = {r: g.t(s) for r, s in factors.items()}
        if alpha is not None:
            values["alpha"] = np.array(alpha, dtype=np.float32)
        stem = self.kohya_stem(comp, path)
        names = {"w1": ".lokr_w1", "w1a": ".lokr_w1_a", "w1b": ".lokr_w1_b", "w2": ".lokr_w2",
                 "w2a": ".lokr_w2_a", "w2b": ".lokr_w2_b", "t2": ".lokr_t2", "alpha": ".alpha"}
        self.add(comp, path, "lokr", {r: stem + names[r] for r in values}, values, diffusers=False)

    def full(self, comp, path, bias=True, norm=False):
        shape = self.shape(comp, path)
        g = self.gen
        values = {"diff": g.t(shape, std=0.05)}
        if bias:
            values["diff_b"] = g.t([shape[0]], std=0.05)
        stem = self.kohya_stem(comp, path)
        names = {"diff": ".w_norm" if norm else ".diff", "diff_b": ".b_norm" if norm else ".diff_b"}
        self.add(comp, path, "norm" if norm else "full", {r: stem + names[r] for r in values}, values,
                 diffusers=False)

    def unknown(self, key, shape, dtype=np.float16):
        self.tensors[key] = self.gen.t(shape, dtype=dtype)
        self.extra_keys.append(key)


def dora_out(out, cin, ndim):
    return [out] + [1] * (ndim - 1)


def dora_in(out, cin, ndim):
    return [1, cin] + [1] * (ndim - 2)


def tb(prefix, t=0):
    return f"{prefix}.transformer_blocks.{t}"


def build_loras():
    """name -> (builder, file name, metadata)."""
    loras = {}

    # SD 1.x, kohya LoRA: attention, feed-forward, 1x1-conv projections, text encoder; alphas present
    # (F16 and F32), absent (scale 1) and equal to the rank; two keys that name nothing.
    b = LoraBuilder("sd1", 101)
    a0 = "down_blocks.0.attentions.0"
    b.lora("unet", tb(a0) + ".attn1.to_q", 4, alpha=2.0)
    b.lora("unet", tb(a0) + ".attn1.to_k", 4)
    b.lora("unet", tb(a0) + ".attn1.to_v", 2, alpha=2.0, dtype=np.float32)
    b.lora("unet", tb(a0) + ".attn1.to_out.0", 4, alpha=1.0)
    b.lora("unet", tb(a0) + ".attn2.to_k", 4, alpha=8.0)
    b.lora("unet", tb(a0) + ".ff.net.0.proj", 4, alpha=4.0)
    b.lora("unet", tb(a0) + ".ff.net.2", 4, alpha=4.0)
    b.lora("unet", a0 + ".proj_in", 2, alpha=1.0)
    b.lora("unet", a0 + ".proj_out", 2, alpha=1.0)
    b.lora("unet", tb("mid_block.attentions.0") + ".attn2.to_v", 4, alpha=2.0)
    b.lora("unet", tb("up_blocks.1.attentions.1") + ".attn1.to_q", 4, alpha=2.0)
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.q_proj", 4, alpha=2.0)
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.k_proj", 4, alpha=2.0)
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.out_proj", 4, alpha=2.0)
    b.lora("text_encoder", "text_model.encoder.layers.1.mlp.fc1", 4, alpha=2.0)
    b.lora("text_encoder", "text_model.encoder.layers.1.mlp.fc2", 4, alpha=2.0)
    b.unknown("lora_unet_down_blocks_5_attentions_0_proj_in.lora_down.weight", [2, 16, 1, 1])
    b.unknown("lora_unet_down_blocks_5_attentions_0_proj_in.lora_up.weight", [16, 2, 1, 1])
    b.unknown("lora_te_text_model_encoder_layers_7_mlp_fc1.alpha", [])
    loras["sd1_kohya"] = (b, "sd1_kohya.safetensors",
                          {"ss_network_module": "networks.lora", "ss_base_model_version": "sd_v1",
                           "ss_output_name": "sd1_kohya_alias"})

    # The same kind of file saved by torch.save inside a "state_dict" wrapper (.pt).
    b = LoraBuilder("sd1", 102)
    b.lora("unet", tb(a0) + ".attn2.to_q", 4, alpha=2.0, dtype=np.float32)
    b.lora("text_encoder", "text_model.encoder.layers.1.self_attn.v_proj", 2, alpha=1.0, dtype=np.float32)
    loras["sd1_wrapped"] = (b, "sd1_kohya_wrapped.pt", None)

    # SD 1.x LoCon (kohya conv_dim / LyCORIS): 3x3 convs with a 3x3 down, the 1x1 shortcut, the time
    # projection, the down- and upsampler convs, and the Tucker form (lora_mid 3x3, 1x1 down and up).
    b = LoraBuilder("sd1", 103)
    b.lora("unet", "down_blocks.0.resnets.0.conv1", 4, alpha=2.0)
    b.lora("unet", "down_blocks.0.resnets.0.time_emb_proj", 4, alpha=4.0)
    b.lora("unet", "down_blocks.1.resnets.0.conv_shortcut", 4, alpha=2.0)
    b.lora("unet", "down_blocks.0.downsamplers.0.conv", 2, alpha=1.0)
    b.lora("unet", "up_blocks.0.upsamplers.0.conv", 4, alpha=4.0, dtype=np.float32)
    b.lora("unet", "down_blocks.0.resnets.0.conv2", 3, alpha=1.5, mid=True)
    b.lora("unet", "conv_in", 2, alpha=2.0)
    loras["sd1_locon"] = (b, "sd1_locon.safetensors", {"ss_network_module": "lycoris.kohya"})

    # SD 1.x LoHa: Linear, 3x3 conv (flattened w1b/w2b), 3x3 conv in Tucker form, text encoder.
    b = LoraBuilder("sd1", 104)
    b.loha("unet", tb(a0) + ".attn1.to_q", 4, alpha=2.0)
    b.loha("unet", "down_blocks.0.resnets.0.conv1", 2, alpha=1.0, dtype=np.float16)
    b.loha("unet", "up_blocks.1.resnets.1.conv2", 3, alpha=3.0, tucker=True)
    b.loha("text_encoder", "text_model.encoder.layers.0.mlp.fc1", 4, alpha=8.0)
    loras["sd1_loha"] = (b, "sd1_loha.safetensors", None)

    # SD 1.x LoKr: full w1 with a low-rank w2 (scale alpha / rank of w2), low-rank w1 with a full w2
    # (alpha / rank of w1), both full (scale 1 although alpha is there), both low-rank (w2's rank), a 3x3
    # conv whose w2 is Tucker (t2) with w1 broadcast over the kernel.
    b = LoraBuilder("sd1", 105)
    b.lokr("unet", tb(a0) + ".attn1.to_q", {"w1": [4, 4], "w2a": [4, 2], "w2b": [2, 4]}, alpha=1.0)
    b.lokr("unet", tb(a0) + ".ff.net.0.proj", {"w1a": [8, 2], "w1b": [2, 2], "w2": [16, 8]}, alpha=3.0)
    b.lokr("unet", tb(a0) + ".attn2.to_k", {"w1": [2, 4], "w2": [8, 8]}, alpha=5.0)
    b.lokr("text_encoder", "text_model.encoder.layers.1.self_attn.q_proj",
           {"w1a": [4, 2], "w1b": [2, 4], "w2a": [8, 3], "w2b": [3, 8]}, alpha=6.0)
    b.lokr("unet", "down_blocks.0.resnets.0.conv1", {"w1": [2, 2], "w2a": [3, 8], "w2b": [3, 8], "t2": [3, 3, 3, 3]},
           alpha=1.5)
    loras["sd1_lokr"] = (b, "sd1_lokr.safetensors", None)

    # Full weight / bias differences and a norm layer's w_norm / b_norm.
    b = LoraBuilder("sd1", 106)
    b.full("unet", tb(a0) + ".attn1.to_out.0", bias=True)
    b.full("unet", tb(a0) + ".norm1", bias=True, norm=True)
    b.full("text_encoder", "text_model.encoder.layers.0.mlp.fc2", bias=False)
    loras["sd1_full"] = (b, "sd1_full.safetensors", None)

    # DoRA (LyCORIS dora_scale): output-axis [out, 1] and input-axis [1, in] magnitudes, a 3x3 conv, text encoder.
    b = LoraBuilder("sd1", 107)
    b.lora("unet", tb(a0) + ".attn1.to_q", 4, alpha=2.0, dtype=np.float32, dora=dora_out)
    b.lora("unet", tb(a0) + ".attn2.to_v", 4, alpha=4.0, dtype=np.float32, dora=dora_in, diffusers=False)
    b.lora("unet", "down_blocks.0.resnets.0.conv1", 2, alpha=1.0, dtype=np.float32, dora=dora_out)
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.q_proj", 4, alpha=4.0, dtype=np.float32,
           dora=dora_in)
    loras["sd1_dora"] = (b, "sd1_dora.safetensors", None)

    # diffusers / PEFT keys: lora_A / lora_B, no alpha (scale 1), 1x1 and 3x3 convs, a PEFT DoRA magnitude.
    b = LoraBuilder("sd1", 108)
    b.lora("unet", tb(a0) + ".attn1.to_q", 4, dtype=np.float32, stem="unet." + tb(a0) + ".attn1.to_q", style="peft")
    b.lora("unet", tb(a0) + ".attn2.to_out.0", 4, dtype=np.float32, stem="unet." + tb(a0) + ".attn2.to_out.0",
           style="peft")
    b.lora("unet", a0 + ".proj_in", 2, dtype=np.float32, stem="unet." + a0 + ".proj_in", style="peft")
    b.lora("unet", "down_blocks.0.resnets.0.conv1", 2, dtype=np.float32,
           stem="unet.down_blocks.0.resnets.0.conv1", style="peft")
    b.lora("unet", tb(a0) + ".ff.net.2", 4, dtype=np.float32, stem="unet." + tb(a0) + ".ff.net.2", style="peft",
           dora=lambda o, i, n: [o])
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.v_proj", 4, dtype=np.float32,
           stem="text_encoder.text_model.encoder.layers.0.self_attn.v_proj", style="peft")
    loras["sd1_peft"] = (b, "sd1_peft.safetensors", {"format": "pt"})

    # diffusers' attention-processor form (unet.save_attn_procs / loaders: to_q_lora.down, to_out_lora,
    # lora_linear_layer, .lora.down), no alpha.
    b = LoraBuilder("sd1", 109)
    blk = "unet." + tb(a0)
    b.lora("unet", tb(a0) + ".attn1.to_q", 4, dtype=np.float32, stem=blk + ".attn1.processor.to_q", style="processor")
    b.lora("unet", tb(a0) + ".attn2.to_out.0", 4, dtype=np.float32, stem=blk + ".attn2.processor.to_out",
           style="processor")
    b.lora("unet", a0 + ".proj_out", 2, dtype=np.float32, stem="unet." + a0 + ".proj_out", style="dotted")
    b.lora("text_encoder", "text_model.encoder.layers.1.self_attn.k_proj", 4, dtype=np.float32,
           stem="text_encoder.text_model.encoder.layers.1.self_attn.to_k", style="processor")
    b.lora("text_encoder", "text_model.encoder.layers.0.mlp.fc2", 4, dtype=np.float32,
           stem="text_encoder.text_model.encoder.layers.0.mlp.fc2", style="linear_layer")
    loras["sd1_attnproc"] = (b, "sd1_attnproc.safetensors", None)

    # SD 2.x kohya: Linear projections (one with an SD1-style 1x1 4-D LoRA, which is reshaped), the 48-wide
    # context and text encoder.
    b = LoraBuilder("sd2", 110)
    b.lora("unet", a0 + ".proj_in", 4, alpha=2.0)
    b.lora("unet", a0 + ".proj_out", 2, alpha=2.0, conv_down_kernel="4d", diffusers=False)
    b.lora("unet", tb(a0) + ".attn2.to_k", 4, alpha=4.0)
    b.lora("unet", tb("up_blocks.1.attentions.0") + ".ff.net.0.proj", 4, alpha=4.0)
    b.lora("text_encoder", "text_model.encoder.layers.1.self_attn.v_proj", 4, alpha=1.0)
    loras["sd2_kohya"] = (b, "sd2_kohya.safetensors", {"ss_v2": "True", "ss_base_model_version": "sd_v2"})

    # SDXL kohya: SGM UNet names (input_blocks / middle_block / output_blocks, in_layers / out_layers /
    # emb_layers / skip_connection / op / conv), both text encoders (lora_te1_ / lora_te2_).
    b = LoraBuilder("sdxl", 111)
    b.lora("unet", tb("down_blocks.1.attentions.0") + ".attn1.to_q", 4, alpha=2.0, sgm=True)
    b.lora("unet", tb("down_blocks.2.attentions.1", 1) + ".attn2.to_k", 4, alpha=2.0, sgm=True)
    b.lora("unet", "mid_block.attentions.0.proj_in", 4, alpha=4.0, sgm=True)
    b.lora("unet", tb("up_blocks.0.attentions.1", 1) + ".ff.net.2", 4, alpha=2.0, sgm=True)
    b.lora("unet", "down_blocks.0.resnets.0.conv1", 2, alpha=1.0, sgm=True)
    b.lora("unet", "up_blocks.1.resnets.0.conv_shortcut", 2, alpha=2.0, sgm=True)
    b.lora("unet", "down_blocks.0.downsamplers.0.conv", 2, alpha=2.0, sgm=True)
    b.lora("unet", "up_blocks.0.upsamplers.0.conv", 2, alpha=1.0, sgm=True)
    b.lora("unet", "mid_block.resnets.0.time_emb_proj", 4, alpha=4.0, sgm=True)
    b.lora("unet", "up_blocks.2.resnets.2.conv2", 2, alpha=2.0, sgm=True)
    b.lora("text_encoder", "text_model.encoder.layers.0.self_attn.q_proj", 4, alpha=2.0)
    b.lora("text_encoder_2", "text_model.encoder.layers.1.mlp.fc1", 4, alpha=2.0)
    b.lora("text_encoder_2", "text_model.encoder.layers.0.self_attn.out_proj", 2, alpha=1.0)
    loras["sdxl_kohya"] = (b, "sdxl_kohya.safetensors",
                           {"ss_base_model_version": "sdxl_base_v1-0", "sshs_model_hash": "0123456789abcdef" * 4})

    # SDXL diffusers / PEFT: unet., text_encoder., text_encoder_2. prefixes.
    b = LoraBuilder("sdxl", 112)
    blk = tb("down_blocks.2.attentions.0", 1)
    b.lora("unet", blk + ".attn2.to_v", 4, dtype=np.float32, stem="unet." + blk + ".attn2.to_v", style="peft")
    b.lora("text_encoder", "text_model.encoder.layers.1.self_attn.out_proj", 4, dtype=np.float32,
           stem="text_encoder.text_model.encoder.layers.1.self_attn.out_proj", style="peft")
    b.lora("text_encoder_2", "text_model.encoder.layers.0.self_attn.k_proj", 4, dtype=np.float32,
           stem="text_encoder_2.text_model.encoder.layers.0.self_attn.k_proj", style="peft")
    loras["sdxl_peft"] = (b, "sdxl_peft.safetensors", None)
    return loras


# The merges to check: LoRAs applied in order, each with its te / unet multipliers (A1111 <lora:name:te:unet>).
CASES = [
    {"name": "sd1_kohya", "model": "sd1", "loras": [["sd1_kohya", 0.75, -0.5]]},
    {"name": "sd1_kohya_dyn", "model": "sd1", "loras": [["sd1_kohya", 1.0, 1.0]], "dyn": 2, "diffusers": False},
    {"name": "sd1_wrapped", "model": "sd1", "loras": [["sd1_wrapped", 1.0, 0.5]], "diffusers": False},
    {"name": "sd1_locon", "model": "sd1", "loras": [["sd1_locon", 1.0, 0.8]]},
    {"name": "sd1_loha", "model": "sd1", "loras": [["sd1_loha", 0.5, 1.25]], "diffusers": False},
    {"name": "sd1_lokr", "model": "sd1", "loras": [["sd1_lokr", 1.5, 0.7]], "diffusers": False},
    {"name": "sd1_full", "model": "sd1", "loras": [["sd1_full", 1.2, 0.8]], "diffusers": False},
    {"name": "sd1_dora_lycoris", "model": "sd1", "loras": [["sd1_dora", 1.0, 0.6]], "dora": "lycoris"},
    {"name": "sd1_dora_a1111", "model": "sd1", "loras": [["sd1_dora", 1.0, 0.6]], "dora": "a1111",
     "diffusers": False},
    {"name": "sd1_dora_comfyui", "model": "sd1", "loras": [["sd1_dora", 1.0, 0.6]], "dora": "comfyui",
     "diffusers": False},
    {"name": "sd1_peft", "model": "sd1", "loras": [["sd1_peft", 0.9, 1.1]]},
    {"name": "sd1_attnproc", "model": "sd1", "loras": [["sd1_attnproc", 1.0, 0.5]]},
    {"name": "sd1_stack", "model": "sd1", "loras": [["sd1_kohya", 1.0, 1.0], ["sd1_lokr", 0.5, 0.5],
                                                   ["sd1_dora", 1.0, 1.0]], "diffusers": False},
    {"name": "sd2_kohya", "model": "sd2", "loras": [["sd2_kohya", 0.6, 1.0]]},
    {"name": "sdxl_kohya", "model": "sdxl", "loras": [["sdxl_kohya", 0.5, 1.0]]},
    {"name": "sdxl_peft", "model": "sdxl", "loras": [["sdxl_peft", 1.0, 0.8]]},
]


def expected_merge(case, loras):
    """(component, tensor) -> float32 merged values, applying the case's LoRAs in order."""
    state = {}  # (component, tensor name) -> float64 torch tensor, float32-exact after each LoRA
    shapes = module_shapes(case["model"])
    convention = case.get("dora", "lycoris")
    for lora_name, te_mult, unet_mult in case["loras"]:
        b = loras[lora_name][0]
        for mod in b.modules:
            comp, path = mod["comp"], mod["path"]
            mult = unet_mult if comp == "unet" else te_mult
            wname = path + ".weight"
            wshape = shapes[comp][path]
            key = (comp, wname)
            if key not in state:
                state[key] = torch.from_numpy(base_tensor(comp, wname, wshape).astype(np.float64))
            w = state[key]
            d, scale = delta_of(mod, wshape, case.get("dyn") if mod["kind"] == "lora" else None)
            vals = mod["values"]
            if "dora" in vals:
                m = torch.from_numpy(vals["dora"].astype(np.float64))
                conv = "peft" if mod["keys"]["dora"].endswith("lora_magnitude_vector") else convention
                state[key] = apply_dora(conv, w, d, scale, mult, m)
            else:
                state[key] = w + d * (mult * scale)
            if "diff_b" in vals:
                bname = path + ".bias"
                bkey = (comp, bname)
                if bkey not in state:
                    state[bkey] = torch.from_numpy(base_tensor(comp, bname, [wshape[0]]).astype(np.float64))
                state[bkey] = state[bkey] + torch.from_numpy(vals["diff_b"].astype(np.float64)) * mult
        for key in state:  # the model holds float32 between LoRAs
            state[key] = state[key].float().double()
    return {k: v.float().numpy() for k, v in state.items()}


def file_hashes(path):
    data = open(path, "rb").read()
    full = hashlib.sha256(data).hexdigest()
    addnet = None
    if path.endswith(".safetensors"):
        n = int.from_bytes(data[:8], "little")
        addnet = hashlib.sha256(data[8 + n:]).hexdigest()  # A1111 modules/hashes.py addnet_hash_safetensors
    return full, addnet


def write_all(outdir):
    os.makedirs(os.path.join(outdir, "expected"), exist_ok=True)
    loras = build_loras()
    files = {}
    for name, (b, fname, metadata) in loras.items():
        path = os.path.join(outdir, fname)
        if fname.endswith(".pt"):
            sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sorted(b.tensors.items())}
            torch.save({"state_dict": sd}, path)
        else:
            write_safetensors(path, dict(sorted(b.tensors.items())), metadata)
        full, addnet = file_hashes(path)
        files[name] = {"file": fname, "sha256": full, "addnet": addnet, "metadata": metadata or {},
                       "modules": len(b.modules), "unmatched": sorted(b.extra_keys)}
    cases = []
    for case in CASES:
        merged = expected_merge(case, loras)
        out = {f"{c}/{n}": v for (c, n), v in sorted(merged.items())}
        write_safetensors(os.path.join(outdir, "expected", case["name"] + ".safetensors"), out)
        cases.append(dict(case, expected="expected/" + case["name"] + ".safetensors",
                          tensors=sorted(out.keys()), dora=case.get("dora", "lycoris")))
        print(f"{case['name']}: {len(out)} tensors")
    doc = {"models": MODELS, "loras": files, "cases": cases,
           "base_pattern": "((fnv1a32('<component>/<tensor>') + i * 2654435761) mod 2^32 / 2^32 - 0.5) / 4"}
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(r, x)) for r, _, fs in os.walk(outdir) for x in fs)
    print(f"{outdir}: {total} bytes")


# ----------------------------------------------------------------------------------------------
# --check-diffusers
# ----------------------------------------------------------------------------------------------

def kohya_stems(model):
    """sd-scripts networks/lora.py create_modules over the tiny model: every Linear / Conv2d below a
    Transformer2DModel, ResnetBlock2D, Downsample2D or Upsample2D (conv_dim on), and below CLIPAttention /
    CLIPMLP; SDXL UNet names in SGM form. -> {kohya stem: (component, diffusers module path)}."""
    shapes = module_shapes(model)
    sgm = model == "sdxl"
    out = {}
    cfg = MODELS[model]["unet"]
    for path, shape in shapes["unet"].items():
        if len(shape) == 1 or not (".attentions." in path or ".resnets." in path or "samplers." in path):
            continue
        if ".attentions." in path and path.split(".")[-1] == "norm":
            continue
        p = ldm_path(path, cfg) if sgm else path
        out["lora_unet_" + underscored(p)] = ("unet", path)
    for comp in ("text_encoder", "text_encoder_2"):
        if comp not in shapes:
            continue
        prefix = {"text_encoder": "lora_te1_" if sgm else "lora_te_", "text_encoder_2": "lora_te2_"}[comp]
        for path, shape in shapes[comp].items():
            if len(shape) == 2:
                out[prefix + underscored(path)] = (comp, path)
    return out


def diffusers_module_of(key):
    """A converted diffusers key's module: attention-processor and PEFT spellings removed."""
    comp, rest = key.split(".", 1)
    for suffix in (".lora.down.weight", "_lora.down.weight", ".lora_linear_layer.down.weight", ".lora_A.weight"):
        if rest.endswith(suffix):
            rest = rest[: -len(suffix)]
            break
    rest = rest.replace(".processor.", ".")
    for a, b in (("to_out", "to_out.0"),):
        if rest.endswith("." + a):
            rest = rest + ".0"
    if comp.startswith("text_encoder"):
        for a, b in (("to_q", "q_proj"), ("to_k", "k_proj"), ("to_v", "v_proj"), ("to_out.0", "out_proj")):
            if rest.endswith(".self_attn." + a):
                rest = rest[: -len(a)] + b
    return comp, rest


ATTENTION_PROJECTIONS = (".to_q", ".to_k", ".to_v", ".to_out.0")


def known_difference(case, key, builders):
    """Why diffusers' merge of a tensor differs from the kohya / A1111 / LyCORIS semantics, where the
    cause is known; "unexplained" otherwise."""
    comp, tensor = key.split("/", 1)
    path = tensor[: -len(".weight")]
    for lora, _, _ in case["loras"]:
        b = builders[lora][0]
        alphas = [float(m["values"]["alpha"]) for m in b.modules if "alpha" in m["values"]]
        common = max(set(alphas), key=alphas.count) if alphas else None
        for m in b.modules:
            if (m["comp"], m["path"]) != (comp, path):
                continue
            if "dora" in m["values"] and m["keys"]["dora"].endswith(".dora_scale"):
                return "dora_scale is not applied: diffusers merges the module as plain LoRA"
            if "dora" not in m["values"] and any("dora" in o["values"] for o in b.modules):
                return ("diffusers sets use_dora for the whole adapter when any module has a lora_magnitude_vector "
                        "(utils/peft_utils.py get_peft_kwargs): this plain LoRA module gets PEFT's initial magnitude "
                        "|W| and is normalised")
            kohya = m["keys"]["down"].endswith(".lora_down.weight")
            alpha = float(m["values"]["alpha"]) if "alpha" in m["values"] else None
            if kohya and path.endswith(ATTENTION_PROJECTIONS) and alpha != common:
                return (f"diffusers gives this attention projection the file's most common alpha {common}, not its own "
                        f"({alpha}): loaders/lora_conversion_utils.py _get_alpha_name splits at '.lora.', which the "
                        "to_q_lora / to_out_lora names lack")
    return "unexplained"


def check_diffusers(outdir, checkdir):
    import diffusers
    from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline, UNet2DConditionModel
    from diffusers.loaders.lora_conversion_utils import (_convert_non_diffusers_lora_to_diffusers,
                                                         _maybe_map_sgm_blocks_to_diffusers)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    os.makedirs(checkdir, exist_ok=True)
    doc = json.load(open(os.path.join(outdir, "cases.json")))
    report = {"diffusers": diffusers.__version__, "cases": {}, "conversion": {}}

    class UnetConfig:  # what _maybe_map_sgm_blocks_to_diffusers reads of the UNet's config
        layers_per_block = MODELS["sdxl"]["unet"]["layers_per_block"]

    # 1. key conversion of full synthetic kohya key sets
    conversion = {}
    for model in MODELS:
        stems = kohya_stems(model)
        sd = {}
        for stem in stems:
            sd[stem + ".lora_down.weight"] = torch.zeros(1, 1)
            sd[stem + ".lora_up.weight"] = torch.zeros(1, 1)
            sd[stem + ".alpha"] = torch.tensor(1.0)
        if model == "sdxl":
            sd = _maybe_map_sgm_blocks_to_diffusers(sd, UnetConfig)
        converted, _ = _convert_non_diffusers_lora_to_diffusers(sd)
        # recover which kohya stem each converted key came from: convert stem by stem
        result, bad = {}, []
        for stem, (comp, path) in stems.items():
            one = {stem + ".lora_down.weight": torch.zeros(1, 1), stem + ".lora_up.weight": torch.zeros(1, 1)}
            if model == "sdxl" and comp == "unet":
                one = _maybe_map_sgm_blocks_to_diffusers(one, UnetConfig)
            conv, _ = _convert_non_diffusers_lora_to_diffusers(one)
            down = [k for k in conv if ".down." in k or "lora_A" in k]
            c, m = diffusers_module_of(down[0])
            comp_name = {"unet": "unet", "text_encoder": "text_encoder", "text_encoder_2": "text_encoder_2"}[c]
            result[stem] = [comp_name, m]
            if (comp_name, m) != (comp, path):
                bad.append(stem)
        conversion[model] = result
        report["conversion"][model] = {"stems": len(stems), "converted_keys": len(converted), "differ": bad}
    with open(os.path.join(checkdir, "kohya_to_diffusers.json"), "w") as f:
        json.dump(conversion, f, indent=1, sort_keys=True)
        f.write("\n")

    # 2. merged weights through load_lora_weights + fuse_lora
    from diffusers import AutoencoderKL, DDIMScheduler
    from peft.tuners.tuners_utils import BaseTunerLayer

    def build(model):
        m = MODELS[model]
        torch.manual_seed(0)
        unet = UNet2DConditionModel(**{k: v for k, v in m["unet"].items() if not k.startswith("_")})

        def clip(cfg):
            c = {k: v for k, v in cfg.items() if k != "architectures"}
            cls = CLIPTextModelWithProjection if cfg["architectures"][0].endswith("Projection") else CLIPTextModel
            return cls(CLIPTextConfig(**c))
        vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=8, layers_per_block=1,
                            down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",))
        te = clip(m["text_encoder"])
        if model == "sdxl":
            return StableDiffusionXLPipeline(vae=vae, text_encoder=te, text_encoder_2=clip(m["text_encoder_2"]),
                                             tokenizer=None, tokenizer_2=None, unet=unet, scheduler=DDIMScheduler())
        return StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=None, unet=unet, scheduler=DDIMScheduler(),
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)

    def has_lora(model):
        return model is not None and any(isinstance(mod, BaseTunerLayer) for mod in model.modules())

    def param(model, name):
        # transformers >= 5 may name CLIPTextModel's parameters without "text_model."
        params = dict(model.named_parameters())
        return params[name] if name in params else params[name[len("text_model."):]]

    # Modules diffusers cannot load (LoRA's Tucker lora_mid, a 1x1-conv LoRA on a Linear): their keys are
    # left out of what diffusers loads and their tensors out of the comparison.
    builders = build_loras()
    left_out_keys, left_out_tensors = {}, {}
    for lname, (b, _, _) in builders.items():
        left_out_keys[lname] = {k for m in b.modules if not m["diffusers"] for k in m["keys"].values()}
        left_out_tensors[lname] = {f"{m['comp']}/{m['path']}.weight" for m in b.modules if not m["diffusers"]}

    merged = {}
    for case in doc["cases"]:
        if not case.get("diffusers", True):
            continue
        name = case["name"]
        try:
            pipe = build(case["model"])
            comps = {"unet": pipe.unet, "text_encoder": pipe.text_encoder,
                     "text_encoder_2": getattr(pipe, "text_encoder_2", None)}
            expected = read_safetensors(os.path.join(outdir, case["expected"]))
            for lora, _, _ in case["loras"]:
                for key in left_out_tensors[lora]:
                    expected.pop(key, None)
            # The text encoders are compared by key conversion only (kohya_to_diffusers.json): diffusers
            # 0.40's text-encoder loader matches transformers' module names with "text_model." (transformers
            # 5 leaves it out) and cannot infer the format of a kohya text-encoder set without out_proj or MLP.
            expected = {k: v for k, v in expected.items() if k.startswith("unet/")}
            with torch.no_grad():
                for key in expected:
                    c, t = key.split("/", 1)
                    p = param(comps[c], t)
                    p.copy_(torch.from_numpy(base_tensor(c, t, list(p.shape))))
            for i, (lora, _, unet_mult) in enumerate(case["loras"]):
                info = doc["loras"][lora]
                adapter = f"a{i}"
                # the keys that name nothing in the model are left out: diffusers refuses leftover keys
                sd = {k: torch.from_numpy(v) for k, v in read_safetensors(os.path.join(outdir, info["file"])).items()
                      if k not in info["unmatched"] and k not in left_out_keys[lora] and not k.startswith(TEXT_KEYS)}
                pipe.load_lora_weights(sd, adapter_name=adapter, low_cpu_mem_usage=False)
                if has_lora(pipe.unet):
                    pipe.fuse_lora(components=["unet"], lora_scale=unet_mult, adapter_names=[adapter])
                pipe.unload_lora_weights()
            worst, agree, differ = 0.0, [], {}
            for key, ref in expected.items():
                c, t = key.split("/", 1)
                got = param(comps[c], t).detach().float().numpy()
                merged[f"{name}:{key}"] = got
                diff = float(np.abs(got.astype(np.float64) - ref).max())
                if diff <= 1e-6 * max(1.0, float(np.abs(ref).max())):
                    agree.append(key)
                    worst = max(worst, diff)
                else:
                    differ[key] = {"max_abs_diff": diff, "why": known_difference(case, key, builders)}
            report["cases"][name] = {"max_abs_diff": worst, "agree": agree, "differ": differ}
            print(f"{name}: {len(agree)} tensors agree (max |diffusers - expected| = {worst:.3g}), "
                  f"{len(differ)} differ: {json.dumps(differ)}")
        except Exception as e:  # noqa: BLE001 - recorded for the report
            import traceback
            traceback.print_exc()
            report["cases"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"{name}: {type(e).__name__}: {e}")
    write_safetensors(os.path.join(checkdir, "merged.safetensors"), merged)
    with open(os.path.join(checkdir, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--check-diffusers", metavar="DIR")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_diffusers:
        check_diffusers(args.outdir, args.check_diffusers)
    else:
        write_all(args.outdir)


if __name__ == "__main__":
    main()
