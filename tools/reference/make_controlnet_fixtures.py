#!/usr/bin/python3
"""Writes the ControlNetModel fixtures of tests/data/controlnet with diffusers itself.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_controlnet_fixtures.py OUTDIR

Needs torch and diffusers' source; no network, no safetensors package (the files are written by the
small writer below). Every model is built from a config dict with a fixed seed, every parameter
re-randomised (ControlNet's zero convolutions and the hint encoder's conv_out start at zero, which
would make every residual zero), rounded to float16 (the values the files hold), then run on the CPU
in float64 (the reference) and float32 (for the measured distance). Layout of OUTDIR:

    cases.json                           configs, inputs, scales, what each file is, measured errors
    sd1/controlnet/, sd2/controlnet/     diffusers folders: config.json (ControlNetModel) and
                                         diffusion_pytorch_model.safetensors (F16)
    sdxl/control_tiny_xl.safetensors     the original names (ControlNet-v1-1 cldm/cldm.py, ComfyUI's
                                         SDXL cldm: label_emb for the text-time embedding) without a
                                         prefix, as extracted files hold them, F16; its configuration
                                         in sdxl/config/config.json (too small for SDXL's 64-wide heads)
    ldm/control_tiny.pth                 the original names under "control_model.", as the
                                         control_v11*.pth files hold them, F16, torch.save's zip format,
                                         no configuration: the loader reads it from the shapes (so
                                         GroupNorm groups 32 and 8 heads, SD 1.x's)
    <case>/forward.safetensors           inputs (sample, timestep, encoder_hidden_states,
                                         controlnet_cond, SDXL text_embeds and time_ids), the hint
                                         encoder's output (hint_embedding), and per scaling set
                                         <set>.down.<k> / <set>.mid, the residuals of
                                         ControlNetModel.forward(..., conditioning_scale, guess_mode)
                                         (float64, stored F32)

The cases cover: layers_per_block 1 and 2, two and three levels, DownBlock2D first or last, 1x1-conv
and Linear projections, per-level heads and depths, downsample_padding 0, mid_block_type
UNetMidBlock2D, a 1-channel hint, "bgr", global_pool_conditions, SDXL's text_time embedding, hint
encoders of 2, 3 and 4 widths (hint 2x, 4x, 8x the latent), non-square latents, guess mode.

The LDM files are converted here from diffusers' names (the inverse of diffusers'
loaders/single_file_utils.py convert_controlnet_checkpoint) and checked by running that function on
them, which must give back every diffusers tensor (but add_embedding's: that function does not map
label_emb).

In case ldm GroupNorm has one channel per group at its 32 channels, which removes the time
embedding's per-channel shift: its residuals do not depend on the timestep (the other cases' do).

With an old torch that diffusers no longer imports cleanly (Debian 12's 1.13, without
huggingface_hub), modules and attributes the ControlNet forward never uses are stubbed
(--torch-compat, or automatically after a failed plain import).
"""
import importlib.machinery
import json
import os
import struct
import sys
import types

import torch

SEEDS = {"sd1": 2101, "sd2": 2102, "sdxl": 2103, "ldm": 2104}
INPUT_SEED = 99
TOKENS = 11  # any count works; SD's 77 would only make the files larger
WEIGHT_DTYPE = torch.float16

