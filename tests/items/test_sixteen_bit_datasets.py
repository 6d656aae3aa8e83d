"""Datasets whose 16 bits are kept (``keep16=True``): 16-bit PNGs (gray, colour, BGRA) and a 16-bit
multi-page TIFF give uint16 batches; evaluation pixels are OpenCV's own resize of the uint16 image
padded with 114 * 257; training batches (mosaic, perspective, mixup) are uint16 and the same for 0 and 2
workers; the image caches hold 2 bytes a sample and give the batches the files give; an 8-bit image is
named.  The pixels use their low bytes, so a path that fell to 8 bits would show."""
from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from yolo_data import Settings
from yolo_data.build import build_loader
from yolo_data.geometry.shapes import letterbox_plan
from banddata import write_bands as write

LABELS = "0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n"
KINDS = {"gray": 1, "colour": 3, "bgra": 4, "pages": 5}  # what the files hold -> the dataset's channels


def read(path: str) -> np.ndarray:
    """The file's (h, w, C) pixels as stored (uint16), pages stacked."""
    ok, pages = cv2.imreadmulti(path, flags=cv2.IMREAD_UNCHANGED)
    assert ok
    return np.stack(pages, 2) if len(pages) > 1 else (pages[0][..., None] if pages[0].ndim == 2 else pages[0])


def dataset(root: Path, kind: str, n: int = 8) -> Path:
    """``n`` 16-bit images of the kind's bands, of a few sizes, every bit used; two boxes each."""
    rng = np.random.default_rng(len(kind))
    bands = KINDS[kind]
    for i in range(n):
        img = rng.integers(0, 65536, (48 + 4 * i, 64, bands), dtype=np.uint16)
        write(root / "images" / "train" / f"{i:02d}.{'tif' if bands > 4 else 'png'}", img)
        (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "train" / f"{i:02d}.txt").write_text(LABELS)
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/train\nnames: [a, b]\n"
                                    f"channels: {bands}\n")
    return root / "data.yaml"


def loader(data: Path, augment: bool, **fields):
    fields = {"img_size": 40, "batch_size": 4, "workers": 0, "seed": 3, "keep16": True,
              "cache_dir": str(data.parent / "cache"), **fields}
    return build_loader(str(data), (Settings.training if augment else Settings.evaluation)(**fields))


def batches(data: Path, augment: bool, n: int = 2, **fields):
    out = []
    for k, b in enumerate(loader(data, augment, **fields)):
        out.append(b)
        if k + 1 == n:
            break
    return out


def low_bytes_used(images: torch.Tensor) -> bool:
    return len(torch.unique(images.int() & 255)) > 200


@pytest.mark.parametrize("kind", list(KINDS))
def test_evaluation_pixels_are_opencvs_resize_of_the_uint16_image(tmp_path, kind):
    """Each image shrunk (area, as YOLOv5's evaluation) by OpenCV from its uint16 pixels, band by band,
    letterboxed with 29298 around it; 3 bands come as RGB planes."""
    for b in batches(dataset(tmp_path, kind), False):
        assert b[0].dtype == torch.uint16 and b[0].shape[1] == KINDS[kind] and low_bytes_used(b[0])
        for k, path in enumerate(b[2]):
            img = read(path)
            h0, w0 = img.shape[:2]
            r = 40 / max(h0, w0)
            h, w = int(np.ceil(h0 * r)), int(np.ceil(w0 * r))
            want = np.stack([cv2.resize(np.ascontiguousarray(img[..., c]), (w, h), interpolation=cv2.INTER_AREA)
                             for c in range(img.shape[2])])
            want = want[::-1] if kind == "colour" else want  # BGR -> RGB planes
            plan = letterbox_plan((h, w), (40, 40), auto=False, scaleup=False)
            got = b[0][k].numpy()
            assert np.array_equal(got[:, plan.top:plan.top + h, plan.left:plan.left + w], want)
            assert (got[:, :plan.top] == 29298).all() and (got[:, plan.top + h:] == 29298).all()


