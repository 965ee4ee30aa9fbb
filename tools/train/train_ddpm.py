#!/usr/bin/env python3
"""Train Tessera's default model: an unconditional pixel-space DDPM (diffusers UNet2DModel).

  python3 tools/train/train_ddpm.py --data wallpapers.npz --minutes 7.5 --out OUTDIR
  python3 tools/train/train_ddpm.py --data ... --minutes 5 --resume OLDOUT --out OUTDIR
  python3 tools/train/train_ddpm.py --export-only --resume OLDOUT --out MODELDIR

Training: epsilon prediction, linear betas 1e-4..0.02 over 1000 steps, t uniform; random 64x64
crops of the photographs at several scales (the .npz holds each photo resized to long sides of
384/256/192/128 px, see make_dataset.py) with horizontal flips; AdamW (lr --lr after --warmup steps,
betas 0.9/0.999, weight decay 0), grad-norm clip 1, bf16 autocast on CUDA, EMA of the weights
(decay min(--ema, (1+s)/(10+s))). Runs for --minutes of wall time, then stops cleanly and writes:

  OUT/diffusion_pytorch_model.safetensors  EMA weights in fp16 (diffusers names)
  OUT/results.tar                          config.json, scheduler_config.json, loss.csv, summary.json,
                                           samples_64.png (16 DDIM-50 samples), samples_tiled256.png
  OUT/ckpt.safetensors.partN               resume checkpoint: model + EMA in fp32, AdamW moments in
                                           bf16, step; one safetensors stream cut into <= 15 MB parts

The held-out denoising loss (summary.json) is the mean epsilon-MSE of the EMA model on a fixed set
of crops of the held-out photographs, t stratified over 0..999 and fixed noise (seeded), and the
same measure on the training photographs for comparison.
Compatible with torch 1.13 (CPU) and torch 2.x (CUDA). No package beyond torch, numpy and PIL.
"""
import argparse
import io
import json
import math
import os
import struct
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unet2d import DEFAULT_CONFIG, SCHEDULER_CONFIG, UNet2DModel, unet_flops  # noqa: E402

PART_BYTES = 15 * 1000 * 1000
CROP = 64

# ---------------------------------------------------------------- safetensors (no package needed)
_DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
_TD = {v: k for k, v in _DT.items()}


