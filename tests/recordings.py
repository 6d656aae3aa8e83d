"""Generated recordings for the split and sequence tests: a few clips of near-identical frames with numbered
names (``clip3_000117.jpg``), YOLO labels beside them, and clips that share a background.

Each clip is one scene (a smooth random background) with one or two objects that move a pixel or two per frame,
so neighbouring frames differ by a few DCT-hash bits and two clips by about half of them; clips listed in
``shared`` are filmed on the background of the clip before them, so their frames look like that clip's."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Sequence

import cv2
import numpy as np


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    small = rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)
    return cv2.GaussianBlur(cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC), (0, 0), 3)


def write_recordings(root: Path, clips: int = 6, frames: int = 12, step: int = 1, classes: int = 3,
                     shared: Sequence[int] = (), size=(96, 128), seed: int = 0, first: int = 0,
                     folder: str = "images") -> List[str]:
    """Write ``clips`` clips of ``frames`` frames each under ``root``/``folder`` (labels under labels/),
    numbered ``first``, ``first + step``, ...; clip c's objects are of class c % classes (and a second one of
    (c + 1) % classes in odd clips), except that a clip in ``shared`` films the clip before it again: the same
    background and objects, so that its frames are near-copies of that clip's.

    Returns:
        The image paths written, sorted.
    """
    rng = np.random.default_rng(seed)
    h, w = size
    images = root / folder
    labels = root / folder.replace("images", "labels")
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    out = []
    background, objects = None, []
    for c in range(clips):
        if c in shared and background is not None:  # the scene of the clip before, filmed again
            objects = [(cls, x + 0.005, y) for cls, x, y in objects]
        else:
            background = _background(rng, h, w)
            objects = [(c % classes, rng.uniform(0.2, 0.5), rng.uniform(0.3, 0.7))]
            if c % 2:
                objects.append(((c + 1) % classes, rng.uniform(0.5, 0.8), rng.uniform(0.3, 0.7)))
        for f in range(frames):
            im = background.copy()
            rows = []
            for cls, x0, y0 in objects:
                x, y = x0 + 0.01 * f, y0
                bw, bh = 0.15, 0.2
                p1 = (int((x - bw / 2) * w), int((y - bh / 2) * h))
                p2 = (int((x + bw / 2) * w), int((y + bh / 2) * h))
                cv2.rectangle(im, p1, p2, tuple(int(v) for v in (60 + 60 * cls, 200 - 50 * cls, 40 * cls)), -1)
                rows.append(f"{cls} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}")
            name = f"clip{c}_{first + f * step:06d}"
            cv2.imwrite(str(images / f"{name}.jpg"), im, [cv2.IMWRITE_JPEG_QUALITY, 95])
            (labels / f"{name}.txt").write_text("\n".join(rows) + "\n")
            out.append(str(images / f"{name}.jpg"))
    return sorted(out)


def random_split(root: Path, images: List[str], val: float = 0.25, seed: int = 0,
                 names: Sequence[str] = ("a", "b", "c")) -> Path:
    """A dataset yaml at ``root``/random.yaml whose train and val lists draw ``images`` at random (as
    Ultralytics' autosplit does): neighbouring frames land on both sides."""
    order = list(images)
    random.Random(seed).shuffle(order)
    k = max(1, int(round(val * len(order))))
    lists: Dict[str, List[str]] = {"val": sorted(order[:k]), "train": sorted(order[k:])}
    for split, files in lists.items():
        (root / f"random_{split}.txt").write_text("\n".join(files) + "\n")
    yaml_file = root / "random.yaml"
    yaml_file.write_text(f"path: {root}\ntrain: random_train.txt\nval: random_val.txt\nnames: {list(names)}\n")
    return yaml_file
