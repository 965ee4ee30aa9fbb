#!/usr/bin/python3
"""Build the training set of Tessera's default model from Debian's wallpaper packages.

  /usr/bin/python3 tools/train/make_dataset.py --out wallpapers.npz \
      --provenance tools/train/provenance.csv

Steps (all reproducible from the Debian archive; needs apt-get, dpkg-deb, numpy and PIL):
  1. `apt-get download` each package of PACKAGES into --work, unpack with `dpkg-deb -x`.
  2. Read the package's /usr/share/doc/<pkg>/copyright (machine-readable DEP-5 format) and find the
     stanza that covers each selected image (the last matching `Files:` pattern wins, as DEP-5 says;
     patterns name upstream source paths, so they are matched against every tail of the installed
     path). An image is kept only if that stanza's license is in FREE_LICENSES. Packages whose
     copyright file is not DEP-5 are skipped: no per-file license can be read from them.
  3. Only photographs are used: PHOTOS lists them per package. The list was made by looking at a
     contact sheet of every raster image in these packages; illustrations, renders, logos and
     gradients (all of gnome-backgrounds 43, desktop-base, sway-backgrounds, ukui-wallpapers,
     xfdesktop4-data, most of plasma-workspace-wallpapers and lxqt-themes) are left out because the
     model should learn natural textures. Every listed file must also pass photo_problem(), a
     simple check against flat art (posterized: few grey levels; or large perfectly smooth areas);
     files it rejects are listed with the reason and left out.
  4. Each photo is converted to RGB and resized with PIL's Lanczos filter so its long side is each of
     LEVELS (pixels); levels whose short side would be under 64, or that would enlarge the photo,
     are dropped.
  5. Held-out split, stable across dataset versions so that training can resume from a checkpoint
     of an earlier version without its training photos leaking into the held-out set: photos of
     PHOTOS_V1 keep their version-1 split (HELDOUT_V1 names the held-out ones); of the photos added
     later (PHOTOS_V2) every 8th in sorted order (index % 8 == 3) is held out.
  6. Writes an .npz: `img{i:03d}_{L}` uint8 [H,W,3] per photo i and level L, `levels` (LEVELS) and
     `meta` (JSON of the provenance rows: id, split, ...); and the provenance table as CSV.
     Rejected files (license, photo check) are listed on stdout with the reason.

Dataset versions: v1 had 37 photos from 4 packages (32 train, 5 held out); v2 adds
lxqt-themes (11 photos), python3-skimage (4: upstream marks them public domain or CC0; Debian's
copyright file covers them as BSD-3-Clause) and sddm-theme-maldives (1, CC-BY-3.0).
"""
import argparse
import csv
import fnmatch
import glob
import hashlib
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
from PIL import Image

PACKAGES = ["mate-backgrounds", "plasma-workspace-wallpapers", "lomiri-wallpapers-16.04",
            "lomiri-wallpapers-20.04", "gnome-backgrounds", "sway-backgrounds", "desktop-base",
            "ukui-wallpapers", "xfdesktop4-data", "lxqt-themes", "python3-skimage", "sddm-theme-maldives",
            "lomiri-wallpapers", "lxde-common", "fvwm-crystal", "mypaint-data-extras"]

