#!/usr/bin/env python3
"""Reference outputs for Tessera's upscale models (core/models/upscale/) from spandrel.

    PYTHONPATH=/path/to/spandrel/libs/spandrel python3 tools/reference/make_upscale_fixtures.py OUTDIR

OUTDIR belongs at tests/data/upscale. Needs torch, safetensors and spandrel's source (pure Python,
github chaiNNer-org/spandrel, libs/spandrel); no network. Every model is a random-weight instance of a
spandrel architecture class at a small, odd configuration, built with a fixed seed in float32 on the CPU
with one thread, saved the way users' files hold it, then loaded back through spandrel's own detector
(spandrel.ModelLoader().load_from_state_dict) so the file layout, the inferred hyperparameters and the
forward pass are all spandrel's.

Cases (spandrel architectures/<Arch>/__init__.py for detection, __arch/ for the forward):
  esrgan_old_x4            RRDBNet old layout (model.0, model.1.sub.N.RDBk...), 8 features, 2 blocks, x4
  esrgan_basicsr_x2_unshuffle  BasicSR/Real-ESRGAN names (conv_first, body.N.rdbk, conv_body, conv_up1,
                           conv_hr, conv_last) under "params_ema", pixel-unshuffle 2 (RealESRGAN_x2plus' shape)
  esrgan_basicsr_x1_unshuffle4 the same names, unshuffle 4, x1
  esrgan_trunk_x8          BSRGAN/RealSR names (RRDB_trunk, trunk_conv, upconv1..3, HRconv), x8
  esrgan_plus_x4           ESRGAN+ (conv1x1 in every dense block), x4
  compact_x4               SRVGGNetCompact, 16 features, 5 convs, PReLU, x4
  compact_x3               SRVGGNetCompact, 8 features, 3 convs, x3 (pixel shuffle 3, nearest x3)
  span_x4                  SPAN, 16 features, x4, input normalisation on, stored eval_conv stale
  span_x2_nonorm_noeval    SPAN, 8 features, x2, norm off (no_norm buffer), eval_conv tensors left out of
                           the file (spandrel re-fuses them from sk/conv.* in eval mode, so they carry nothing)

Outputs per case, under OUTDIR/<case>/:
  model.safetensors   the state dict (float32) as the file holds it
  model.pth           torch.save zip format (esrgan_basicsr_x2_unshuffle, under its params_ema wrapper; compact_x4)
  model_legacy.pth    torch.save(_use_new_zipfile_serialization=False) (compact_x4)
  model_fp16.safetensors  float16 copy (esrgan_old_x4)
  io.safetensors      input [1,C,H,W] in [0,1]; output = spandrel's ImageModelDescriptor.__call__ without its
                      final clamp (pad to the size requirements, forward, crop), float32; output64 = the same
                      in float64 (stored as float32); clamped = __call__ itself
  meta.json           what spandrel detected (architecture id, scale, channels, tags, size requirements) and
                      the configuration built, the input size and library versions
"""
import json
import math
import os
import sys
from collections import OrderedDict

import torch
from safetensors.torch import save_file

import spandrel
from spandrel import ModelLoader
from spandrel.__helpers.size_req import pad_tensor
from spandrel.architectures.Compact import Compact
from spandrel.architectures.ESRGAN import ESRGAN
from spandrel.architectures.SPAN import SPAN