CONFIGS = {
    # SD 1.x-like: 1x1-conv projections, 2 heads, layers_per_block 1, a hint 2x the latent.
    "sd1": dict(in_channels=4, conditioning_channels=3, block_out_channels=[16, 32],
                down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"], layers_per_block=1,
                norm_num_groups=8, cross_attention_dim=24, attention_head_dim=2,
                use_linear_projection=False, conditioning_embedding_out_channels=[8, 16]),
    # SD 2.x-like and odd: three levels, attention only below level 0, Linear projections, heads
    # [1, 2, 4], depths [1, 2, 2], downsample_padding 0, a one-resnet mid block, "bgr", global pooling,
    # a hint 4x the latent.
    "sd2": dict(in_channels=4, conditioning_channels=3, block_out_channels=[8, 16, 16],
                down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                layers_per_block=2, norm_num_groups=4, cross_attention_dim=12, attention_head_dim=[1, 2, 4],
                transformer_layers_per_block=[1, 2, 2], use_linear_projection=True, upcast_attention=True,
                downsample_padding=0, mid_block_type="UNetMidBlock2D",
                controlnet_conditioning_channel_order="bgr", global_pool_conditions=True,
                conditioning_embedding_out_channels=[4, 8, 8]),
    # SDXL-like: DownBlock2D then CrossAttn, Linear projections, heads (2, 4), depths (1, 2), the
    # text_time embedding (addition_time_embed_dim 8, 80 = 32 pooled + 6 x 8), a 1-channel hint, the
    # usual 4-width hint encoder (hint 8x; diffusers' converter knows no other), stored in LDM names.
    "sdxl": dict(in_channels=4, conditioning_channels=1, block_out_channels=[16, 32],
                 down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"], layers_per_block=1,
                 norm_num_groups=8, cross_attention_dim=32, attention_head_dim=[2, 4],
                 transformer_layers_per_block=[1, 2], use_linear_projection=True,
                 addition_embed_type="text_time", addition_time_embed_dim=8,
                 projection_class_embeddings_input_dim=80, conditioning_embedding_out_channels=[4, 8, 8, 8]),
    # The original layout, read without a config: what SD 1.x's shapes cannot show must be SD 1.x's
    # (GroupNorm groups 32, 8 heads); the usual 4-width hint encoder (hint 8x), narrow.
    "ldm": dict(in_channels=4, conditioning_channels=3, block_out_channels=[32, 32],
                down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"], layers_per_block=1,
                norm_num_groups=32, cross_attention_dim=24, attention_head_dim=8,
                use_linear_projection=False, conditioning_embedding_out_channels=[4, 8, 8, 16]),
}
# case -> (batch, latent h, w, timesteps)
INPUTS = {"sd1": (2, 6, 10, [10, 700]), "sd2": (2, 8, 12, [999, 250]), "sdxl": (2, 4, 6, [500, 20]),
          "ldm": (2, 4, 6, [300, 900])}
# scaling sets: name -> (conditioning_scale, guess_mode)
SETS = {"scale": (0.7, False), "guess": (0.5, True)}
SDXL_POOLED = 32
SDXL_TIME_IDS = [[48.0, 80.0, 0.0, 0.0, 48.0, 80.0], [96.0, 64.0, 8.0, 16.0, 48.0, 80.0]]

# weight = gain * N(0,1) / sqrt(fan_in); biases N(0, 0.1^2); norms gamma 1 + N(0, 0.2^2), beta N(0, 0.2^2).
GAIN_QK = 1.5  # sharper attention than the default init, so a wrong softmax/scale shows
BIAS_STD = 0.1
NORM_STD = 0.2


# --- diffusers import (with stubs for an old torch) ---------------------------------------------

class _Placeholder(str):
    """Stands for anything a stubbed module is asked for: callable, subscriptable, a base class, and a
    string (diffusers joins cache paths from huggingface_hub.constants)."""

    def __new__(cls, _name="object"):
        return str.__new__(cls, "object")

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __getitem__(self, key):
        return object

    def __or__(self, other):
        return object

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


def _stub(name):
    module = _StubModule(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = module
    return module


class _StubFinder:
    """Old-style meta-path finder: packages diffusers imports at load time but the forward never uses."""

    def __init__(self, test):
        self.test = test

    def find_module(self, fullname, path=None):
        return self if self.test(fullname) else None

    def load_module(self, fullname):
        return _stub(fullname)


def install_torch_compat():
    import torch.distributed
    missing = lambda name: name.split(".")[0] in ("huggingface_hub", "safetensors")  # noqa: E731
    sys.meta_path.insert(0, _StubFinder(lambda n: missing(n) and n not in sys.modules))
    # torch 2.x submodules, reached only by parallelism and flex-attention code: after the real finders.
    sys.meta_path.append(_StubFinder(lambda n: n.startswith(("torch.distributed.", "torch.nn.attention"))))
    for name in ("xpu", "mps", "mtia", "compiler", "neuron"):
        if not hasattr(torch, name):
            setattr(torch, name, _stub("torch." + name))
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, _Placeholder())
    for name in ("device_mesh", "tensor"):
        if not hasattr(torch.distributed, name):
            setattr(torch.distributed, name, _stub("torch.distributed." + name))
    # Debian 12's torch 1.13 on its OpenBLAS 0.3.21: baddbmm with beta=0 (diffusers' attention scores,
    # Attention.get_attention_scores, in float32 under upcast_attention) now and then returns NaN from
    # finite operands, the uninitialised output apparently read. Products summed without BLAS instead.
    baddbmm = torch.baddbmm

    def baddbmm_without_blas(input, batch1, batch2, *, beta=1, alpha=1, out=None):
        if beta != 0 or out is not None:
            return baddbmm(input, batch1, batch2, beta=beta, alpha=alpha, out=out)
        return alpha * (batch1.unsqueeze(-1) * batch2.unsqueeze(-3)).sum(-2)

    torch.baddbmm = baddbmm_without_blas