def st_bytes(tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_load(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base, out = 8 + n, {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = _TD[e["dtype"]]
        raw = bytearray(data[base + a:base + b])
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.zeros(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out, meta


def write_parts(data, out, stem):
    for k in range(0, max(1, math.ceil(len(data) / PART_BYTES))):
        with open(os.path.join(out, "%s.part%d" % (stem, k)), "wb") as f:
            f.write(data[k * PART_BYTES:(k + 1) * PART_BYTES])


def read_parts(folder, stem):
    data, k = b"", 0
    while os.path.exists(os.path.join(folder, "%s.part%d" % (stem, k))):
        with open(os.path.join(folder, "%s.part%d" % (stem, k)), "rb") as f:
            data += f.read()
        k += 1
    if not data:
        raise SystemExit("no %s.part0 in %s" % (stem, folder))
    return data


# ---------------------------------------------------------------- data
class Crops:
    """All pyramid levels of one split in one padded uint8 tensor; crops gathered on the device."""

    def __init__(self, npz, split, device):
        meta = json.loads(str(npz["meta"]))
        ids = {r["id"] for r in meta if r["split"] == split}
        arrs = [npz[k] for k in sorted(npz.files) if k.startswith("img") and int(k[3:6]) in ids]
        arrs = [a for a in arrs if min(a.shape[:2]) >= CROP]
        hm, wm = max(a.shape[0] for a in arrs), max(a.shape[1] for a in arrs)
        pad = np.zeros((len(arrs), hm, wm, 3), np.uint8)
        for i, a in enumerate(arrs):
            pad[i, :a.shape[0], :a.shape[1]] = a
        self.images = torch.from_numpy(pad).to(device)
        self.hw = torch.tensor([a.shape[:2] for a in arrs], device=device)
        self.n_photos, self.n_levels = len(ids), len(arrs)
        self.ar = torch.arange(CROP, device=device)

    def sample(self, b, gen, flip=True):
        dev = self.images.device
        m = torch.randint(0, self.n_levels, (b,), generator=gen, device=dev)
        h, w = self.hw[m, 0], self.hw[m, 1]
        y = (torch.rand(b, generator=gen, device=dev) * (h - CROP + 1)).long()
        x = (torch.rand(b, generator=gen, device=dev) * (w - CROP + 1)).long()
        xs = x[:, None] + self.ar[None]
        if flip:
            f = torch.rand(b, generator=gen, device=dev) < 0.5
            xs = torch.where(f[:, None], x[:, None] + (CROP - 1 - self.ar)[None], xs)
        ys = y[:, None] + self.ar[None]
        c = self.images[m[:, None, None], ys[:, :, None], xs[:, None, :]]  # [b,64,64,3]
        return c.permute(0, 3, 1, 2).float() / 127.5 - 1.0


# ---------------------------------------------------------------- diffusion
def alphas_cumprod(device):
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    return torch.cumprod(1.0 - betas, 0).float().to(device)


@torch.no_grad()
def heldout_loss(model, crops, acp, n=2048, batch=256, seed=1234):
    dev = acp.device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    total, count = 0.0, 0
    for s in range(0, n, batch):
        b = min(batch, n - s)
        x0 = crops.sample(b, gen, flip=False)
        t = ((torch.arange(s, s + b, device=dev) * 1000) // n).long()  # stratified over 0..999
        noise = torch.randn(x0.shape, generator=gen, device=dev)
        a = acp[t][:, None, None, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        with autocast(dev):
            eps = model(xt, t)
        total += F.mse_loss(eps.float(), noise, reduction="sum").item() / (3 * CROP * CROP)
        count += b
    return total / count


def ddim_timesteps(steps):
    # diffusers DDIMScheduler "leading" spacing with steps_offset 0
    return [i * (1000 // steps) for i in range(steps)][::-1]


@torch.no_grad()
def ddim_sample(model, acp, shape, steps, gen, tile=None, overlap=16):
    """DDIM (eta 0, x0 clipped to [-1,1]). With `tile`, epsilon is predicted per overlapping tile
    and blended with a Hann-like window: a rough preview of a tiled Tessera run, not its contract."""
    dev = acp.device
    x = torch.randn(shape, generator=gen, device=dev)
    ts = ddim_timesteps(steps)
    if tile:
        H = shape[-1]
        pos = list(range(0, H - tile + 1, tile - overlap))
        if pos[-1] != H - tile:
            pos.append(H - tile)
        win1 = torch.sin(math.pi * (torch.arange(tile, device=dev) + 0.5) / tile) ** 2 + 1e-3
        win = win1[:, None] * win1[None, :]
    for k, t in enumerate(ts):
        tt = torch.full((shape[0],), t, device=dev, dtype=torch.long)
        if tile:
            num = torch.zeros_like(x)
            den = torch.zeros_like(x[:, :1])
            for py in pos:
                for px in pos:
                    with autocast(dev):
                        e = model(x[:, :, py:py + tile, px:px + tile], tt).float()
                    num[:, :, py:py + tile, px:px + tile] += e * win
                    den[:, :, py:py + tile, px:px + tile] += win
            eps = num / den
        else:
            with autocast(dev):
                eps = model(x, tt).float()
        a = acp[t]
        a_prev = acp[ts[k + 1]] if k + 1 < len(ts) else torch.tensor(1.0, device=dev)
        x0 = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
        eps = (x - a.sqrt() * x0) / (1 - a).sqrt()
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    return x


def to_png(x, nrow, path):
    from PIL import Image
    x = ((x.clamp(-1, 1) + 1) * 127.5).round().byte().cpu()
    b, c, h, w = x.shape
    ncol = math.ceil(b / nrow)
    grid = torch.full((3, ncol * (h + 2) + 2, nrow * (w + 2) + 2), 255, dtype=torch.uint8)
    for i in range(b):
        r, q = divmod(i, nrow)
        grid[:, 2 + r * (h + 2):2 + r * (h + 2) + h, 2 + q * (w + 2):2 + q * (w + 2) + w] = x[i]
    Image.fromarray(grid.permute(1, 2, 0).numpy()).save(path)


class autocast:
    """bf16 autocast on CUDA, nothing on CPU (torch 1.13's CPU bf16 autocast is slow)."""

    def __init__(self, dev):
        self.ctx = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else None

    def __enter__(self):
        if self.ctx:
            self.ctx.__enter__()

    def __exit__(self, *a):
        if self.ctx:
            self.ctx.__exit__(*a)


# ---------------------------------------------------------------- checkpoint / export
def save_ckpt(out, model, ema, opt, step, keep_opt):
    ts = {}
    for k, v in model.state_dict().items():
        ts["model." + k] = v.float()
    for k, v in ema.state_dict().items():
        ts["ema." + k] = v.float()
    if keep_opt:
        names = {id(p): n for n, p in model.named_parameters()}
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p, {})
                if "exp_avg" in st:
                    ts["opt.m." + names[id(p)]] = st["exp_avg"].to(torch.bfloat16)
                    ts["opt.v." + names[id(p)]] = st["exp_avg_sq"].to(torch.bfloat16)
    meta = {"step": step, "config": json.dumps(model.config), "has_opt": int(keep_opt)}
    write_parts(st_bytes(ts, meta), out, "ckpt.safetensors")


def load_ckpt(folder, device):
    ts, meta = st_load(read_parts(folder, "ckpt.safetensors"))
    cfg = json.loads(meta["config"])
    model, ema = UNet2DModel(cfg).to(device), UNet2DModel(cfg).to(device)
    model.load_state_dict({k[6:]: v for k, v in ts.items() if k.startswith("model.")})
    ema.load_state_dict({k[4:]: v for k, v in ts.items() if k.startswith("ema.")})
    opt_state = {k: v for k, v in ts.items() if k.startswith("opt.")}
    return model, ema, int(meta["step"]), opt_state


def export(out, ema):
    cfg = {k: v for k, v in ema.config.items()}
    sd = {k: v.half() for k, v in ema.state_dict().items()}
    with open(os.path.join(out, "diffusion_pytorch_model.safetensors"), "wb") as f:
        f.write(st_bytes(sd, {"format": "pt"}))
    return {"config.json": json.dumps(cfg, indent=2) + "\n",
            "scheduler_config.json": json.dumps(SCHEDULER_CONFIG, indent=2) + "\n"}


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help=".npz from make_dataset.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=7.5, help="wall-time budget of the training loop")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    ap.add_argument("--resume", help="folder holding ckpt.safetensors.part*")
    ap.add_argument("--export-only", action="store_true", help="with --resume: write the fp16 model files")
    ap.add_argument("--channels", default=",".join(str(c) for c in DEFAULT_CONFIG["block_out_channels"]))
    ap.add_argument("--layers", type=int, default=DEFAULT_CONFIG["layers_per_block"], help="layers_per_block")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-crops", type=int, default=2048)
    ap.add_argument("--sample-steps", type=int, default=50)
    ap.add_argument("--no-samples", action="store_true")
    ap.add_argument("--no-opt-state", action="store_true", help="leave AdamW moments out of the checkpoint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    opt_state, step0 = {}, 0
    if a.resume:
        model, ema, step0, opt_state = load_ckpt(a.resume, dev)
        print("resumed %s at step %d (optimizer moments: %s)" % (a.resume, step0, bool(opt_state)))
    else:
        cfg = dict(DEFAULT_CONFIG, block_out_channels=[int(c) for c in a.channels.split(",")],
                   layers_per_block=a.layers)
        model, ema = UNet2DModel(cfg).to(dev), UNet2DModel(cfg).to(dev)
        ema.load_state_dict(model.state_dict())
    if a.export_only:
        files = export(a.out, ema)
        for name, text in files.items():
            with open(os.path.join(a.out, name), "w") as f:
                f.write(text)
        print("exported EMA weights (fp16) to", a.out)
        return 0
    ema.requires_grad_(False)
    ema.eval()
    nparam = sum(p.numel() for p in model.parameters())
    flops = unet_flops(UNet2DModel(model.config), CROP)
    print("params %d (%.1f MB fp16), %.3f GFLOP per 64x64 evaluation, device %s, torch %s" % (
        nparam, 2 * nparam / 1e6, flops / 1e9, dev, torch.__version__))

    npz = np.load(a.data)
    train, held = Crops(npz, "train", dev), Crops(npz, "heldout", dev)
    print("train: %d photos / %d levels; held out: %d photos / %d levels" % (
        train.n_photos, train.n_levels, held.n_photos, held.n_levels))
    acp = alphas_cumprod(dev)

    if dev.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
        ema = ema.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.0)
    if opt_state:
        for n, p in model.named_parameters():
            if "opt.m." + n in opt_state:
                opt.state[p] = {"step": torch.tensor(float(step0)), "exp_avg": opt_state["opt.m." + n].to(dev).float(),
                                "exp_avg_sq": opt_state["opt.v." + n].to(dev).float()}
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed * 1000003 + step0)
    ema_params = list(ema.parameters())
    model_params = list(model.parameters())

    log = ["step,elapsed_s,loss,lr"]
    budget = a.minutes * 60.0
    step, acc, nacc = step0, 0.0, 0
    acc_t = torch.zeros((), device=dev)
    t_loop = time.time()
    model.train()
    while True:
        if step - step0 >= a.max_steps > 0 or time.time() - t_loop >= budget:
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x0 = train.sample(a.batch, gen)
        t = torch.randint(0, 1000, (a.batch,), generator=gen, device=dev)
        noise = torch.randn(x0.shape, generator=gen, device=dev)
        al = acp[t][:, None, None, None]
        xt = al.sqrt() * x0 + (1 - al).sqrt() * noise
        if dev.type == "cuda":
            xt = xt.contiguous(memory_format=torch.channels_last)
        with autocast(dev):
            eps = model(xt, t)
        loss = F.mse_loss(eps.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model_params, 1.0)
        opt.step()
        step += 1
        d = min(a.ema, (1.0 + step) / (10.0 + step))
        with torch.no_grad():
            if hasattr(torch, "_foreach_lerp_"):
                torch._foreach_lerp_(ema_params, model_params, 1.0 - d)
            else:
                for pe, pm in zip(ema_params, model_params):
                    pe.mul_(d).add_(pm.detach(), alpha=1.0 - d)
        acc_t += loss.detach()
        nacc += 1
        if step % a.log_every == 0:
            acc = acc_t.item() / nacc
            el = time.time() - t_loop
            log.append("%d,%.1f,%.5f,%.2e" % (step, el, acc, lr))
            if step % (a.log_every * 10) == 0 or step - step0 == a.log_every:
                print("step %d  %.1fs  loss %.4f  lr %.1e  %.1f it/s" % (step, el, acc, lr, (step - step0) / el))
            acc_t.zero_()
            nacc = 0
    train_s = time.time() - t_loop
    print("stopped at step %d after %.1fs of training (%.2f it/s)" % (step, train_s, (step - step0) / max(train_s, 1e-9)))
    model.eval()
    keep_opt = not a.no_opt_state
    save_ckpt(a.out, model.to(memory_format=torch.contiguous_format), ema, opt, step, keep_opt)
    files = export(a.out, ema)
    summary = {"steps": step, "steps_this_run": step - step0, "train_seconds": round(train_s, 1),
               "batch": a.batch, "lr": a.lr, "warmup": a.warmup, "ema": a.ema, "params": nparam,
               "gflop_per_64x64_eval": round(flops / 1e9, 3), "torch": torch.__version__,
               "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
               "resumed_from_step": step0, "opt_state_in_ckpt": keep_opt,
               "final_logged_loss": float(log[-1].split(",")[2]) if len(log) > 1 else None}
    summary["heldout_loss_ema"] = heldout_loss(ema, held, acp, a.eval_crops)
    summary["train_loss_ema_same_protocol"] = heldout_loss(ema, train, acp, a.eval_crops)
    summary["heldout_loss_raw_model"] = heldout_loss(model, held, acp, a.eval_crops)
    print(json.dumps(summary))
    files["summary.json"] = json.dumps(summary, indent=2) + "\n"
    files["loss.csv"] = "\n".join(log) + "\n"
    pngs = []
    if not a.no_samples:
        g2 = torch.Generator(device=dev)
        g2.manual_seed(7)
        x = ddim_sample(ema, acp, (16, 3, CROP, CROP), a.sample_steps, g2)
        to_png(x, 4, os.path.join(a.out, "samples_64.png"))
        x = ddim_sample(ema, acp, (2, 3, 256, 256), a.sample_steps, g2, tile=CROP, overlap=16)
        to_png(x, 2, os.path.join(a.out, "samples_tiled256.png"))
        pngs = ["samples_64.png", "samples_tiled256.png"]
    with tarfile.open(os.path.join(a.out, "results.tar"), "w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        for name in pngs:
            tar.add(os.path.join(a.out, name), arcname=name)
    for name in pngs:
        os.remove(os.path.join(a.out, name))
    total = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print("wrote %s (%d files, %.1f MB) in %.1fs total" % (a.out, len(os.listdir(a.out)), total / 1e6, time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
