#!/usr/bin/python3
"""Writes the small image fixtures of tests/app/tst_initimage.cpp (PIL, Debian's python3-pil).

  /usr/bin/python3 tests/data/images/make_fixtures.py

quadrants.jpg   16x16 RGB, 4:4:4, quality 100: four solid 8x8 blocks (each one JPEG block, so
                they decode within a few levels): red, green / blue, white
grey.jpg        8x8 greyscale JPEG, every pixel 128
cmyk.jpg        8x8 CMYK JPEG (Adobe marker, inverted ink as Photoshop writes it): pure cyan ink
alpha.png       2x1 RGBA PNG: opaque red, then a fully transparent black pixel
grey16.png      2x2 16-bit greyscale PNG: 0, 65535 / 32896 (= 128 * 257), 65535; no gAMA chunk
"""
import os

import numpy as np
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))

q = np.zeros((16, 16, 3), np.uint8)
q[:8, :8] = (255, 0, 0)
q[:8, 8:] = (0, 255, 0)
q[8:, :8] = (0, 0, 255)
q[8:, 8:] = (255, 255, 255)
Image.fromarray(q, "RGB").save(os.path.join(here, "quadrants.jpg"), quality=100, subsampling=0)

Image.fromarray(np.full((8, 8), 128, np.uint8), "L").save(os.path.join(here, "grey.jpg"), quality=100)

Image.new("CMYK", (8, 8), (255, 0, 0, 0)).save(os.path.join(here, "cmyk.jpg"), quality=100)

a = np.array([[[255, 0, 0, 255], [0, 0, 0, 0]]], np.uint8)
Image.fromarray(a, "RGBA").save(os.path.join(here, "alpha.png"))

g = np.array([[0, 65535], [32896, 65535]], np.uint16)
Image.fromarray(g.astype(np.int32), "I").convert("I;16").save(os.path.join(here, "grey16.png"))
