"""Datasets of 1, 4 and 10 channels through the loaders: the dataset yaml's ``channels`` (or the
setting) decides how images are read; batches are (B, C, H, W) with the targets a 3-channel copy of
the same labels gives; the device stage makes them too; an image of other bands is named."""
from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from yolo_data import Settings, create_dataloader
from yolo_data.build import build_loader
from yolo_data.images.bands import imread_bands
from banddata import write_bands as write

LABELS = "0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n"


def dataset(root: Path, channels: int, n: int = 10, yaml_channels=True, bands=None) -> Path:
    """``n`` images of ``channels`` bands (``bands`` to write other counts) of a few sizes, two boxes
    each; a yaml saying ``channels`` (or not)."""
    rng = np.random.default_rng(0)
    suffix = "tif" if (bands or channels) > 4 else "png"
    for i in range(n):
        img = rng.integers(0, 255, (48 + 4 * i, 64, bands or channels), dtype=np.uint8)
        write(root / "images" / "train" / f"{i:02d}.{suffix}", img)
        (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "train" / f"{i:02d}.txt").write_text(LABELS)
    key = f"channels: {channels}\n" if yaml_channels else ""
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/train\nnames: [a, b]\n{key}")
    return root / "data.yaml"


def batches(data: Path, augment: bool, n: int = 2, **fields):
    fields = {"img_size": 64, "batch_size": 4, "workers": 0, "seed": 3, "cache_dir": str(data.parent / "cache"),
              **({"rect": True} if not augment else {}), **fields}
    settings = (Settings.training if augment else Settings.evaluation)(**fields)
    loader = build_loader(str(data), settings)
    out = []
    for k, b in enumerate(loader):
        out.append(b)
        if k + 1 == n:
            break
    return out


@pytest.mark.parametrize("channels", [1, 4, 10])
@pytest.mark.parametrize("augment", [True, False], ids=["training", "evaluation"])
def test_batches_have_the_datasets_bands_and_a_colour_copys_targets(tmp_path, channels, augment):
    got = batches(dataset(tmp_path / "bands", channels), augment)
    colour = batches(dataset(tmp_path / "colour", 3), augment)
    for a, b in zip(got, colour, strict=True):
        assert a[0].shape == (b[0].shape[0], channels, *b[0].shape[2:]) and a[0].dtype == torch.uint8
        assert torch.equal(a[1], b[1]) and a[3] == b[3]  # the same draws: the same boxes and shapes


def test_every_band_is_read_in_its_stored_order(tmp_path):
    """Evaluation of a 10-band dataset at its own size: band k of the batch is page k of the file."""
    data = dataset(tmp_path, 10, n=4)
    (b,) = batches(data, augment=False, n=1, scale_up=False)
    for k, path in enumerate(b[2]):
        ok, pages = cv2.imreadmulti(path, flags=cv2.IMREAD_UNCHANGED)
        h, w = pages[0].shape
        top = (b[0].shape[2] - h) // 2
        region = b[0][k, :, top:top + h, :w]
        assert ok and torch.equal(region, torch.from_numpy(np.stack(pages)))


@pytest.mark.parametrize("channels", [1, 10])
def test_the_device_stage_makes_the_same_bands(tmp_path, channels):
    data = dataset(tmp_path, channels)
    cpu, dev = batches(data, True), batches(data, True, device="cpu")
    for a, b in zip(cpu, dev, strict=True):
        assert a[0].shape == b[0].shape and torch.equal(a[1], b[1])
        assert (a[0].int() - b[0].int()).abs().float().mean() <= 3.0


def test_the_setting_wins_over_the_yaml_and_a_yaml_without_the_key_is_colour(tmp_path):
    data = dataset(tmp_path / "gray", 1, yaml_channels=False)  # grayscale PNGs, no channels key: read as colour
    assert batches(data, False, n=1)[0][0].shape[1] == 3
    assert batches(data, False, n=1, channels=1)[0][0].shape[1] == 1
    loader, _ = create_dataloader(str(data), 64, 4, 32, workers=0, channels=1, cache_dir=str(tmp_path / "c"))
    assert next(iter(loader))[0].shape[1] == 1


def test_an_image_of_other_bands_is_named_and_left_out(tmp_path, caplog):
    """A 3-band image in a 4-channel dataset: the scan's record of its bands names it in the split's
    summary and leaves it out, for training and evaluation alike, before any decode."""
    for run, augment in (("training", True), ("evaluation", False)):
        data = dataset(tmp_path / run, 4, n=8)
        odd = tmp_path / run / "images" / "train" / "03.png"
        write(odd, np.full((52, 64, 3), 7, np.uint8))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="yolo_data"):
            got = batches(data, augment, n=2, batch_size=8)
        for b in got:
            assert b[0].shape[1] == 4 and str(odd) not in b[2]
        assert len(got[0][2]) == 7
        assert f"{odd}: image has 3 bands of 8 bits, the dataset 4 channels" in caplog.text
        assert "7 images, 14 boxes, 0 backgrounds, 0 corrupt, 1 of other bands, 0 warnings" in caplog.text