@pytest.mark.parametrize("kind", ["gray", "colour", "pages"])
def test_training_batches_are_uint16_and_the_same_for_0_and_2_workers(tmp_path, kind):
    data = dataset(tmp_path, kind)
    hyp = {"mosaic": 1.0, "mixup": 1.0, "degrees": 10.0, "shear": 2.0, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0}
    zero = batches(data, True, hyp=hyp)
    two = batches(data, True, hyp=hyp, workers=2)
    for a, b in zip(zero, two, strict=True):
        assert a[0].dtype == b[0].dtype == torch.uint16 and a[0].shape == (4, KINDS[kind], 40, 40)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and low_bytes_used(a[0])


def test_hsv_is_not_applied_to_16_bits_and_a_colour_dataset_is_told_once(tmp_path, caplog):
    data = dataset(tmp_path, "colour")
    hyp = {"mosaic": 0.0, "degrees": 0.0, "translate": 0.0, "scale": 0.0, "fliplr": 0.0}
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        (batch,) = batches(data, True, n=1, hyp=hyp)
    gains = batch[0]
    assert caplog.text.count("not applied to 16-bit images (keep16=True)") == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        none = batches(data, True, n=1, hyp={**hyp, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0})[0][0]
    assert "keep16" not in caplog.text and torch.equal(gains, none)
    assert gains.dtype == torch.uint16
    for g, path in zip(gains, batch[2]):  # letterboxed, not warped: a padded row or column (04.png is square)
        assert (g[:, 0] == 29298).all() or (g[:, :, 0] == 29298).all() or path.endswith("04.png")


@pytest.mark.parametrize("mode", ["ram", "disk"])
def test_an_image_cache_of_16_bits_holds_two_bytes_a_sample_and_the_files_batches(tmp_path, mode, monkeypatch):
    monkeypatch.setenv("YOLO_DATA_SHM_DIR", str(tmp_path / "shm"))  # a RAM cache of ours, not in /dev/shm
    (tmp_path / "shm").mkdir()
    data = dataset(tmp_path / "d", "bgra")
    eight = batches(data, True, keep16=False, cache=mode)  # an 8-bit cache of the same images first
    assert eight[0][0].dtype == torch.uint8
    want = batches(data, True)
    cached = loader(data, True, cache=mode)
    cache = cached.dataset.image_cache
    hw = cache.hw.astype(np.int64)
    assert cache.dtype == np.uint16 and cache.nbytes == int((hw[:, 0] * hw[:, 1]).sum()) * 4 * 2
    got = []
    for k, b in enumerate(cached):
        got.append(b)
        if k == 1:
            break
    for a, b in zip(want, got, strict=True):
        assert b[0].dtype == torch.uint16 and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    if mode == "disk":
        names = sorted(p.name for p in (data.parent / "cache").glob("*.imgcache"))
        assert len(names) == 2 and sum("-16" in n for n in names) == 1, names


def test_an_8_bit_image_in_a_16_bit_dataset_is_named_and_left_out(tmp_path, caplog):
    for run, augment in (("training", True), ("evaluation", False)):
        data = dataset(tmp_path / run, "gray")
        odd = tmp_path / run / "images" / "train" / "03.png"
        write(odd, np.full((52, 64, 1), 7, np.uint8))
        message = "03.png: image has 1 band of 8 bits, the dataset 1 channel: 16-bit samples asked"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="yolo_data"):  # named by the scan, before any batch
            for b in batches(data, augment):
                assert b[0].dtype == torch.uint16 and str(odd) not in b[2]
        assert message in caplog.text
        (again,) = batches(data, False, n=1, batch_size=8)
        assert len(again[2]) == 7 and str(odd) not in again[2]


def test_a_device_loader_of_16_bits_makes_its_items_on_the_cpu(tmp_path):
    data = dataset(tmp_path, "gray")
    cpu, dev = batches(data, True), batches(data, True, device="cpu")
    for a, b in zip(cpu, dev, strict=True):
        assert b[0].dtype == torch.uint16 and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_keep16_takes_true_or_false():
    assert Settings().images.keep16 is False and Settings(keep16=True).images.keep16 is True
    with pytest.raises(ValueError, match="keep16 must be True or False"):
        Settings(keep16="yes")
