"""Where PyTorch's UNet forward spends GPU time: the kernels of one tile-batch forward.

Same network as bench/pytorch/torch_tiled_ddim.py (random weights, fp16, channels_last). For each mode
(eager, compile = torch.compile inductor default), prints the forward time as a replayed CUDA
graph (CUDA events, median of 30) and the top kernels from torch.profiler over 10 eager (or
compiled) forwards, per forward. Compare with `tessera-cli bench --profile --shape SHAPE --tile TILE --batch BATCH`.

  python3 bench/pytorch/torch_profile.py --shape cifar --tile 64 --batch 1,32 --modes eager,compile
"""
import argparse
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_tiled_ddim import SHAPES, UNet2D, unet_flops  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="cifar", choices=SHAPES)
    p.add_argument("--tile", type=int, default=64)
    p.add_argument("--batch", default="1,32")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    cfg = SHAPES[a.shape]
    for mode in a.modes.split(","):
        for batch in [int(b) for b in a.batch.split(",")]:
            torch.manual_seed(0)
            model = UNet2D(cfg["ch"], cfg["down"], cfg["up"])
            flops = unet_flops(model, a.tile) * batch
            model = model.cuda().half().to(memory_format=torch.channels_last).eval()
            net = torch.compile(model, dynamic=False) if mode == "compile" else model
            x = torch.randn(batch, 3, a.tile, a.tile, device="cuda").half().contiguous(memory_format=torch.channels_last)
            t = torch.full((batch,), 500.0, device="cuda")
            with torch.no_grad():
                for _ in range(3):
                    net(x, t)
                torch.cuda.synchronize()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    net(x, t)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    net(x, t)
                ms = []
                for _ in range(30):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    g.replay()
                    e.record()
                    torch.cuda.synchronize()
                    ms.append(s.elapsed_time(e))
                med = statistics.median(ms)
                print(f"torch {mode} {a.shape} tile {a.tile} batch {batch}: graph replay forward median {med:.3f} ms, "
                      f"{flops / med * 1e-9:.1f} TFLOP/s", flush=True)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        net(x, t)
                    torch.cuda.synchronize()
            rows = []
            for ev in prof.key_averages():
                dt = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
                if dt > 0 and ev.device_type == torch.autograd.DeviceType.CUDA:
                    rows.append((dt / 10 / 1000, ev.count // 10, ev.key))
            rows.sort(reverse=True)
            total = sum(r[0] for r in rows)
            print(f"  kernels per forward: sum {total:.3f} ms over {sum(r[1] for r in rows)} launches")
            for ms_, n, k in rows[: a.top]:
                print(f"  {ms_:8.4f} ms {100 * ms_ / total:5.1f}% x{n:<3d} {k[:110]}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