def named_at_scan(data: Path, odd: Path, caplog, **fields):
    """The first batch of ``data`` (no image decoded yet fails) and the log naming ``odd``."""
    decoded = []
    real = imread_bands

    def spy(path, *args, **kwargs):
        decoded.append(str(path))
        return real(path, *args, **kwargs)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="yolo_data"), \
            pytest.MonkeyPatch.context() as m:
        m.setattr("yolo_data.images.load.imread_bands", spy)
        (b,) = batches(data, False, n=1, batch_size=16, **fields)
    assert str(odd) not in b[2] and str(odd) not in decoded  # left out at the scan, never decoded
    return b, caplog.text


def test_a_10_page_tiff_in_a_3_channel_dataset_is_named_at_the_scan(tmp_path, caplog):
    """Its first page read as colour would drop nine bands: the split leaves it out and says why."""
    data = dataset(tmp_path, 3, n=6)
    odd = tmp_path / "images" / "train" / "a.tif"
    write(odd, np.random.default_rng(1).integers(0, 255, (40, 64, 10), dtype=np.uint8))
    (tmp_path / "labels" / "train" / "a.txt").write_text(LABELS)
    b, log = named_at_scan(data, odd, caplog)
    assert b[0].shape[:2] == (6, 3)
    assert f"{odd}: image has 10 bands of 8 bits, the dataset 3 channels: its bands are TIFF pages" in log
    # the same files at 10 channels: the TIFF is the one image that fits, from the same label cache
    b, log = named_at_scan(data, tmp_path / "images" / "train" / "00.png", caplog, channels=10)
    assert list(b[2]) == [str(odd)] and b[0].shape[1] == 10
    assert "1 image, 2 boxes, 0 backgrounds, 0 corrupt, 6 of other bands, 0 warnings from " in log  # not rescanned


def test_a_jpeg_in_a_10_channel_dataset_is_named(tmp_path, caplog):
    data = dataset(tmp_path, 10, n=4)
    odd = tmp_path / "images" / "train" / "photo.jpg"
    write(odd, np.full((40, 64, 3), 90, np.uint8))
    (tmp_path / "labels" / "train" / "photo.txt").write_text(LABELS)
    b, log = named_at_scan(data, odd, caplog)
    assert len(b[2]) == 4 and b[0].shape[1] == 10
    assert f"{odd}: image has 3 bands of 8 bits, the dataset 10 channels: not converted" in log


def test_bad_channels_are_refused(tmp_path):
    with pytest.raises(ValueError, match="channels must be a whole number of bands >= 1"):
        Settings(channels=0)
    data = dataset(tmp_path, 4, n=2)
    data.write_text(data.read_text().replace("channels: 4", "channels: four"))
    with pytest.raises(ValueError, match="'channels' must be the bands of its images"):
        batches(data, False, n=1)


@pytest.mark.parametrize("channels", [1, 10])
@pytest.mark.parametrize("mode", ["disk", "ram"])
def test_an_image_cache_holds_every_band_once(tmp_path, channels, mode, monkeypatch):
    """The image cache of a C-band dataset holds C bands an image (its size says so), and its batches
    are those read from the files; a cache of the same images read with 3 bands is another file."""
    monkeypatch.setenv("YOLO_DATA_SHM_DIR", str(tmp_path / "shm"))  # a RAM cache of ours, not in /dev/shm
    (tmp_path / "shm").mkdir()
    data = dataset(tmp_path / "d", channels)
    want = batches(data, True)
    loader = build_loader(str(data), Settings.training(img_size=64, batch_size=4, workers=0, seed=3, cache=mode,
                                                       cache_dir=str(data.parent / "cache")))
    cache = loader.dataset.image_cache
    hw = cache.hw.astype(np.int64)
    assert cache.channels == channels and cache.nbytes == int((hw[:, 0] * hw[:, 1]).sum()) * channels
    assert loader.dataset.images(0).img.shape[2] == channels
    got = []
    for k, b in enumerate(loader):
        got.append(b)
        if k == 1:
            break
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    if mode == "disk":
        names = {p.name for p in (data.parent / "cache").glob("*.imgcache")}
        assert any(f"-c{channels}" in n for n in names), names


@pytest.mark.parametrize("channels", [1, 10])
def test_the_report_draws_a_dataset_of_other_bands(tmp_path, channels):
    """``yolo-data report`` of a 1- or 10-band dataset: its training batches are drawn, one band as
    gray, the first three of ten in false colour (plots.shown)."""
    from yolo_data.cli import main
    from yolo_data.report.plots import shown
    data = dataset(tmp_path, channels)
    assert main(["report", str(data), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report.html").stat().st_size > 0
    bands = np.arange(channels * 4, dtype=np.uint8).reshape(channels, 2, 2)
    picture = shown(bands)
    assert picture.shape == (2, 2, 3)
    assert np.array_equal(picture, bands[[0, 0, 0] if channels == 1 else [0, 1, 2]].transpose(1, 2, 0))
    colour = np.arange(12, dtype=np.uint8).reshape(3, 2, 2)
    assert np.array_equal(shown(colour), colour[::-1].transpose(1, 2, 0))  # RGB to BGR, as before
