#!/usr/bin/env python3
"""The table of bench/gpu/run.sh before-after: the same `tessera-cli bench` rows with two builds.

  before_after_table.py add RUNS.tsv BUILD RUN BENCH.csv
      appends each row of a `tessera-cli bench --csv` file to RUNS.tsv: its label, the build, the run's number,
      the row's figure and its value
  before_after_table.py table RUNS.tsv
      per row: each build's median over its runs (the runs beside it) and after / before (below 1: the after
      build is faster)

A row's figure is what the bench reports as its result: forward_ms (an SD UNet per call), total_s (a whole
job), seconds_per_image (the DDPM shapes), median_ms (the VAE).
"""
import csv
import statistics
import sys

FIGURES = ("forward_ms", "total_s", "seconds_per_image", "median_ms")


def label(row, figure):
    shape = row.get("shape", "?")
    if figure == "forward_ms":
        return f"{shape} UNet batch {row.get('unet_batch')}"
    if figure == "total_s":
        return f"{shape} job {row.get('size')}x{row.get('size')}, tile batch {row.get('batch')}"
    if figure == "median_ms":
        return f"vae {row.get('pass')} {row.get('size')}, {row.get('mode')}"
    return f"{shape} B {row.get('batch')}, graphs {row.get('graphs')}"


def add(runs_path, build, run, csv_path):
    with open(csv_path, newline="") as f, open(runs_path, "a") as runs:
        for row in csv.DictReader(f):
            figure = next((k for k in FIGURES if row.get(k)), None)
            if figure is None:
                continue
            runs.write(f"{label(row, figure)}\t{build}\t{run}\t{figure}\t{row[figure]}\n")


def table(runs_path):
    values = {}  # (label, figure) -> {build: [values]}, in the order rows first ran
    with open(runs_path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            values.setdefault((r["row"], r["metric"]), {}).setdefault(r["build"], []).append(float(r["value"]))
    lines = [("row", "before", "after", "after/before")]
    for (name, figure), by_build in values.items():
        unit = "ms" if figure.endswith("_ms") else "s"
        cells = []
        for build in ("before", "after"):
            v = by_build.get(build, [])
            cells.append(f"{statistics.median(v):.4g} {unit} ({', '.join(f'{x:.4g}' for x in v)})" if v else "-")
        b, a = by_build.get("before"), by_build.get("after")
        ratio = f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else "-"
        lines.append((name, cells[0], cells[1], ratio))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    print("(medians of each build's runs; after/before below 1: the after build is faster)")


def main(argv):
    if len(argv) == 6 and argv[1] == "add":
        add(argv[2], argv[3], argv[4], argv[5])
    elif len(argv) == 3 and argv[1] == "table":
        table(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
