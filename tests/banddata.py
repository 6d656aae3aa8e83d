"""Datasets of any number of bands for the tests of other channels (tests/augment/test_band_gains.py,
tests/device/test_band_gains_on_device.py, tests/items/test_band_datasets.py, test_sixteen_bit_datasets.py):
an image of C bands written as a file, datasets of them, their first training batches."""
from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

from yolo_data.build import build_loader
from yolo_data.settings import Settings

REPO = Path(__file__).resolve().parents[1]
SCRATCH_LOW = yaml.safe_load((REPO / "yolo_data/data/hyps/hyp.scratch-low.yaml").read_text())
LABELS = "0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n"
#: a hyp that draws after the colour step too (flips, mixup)
HYP = dict(mixup=0.5, flipud=0.5)


def write_bands(path: Path, img: np.ndarray) -> None:
    """``img`` (h, w, C) uint8 or uint16: more than 4 bands as a multi-page TIFF (one page a band), else
    the format the suffix names (1 band as a gray image)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if img.shape[2] > 4:
        assert cv2.imwritemulti(str(path), [img[:, :, k] for k in range(img.shape[2])])
    else:
        assert cv2.imwrite(str(path), img[:, :, 0] if img.shape[2] == 1 else img)


def band_dataset(root: Path, channels: int, n: int = 8) -> Path:
    """``n`` images of ``channels`` bands (PNG for 3, multi-page TIFF for more), two boxes each, and a
    data yaml saying the channels."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir(parents=True)
    for i in range(n):
        img = rng.integers(0, 256, (40 + 4 * i, 56, channels), dtype=np.uint8)
        write_bands(root / "images" / f"{i}.{'png' if channels == 3 else 'tif'}", img)
        (root / "labels" / f"{i}.txt").write_text(LABELS)
    (root / "data.yaml").write_text(f"path: .\ntrain: images\nval: images\nnames: [a, b]\nchannels: {channels}\n")
    return root / "data.yaml"


def training_batches(data: Path, n: int = 2, workers: int = 0, hyp=None, **fields):
    """The first ``n`` training batches of ``data`` (img_size 64, batch 4, seed 3)."""
    settings = Settings.training(img_size=64, batch_size=4, workers=workers, seed=3,
                                 hyp={**SCRATCH_LOW, **HYP, **(hyp or {})}, partner_group=4,
                                 cache_dir=str(data.parent / "cache"), **fields)
    out = []
    for k, b in enumerate(build_loader(str(data), settings)):
        out.append(b)
        if k + 1 == n:
            break
    return out


def digests(data: Path, **kw):
    """sha256 (16 hex digits) of each batch's images and targets."""
    return [hashlib.sha256(b[0].numpy().tobytes() + b[1].numpy().tobytes()).hexdigest()[:16]
            for b in training_batches(data, **kw)]


def assert_band_step_of(plain: torch.Tensor, banded: torch.Tensor) -> None:
    """``banded`` (B, C, H, W) is ``plain`` with each band of each image through a lookup table that
    rises with the level: each level of a band goes to one level, never below a lower level's."""
    assert banded.shape == plain.shape and not torch.equal(banded, plain)
    for image, ref in zip(banded, plain):
        for band, ref_band in zip(image, ref):
            pairs = torch.unique(torch.stack([ref_band.reshape(-1), band.reshape(-1)]).int(), dim=1)
            assert torch.equal(torch.unique(pairs[0]), pairs[0]), "a level went to two levels"
            assert torch.all(pairs[1, 1:] >= pairs[1, :-1]), "the step does not rise with the level"