# Photographs, as paths relative to the unpacked package root (globs allowed). Version 1:
PHOTOS_V1 = {
    "mate-backgrounds": ["usr/share/backgrounds/mate/nature/*.jpg"],
    "lomiri-wallpapers-16.04": [
        "usr/share/backgrounds/" + f for f in [
            "Bridge_by_Sander_Klootwijk.jpg", "Dragonfly_by_Bolly.jpg", "Picture_0B_by_freespace.jpg",
            "Picture_1A_by_freespace.jpg", "Wine_by_Jakkub_Mede.jpg", "aitzgorri_by_Aitzol_Berasategi.jpg",
            "free_by_Peter_Nerlich.jpg", "friends_by_Aitzol_Berasategi.jpg", "greentock_by_Peter_Nerlich.jpg",
            "life_by_Aitzol_Berasategi.jpg", "picosdeeuropa_by_Aitzol_Berasategi.jpg",
            "seeding_by_Clements_Engelhardt.jpg", "sunset_by_Aitzol_Berasategi.jpg"]],
    "lomiri-wallpapers-20.04": ["usr/share/backgrounds/Kleiber_by_Lukas_Baubkus.jpg"],
    # one image per wallpaper: the largest landscape variant is picked below
    "plasma-workspace-wallpapers": [
        "usr/share/wallpapers/%s/contents/images/*" % d for d in [
            "BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow", "FallenLeaf", "Grey",
            "Kite", "OneStandsOut", "Path", "summer_1am"]],
}
HELDOUT_V1 = {"/usr/share/backgrounds/Picture_1A_by_freespace.jpg",
              "/usr/share/backgrounds/seeding_by_Clements_Engelhardt.jpg",
              "/usr/share/backgrounds/mate/nature/GreenMeadow.jpg",
              "/usr/share/wallpapers/ColdRipple/contents/images/2560x1600.jpg",
              "/usr/share/wallpapers/Path/contents/images/2560x1600.jpg"}

