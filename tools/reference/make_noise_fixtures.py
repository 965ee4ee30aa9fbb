#!/usr/bin/python3
"""Writes the fixtures of tests/core/tst_torchnoise.cpp: torch's own CPU randn, A1111's NV generator
(its modules/rng_philox.py, run as it is), and references for A1111's per-image noise (modules/rng.py
ImageRNG) and ComfyUI's initial noise (comfy/sample.py prepare_noise) computed with torch.

    /usr/bin/python3 tools/reference/make_noise_fixtures.py --rng-philox PATH/TO/rng_philox.py [OUTDIR]

OUTDIR defaults to tests/data/noise. rng_philox.py is AUTOMATIC1111/stable-diffusion-webui's
modules/rng_philox.py (numpy only); it is imported from the given path and not copied anywhere. The
committed files were made with Debian 12's torch 1.13 and numpy 1.24 on an x86-64 CPU with AVX-512.

torch.randn on the CPU has two kernels (aten/src/ATen/native/cpu/DistributionTemplates.h): the AVX2
one, which x86-64 builds run on CPUs with AVX2 or AVX-512, and the portable one. This script runs its
torch part three times in child processes: with ATEN_CPU_CAPABILITY unset (this CPU's best: the
"avx2" variant of the fixtures; the script refuses a CPU without AVX2), with
ATEN_CPU_CAPABILITY=avx2 (checked identical to the first), and with ATEN_CPU_CAPABILITY=default
(the "scalar" variant). Everything else runs with the capability unset.

The A1111 and ComfyUI references mirror these functions with the same torch and numpy operations:
  A1111 modules/rng.py: randn (torch.manual_seed + torch.randn, or a fresh rng_philox.Generator for
    NV), randn_without_seed, create_generator, slerp, ImageRNG.first and ImageRNG.next, with the
    seeds of modules/processing.py process_images_inner (seed + x, subseed + x);
  ComfyUI comfy/sample.py: prepare_noise (torch.manual_seed, one torch.randn, or per-index draws
    with numpy.unique for batch_index).

Layout:
    OUTDIR/fixtures.json   {"torch": version, "numpy": version, "cpu_capability": ..., "cases": [...]}
    OUTDIR/fixtures.bin    float32 little-endian values of the cases stored in full
A case has a "kind" (torch_cpu, nv, a1111, comfy, slerp), its parameters and "outputs": one entry
per call, each {"shape": [...], "offset": float index into fixtures.bin, "count": n} when stored in
full, or {"shape": [...], "count": n, "sha256": of the float32 bytes, "samples": [[index, float bits],
...]} for the large ones. Deterministic: two runs write identical files.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import torch

SEEDS = [0, 1, 42, 2**32 + 5, 123456789]
# Shapes of one randn call: below 16 (double path), 16, 17, around 32, not multiples of 16, odd.
SMALL_SHAPES = [[1], [2], [3], [5], [15], [16], [17], [31], [32], [33], [100], [252], [1000], [3, 5, 7], [4, 7, 9],
                [2, 4, 13, 11]]
LARGE_SHAPES = [[4, 64, 64], [4, 96, 128], [4, 128, 128]]
FULL_LIMIT = 2000  # outputs with more values are stored as sha256 + samples, except where marked full


def float_bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


class Store:
    """Collects cases and the float data stored in full."""

    def __init__(self):
        self.values = []
        self.count = 0

    def output(self, tensor, full=None):
        a = np.ascontiguousarray(np.asarray(tensor, dtype=np.float32))
        flat = a.reshape(-1)
        entry = {"shape": list(a.shape), "count": int(flat.size)}
        if full is None:
            full = flat.size <= FULL_LIMIT
        if full:
            entry["offset"] = self.count
            self.values.append(flat.copy())
            self.count += flat.size
        else:
            entry["sha256"] = hashlib.sha256(flat.astype("<f4").tobytes()).hexdigest()
            n = flat.size
            picks = sorted(set(list(range(16)) + list(range(n - 16, n)) +
                               [int(i) for i in np.random.RandomState(n % 1000).randint(0, n, 32)]))
            bits = float_bits(flat)
            entry["samples"] = [[i, int(bits[i])] for i in picks]
        return entry

    def bytes(self):
        if not self.values:
            return b""
        return np.concatenate(self.values).astype("<f4").tobytes()


# --- torch CPU randn (child process: the capability is read when torch loads) -------------------------


def torch_cpu_cases():
    """Every torch_cpu case as {"name", "seed", "calls": [shape...], "via", "outputs": [float32 arrays]}."""
    cases = []

    def run(name, seed, calls, via="generator"):
        if via == "global":
            torch.manual_seed(seed)
            outs = [torch.randn(shape).numpy() for shape in calls]
        else:
            g = torch.Generator().manual_seed(seed)
            outs = [torch.randn(shape, generator=g).numpy() for shape in calls]
        cases.append({"name": name, "seed": seed, "calls": calls, "via": via, "outputs": outs})

    for seed in SEEDS:
        for shape in SMALL_SHAPES + LARGE_SHAPES:
            run("x".join(map(str, shape)), seed, [shape])
    # Two successive draws from one generator (an A1111 image's initial and first step noise).
    run("4x64x64 twice", 0, [[4, 64, 64], [4, 64, 64]])
    run("4x128x128 twice", 42, [[4, 128, 128], [4, 128, 128]])
    # The cached double sample of the small path across calls, and through a vectorised call.
    run("small calls keep the cache", 42, [[3], [5], [1], [17], [2], [7], [4, 4], [1]])
    run("odd small calls", 123456789, [[1], [1], [1], [15], [3]])
    # The default generator seeded by torch.manual_seed (ComfyUI, A1111's randn(seed, shape)).
    run("global 4x64x64", 2**32 + 5, [[4, 64, 64]], via="global")
    return cases


def child_main(path):
    cases = torch_cpu_cases()
    np.savez(path, **{f"{i}_{k}": o for i, c in enumerate(cases) for k, o in enumerate(c["outputs"])})
    meta = [{k: v for k, v in c.items() if k != "outputs"} for c in cases]
    with open(path + ".json", "w") as f:
        json.dump({"cases": meta, "config": torch.__config__.show()}, f)


def run_child(capability, tmpdir):
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    path = os.path.join(tmpdir, f"cpu_{capability or 'best'}.npz")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path], env=env, check=True)
    with open(path + ".json") as f:
        meta = json.load(f)
    data = np.load(path)
    for i, c in enumerate(meta["cases"]):
        c["outputs"] = [data[f"{i}_{k}"] for k in range(len(c["calls"]))]
    usage = [line.split(":", 1)[1].strip() for line in meta["config"].splitlines() if "CPU capability usage" in line]
    return meta["cases"], usage[0] if usage else "unknown"


# --- A1111 (modules/rng.py, modules/rng_philox.py) -------------------------------------------------------


class A1111:
    """modules/rng.py for one randn_source ("CPU" or "NV"), on a CPU device."""

    def __init__(self, source, rng_philox):
        self.source = source
        self.rng_philox = rng_philox
        self.nv_rng = None

    def manual_seed(self, seed):
        if self.source == "NV":
            self.nv_rng = self.rng_philox.Generator(seed)
            return
        torch.manual_seed(seed)

    def randn(self, seed, shape, generator=None):
        self.manual_seed(seed)
        if self.source == "NV":
            return torch.asarray((generator or self.nv_rng).randn(shape))
        return torch.randn(shape, device="cpu", generator=generator)

    def randn_without_seed(self, shape, generator=None):
        if self.source == "NV":
            return torch.asarray((generator or self.nv_rng).randn(shape))
        return torch.randn(shape, device="cpu", generator=generator)

    def create_generator(self, seed):
        if self.source == "NV":
            return self.rng_philox.Generator(seed)
        return torch.Generator("cpu").manual_seed(int(seed))


def a1111_slerp(val, low, high):
    """modules/rng.py slerp: norms over dim 1, the linear blend above a mean dot of 0.9995."""
    low_norm = low / torch.norm(low, dim=1, keepdim=True)
    high_norm = high / torch.norm(high, dim=1, keepdim=True)
    dot = (low_norm * high_norm).sum(1)
    if dot.mean() > 0.9995:
        return low * val + high * (1 - val)
    omega = torch.acos(dot)
    so = torch.sin(omega)
    return (torch.sin((1.0 - val) * omega) / so).unsqueeze(1) * low + (torch.sin(val * omega) / so).unsqueeze(1) * high


class ImageRNG:
    """modules/rng.py ImageRNG (eta_noise_seed_delta passed in instead of read from shared.opts)."""

    def __init__(self, rng, shape, seeds, subseeds, subseed_strength, seed_resize_from_h, seed_resize_from_w, ensd):
        self.rng = rng
        self.shape = shape
        self.seeds = seeds
        self.subseeds = subseeds
        self.subseed_strength = subseed_strength
        self.seed_resize_from_h = seed_resize_from_h
        self.seed_resize_from_w = seed_resize_from_w
        self.ensd = ensd
        self.generators = [rng.create_generator(seed) for seed in seeds]
        self.is_first = True

    def first(self):
        rng = self.rng
        if self.seed_resize_from_h <= 0 or self.seed_resize_from_w <= 0:
            noise_shape = self.shape
        else:
            noise_shape = (self.shape[0], self.seed_resize_from_h // 8, self.seed_resize_from_w // 8)
        xs = []
        for i, (seed, generator) in enumerate(zip(self.seeds, self.generators)):
            subnoise = None
            if self.subseeds is not None and self.subseed_strength != 0:
                subseed = 0 if i >= len(self.subseeds) else self.subseeds[i]
                subnoise = rng.randn(subseed, noise_shape)
            if noise_shape != self.shape:
                noise = rng.randn(seed, noise_shape)
            else:
                noise = rng.randn(seed, self.shape, generator=generator)
            if subnoise is not None:
                noise = a1111_slerp(self.subseed_strength, noise, subnoise)
            if noise_shape != self.shape:
                x = rng.randn(seed, self.shape, generator=generator)
                dx = (self.shape[2] - noise_shape[2]) // 2
                dy = (self.shape[1] - noise_shape[1]) // 2
                w = noise_shape[2] if dx >= 0 else noise_shape[2] + 2 * dx
                h = noise_shape[1] if dy >= 0 else noise_shape[1] + 2 * dy
                tx = 0 if dx < 0 else dx
                ty = 0 if dy < 0 else dy
                dx = max(-dx, 0)
                dy = max(-dy, 0)
                x[:, ty:ty + h, tx:tx + w] = noise[:, dy:dy + h, dx:dx + w]
                noise = x
            xs.append(noise)
        if self.ensd:
            self.generators = [rng.create_generator(seed + self.ensd) for seed in self.seeds]
        return torch.stack(xs)

    def next(self):
        if self.is_first:
            self.is_first = False
            return self.first()
        return torch.stack([self.rng.randn_without_seed(self.shape, generator=g) for g in self.generators])


def a1111_cases(store, rng_philox):
    cases = []
    # (name, latent [C, H, W], seed, subseed, strength, resize (h, w) in pixels, ENSD, batch, first image)
    plans = [
        ("plain batch 2", (4, 10, 8), 1000, 0, 0.0, (0, 0), 0, 2, 0),
        ("second batch of the job", (4, 10, 8), 1000, 0, 0.0, (0, 0), 0, 2, 2),
        ("odd latent", (4, 5, 7), 31, 0, 0.0, (0, 0), 0, 2, 0),
        ("variation 0.3", (4, 10, 8), 77, 555, 0.3, (0, 0), 0, 2, 0),
        ("seed resize pad", (4, 10, 8), 2**32 + 5, 0, 0.0, (64, 48), 0, 2, 0),
        ("seed resize crop odd", (4, 10, 8), 123456789, 0, 0.0, (40, 88), 0, 1, 0),
        ("resize to the same size", (4, 10, 8), 9, 0, 0.0, (80, 64), 0, 1, 0),
        ("variation, resize, ENSD", (4, 10, 8), 42, 7, 0.3, (64, 48), 31337, 2, 0),
        ("ENSD", (4, 10, 8), 42, 0, 0.0, (0, 0), 31337, 2, 0),
        ("variation 1.0", (4, 8, 8), 3, 4, 1.0, (0, 0), 0, 1, 0),
    ]
    for source in ("CPU", "NV"):
        for name, shape, seed, subseed, strength, (rh, rw), ensd, batch, first in plans:
            rng = A1111(source, rng_philox)
            # modules/processing.py process_images_inner: all_seeds / all_subseeds of the job.
            seeds = [seed + (x if strength == 0 else 0) for x in range(first, first + batch)]
            subseeds = [subseed + x for x in range(first, first + batch)]
            image_rng = ImageRNG(rng, shape, seeds, subseeds, strength, rh, rw, ensd)
            outputs = [store.output(image_rng.next().numpy(), full=True) for _ in range(3)]
            cases.append({"kind": "a1111", "name": f"{source} {name}", "source": source, "shape": list(shape),
                          "seed": seed, "subseed": subseed, "subseed_strength": strength, "seed_resize_from_h": rh,
                          "seed_resize_from_w": rw, "ensd": ensd, "batch": batch, "first_image": first,
                          "outputs": outputs})
    return cases


def slerp_cases(store):
    """rng.py slerp on given inputs: the angle branch and the linear (nearly parallel) branch."""
    cases = []
    g = torch.Generator().manual_seed(2024)
    for name, shape, val, closeness in [("angle", (4, 6, 5), 0.3, None), ("angle wide", (2, 9, 13), 0.8, None),
                                        ("nearly parallel", (4, 6, 5), 0.3, 0.01)]:
        low = torch.randn(shape, generator=g)
        other = torch.randn(shape, generator=g)
        high = other if closeness is None else low + closeness * other
        out = a1111_slerp(val, low, high)
        cases.append({"kind": "slerp", "name": name, "val": val, "shape": list(shape),
                      "inputs": [store.output(low.numpy(), full=True), store.output(high.numpy(), full=True)],
                      "outputs": [store.output(out.numpy(), full=True)]})
    return cases


def comfy_prepare_noise(latent_image, seed, noise_inds=None):
    """ComfyUI comfy/sample.py prepare_noise."""
    generator = torch.manual_seed(seed)
    if noise_inds is None:
        return torch.randn(latent_image.size(), dtype=latent_image.dtype, layout=latent_image.layout,
                           generator=generator, device="cpu")
    unique_inds, inverse = np.unique(noise_inds, return_inverse=True)
    noises = []
    for i in range(unique_inds[-1] + 1):
        noise = torch.randn([1] + list(latent_image.size())[1:], dtype=latent_image.dtype,
                            layout=latent_image.layout, generator=generator, device="cpu")
        if i in unique_inds:
            noises.append(noise)
    noises = [noises[i] for i in inverse]
    return torch.cat(noises, axis=0)


def comfy_cases(store):
    cases = []
    for name, shape, seed, inds in [("batch 3", [3, 4, 8, 8], 42, None),
                                    ("seed above 2^32", [1, 4, 8, 8], 2**32 + 42, None),
                                    ("batch_index 2,0", [2, 4, 8, 8], 42, [2, 0]),
                                    ("batch_index repeated", [3, 4, 8, 8], 7, [1, 1, 3]),
                                    ("batch_index M%16 != 0", [2, 4, 5, 5], 123456789, [0, 1]),
                                    ("whole batch M%16 != 0", [2, 4, 5, 5], 123456789, None),
                                    ("batch 2 of 4x24x20", [2, 4, 24, 20], 0, None)]:
        out = comfy_prepare_noise(torch.zeros(shape), seed, inds)
        cases.append({"kind": "comfy", "name": name, "shape": shape, "seed": seed, "batch_index": inds,
                      "outputs": [store.output(out.numpy(), full=True)]})
    return cases


def nv_cases(store, rng_philox):
    cases = []

    def run(name, seed, calls, full_first=False):
        g = rng_philox.Generator(seed)
        outs = [store.output(g.randn(tuple(shape)), full=True if full_first and k == 0 else None)
                for k, shape in enumerate(calls)]
        cases.append({"kind": "nv", "name": name, "seed": seed, "calls": calls, "outputs": outs})

    run("documented example", 0, [[3, 4]])
    for seed in SEEDS:
        for shape in [[1], [17], [3, 5, 7], [4, 8, 8]]:
            run("x".join(map(str, shape)), seed, [shape])
        run("4x128x128", seed, [[4, 128, 128]])
    run("4x64x64 twice", 0, [[4, 64, 64], [4, 64, 64]], full_first=True)
    run("three calls", 42, [[5], [4, 8, 8], [17]])
    return cases


def load_rng_philox(path):
    spec = importlib.util.spec_from_file_location("rng_philox", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rng-philox", help="A1111's modules/rng_philox.py")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("outdir", nargs="?",
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                                             "noise"))
    args = parser.parse_args()
    if args.child:
        torch.set_num_threads(1)
        child_main(args.child)
        return
    if not args.rng_philox:
        parser.error("--rng-philox is required")
    torch.set_num_threads(1)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        best, best_usage = run_child(None, tmp)
        avx2, avx2_usage = run_child("avx2", tmp)
        scalar, scalar_usage = run_child("default", tmp)
    if "AVX2" not in best_usage and "AVX512" not in best_usage:
        sys.exit(f"this CPU's torch kernels are not AVX2 ({best_usage}): the avx2 variant cannot be made here")
    same = all(np.array_equal(float_bits(a), float_bits(b))
               for ca, cb in zip(best, avx2) for a, b in zip(ca["outputs"], cb["outputs"]))
    print(f"capabilities: {best_usage} | {avx2_usage} | {scalar_usage}; best == avx2: {same}")
    if not same:
        sys.exit("the AVX2 capability gives other values than this CPU's best: which is the avx2 variant?")

    rng_philox = load_rng_philox(args.rng_philox)
    store = Store()
    cases = []
    for variant, runs in (("avx2", best), ("scalar", scalar)):
        for c in runs:
            # Stored in full: the small ones, and the two-draw [4, 64, 64] case (avx2) or the single
            # seed-42 [4, 64, 64] draw (scalar), so that a mismatch there is counted value by value.
            full_case = (variant == "avx2" and c["name"] == "4x64x64 twice") or \
                        (variant == "scalar" and c["name"] == "4x64x64" and c["seed"] == 42)
            outputs = [store.output(o, full=True if full_case else None) for o in c["outputs"]]
            cases.append({"kind": "torch_cpu", "name": c["name"], "variant": variant, "seed": c["seed"],
                          "via": c["via"], "calls": c["calls"], "outputs": outputs})
    cases += nv_cases(store, rng_philox)
    cases += a1111_cases(store, rng_philox)
    cases += slerp_cases(store)
    cases += comfy_cases(store)

    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "fixtures.bin"), "wb") as f:
        f.write(store.bytes())
    doc = {"torch": torch.__version__, "numpy": np.__version__, "cpu_capability": best_usage,
           "scalar_capability": scalar_usage, "cases": cases}
    with open(os.path.join(args.outdir, "fixtures.json"), "w") as f:
        # One case per line.
        head = {k: v for k, v in doc.items() if k != "cases"}
        f.write(json.dumps(head)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} cases, {store.count} floats stored in full ({store.count * 4} bytes)")


if __name__ == "__main__":
    main()