def import_diffusers(force_compat):
    if not force_compat:
        try:
            from diffusers import ControlNetModel
            from diffusers.loaders.single_file_utils import convert_controlnet_checkpoint
            return ControlNetModel, convert_controlnet_checkpoint, False
        except Exception as e:  # noqa: BLE001 - any import failure falls back to the shims
            print(f"plain diffusers import failed ({type(e).__name__}: {e}); retrying with torch-compat stubs",
                  flush=True)
            for name in [n for n in sys.modules if n == "diffusers" or n.startswith("diffusers.")]:
                del sys.modules[name]
    install_torch_compat()
    from diffusers import ControlNetModel
    from diffusers.loaders.single_file_utils import convert_controlnet_checkpoint
    return ControlNetModel, convert_controlnet_checkpoint, True


# --- files --------------------------------------------------------------------------------------

_DTYPES = {torch.float32: "F32", torch.float16: "F16"}


def write_safetensors(path, tensors):
    """safetensors with the tensors in name order, the header padded with spaces to a multiple of 8."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


RESNET_LDM = [("norm1.", "in_layers.0."), ("conv1.", "in_layers.2."), ("time_emb_proj.", "emb_layers.1."),
              ("norm2.", "out_layers.0."), ("conv2.", "out_layers.3."), ("conv_shortcut.", "skip_connection.")]


def _resnet(rest):
    for a, b in RESNET_LDM:
        if rest.startswith(a):
            return b + rest[len(a):]
    raise KeyError(rest)


def ldm_name(name, layers, hint_widths):
    """diffusers ControlNetModel name -> ControlNet-v1-1 cldm/cldm.py name (without control_model.)."""
    fixed = {"time_embedding.linear_1.": "time_embed.0.", "time_embedding.linear_2.": "time_embed.2.",
             "add_embedding.linear_1.": "label_emb.0.0.", "add_embedding.linear_2.": "label_emb.0.2.",
             "conv_in.": "input_blocks.0.0.", "controlnet_cond_embedding.conv_in.": "input_hint_block.0.",
             "controlnet_mid_block.": "middle_block_out.0.",
             "controlnet_cond_embedding.conv_out.": f"input_hint_block.{4 * hint_widths - 2}."}
    for a, b in fixed.items():
        if name.startswith(a):
            return b + name[len(a):]
    p = name.split(".")
    if p[0] == "controlnet_cond_embedding" and p[1] == "blocks":
        return f"input_hint_block.{2 * int(p[2]) + 2}." + ".".join(p[3:])
    if p[0] == "controlnet_down_blocks":
        return f"zero_convs.{p[1]}.0." + ".".join(p[2:])
    if p[0] == "down_blocks":
        b, kind = int(p[1]), p[2]
        if kind == "downsamplers":
            return f"input_blocks.{(b + 1) * (layers + 1)}.0.op." + ".".join(p[5:])
        j, rest = int(p[3]), ".".join(p[4:])
        block = f"input_blocks.{1 + b * (layers + 1) + j}"
        return f"{block}.0.{_resnet(rest)}" if kind == "resnets" else f"{block}.1.{rest}"
    if p[0] == "mid_block":
        kind, m, rest = p[1], int(p[2]), ".".join(p[3:])
        return f"middle_block.{2 * m}.{_resnet(rest)}" if kind == "resnets" else f"middle_block.1.{rest}"
    raise KeyError(name)


# --- models -------------------------------------------------------------------------------------

def randomize(model, seed):
    """Deterministic values for every parameter (sorted name order), norms included."""
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
                gain = GAIN_QK if (".to_q." in name or ".to_k." in name) else 1.0
                value = gain * noise / fan_in ** 0.5
            p.copy_(value.to(WEIGHT_DTYPE).to(p.dtype))  # values exactly representable on disk


def forward(model, dtype, inputs, scale, guess, hook=None):
    model.to(dtype)
    captured = {}
    handle = None
    if hook:
        handle = model.controlnet_cond_embedding.register_forward_hook(
            lambda _m, _i, out: captured.__setitem__("hint", out.detach().clone()))
    kwargs = {}
    if "text_embeds" in inputs:
        kwargs["added_cond_kwargs"] = {"text_embeds": inputs["text_embeds"].to(dtype),
                                       "time_ids": inputs["time_ids"].to(dtype)}
    try:
        with torch.no_grad():
            down, mid = model(inputs["sample"].to(dtype), inputs["timestep"],
                              encoder_hidden_states=inputs["encoder_hidden_states"].to(dtype),
                              controlnet_cond=inputs["controlnet_cond"].to(dtype), conditioning_scale=scale,
                              guess_mode=guess, return_dict=False, **kwargs)
    finally:
        if handle:
            handle.remove()
    return list(down), mid, captured.get("hint")


def f32(t):
    return t.detach().to(torch.float32).contiguous()


def make_inputs(case, cfg):
    b, h, w, steps = INPUTS[case]
    factor = 2 ** (len(cfg["conditioning_embedding_out_channels"]) - 1)
    g = torch.Generator().manual_seed(INPUT_SEED + SEEDS[case])
    inputs = {
        "sample": torch.randn((b, cfg["in_channels"], h, w), generator=g, dtype=torch.float32),
        "timestep": torch.tensor(steps, dtype=torch.int64),
        "encoder_hidden_states": torch.randn((b, TOKENS, cfg["cross_attention_dim"]), generator=g,
                                             dtype=torch.float32),
        # an image in [0, 1], as pipelines give it
        "controlnet_cond": torch.rand((b, cfg["conditioning_channels"], factor * h, factor * w), generator=g,
                                      dtype=torch.float32),
    }
    if cfg.get("addition_embed_type") == "text_time":
        inputs["text_embeds"] = torch.randn((b, SDXL_POOLED), generator=g, dtype=torch.float32)
        inputs["time_ids"] = torch.tensor(SDXL_TIME_IDS[:b], dtype=torch.float32)
    return inputs


def check_ldm_conversion(convert, state, ldm, layers):
    """diffusers' own converter must give back every diffusers tensor from the LDM names (but
    add_embedding's: convert_controlnet_checkpoint applies only the "layers" part of its mapping)."""
    back = convert(dict(ldm), {"layers_per_block": layers})
    missing = [k for k in state if k not in back and not k.startswith("add_embedding.")]
    wrong = [k for k in state if k in back and not torch.equal(back[k], state[k])]
    extra = [k for k in back if k not in state]
    if missing or wrong or extra:
        raise SystemExit(f"LDM conversion disagrees with diffusers: missing {missing[:5]}, "
                         f"different {wrong[:5]}, extra {extra[:5]}")