def randomize(model, seed):
    """Every parameter and buffer redrawn: conv weights ~ N(0, 0.5/sqrt(fan_in)), biases and PReLU slopes
    non-trivial, so a loader that drops or swaps a tensor cannot match."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 4:
                fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 / math.sqrt(fan_in)))
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            else:  # PReLU slopes
                p.copy_(torch.rand(p.shape, generator=g) * 0.4)


def esrgan_old_state(in_nc, out_nc, nf, nb, scale, plus, shuffle, seed):
    m = ESRGAN(in_nc=in_nc * (shuffle or 1) ** 2, out_nc=out_nc, num_filters=nf, num_blocks=nb,
               scale=scale * (shuffle or 1), plus=plus, shuffle_factor=shuffle)
    randomize(m, seed)
    return OrderedDict((k, v.detach().clone()) for k, v in m.state_dict().items())


def old_to_basicsr(sd, nb, upsamples, trunk):
    """The inverse of spandrel architectures/ESRGAN/__init__.py _to_old_arch for one of its two new layouts:
    BasicSR (trunk False) or BSRGAN/RealSR RRDB_trunk names (trunk True)."""
    out = OrderedDict()
    last_up = 3 * upsamples
    for k, v in sd.items():
        parts = k.split(".")
        kind = parts[-1]
        if k.startswith("model.0."):
            out["conv_first." + kind] = v
        elif k.startswith("model.1.sub.%d." % nb):
            out[("trunk_conv." if trunk else "conv_body.") + kind] = v
        elif k.startswith("model.1.sub."):
            # model.1.sub.N.RDBk.convj.0.kind
            n, rdb, conv = parts[3], parts[4], parts[5]
            if trunk:
                out["RRDB_trunk.%s.%s.%s.%s" % (n, rdb, conv, kind)] = v
            else:
                out["body.%s.rdb%s.%s.%s" % (n, rdb[3:], conv, kind)] = v
        else:
            idx = int(parts[1])
            if idx == last_up + 2:
                out[("HRconv." if trunk else "conv_hr.") + kind] = v
            elif idx == last_up + 4:
                out["conv_last." + kind] = v
            else:
                assert idx % 3 == 0, k
                out[("upconv%d." if trunk else "conv_up%d.") % (idx // 3) + kind] = v
    assert len(out) == len(sd)
    return out


def compact_state(in_nc, out_nc, nf, nconv, scale, seed):
    m = Compact(num_in_ch=in_nc, num_out_ch=out_nc, num_feat=nf, num_conv=nconv, upscale=scale)
    randomize(m, seed)
    return OrderedDict((k, v.detach().clone()) for k, v in m.state_dict().items())


def span_state(in_nc, out_nc, nf, scale, norm, seed):
    m = SPAN(num_in_ch=in_nc, num_out_ch=out_nc, feature_channels=nf, upscale=scale, norm=norm)
    m.train()  # train mode: eval_conv is left as drawn (stale), as a file may hold it
    randomize(m, seed)
    return OrderedDict((k, v.detach().clone()) for k, v in m.state_dict().items())


def run(descriptor, x):
    """ImageModelDescriptor.__call__ (spandrel __helpers/model_descriptor.py) without the final clamp."""
    _, _, h, w = x.shape
    _, padded = pad_tensor(x, descriptor.size_requirements)
    with torch.no_grad():
        y = descriptor.model(padded)
    return y[..., : h * descriptor.scale, : w * descriptor.scale]


def flat(state):
    """What a safetensors file of this state holds: the inner dict of a params_ema wrapper, contiguous."""
    inner = state.get("params_ema", state) if isinstance(state.get("params_ema"), dict) else state
    return OrderedDict((k, v.contiguous()) for k, v in inner.items())


def case(outdir, name, state, in_nc, size, config, seed, pth=False, legacy=False, fp16=False, drop=()):
    folder = os.path.join(outdir, name)
    os.makedirs(folder, exist_ok=True)
    descriptor = ModelLoader().load_from_state_dict(state)
    descriptor.model.eval()
    g = torch.Generator().manual_seed(seed + 1000)
    x = torch.rand((1, in_nc, size[0], size[1]), generator=g)
    y32 = run(descriptor, x)
    clamped = descriptor(x.clone())
    d64 = ModelLoader().load_from_state_dict(state)
    d64.model.double().eval()
    y64 = run(d64, x.double()).float()

    weights = flat(state)
    for key in drop:
        weights = OrderedDict((k, v) for k, v in weights.items() if key not in k)
    save_file(dict(weights), os.path.join(folder, "model.safetensors"))
    if fp16:
        save_file({k: v.half() for k, v in weights.items()}, os.path.join(folder, "model_fp16.safetensors"))
    if pth:
        torch.save(state, os.path.join(folder, "model.pth"))
    if legacy:
        torch.save(state, os.path.join(folder, "model_legacy.pth"), _use_new_zipfile_serialization=False)
    save_file({"input": x.contiguous(), "output": y32.contiguous(), "output64": y64.contiguous(),
               "clamped": clamped.contiguous()}, os.path.join(folder, "io.safetensors"))
    req = descriptor.size_requirements
    meta = {
        "case": name,
        "architecture": descriptor.architecture.id,
        "scale": descriptor.scale,
        "input_channels": descriptor.input_channels,
        "output_channels": descriptor.output_channels,
        "tags": list(descriptor.tags),
        "size_requirements": {"minimum": req.minimum, "multiple_of": req.multiple_of, "square": req.square},
        "built_with": config,
        "input_size": list(size),
        "dropped_from_file": list(drop),
        "relative_l2_output64_vs_output": float((y64 - y32).norm() / y64.norm()),
        "torch": torch.__version__,
        "spandrel": getattr(spandrel, "__version__", "unknown"),
    }
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print(name, meta["architecture"], meta["scale"], meta["tags"], tuple(y32.shape),
          "rel64=%.2e" % meta["relative_l2_output64_vs_output"])


def main():
    outdir = sys.argv[1]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    sd = esrgan_old_state(3, 3, 8, 2, 4, False, None, 1)
    case(outdir, "esrgan_old_x4", sd, 3, (13, 11), {"arch": "ESRGAN", "nf": 8, "nb": 2, "scale": 4}, 1,
         fp16=True)

    sd = esrgan_old_state(3, 3, 8, 1, 2, False, 2, 2)
    bsr = old_to_basicsr(sd, 1, 2, trunk=False)
    case(outdir, "esrgan_basicsr_x2_unshuffle", {"params_ema": bsr}, 3, (15, 9),
         {"arch": "ESRGAN", "layout": "basicsr", "nf": 8, "nb": 1, "scale": 2, "shuffle": 2}, 2, pth=True)

    sd = esrgan_old_state(3, 3, 8, 1, 1, False, 4, 3)
    bsr = old_to_basicsr(sd, 1, 2, trunk=False)
    case(outdir, "esrgan_basicsr_x1_unshuffle4", bsr, 3, (10, 7),
         {"arch": "ESRGAN", "layout": "basicsr", "nf": 8, "nb": 1, "scale": 1, "shuffle": 4}, 3)

    sd = esrgan_old_state(3, 3, 8, 1, 8, False, None, 4)
    trunk = old_to_basicsr(sd, 1, 3, trunk=True)
    case(outdir, "esrgan_trunk_x8", trunk, 3, (5, 7),
         {"arch": "ESRGAN", "layout": "RRDB_trunk", "nf": 8, "nb": 1, "scale": 8}, 4)

    sd = esrgan_old_state(3, 3, 8, 1, 4, True, None, 5)
    case(outdir, "esrgan_plus_x4", sd, 3, (9, 6), {"arch": "ESRGAN+", "nf": 8, "nb": 1, "scale": 4}, 5)

    sd = compact_state(3, 3, 16, 5, 4, 6)
    case(outdir, "compact_x4", sd, 3, (21, 17), {"arch": "Compact", "nf": 16, "num_conv": 5, "scale": 4}, 6,
         pth=True, legacy=True)

    sd = compact_state(3, 3, 8, 3, 3, 7)
    case(outdir, "compact_x3", sd, 3, (11, 14), {"arch": "Compact", "nf": 8, "num_conv": 3, "scale": 3}, 7)

    sd = span_state(3, 3, 16, 4, True, 8)
    case(outdir, "span_x4", sd, 3, (12, 9), {"arch": "SPAN", "nf": 16, "scale": 4, "norm": True}, 8)

    sd = span_state(3, 3, 8, 2, False, 9)
    case(outdir, "span_x2_nonorm_noeval", sd, 3, (8, 13), {"arch": "SPAN", "nf": 8, "scale": 2, "norm": False}, 9,
         drop=(".eval_conv.",))


if __name__ == "__main__":
    main()
