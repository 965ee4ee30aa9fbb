#!/usr/bin/env python3
"""Writes a 512x512 RGB test scene (sky gradient, sun, hills, a house) as PNG with the standard
library only: the start image of the 4x upscale run (bench/gpu/run.sh renders).
    python3 bench/pytorch/make_scene.py OUT.png"""
import math
import struct
import sys
import zlib

N = 512


def pixel(x, y):
    u, v = x / N, y / N
    r, g, b = 90 + 100 * v, 150 + 60 * v, 235 - 20 * v                      # sky
    if (x - 380) ** 2 + (y - 110) ** 2 < 45 ** 2:
        r, g, b = 255, 225, 120                                              # sun
    hill = 330 + 40 * math.sin(u * 6.0) + 20 * math.sin(u * 17.0 + 1.0)
    if y > hill:
        shade = 0.8 + 0.2 * math.sin(x * 0.21) * math.sin(y * 0.17)
        r, g, b = 60 * shade, 140 * shade, 55 * shade                        # grass
    if 150 <= x < 260 and 290 <= y < 380:
        r, g, b = 200, 170, 140                                              # wall
        if 180 <= x < 210 and 320 <= y < 350:
            r, g, b = 90, 130, 170                                           # window
    if 140 <= x < 270 and 230 <= y < 290 and abs(x - 205) < (y - 230) * 65 / 60:
        r, g, b = 150, 50, 40                                                # roof
    return bytes(max(0, min(255, int(c))) for c in (r, g, b))


def main():
    rows = b"".join(b"\0" + b"".join(pixel(x, y) for x in range(N)) for y in range(N))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", N, N, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
    with open(sys.argv[1], "wb") as f:
        f.write(png)


if __name__ == "__main__":
    main()
