#!/usr/bin/python3
"""sd-webui-controlnet's tile_resample preprocessor and its resize of the processed map to the run's
size, run with OpenCV on small odd images, for tests/data/controlnet/preprocess.

    /usr/bin/python3 tools/reference/make_control_preprocessor_fixtures.py tests/data/controlnet/preprocess

Needs numpy and OpenCV (Debian's python3-opencv); deterministic. What runs, as the extension runs it:
  scripts/preprocessor/legacy/processor.py tile_resample: below a rate of 1.1 the image as it is,
  else cv2.resize to (int(W / rate), int(H / rate)) with INTER_AREA;
  scripts/controlnet.py detectmap_proc: "Just Resize" (the img2img start image as the control image:
  A1111's img2img resize mode 0) is high_quality_resize to (w, h); "Crop and Resize" (a unit's own
  image) scales by the larger ratio, rounded, then takes the centre;
  high_quality_resize: 3 to 199 colours INTER_NEAREST, a smaller size INTER_AREA, else INTER_CUBIC
  (two-colour black-and-white maps' thinning is not transcribed: no case has one).
Writes OUTDIR/cases.json (per case: its input image, the rate, the resize mode, the resampled size, the
interpolation high_quality_resize chose) and OUTDIR/images.safetensors ("<image>" and "<case>": H x W x 3,
the 8-bit values as float16, which holds them exactly).
"""
import json
import os
import sys

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unet2d_ref import write_safetensors  # noqa: E402


def tile_resample(img, rate):
    if rate < 1.1:
        return img
    h, w = img.shape[:2]
    return cv2.resize(img, (int(float(w) / float(rate)), int(float(h) / float(rate))), interpolation=cv2.INTER_AREA)


def high_quality_resize(x, size):
    if x.shape[0] == size[1] and x.shape[1] == size[0]:
        return x, "none"
    smaller = size[0] * size[1] < x.shape[0] * x.shape[1]
    colours = len(np.unique(x.reshape(-1, x.shape[2]), axis=0))
    assert colours != 2, "two-colour maps are not transcribed"
    if 2 < colours < 200:
        how, interpolation = "nearest", cv2.INTER_NEAREST
    elif smaller:
        how, interpolation = "area", cv2.INTER_AREA
    else:
        how, interpolation = "cubic", cv2.INTER_CUBIC
    return cv2.resize(x, size, interpolation=interpolation), how


def detectmap_resize(x, mode, h, w):
    if mode == "just_resize":
        return high_quality_resize(x, (w, h))
    old_h, old_w = float(x.shape[0]), float(x.shape[1])
    k = max(float(h) / old_h, float(w) / old_w)
    y, how = high_quality_resize(x, (int(np.round(old_w * k)), int(np.round(old_h * k))))
    pad_h = max(0, (y.shape[0] - h) // 2)
    pad_w = max(0, (y.shape[1] - w) // 2)
    return y[pad_h:pad_h + h, pad_w:pad_w + w], how


def photo_like(rng, h, w):
    """A smooth image with noise: hundreds of colours, as a photograph has."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([128 + 90 * np.sin(xx / 7.0 + c) * np.cos(yy / 5.0 - c) for c in range(3)], axis=2)
    return np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)


def few_colours(rng, h, w, n):
    palette = rng.randint(0, 256, (n, 3)).astype(np.uint8)
    return palette[rng.randint(0, n, (h, w))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.RandomState(9031)
    inputs = {"photo 77x53": photo_like(rng, 53, 77), "photo 64x96": photo_like(rng, 96, 64),
              "palette 41x37": few_colours(rng, 37, 41, 50)}
    # name -> input, rate, resize mode
    cases, tensors = {}, {}
    for name, img in inputs.items():
        tensors[name] = img.astype(np.float16)
        for rate in (1.1, 2.0, 3.7, 8.0):
            for mode in ("just_resize", "crop_and_resize"):
                cases["%s rate %g %s" % (name, rate, mode)] = (name, rate, mode)
    meta = {}
    for case, (name, rate, mode) in cases.items():
        img = inputs[name]
        h, w = img.shape[:2]
        small = tile_resample(img, rate)
        out, how = detectmap_resize(small, mode, h, w)
        assert out.shape == img.shape, (case, out.shape)
        tensors[case] = out.astype(np.float16)
        meta[case] = dict(image=name, width=w, height=h, rate=rate, resize_mode=mode, resampled=[small.shape[1], small.shape[0]],
                          interpolation=how)
    write_safetensors(os.path.join(outdir, "images.safetensors"), tensors)
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(dict(generator="tools/reference/make_control_preprocessor_fixtures.py", opencv=cv2.__version__,
                       cases=meta), f, indent=1)


if __name__ == "__main__":
    main()
