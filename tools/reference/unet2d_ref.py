"""Float64 PyTorch reference for Tessera: diffusers UNet2DModel, DDPM/DDIM scheduler math,
the Philox4x32-10 + Box-Muller noise of core/sampling/Philox.h, and the tiled sampler of
docs/ENGINE_SEMANTICS.md.

diffusers is not needed: the network is rebuilt from diffusers' models/unets/unet_2d.py (UNet2DModel.forward),
models/resnet.py, models/attention_processor.py and schedulers/scheduling_ddpm.py, scheduling_ddim.py, with
diffusers' parameter names and semantics, using torch's
own functional ops (F.conv2d, F.group_norm, F.linear, softmax, F.interpolate nearest) in float64
on the CPU. Runs with torch 1.13 and numpy 1.24 (Debian 12's python3-torch) and later.
"""
import json
import math
import os
import re
import struct

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# safetensors (huggingface/safetensors' file format), written and read with struct + json only
# ----------------------------------------------------------------------------------------------

_NP_OF_DTYPE = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "U32": np.uint32,
                "I32": np.int32, "I64": np.int64, "U8": np.uint8}
_DTYPE_OF_NP = {np.dtype(v).str[1:]: k for k, v in _NP_OF_DTYPE.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> numpy array (float32 / uint32 / ...). Layout as the reference writer:
    header padded with spaces to a multiple of 8, tensors ordered by descending dtype alignment
    then name, contiguous little-endian data."""
    items = []
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr)
        dt = _DTYPE_OF_NP[a.dtype.newbyteorder("<").str[1:]]
        items.append((-a.dtype.itemsize, name, dt, a.astype(a.dtype.newbyteorder("<"), copy=False)))
    items.sort(key=lambda it: (it[0], it[1]))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for _, name, dt, a in items:
        raw = a.tobytes(order="C")
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """name -> numpy array (copy); ignores __metadata__."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    out = {}
    base = 8 + n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = np.dtype(_NP_OF_DTYPE[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[base + b:base + e], dtype=dt).reshape(info["shape"]).copy()
    return out


# ----------------------------------------------------------------------------------------------
# config.json with diffusers' UNet2DModel defaults
# ----------------------------------------------------------------------------------------------

UNET_DEFAULTS = {
    "sample_size": None, "in_channels": 3, "out_channels": 3, "center_input_sample": False,
    "time_embedding_type": "positional", "time_embedding_dim": None, "freq_shift": 0,
    "flip_sin_to_cos": True,
    "down_block_types": ["DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"],
    "mid_block_type": "UNetMidBlock2D",
    "up_block_types": ["AttnUpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
    "block_out_channels": [224, 448, 672, 896], "layers_per_block": 2, "mid_block_scale_factor": 1,
    "downsample_padding": 1, "downsample_type": "conv", "upsample_type": "conv", "dropout": 0.0,
    "act_fn": "silu", "attention_head_dim": 8, "norm_num_groups": 32, "attn_norm_num_groups": None,
    "norm_eps": 1e-5, "resnet_time_scale_shift": "default", "add_attention": True,
    "class_embed_type": None, "num_class_embeds": None, "num_train_timesteps": None,
}


def resolve_config(raw):
    cfg = dict(UNET_DEFAULTS)
    forced = set(raw.get("_use_default_values", []))
    for k, v in raw.items():
        if k.startswith("_") or k not in UNET_DEFAULTS or k in forced:
            continue
        cfg[k] = v
    strip = lambda names: [n[len("UNetRes"):] if n.startswith("UNetRes") else n for n in names]
    cfg["down_block_types"] = strip(cfg["down_block_types"])
    cfg["up_block_types"] = strip(cfg["up_block_types"])
    unsupported = {"time_embedding_type": "positional", "act_fn": "silu", "downsample_type": "conv",
                   "upsample_type": "conv", "class_embed_type": None, "num_class_embeds": None}
    for k, want in unsupported.items():
        if cfg[k] != want and not (k == "act_fn" and cfg[k] == "swish"):
            raise ValueError(f"config.json: {k}={cfg[k]!r} is not supported by the reference")
    return cfg


def load_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return resolve_config(json.load(f))


# ----------------------------------------------------------------------------------------------
# State-dict names (diffusers' UNet2DModel, and the legacy attention names its loader converts)
# ----------------------------------------------------------------------------------------------

def _resnet_keys(p, cin, cout, temb, scale_shift):
    k = {f"{p}.norm1.weight": [cin], f"{p}.norm1.bias": [cin],
         f"{p}.conv1.weight": [cout, cin, 3, 3], f"{p}.conv1.bias": [cout],
         f"{p}.time_emb_proj.weight": [2 * cout if scale_shift else cout, temb],
         f"{p}.time_emb_proj.bias": [2 * cout if scale_shift else cout],
         f"{p}.norm2.weight": [cout], f"{p}.norm2.bias": [cout],
         f"{p}.conv2.weight": [cout, cout, 3, 3], f"{p}.conv2.bias": [cout]}
    if cin != cout:
        k[f"{p}.conv_shortcut.weight"] = [cout, cin, 1, 1]
        k[f"{p}.conv_shortcut.bias"] = [cout]
    return k


def _attn_keys(p, c, group_norm=True):
    k = {}
    if group_norm:
        k[f"{p}.group_norm.weight"] = [c]
        k[f"{p}.group_norm.bias"] = [c]
    for n in ("to_q", "to_k", "to_v", "to_out.0"):
        k[f"{p}.{n}.weight"] = [c, c]
        k[f"{p}.{n}.bias"] = [c]
    return k


def mid_attention_has_norm(cfg):
    return cfg["attn_norm_num_groups"] is not None or cfg["resnet_time_scale_shift"] == "default"


def expected_keys(cfg):
    """Ordered dict name -> shape of every tensor a UNet2DModel with `cfg` has (current names)."""
    C = cfg["block_out_channels"]
    L, n = len(C), cfg["layers_per_block"]
    T = cfg["time_embedding_dim"] or 4 * C[0]
    ss = cfg["resnet_time_scale_shift"] == "scale_shift"
    k = {"conv_in.weight": [C[0], cfg["in_channels"], 3, 3], "conv_in.bias": [C[0]],
         "time_embedding.linear_1.weight": [T, C[0]], "time_embedding.linear_1.bias": [T],
         "time_embedding.linear_2.weight": [T, T], "time_embedding.linear_2.bias": [T]}
    for i, bt in enumerate(cfg["down_block_types"]):
        cin_block = C[i - 1] if i > 0 else C[0]
        for j in range(n):
            k.update(_resnet_keys(f"down_blocks.{i}.resnets.{j}", cin_block if j == 0 else C[i], C[i], T, ss))
            if bt == "AttnDownBlock2D":
                k.update(_attn_keys(f"down_blocks.{i}.attentions.{j}", C[i]))
        if i < L - 1:
            k[f"down_blocks.{i}.downsamplers.0.conv.weight"] = [C[i], C[i], 3, 3]
            k[f"down_blocks.{i}.downsamplers.0.conv.bias"] = [C[i]]
    if cfg["mid_block_type"] is not None:
        c = C[-1]
        k.update(_resnet_keys("mid_block.resnets.0", c, c, T, ss))
        if cfg["add_attention"]:
            k.update(_attn_keys("mid_block.attentions.0", c, mid_attention_has_norm(cfg)))
        k.update(_resnet_keys("mid_block.resnets.1", c, c, T, ss))
    rev = list(reversed(C))
    for i, bt in enumerate(cfg["up_block_types"]):
        out, prev, skip_last = rev[i], rev[max(i - 1, 0)], rev[min(i + 1, L - 1)]
        for j in range(n + 1):
            cin = (prev if j == 0 else out) + (skip_last if j == n else out)
            k.update(_resnet_keys(f"up_blocks.{i}.resnets.{j}", cin, out, T, ss))
            if bt == "AttnUpBlock2D":
                k.update(_attn_keys(f"up_blocks.{i}.attentions.{j}", out))
        if i < L - 1:
            k[f"up_blocks.{i}.upsamplers.0.conv.weight"] = [out, out, 3, 3]
            k[f"up_blocks.{i}.upsamplers.0.conv.bias"] = [out]
    k.update({"conv_norm_out.weight": [C[0]], "conv_norm_out.bias": [C[0]],
              "conv_out.weight": [cfg["out_channels"], C[0], 3, 3], "conv_out.bias": [cfg["out_channels"]]})
    return k


_LEGACY = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out.0"}
_LEGACY_RE = re.compile(r"^(.*attentions\.\d+)\.(query|key|value|proj_attn)\.(weight|bias)$")
_CURRENT_RE = re.compile(r"^(.*attentions\.\d+)\.(to_q|to_k|to_v|to_out\.0)\.(weight|bias)$")


def to_legacy_name(name):
    m = _CURRENT_RE.match(name)
    if not m:
        return name
    inv = {v: k for k, v in _LEGACY.items()}
    return f"{m.group(1)}.{inv[m.group(2)]}.{m.group(3)}"


def from_legacy_names(state):
    """diffusers' _fix_state_dict_keys_on_load: query/key/value/proj_attn -> to_q/to_k/to_v/to_out.0."""
    out = {}
    for name, v in state.items():
        m = _LEGACY_RE.match(name)
        new = f"{m.group(1)}.{_LEGACY[m.group(2)]}.{m.group(3)}" if m else name
        if new in out:
            raise ValueError(f"both legacy and current spelling of {new} present")
        out[new] = v
    return out


# ----------------------------------------------------------------------------------------------
# UNet2DModel forward (diffusers unet_2d.py UNet2DModel.forward), float64 on the CPU
# ----------------------------------------------------------------------------------------------

def timestep_embedding(timesteps, dim, flip_sin_to_cos, freq_shift):
    """diffusers get_timestep_embedding, in float32 as diffusers computes it (models/embeddings.py)."""
    half = dim // 2
    exponent = -math.log(10000) * torch.arange(0, half, dtype=torch.float32)
    exponent = exponent / (half - freq_shift)
    freqs = torch.exp(exponent)
    args = torch.as_tensor(timesteps).reshape(-1).to(torch.float32)[:, None] * freqs[None, :]
    emb = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if dim % 2 == 1:
        emb = F.pad(emb, (0, 1))
    return emb


class UNet2DRef:
    """diffusers UNet2DModel (positional time embedding, conv resamplers, SiLU), float64."""

    def __init__(self, cfg, state, dtype=torch.float64):
        """dtype float64 for the goldens; float32 emulates a float32 engine (calibration)."""
        self.cfg = cfg
        self.dtype = dtype
        state = from_legacy_names(state)
        want = expected_keys(cfg)
        missing = [k for k in want if k not in state]
        extra = [k for k in state if k not in want]
        if missing or extra:
            raise ValueError(f"state dict mismatch: missing {missing[:5]} extra {extra[:5]}")
        self.w = {}
        for k, shape in want.items():
            a = np.asarray(state[k])
            if list(a.shape) != shape:
                raise ValueError(f"{k}: shape {list(a.shape)} != expected {shape}")
            self.w[k] = torch.from_numpy(a.astype(np.float64)).to(dtype)
        self.G = cfg["norm_num_groups"]
        self.eps = cfg["norm_eps"]

    @classmethod
    def from_folder(cls, folder, dtype=torch.float64):
        cfg = load_config(folder)
        return cls(cfg, read_safetensors(os.path.join(folder, "diffusion_pytorch_model.safetensors")), dtype)

    # -- layers --
    def _conv(self, p, x, padding=1, stride=1):
        return F.conv2d(x, self.w[p + ".weight"], self.w[p + ".bias"], stride=stride, padding=padding)

    def _linear(self, p, x):
        return F.linear(x, self.w[p + ".weight"], self.w[p + ".bias"])

    def _gn(self, p, x, groups=None):
        return F.group_norm(x, groups or self.G, self.w[p + ".weight"], self.w[p + ".bias"], self.eps)

    def _resnet(self, p, x, emb, out_scale=1.0):
        h = self._conv(p + ".conv1", F.silu(self._gn(p + ".norm1", x)))
        t = self._linear(p + ".time_emb_proj", F.silu(emb))[:, :, None, None]
        if self.cfg["resnet_time_scale_shift"] == "scale_shift":
            scale, shift = torch.chunk(t, 2, dim=1)
            h = self._gn(p + ".norm2", h) * (1 + scale) + shift
        else:
            h = self._gn(p + ".norm2", h + t)
        h = self._conv(p + ".conv2", F.silu(h))
        skip = self._conv(p + ".conv_shortcut", x, padding=0) if (p + ".conv_shortcut.weight") in self.w else x
        return (skip + h) / out_scale

    def _attention(self, p, x, groups, head_dim, rescale=1.0):
        B, C, H, W = x.shape
        r = x
        if (p + ".group_norm.weight") in self.w:
            x = self._gn(p + ".group_norm", x, groups)
        X = x.reshape(B, C, H * W).transpose(1, 2)  # [B, N, C], token = y*W + x
        d = head_dim if head_dim is not None else C
        heads = C // d
        q, k, v = (self._linear(p + n, X).reshape(B, H * W, heads, d).transpose(1, 2)
                   for n in (".to_q", ".to_k", ".to_v"))
        a = torch.softmax(q @ k.transpose(-1, -2) * (d ** -0.5), dim=-1)
        o = (a @ v).transpose(1, 2).reshape(B, H * W, C)
        y = self._linear(p + ".to_out.0", o).transpose(1, 2).reshape(B, C, H, W)
        return (y + r) / rescale

    def _downsample(self, p, x):
        pad = self.cfg["downsample_padding"]
        if pad == 0:
            return self._conv(p, F.pad(x, (0, 1, 0, 1)), padding=0, stride=2)
        return self._conv(p, x, padding=pad, stride=2)

    # -- forward, in UNet2DModel.forward's order --
    def forward(self, sample, timesteps):
        """sample: [B, Cin, H, W] (any float, converted to float64); timesteps: scalar or [B].
        Returns float64 [B, Cout, H, W] (computed in self.dtype)."""
        cfg = self.cfg
        x = torch.as_tensor(sample).to(self.dtype)
        B = x.shape[0]
        t = torch.as_tensor(timesteps)
        if t.dim() == 0:
            t = t.reshape(1)
        t = t.expand(B) if t.numel() == 1 else t
        if cfg["center_input_sample"]:
            x = 2 * x - 1
        C = cfg["block_out_channels"]
        L, n = len(C), cfg["layers_per_block"]
        hd = cfg["attention_head_dim"]
        e = timestep_embedding(t, C[0], cfg["flip_sin_to_cos"], cfg["freq_shift"]).to(self.dtype)
        emb = self._linear("time_embedding.linear_2", F.silu(self._linear("time_embedding.linear_1", e)))

        h = self._conv("conv_in", x)
        skips = [h]
        for i, bt in enumerate(cfg["down_block_types"]):
            for j in range(n):
                h = self._resnet(f"down_blocks.{i}.resnets.{j}", h, emb)
                if bt == "AttnDownBlock2D":
                    h = self._attention(f"down_blocks.{i}.attentions.{j}", h, self.G, hd)
                skips.append(h)
            if i < L - 1:
                h = self._downsample(f"down_blocks.{i}.downsamplers.0.conv", h)
                skips.append(h)

        if cfg["mid_block_type"] is not None:
            s = cfg["mid_block_scale_factor"]
            h = self._resnet("mid_block.resnets.0", h, emb, s)
            if cfg["add_attention"]:
                groups = cfg["attn_norm_num_groups"] or self.G
                h = self._attention("mid_block.attentions.0", h, groups, hd if hd is not None else C[-1], s)
            h = self._resnet("mid_block.resnets.1", h, emb, s)

        for i, bt in enumerate(cfg["up_block_types"]):
            for j in range(n + 1):
                h = torch.cat([h, skips.pop()], dim=1)  # h first, skip second
                h = self._resnet(f"up_blocks.{i}.resnets.{j}", h, emb)
                if bt == "AttnUpBlock2D":
                    h = self._attention(f"up_blocks.{i}.attentions.{j}", h, self.G, hd)
            if i < L - 1:
                h = F.interpolate(h, scale_factor=2.0, mode="nearest")
                h = self._conv(f"up_blocks.{i}.upsamplers.0.conv", h)
        assert not skips

        h = F.silu(self._gn("conv_norm_out", h))
        return self._conv("conv_out", h).to(torch.float64)

    __call__ = forward


# ----------------------------------------------------------------------------------------------
# Schedulers (diffusers scheduling_ddpm.py, scheduling_ddim.py): DDPM and DDIM, "leading" spacing, epsilon prediction
# ----------------------------------------------------------------------------------------------

SCHEDULER_DEFAULTS = {"num_train_timesteps": 1000, "beta_start": 1e-4, "beta_end": 0.02,
                      "beta_schedule": "linear", "trained_betas": None, "clip_sample": True,
                      "clip_sample_range": 1.0, "variance_type": "fixed_small", "prediction_type": "epsilon",
                      "set_alpha_to_one": True, "steps_offset": 0, "timestep_spacing": "leading",
                      "thresholding": False}


def noise_schedule(sched_cfg):
    """float32 betas and alphas_cumprod exactly as diffusers builds them (torch, CPU)."""
    c = dict(SCHEDULER_DEFAULTS, **{k: v for k, v in sched_cfg.items() if not k.startswith("_")})
    Tn = c["num_train_timesteps"]
    if c["beta_schedule"] == "linear":
        betas = torch.linspace(c["beta_start"], c["beta_end"], Tn, dtype=torch.float32)
    elif c["beta_schedule"] == "scaled_linear":
        betas = torch.linspace(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, Tn, dtype=torch.float32) ** 2
    else:
        raise ValueError(f"beta_schedule {c['beta_schedule']!r} not supported by the reference")
    alphas = 1.0 - betas
    # torch's CPU cumprod accumulates in double and rounds each entry to float32.
    alphas_cumprod = torch.cumprod(alphas, dim=0)
    return betas.numpy(), alphas_cumprod.numpy(), c


def leading_timesteps(num_train, steps, offset=0):
    r = num_train // steps
    return [int(k * r + offset) for k in reversed(range(steps))]


class Scheduler:
    """DDPM or DDIM for one number of inference steps. All math in float64 from the float32
    alphas_cumprod. coefficients(k) returns core/sampling/StepUpdate.h's StepCoefficients fields;
    step_direct() is the schedulers' step() formula, used to check the coefficients."""

    def __init__(self, kind, sched_cfg, steps, eta=0.0):
        assert kind in ("ddpm", "ddim")
        self.kind = kind
        self.betas, self.alphas_cumprod, c = noise_schedule(sched_cfg)
        if c["prediction_type"] != "epsilon" or c["thresholding"] or c["timestep_spacing"] != "leading":
            raise ValueError("reference supports epsilon prediction, no thresholding, leading spacing")
        self.Tn = c["num_train_timesteps"]
        self.clip = bool(c["clip_sample"])
        self.clip_range = float(c["clip_sample_range"])
        self.variance_type = c["variance_type"]
        if kind == "ddpm" and self.variance_type not in ("fixed_small", "fixed_small_log", "fixed_large"):
            raise ValueError(f"variance_type {self.variance_type!r} not supported")
        self.final_abar = 1.0 if c["set_alpha_to_one"] else float(self.alphas_cumprod[0])
        self.eta = float(eta) if kind == "ddim" else 0.0
        self.steps = steps
        self.timesteps = leading_timesteps(self.Tn, steps, c["steps_offset"])
        self.init_noise_sigma = 1.0

    def _abar(self, t):
        return float(np.float64(self.alphas_cumprod[t]))

    def _prev(self, k):
        t = self.timesteps[k]
        if self.kind == "ddim":
            return t - self.Tn // self.steps
        return self.timesteps[k + 1] if k + 1 < len(self.timesteps) else -1

    def coefficients(self, k):
        t = self.timesteps[k]
        prev = self._prev(k)
        a_t = self._abar(t)
        b_t = 1.0 - a_t
        K = dict(ax=1.0 / math.sqrt(a_t), ae=-math.sqrt(b_t) / math.sqrt(a_t),
                 clip=1.0 if self.clip else 0.0, clipRange=self.clip_range,
                 ee=0.0, ex=0.0, e0=0.0, cx0=0.0, cx=0.0, ceps=0.0, sigma=0.0,
                 modelInputScale=1.0, timestep=float(t))
        if self.kind == "ddpm":
            a_p = self._abar(prev) if prev >= 0 else 1.0
            b_p = 1.0 - a_p
            a_cur = a_t / a_p
            beta_cur = 1.0 - a_cur
            K["cx0"] = math.sqrt(a_p) * beta_cur / b_t
            K["cx"] = math.sqrt(a_cur) * b_p / b_t
            if t > 0:
                var = max(b_p / b_t * beta_cur, 1e-20)
                if self.variance_type in ("fixed_small", "fixed_small_log"):
                    K["sigma"] = math.sqrt(var)
                else:  # fixed_large
                    K["sigma"] = math.sqrt(beta_cur)
        else:
            a_p = self._abar(prev) if prev >= 0 else self.final_abar
            b_p = 1.0 - a_p
            var = (b_p / b_t) * (1.0 - a_t / a_p)
            std = self.eta * math.sqrt(var)
            K["ee"] = 1.0  # epsHat = the unclipped model output (use_clipped_model_output false)
            K["cx0"] = math.sqrt(a_p)
            K["ceps"] = math.sqrt(1.0 - a_p - std * std)
            K["sigma"] = std
        return K

    def step_direct(self, eps, k, x, z):
        """DDPMScheduler.step / DDIMScheduler.step on float64 arrays (z used only where noise is added)."""
        t = self.timesteps[k]
        prev = self._prev(k)
        a_t = self._abar(t)
        b_t = 1 - a_t
        x0 = (x - math.sqrt(b_t) * eps) / math.sqrt(a_t)
        if self.clip:
            x0 = np.clip(x0, -self.clip_range, self.clip_range)
        if self.kind == "ddpm":
            a_p = self._abar(prev) if prev >= 0 else 1.0
            b_p = 1 - a_p
            a_cur = a_t / a_p
            beta_cur = 1 - a_cur
            mu = (math.sqrt(a_p) * beta_cur / b_t) * x0 + (math.sqrt(a_cur) * b_p / b_t) * x
            if t > 0:
                var = max(b_p / b_t * beta_cur, 1e-20)
                sd = math.sqrt(var) if self.variance_type != "fixed_large" else math.sqrt(beta_cur)
                mu = mu + sd * z
            return mu
        a_p = self._abar(prev) if prev >= 0 else self.final_abar
        b_p = 1 - a_p
        std = self.eta * math.sqrt((b_p / b_t) * (1 - a_t / a_p))
        out = math.sqrt(a_p) * x0 + math.sqrt(1 - a_p - std ** 2) * eps
        if self.eta > 0:
            out = out + std * z
        return out


def apply_step(K, x, eps, z):
    """core/sampling/StepUpdate.h applyStep, elementwise on float64 numpy arrays."""
    x0 = K["ax"] * x + K["ae"] * eps
    if K["clip"] != 0:
        x0 = np.clip(x0, -K["clipRange"], K["clipRange"])
    eps_hat = K["ee"] * eps + K["ex"] * x + K["e0"] * x0
    out = K["cx0"] * x0 + K["cx"] * x + K["ceps"] * eps_hat
    if K["sigma"] != 0:
        out = out + K["sigma"] * z
    return out


COEFF_FIELDS = ["ax", "ae", "clip", "clipRange", "ee", "ex", "e0", "cx0", "cx", "ceps", "sigma",
                "modelInputScale", "timestep"]


# ----------------------------------------------------------------------------------------------
# Philox4x32-10 + Box-Muller (core/sampling/Philox.h)
# ----------------------------------------------------------------------------------------------

PHILOX_TAG = 0x7E55E7A0
INIT_NOISE_DRAW = 0x80000000
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorised Random123 Philox4x32-10. Counters: uint32 arrays (broadcast); key: ints.
    Returns four uint32 arrays."""
    v = [np.asarray(c, dtype=np.uint64) & _MASK for c in (c0, c1, c2, c3)]
    v = np.broadcast_arrays(*v)
    k0, k1 = int(k0) & 0xFFFFFFFF, int(k1) & 0xFFFFFFFF
    for _ in range(10):
        p0 = _M0 * v[0]
        p1 = _M1 * v[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK
        v = [hi1 ^ v[1] ^ np.uint64(k0), lo1, hi0 ^ v[3] ^ np.uint64(k1), lo0]
        k0 = (k0 + _W0) & 0xFFFFFFFF
        k1 = (k1 + _W1) & 0xFFFFFFFF
    return [a.astype(np.uint32) for a in v]


def philox_bits(seed, draw, index):
    """philoxBits(seed, draw, index): key = (lo32(seed), hi32(seed)),
    counter = (lo32(index), hi32(index), draw, 0x7E55E7A0). index: int or uint64 array."""
    idx = np.asarray(index, dtype=np.uint64)
    seed = int(seed)
    return philox4x32_10(idx & _MASK, idx >> np.uint64(32), np.uint32(draw), np.uint32(PHILOX_TAG),
                         seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)


_cos = np.frompyfunc(math.cos, 1, 1)
_log = np.frompyfunc(math.log, 1, 1)
_sqrt = np.frompyfunc(math.sqrt, 1, 1)


def philox_normal(seed, draw, index):
    """philoxNormal (CPU branch): u1 = (r0 + 1) * 2^-32, u2 = r1 * 2^-32,
    z = sqrt(-2 ln u1) * cos(2 pi u2) in float64 (libm through Python's math, as std::log/std::cos),
    rounded to float32."""
    r = philox_bits(seed, draw, index)
    u1 = np.atleast_1d((r[0].astype(np.float64) + 1.0) * 2.3283064365386963e-10)
    u2 = np.atleast_1d(r[1].astype(np.float64) * 2.3283064365386963e-10)
    z = np.asarray(_sqrt(-2.0 * _log(u1)), dtype=np.float64) * np.asarray(_cos(6.283185307179586 * u2),
                                                                           dtype=np.float64)
    return z.astype(np.float32).reshape(np.shape(r[0]))


def canvas_noise(seed, draw, C, H, W):
    """z(draw, c, y, x) over the whole canvas, float32 [C, H, W] (index = (c*H + y)*W + x)."""
    idx = np.arange(C * H * W, dtype=np.uint64)
    return philox_normal(seed, draw, idx).reshape(C, H, W)


# ----------------------------------------------------------------------------------------------
# Tile plan and blend windows (docs/ENGINE_SEMANTICS.md, core/sampling/TilePlan.cpp, core/sampling/BlendWindow.cpp)
# ----------------------------------------------------------------------------------------------

def axis_positions(length, tile, overlap):
    eff = min(tile, length)
    stride = tile - overlap
    pos = [0]
    if eff < tile or stride <= 0:
        return pos
    p = stride
    while p + eff < length:
        pos.append(p)
        p += stride
    if pos[-1] + eff < length:
        pos.append(length - eff)
    out = []
    for v in pos:
        if not out or out[-1] != v:
            out.append(v)
    return out


def tile_plan(width, height, tile, overlap):
    """dict: tileW, tileH, xs, ys, tiles = [(id, col, row, x, y)] row-major."""
    if width < 1 or height < 1 or tile < 1 or not (0 <= overlap < tile):
        raise ValueError("bad tile plan arguments")
    xs, ys = axis_positions(width, tile, overlap), axis_positions(height, tile, overlap)
    tiles = [(r * len(xs) + c, c, r, xs[c], ys[r]) for r in range(len(ys)) for c in range(len(xs))]
    return dict(width=width, height=height, tile=tile, overlap=overlap, tileW=min(tile, width),
                tileH=min(tile, height), xs=xs, ys=ys, tiles=tiles)


def _window_value(kind, i, T, o):
    if kind == "none":
        return 1.0
    if kind == "linear":
        return 1.0 if o == 0 else min(1.0, (i + 0.5) / o, (T - i - 0.5) / o)
    if kind == "hann":
        return 0.5 - 0.5 * math.cos(2.0 * math.pi * (i + 0.5) / T)
    if kind == "gaussian":
        d = i - (T - 1.0) / 2.0
        return math.exp(-(d * d) / (T * T) / (2.0 * 0.01))
    raise ValueError(kind)


def axis_window(kind, length, overlap):
    """float32 [length]: computed in double, first half mirrored (exactly symmetric)."""
    o = min(max(overlap, 0), length - 1)
    w = np.empty(length, dtype=np.float32)
    for i in range((length + 1) // 2):
        w[i] = w[length - 1 - i] = np.float32(_window_value(kind, i, length, o))
    return w


def _owned_window(positions, index, length, tile_len):
    """`none`: pixel belongs to the covering tile with the nearest centre, ties to the lower index."""
    w = np.zeros(tile_len, dtype=np.float32)
    own = positions[index]
    for i in range(tile_len):
        p = own + i
        if p >= length:
            break
        best, best_d = None, None
        for t, pos in enumerate(positions):
            if p < pos or p >= pos + tile_len:
                continue
            d = abs(2 * p + 1 - (2 * pos + tile_len))
            if best is None or d < best_d:
                best, best_d = t, d
        if best == index:
            w[i] = 1.0
    return w


def blend_weights(plan, kind, overlap=None):
    """Per-tile float32 weight maps [tileH, tileW] (float32 product of the float32 axis windows)
    and the normaliser N [H, W] (sum of those float32 weights in float64)."""
    overlap = plan["overlap"] if overlap is None else overlap
    tw, th = plan["tileW"], plan["tileH"]
    if kind == "none":
        wx = [_owned_window(plan["xs"], c, plan["width"], tw) for c in range(len(plan["xs"]))]
        wy = [_owned_window(plan["ys"], r, plan["height"], th) for r in range(len(plan["ys"]))]
    else:
        wx = [axis_window(kind, tw, overlap)] * len(plan["xs"])
        wy = [axis_window(kind, th, overlap)] * len(plan["ys"])
    maps = []
    N = np.zeros((plan["height"], plan["width"]), dtype=np.float64)
    for (tid, c, r, x, y) in plan["tiles"]:
        m = (wy[r][:, None] * wx[c][None, :]).astype(np.float32)
        maps.append(m)
        N[y:y + th, x:x + tw] += m
    assert (N > 0).all()
    return maps, N


# ----------------------------------------------------------------------------------------------
# Tiled sampler (docs/ENGINE_SEMANTICS.md "Sampling")
# ----------------------------------------------------------------------------------------------

def sample(model, sched, seed, height, width, tile=None, overlap=0, window="hann", fusion="sample",
           tile_batch=64, record=None, progress=None):
    """Returns the final canvas x as float64 [1, C, H, W] (before the image clamp).
    tile=None: the untiled sampler (the whole canvas in one UNet call).
    record: optional dict; record['x_after_step'][k] = canvas after step k (float64)."""
    C = model.cfg["in_channels"]
    x = canvas_noise(seed, 0, C, height, width).astype(np.float64) * sched.init_noise_sigma
    if tile is not None:
        plan = tile_plan(width, height, tile, overlap)
        maps, N = blend_weights(plan, window)
        th, tw = plan["tileH"], plan["tileW"]
    for k in range(sched.steps):
        K = sched.coefficients(k)
        z = canvas_noise(seed, k + 1, C, height, width).astype(np.float64) if K["sigma"] != 0 else None
        if tile is None:
            eps = model(torch.from_numpy(x[None] * K["modelInputScale"]), K["timestep"])[0].numpy()
            x = apply_step(K, x, eps, z)
        else:
            tiles = plan["tiles"]
            eps_tiles = []
            for b0 in range(0, len(tiles), tile_batch):
                batch = tiles[b0:b0 + tile_batch]
                xin = np.stack([x[:, y:y + th, xx:xx + tw] for (_, _, _, xx, y) in batch]) * K["modelInputScale"]
                eps_tiles.extend(list(model(torch.from_numpy(xin), K["timestep"]).numpy()))
            if fusion == "sample":
                acc = np.zeros_like(x)
                for (tid, _, _, xx, y), e in zip(tiles, eps_tiles):
                    sl = (slice(None), slice(y, y + th), slice(xx, xx + tw))
                    xt = apply_step(K, x[sl], e, z[sl] if z is not None else None)
                    acc[sl] += maps[tid].astype(np.float64) * xt
                x = acc / N
            elif fusion == "noise":
                acc = np.zeros_like(x)
                for (tid, _, _, xx, y), e in zip(tiles, eps_tiles):
                    acc[:, y:y + th, xx:xx + tw] += maps[tid].astype(np.float64) * e
                x = apply_step(K, x, acc / N, z)
            else:
                raise ValueError(fusion)
        if record is not None:
            record.setdefault("x_after_step", {})[k] = x.copy()
        if progress:
            progress(k)
    return x[None]
