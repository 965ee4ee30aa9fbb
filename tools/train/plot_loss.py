#!/usr/bin/python3
"""Plot loss.csv (from train_ddpm.py) to a PNG: python3 tools/train/plot_loss.py loss.csv out.png [heldout]"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
steps = [int(r["step"]) for r in rows]
loss = [float(r["loss"]) for r in rows]
fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
ax.plot(steps, loss, lw=1, label="training loss (mean of each 50 steps)")
if len(sys.argv) > 3:
    ax.axhline(float(sys.argv[3]), color="C3", ls="--", lw=1, label="held-out loss, EMA weights, end")
ax.set_yscale("log")
ax.set_ylim(0.01, 0.2)
ax.set_xlabel("step (batch 256)")
ax.set_ylabel("epsilon MSE")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2])
