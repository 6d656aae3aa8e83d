#!/usr/bin/env python
"""Regenerate the small sample dataset that ships in data/sample (no download needed).

Shapes on textured backgrounds: class 0 circle, 1 rectangle, 2 triangle (triangles are written as
polygon rows, so the sample exercises segments too).  One train image has no label file (a
background).  Deterministic: the same files every run.

    python tools/make_sample.py [--out data/sample]
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import cv2
import numpy as np

NAMES = ["circle", "rectangle", "triangle"]
SIZES = [(320, 240), (240, 320), (320, 320), (320, 213)]  # (w, h)


def draw_image(rng: np.random.Generator, w: int, h: int):
    """One BGR image and its label rows (YOLO format strings)."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = rng.uniform(40, 200, 3)
    grad = rng.uniform(-0.3, 0.3, (2, 3))
    img = base + xx[..., None] * grad[0] + yy[..., None] * grad[1] + rng.normal(0, 8, (h, w, 3))
    img = np.clip(img, 0, 255).astype(np.uint8)
    rows = []
    for _ in range(int(rng.integers(1, 5))):
        cls = int(rng.integers(0, 3))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        s = int(rng.integers(20, min(w, h) // 2))
        cx, cy = int(rng.integers(s // 2, w - s // 2)), int(rng.integers(s // 2, h - s // 2))
        if cls == 0:
            cv2.circle(img, (cx, cy), s // 2, color, -1)
            x1, y1, x2, y2 = cx - s // 2, cy - s // 2, cx + s // 2, cy + s // 2
            rows.append(f"0 {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}")
        elif cls == 1:
            x1, y1, x2, y2 = cx - s // 2, cy - s // 3, cx + s // 2, cy + s // 3
            cv2.rectangle(img, (x1, y1), (x2, y2), color, -1)
            rows.append(f"1 {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}")
        else:
            pts = np.array([[cx, cy - s // 2], [cx + s // 2, cy + s // 2], [cx - s // 2, cy + s // 2]])
            cv2.fillPoly(img, [pts.astype(np.int32)], color)
            rows.append("2 " + " ".join(f"{x / w:.6f} {y / h:.6f}" for x, y in pts))
    return img, rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "sample"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out / "images", ignore_errors=True)
    shutil.rmtree(out / "labels", ignore_errors=True)
    rng = np.random.default_rng(2026)
    for split, n in (("train", 16), ("val", 8)):
        (out / "images" / split).mkdir(parents=True)
        (out / "labels" / split).mkdir(parents=True)
        for i in range(n):
            w, h = SIZES[i % len(SIZES)]
            img, rows = draw_image(rng, w, h)
            name = f"{split}_{i:03d}"
            cv2.imwrite(str(out / "images" / split / f"{name}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 85])
            if not (split == "train" and i == n - 1):  # the last train image stays a background
                (out / "labels" / split / f"{name}.txt").write_text("\n".join(rows) + "\n")
    (out.parent / "sample.yaml").write_text(
        "# The sample dataset bundled with yolo_data (made by tools/make_sample.py).  No 'path': yolo_data\n"
        "# and Ultralytics then read the splits from this file's folder, from whatever folder they run in.\n"
        f"train: {out.name}/images/train\nval: {out.name}/images/val\n"
        "names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES)))
    print(f"wrote {out} and {out.parent / 'sample.yaml'}")


if __name__ == "__main__":
    main()
