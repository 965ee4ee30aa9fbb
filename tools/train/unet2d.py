"""A diffusers-compatible UNet2DModel in plain PyTorch, for training Tessera's default model.

Parameter names, shapes and the forward pass follow diffusers' UNet2DModel (models/unets/unet_2d.py,
the google/ddpm conventions), so the state dict written by train_ddpm.py loads
in diffusers and in Tessera unchanged. Only what the default model needs is built: positional
time embedding, DownBlock2D / AttnDownBlock2D / UpBlock2D / AttnUpBlock2D, conv resamplers,
"default" time scale shift, silu. Works with torch 1.13 (CPU) and torch 2.x (GPU).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# The default model's config.json (keys as diffusers writes them).
DEFAULT_CONFIG = {
    "_class_name": "UNet2DModel",
    "_diffusers_version": "0.30.0",
    "sample_size": 64,
    "in_channels": 3,
    "out_channels": 3,
    "center_input_sample": False,
    "time_embedding_type": "positional",
    "freq_shift": 1,
    "flip_sin_to_cos": False,
    "down_block_types": ["DownBlock2D", "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D"],
    "block_out_channels": [32, 64, 128, 128],
    "layers_per_block": 1,
    "mid_block_scale_factor": 1,
    "downsample_padding": 0,
    "act_fn": "silu",
    "attention_head_dim": None,
    "norm_num_groups": 32,
    "norm_eps": 1e-06,
    "add_attention": True,
}

SCHEDULER_CONFIG = {
    "_class_name": "DDPMScheduler",
    "_diffusers_version": "0.30.0",
    "num_train_timesteps": 1000,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "clip_sample": True,
    "clip_sample_range": 1.0,
    "prediction_type": "epsilon",
    "trained_betas": None,
    "variance_type": "fixed_small",
}


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, temb, groups, eps):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        s = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return s + h


class Attention(nn.Module):
    """Spatial self-attention with residual (diffusers Attention, _from_deprecated_attn_block)."""

    def __init__(self, c, groups, eps, head_dim=None):
        super().__init__()
        self.heads = 1 if head_dim is None else c // head_dim
        self.group_norm = nn.GroupNorm(groups, c, eps=eps)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c), nn.Dropout(0.0)])

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.group_norm(x).reshape(b, c, h * w).transpose(1, 2)
        nh, d = self.heads, c // self.heads

        def split(y):
            return y.reshape(b, h * w, nh, d).transpose(1, 2)

        q, k, v = split(self.to_q(t)), split(self.to_k(t)), split(self.to_v(t))
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v)
        else:  # torch 1.x: same computation, unfused, softmax in fp32
            a = torch.softmax((q @ k.transpose(-1, -2)).float() / math.sqrt(d), dim=-1).to(v.dtype)
            o = a @ v
        o = o.transpose(1, 2).reshape(b, h * w, c)
        o = self.to_out[0](o).transpose(1, 2).reshape(b, c, h, w)
        return o + x


class Downsample2D(nn.Module):
    def __init__(self, c, padding):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=padding)

    def forward(self, x):
        if self.padding == 0:  # TF "SAME": pad right and bottom only
            x = F.pad(x, (0, 1, 0, 1))
        return self.conv(x)


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class TimestepEmbedding(nn.Module):
    def __init__(self, cin, temb):
        super().__init__()
        self.linear_1 = nn.Linear(cin, temb)
        self.linear_2 = nn.Linear(temb, temb)

    def forward(self, e):
        return self.linear_2(F.silu(self.linear_1(e)))


class Block(nn.Module):
    pass


class MidBlock(nn.Module):
    def __init__(self, c, temb, groups, eps, head_dim):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock2D(c, c, temb, groups, eps) for _ in range(2)])
        self.attentions = nn.ModuleList([Attention(c, groups, eps, head_dim)])

    def forward(self, h, emb):
        h = self.resnets[0](h, emb)
        h = self.attentions[0](h)
        return self.resnets[1](h, emb)


class UNet2DModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        cfg = dict(DEFAULT_CONFIG)
        cfg.update(config)
        assert cfg["time_embedding_type"] == "positional" and cfg["act_fn"] in ("silu", "swish")
        assert cfg["mid_block_scale_factor"] == 1 and cfg.get("add_attention", True)
        self.config = cfg
        ch = list(cfg["block_out_channels"])
        n = cfg["layers_per_block"]
        g, eps, hd = cfg["norm_num_groups"], cfg["norm_eps"], cfg["attention_head_dim"]
        c0 = ch[0]
        temb = cfg.get("time_embedding_dim") or 4 * c0
        self.conv_in = nn.Conv2d(cfg["in_channels"], c0, 3, padding=1)
        self.time_embedding = TimestepEmbedding(c0, temb)
        self.down_blocks = nn.ModuleList()
        skips = [c0]
        cin = c0
        for i, (c, kind) in enumerate(zip(ch, cfg["down_block_types"])):
            blk = Block()
            blk.resnets = nn.ModuleList([ResnetBlock2D(cin if j == 0 else c, c, temb, g, eps) for j in range(n)])
            if kind == "AttnDownBlock2D":
                blk.attentions = nn.ModuleList([Attention(c, g, eps, hd) for _ in range(n)])
            else:
                assert kind == "DownBlock2D", kind
                blk.attentions = None
            skips += [c] * n
            if i < len(ch) - 1:
                blk.downsamplers = nn.ModuleList([Downsample2D(c, cfg["downsample_padding"])])
                skips.append(c)
            else:
                blk.downsamplers = None
            self.down_blocks.append(blk)
            cin = c
        self.mid_block = MidBlock(cin, temb, g, eps, hd)
        rev = list(reversed(ch))
        self.up_blocks = nn.ModuleList()
        prev = rev[0]
        for i, (c, kind) in enumerate(zip(rev, cfg["up_block_types"])):
            blk = Block()
            res = []
            for j in range(n + 1):
                s = skips.pop()
                res.append(ResnetBlock2D((prev if j == 0 else c) + s, c, temb, g, eps))
            blk.resnets = nn.ModuleList(res)
            if kind == "AttnUpBlock2D":
                blk.attentions = nn.ModuleList([Attention(c, g, eps, hd) for _ in range(n + 1)])
            else:
                assert kind == "UpBlock2D", kind
                blk.attentions = None
            blk.upsamplers = nn.ModuleList([Upsample2D(c)]) if i < len(ch) - 1 else None
            self.up_blocks.append(blk)
            prev = c
        self.conv_norm_out = nn.GroupNorm(g, c0, eps=eps)
        self.conv_out = nn.Conv2d(c0, cfg["out_channels"], 3, padding=1)
        half = c0 // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / (half - cfg["freq_shift"]))
        self.register_buffer("freqs", freqs, persistent=False)

    def time_proj(self, t):
        a = t.float()[:, None] * self.freqs[None]
        s, c = torch.sin(a), torch.cos(a)
        return torch.cat([c, s] if self.config["flip_sin_to_cos"] else [s, c], dim=1)

    def forward(self, x, t):
        if t.dim() == 0:
            t = t.expand(x.shape[0])
        emb = self.time_embedding(self.time_proj(t).to(x.dtype))
        h = self.conv_in(x)
        stack = [h]
        for blk in self.down_blocks:
            for j, r in enumerate(blk.resnets):
                h = r(h, emb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h)
                stack.append(h)
            if blk.downsamplers is not None:
                h = blk.downsamplers[0](h)
                stack.append(h)
        h = self.mid_block(h, emb)
        for blk in self.up_blocks:
            for j, r in enumerate(blk.resnets):
                h = r(torch.cat([h, stack.pop()], dim=1), emb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h)
            if blk.upsamplers is not None:
                h = blk.upsamplers[0](h)
        return self.conv_out(F.silu(self.conv_norm_out(h)))


def unet_flops(model, tile):
    """2 x multiply-adds of convs and attention (projections + matmuls) for one tile evaluation,
    counted the way bench/torch_tiled_ddim.py's unet_flops does."""
    flops = 0
    hooks = []

    def conv_hook(m, i, o):
        nonlocal flops
        flops += 2 * o.numel() // o.shape[0] * m.in_channels * m.kernel_size[0] * m.kernel_size[1]

    def attn_hook(m, i, o):
        nonlocal flops
        b, c, h, w = o.shape
        n = h * w
        flops += 2 * (4 * n * c * c + 2 * n * n * c)

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        if isinstance(m, Attention):
            hooks.append(m.register_forward_hook(attn_hook))
    with torch.no_grad():
        model(torch.zeros(1, 3, tile, tile), torch.tensor([10.0]))
    for hk in hooks:
        hk.remove()
    return flops


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="print parameter count and FLOPs per tile of a config")
    ap.add_argument("--channels", default="32,64,128,128")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--tile", type=int, default=64)
    a = ap.parse_args()
    m = UNet2DModel({"block_out_channels": [int(c) for c in a.channels.split(",")], "layers_per_block": a.layers})
    p = sum(x.numel() for x in m.parameters())
    print(json.dumps({"channels": a.channels, "params": p, "fp16_MB": round(2 * p / 1e6, 2),
                      "gflop_per_tile": round(unet_flops(m, a.tile) / 1e9, 3), "tensors": len(m.state_dict())}))