# Added in version 2. Looked at and left out: lxqt-themes' origami/triangles/waves/plasma art,
# lomiri-wallpapers (one Ubuntu warty render), lxde-common and fvwm-crystal (logo art),
# mypaint-data-extras (flat paper textures), skimage's greyscale and texture samples and its
# motorcycle (no license stated upstream), the other sddm themes (renders).
PHOTOS_V2 = {
    "lxqt-themes": ["usr/share/lxqt/wallpapers/" + f for f in [
        "Butterfly-Kenneth-Wimer.jpg", "Valendas.png", "after-the-rain.jpg", "appleflower.png", "beam.png",
        "butterfly.png", "cloud.png", "drop.png", "flowers.png", "fog.jpg", "this-is-not-windows.jpg"]],
    "python3-skimage": ["usr/lib/python3/dist-packages/skimage/data/" + f for f in [
        "astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]],
    "sddm-theme-maldives": ["usr/share/sddm/themes/maldives/background.jpg"],
}
PHOTOS = {pkg: PHOTOS_V1.get(pkg, []) + PHOTOS_V2.get(pkg, []) for pkg in set(PHOTOS_V1) | set(PHOTOS_V2)}

# Debian's copyright file names the package's authors; upstream names each photographer.
UPSTREAM_CREDIT = {
    ("python3-skimage", "astronaut.png"): ("NASA (Eileen Collins)", "public domain per skimage.data.astronaut"),
    ("python3-skimage", "chelsea.png"): ("Stefan van der Walt", "CC0 per skimage.data.chelsea"),
    ("python3-skimage", "coffee.png"): ("Rachel Michetti", "CC0 per skimage.data.coffee"),
    ("python3-skimage", "rocket.jpg"): ("SpaceX", "public domain per skimage.data.rocket"),
}

FREE_LICENSES = {"GPL-2", "GPL-2+", "GPL-3", "GPL-3+", "LGPL-2.1", "LGPL-2.1+", "LGPL-3", "LGPL-3+",
                 "CC-BY-2.0", "CC-BY-3.0", "CC-BY-4.0", "CC-BY-SA-2.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0",
                 "CC0-1.0", "Expat", "MIT", "BSD-2-clause", "BSD-3-clause", "public-domain"}

LEVELS = [384, 256, 192, 128]
HELDOUT_EVERY, HELDOUT_AT = 8, 3

# photo_problem() thresholds, measured on a 256-px thumbnail of the luma. The photos selected
# here have 103..256 distinct grey levels and 7..40 % of pixels with |Laplacian| < 0.5 (smooth);
# flat art, gradients and posterized images have 1..28 grey levels or 45..100 % smooth pixels.
# Colour statistics do not separate the two (monochrome photos such as Grey and ColdRipple
# have under 70 colours; much vector art has thousands), so the check is only a safety net
# behind the curated PHOTOS list, not a replacement for looking.
MIN_GREY_LEVELS, MAX_SMOOTH = 64, 0.45


def sh(cmd, cwd=None):
    return subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout


def fetch(pkg, work):
    debs = glob.glob(os.path.join(work, "debs", pkg + "_*.deb"))
    if not debs:
        os.makedirs(os.path.join(work, "debs"), exist_ok=True)
        sh(["apt-get", "download", pkg], cwd=os.path.join(work, "debs"))
        debs = glob.glob(os.path.join(work, "debs", pkg + "_*.deb"))
    deb = sorted(debs)[-1]
    root = os.path.join(work, "x", pkg)
    if not os.path.isdir(root):
        os.makedirs(root)
        sh(["dpkg-deb", "-x", deb, root])
    version = sh(["dpkg-deb", "-f", deb, "Version"]).strip()
    return root, version


def parse_dep5(text):
    """Returns the list of Files stanzas as (patterns, copyright, license), or None if not DEP-5."""
    if not text.lstrip().startswith("Format:"):
        return None
    stanzas = []
    for para in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in para.splitlines():
            if line[:1] in (" ", "\t"):
                if key:
                    fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, val = line.split(":", 1)
                fields[key] = val.strip()
        if "Files" in fields and "License" in fields:
            pats = fields["Files"].split()
            lic = fields["License"].splitlines()[0].strip()
            stanzas.append((pats, fields.get("Copyright", "").strip(), lic))
    return stanzas


def covering_stanza(stanzas, relpath):
    parts = relpath.split("/")
    tails = ["/".join(parts[k:]) for k in range(len(parts))]
    found = None
    for st in stanzas:  # DEP-5: the last matching stanza wins
        for pat in st[0]:
            last = pat.rsplit("/", 1)[-1]
            # A pattern that names one file exactly also matches when packaging moved the file to
            # another folder (lomiri-wallpapers installs upstream 16.04/X.jpg as backgrounds/X.jpg).
            named = not any(c in last for c in "*?[") and last == parts[-1]
            if named or any(fnmatch.fnmatchcase(t, pat) for t in tails):
                found = st
    return found


def license_is_free(lic):
    free = {f.lower() for f in FREE_LICENSES}
    return any(alt.strip().lower() in free for alt in re.split(r"\s+or\s+", lic))


def photo_problem(path):
    """None for a photograph; otherwise why the image looks like flat art (see MAX_SMOOTH)."""
    img = Image.open(path).convert("RGB")
    img.thumbnail((256, 256), Image.LANCZOS)
    y = np.asarray(img, dtype=np.float32).mean(2)
    levels = len(np.unique(y.astype(np.uint8)))
    if levels < MIN_GREY_LEVELS:
        return "posterized: %d distinct grey levels < %d" % (levels, MIN_GREY_LEVELS)
    lap = np.abs(4 * y[1:-1, 1:-1] - y[:-2, 1:-1] - y[2:, 1:-1] - y[1:-1, :-2] - y[1:-1, 2:])
    smooth = float((lap < 0.5).mean())
    if smooth > MAX_SMOOTH:
        return "flat or gradient: %.0f %% of pixels with |Laplacian| < 0.5 > %.0f %%" % (
            100 * smooth, 100 * MAX_SMOOTH)
    return None


def author_of(copyright_field, root, path):
    meta = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "metadata.json")
    if os.path.exists(meta):  # Plasma wallpapers name their author per image
        with open(meta, encoding="utf-8") as f:
            names = [a.get("Name", "") for a in json.load(f).get("KPlugin", {}).get("Authors", [])]
        if names:
            return "; ".join(names)
    lines = [re.sub(r"<[^>]*>", "", ln).strip(" ,.´") for ln in copyright_field.splitlines()]
    return "; ".join(ln for ln in lines if ln)


def pick_files(root, pattern):
    files = sorted(f for f in glob.glob(os.path.join(root, pattern)) if not os.path.islink(f))
    if "/contents/images/" in pattern:  # Plasma: the largest landscape variant only
        def area(f):
            w, h = Image.open(f).size
            return (w >= h, w * h)
        files = [max(files, key=area)] if files else []
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/tessera-wallpapers", help="download/unpack folder")
    ap.add_argument("--out", required=True, help="output .npz")
    ap.add_argument("--provenance", required=True, help="output CSV")
    a = ap.parse_args()

    rows, skipped, rejected = [], [], []
    for pkg in PACKAGES:
        root, version = fetch(pkg, a.work)
        with open(os.path.join(root, "usr/share/doc", pkg, "copyright"), encoding="utf-8") as f:
            stanzas = parse_dep5(f.read())
        if pkg not in PHOTOS:
            print("%s %s: no photographs selected" % (pkg, version))
            continue
        if stanzas is None:
            print("%s: copyright file is not machine-readable, skipped" % pkg)
            continue
        for pattern in PHOTOS[pkg]:
            for path in pick_files(root, pattern):
                rel = os.path.relpath(path, root)
                st = covering_stanza(stanzas, rel)
                if st is None or not license_is_free(st[2]):
                    skipped.append((pkg, rel, st[2] if st else "no stanza"))
                    continue
                problem = photo_problem(path)
                if problem:
                    rejected.append((pkg, rel, problem))
                    continue
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                w, h = Image.open(path).size
                author, note = author_of(st[1], root, path), ""
                if (pkg, os.path.basename(rel)) in UPSTREAM_CREDIT:
                    author, note = UPSTREAM_CREDIT[(pkg, os.path.basename(rel))]
                rows.append({"package": pkg, "version": version, "file": "/" + rel,
                             "author": author, "license": st[2], "note": note,
                             "copyright_stanza": " ".join(st[0]), "width": w, "height": h,
                             "sha256": digest, "added": "v1" if pattern in PHOTOS_V1.get(pkg, []) else "v2"})
    rows.sort(key=lambda r: (r["package"], r["file"]))
    added = [r for r in rows if r["added"] == "v2"]
    for r in rows:
        if r["added"] == "v1":
            r["split"] = "heldout" if r["file"] in HELDOUT_V1 else "train"
        else:
            r["split"] = "heldout" if added.index(r) % HELDOUT_EVERY == HELDOUT_AT else "train"
    missing = HELDOUT_V1 - {r["file"] for r in rows if r["added"] == "v1"}
    if missing:
        sys.exit("held-out photos of version 1 are missing: %s" % sorted(missing))
    arrays, nlev = {}, 0
    for i, r in enumerate(rows):
        r["id"] = i
        img = Image.open(os.path.join(a.work, "x", r["package"], r["file"][1:])).convert("RGB")
        w, h = img.size
        for L in LEVELS:
            s = L / max(w, h)
            nw, nh = max(1, round(w * s)), max(1, round(h * s))
            if min(nw, nh) < 64 or s > 1:
                continue
            arrays["img%03d_%d" % (i, L)] = np.asarray(img.resize((nw, nh), Image.LANCZOS), dtype=np.uint8)
            nlev += 1
    cols = ["id", "split", "added", "package", "version", "file", "author", "license", "note",
            "copyright_stanza", "width", "height", "sha256"]
    os.makedirs(os.path.dirname(os.path.abspath(a.provenance)), exist_ok=True)
    with open(a.provenance, "w", newline="", encoding="utf-8") as f:
        wr = csv.DictWriter(f, fieldnames=cols)
        wr.writeheader()
        wr.writerows(rows)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(json.dumps(rows)), levels=np.array(LEVELS), **arrays)
    with open(a.out, "wb") as f:
        f.write(buf.getvalue())
    for s in skipped:
        print("skipped (license): %s %s [%s]" % s)
    for s in rejected:
        print("rejected (not a photograph): %s %s [%s]" % s)
    ntr = sum(r["split"] == "train" for r in rows)
    print("%d photos (%d train, %d held out), %d pyramid levels, %s: %.1f MB" % (
        len(rows), ntr, len(rows) - ntr, nlev, a.out, len(buf.getvalue()) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