def make_case(ControlNetModel, convert, outdir, case, cfg):
    torch.manual_seed(SEEDS[case])
    model = ControlNetModel(**cfg).eval()
    randomize(model, SEEDS[case])
    state = {k: v.to(WEIGHT_DTYPE) for k, v in model.state_dict().items()}
    os.makedirs(os.path.join(outdir, case), exist_ok=True)
    info = {"config": cfg, "parameters": sum(p.numel() for p in model.parameters()), "tensors": len(state),
            "weights_dtype": "F16"}
    layers, widths = cfg["layers_per_block"], len(cfg["conditioning_embedding_out_channels"])
    if case == "ldm":
        ldm = {"control_model." + ldm_name(k, layers, widths): v for k, v in state.items()}
        check_ldm_conversion(convert, state, ldm, layers)
        path = os.path.join(case, "control_tiny.pth")
        torch.save(ldm, os.path.join(outdir, path))
        info.update(layout="ldm", file=path)
    elif case == "sdxl":
        ldm = {ldm_name(k, layers, widths): v for k, v in state.items()}
        check_ldm_conversion(convert, state, ldm, layers)
        path = os.path.join(case, "control_tiny_xl.safetensors")
        write_safetensors(os.path.join(outdir, path), ldm)
        os.makedirs(os.path.join(outdir, case, "config"), exist_ok=True)
        with open(os.path.join(outdir, case, "config", "config.json"), "w") as f:
            f.write(model.to_json_string())
        info.update(layout="ldm", file=path, config_folder=os.path.join(case, "config"))
    else:
        folder = os.path.join(outdir, case, "controlnet")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(model.to_json_string())
        write_safetensors(os.path.join(folder, "diffusion_pytorch_model.safetensors"), state)
        info.update(layout="diffusers", folder=os.path.join(case, "controlnet"))

    inputs = make_inputs(case, cfg)
    tensors = {k: f32(v) for k, v in inputs.items()}
    info["sets"] = {}
    for name, (scale, guess) in SETS.items():
        down64, mid64, hint = forward(model, torch.float64, inputs, scale, guess, hook=True)
        down32, mid32, _ = forward(model, torch.float32, inputs, scale, guess)
        worst = max((a.double() - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
                    for a, b in zip(down32 + [mid32], down64 + [mid64]))
        if not all(torch.isfinite(t).all() for t in down64 + [mid64, hint]):
            raise SystemExit(f"{case}/{name}: non-finite residuals")
        for k, t in enumerate(down64):
            tensors[f"{name}.down.{k}"] = f32(t)
        tensors[f"{name}.mid"] = f32(mid64)
        tensors["hint_embedding"] = f32(hint)
        info["sets"][name] = {"conditioning_scale": scale, "guess_mode": guess, "down": len(down64),
                              "float32_vs_float64_max_rel": worst}
        print(f"{case}/{name}: {len(down64)} down residuals, mid {list(mid64.shape)}, "
              f"float32 vs float64 max rel {worst:.2e}", flush=True)
    # the timestep and the hint must change the residuals, or a wrong path could pass
    for what in ("timestep", "controlnet_cond"):
        other = dict(inputs)
        other[what] = inputs[what].flip(0)
        down, mid, _ = forward(model, torch.float64, other, 0.7, False)
        effect = (mid - forward(model, torch.float64, inputs, 0.7, False)[1]).abs().max().item()
        info[f"{what}_swap_effect"] = effect
        expected_none = case == "ldm" and what == "timestep"  # one channel per group: see the top
        if not effect > 1e-3 and not expected_none:
            print(f"WARNING {case}: swapping {what} changes the mid residual by {effect:.2e}", flush=True)
    write_safetensors(os.path.join(outdir, case, "forward.safetensors"), tensors)
    info["forward"] = os.path.join(case, "forward.safetensors")
    info["inputs"] = {"batch": INPUTS[case][0], "latent": INPUTS[case][1:3], "timesteps": INPUTS[case][3],
                      "tokens": TOKENS}
    print(f"{case}: {info['tensors']} tensors, {info['parameters']} parameters", flush=True)
    return info


def main():
    args = [a for a in sys.argv[1:] if a != "--torch-compat"]
    if len(args) != 1:
        sys.exit("usage: make_controlnet_fixtures.py [--torch-compat] OUTDIR")
    outdir = args[0]
    ControlNetModel, convert, compat = import_diffusers("--torch-compat" in sys.argv)
    import diffusers
    diffusers.utils.logging.set_verbosity_error()  # not the dtype-cast notes of every .to()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    cases = {case: make_case(ControlNetModel, convert, outdir, case, cfg) for case, cfg in CONFIGS.items()}
    doc = {"generator": "tools/reference/make_controlnet_fixtures.py", "torch": torch.__version__,
           "diffusers": getattr(diffusers, "__version__", "?"), "torch_compat_stubs": compat,
           "tolerance_relative_l2": 1e-5, "cases": cases}
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(outdir) for n in files)
    print(f"total {total} bytes", flush=True)
    if total >= 1_500_000:
        print("WARNING: fixtures over the 1.5 MB budget", flush=True)


if __name__ == "__main__":
    main()
