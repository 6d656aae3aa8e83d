"""An image that passes the scan but cannot be decoded when loaded is remembered beside the label
cache, and the next run leaves it out with the reason, until the file changes."""
import logging
import os
from pathlib import Path

import cv2
import pytest

from conftest import make_dataset, write_image
from yolo_data import failures
from yolo_data.dataset import YoloDataset
from yolo_data.images import ImageReadError


def damage_png_pixels(path: Path) -> None:
    """Flip bytes inside the IDAT chunk: the header, size and IEND stay valid (the scan keeps it),
    the pixel data no longer decodes (libpng's CRC check fails in cv2.imread)."""
    data = bytearray(path.read_bytes())
    start = data.index(b"IDAT") + 4
    for k in range(start + 8, start + 40):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.fixture
def ds_with_bad_png(tmp_path):
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcd"] + [("e.png", (64, 48), "1 0.5 0.5 0.2 0.2\n")]
    yaml = make_dataset(tmp_path / "ds", items)
    bad = tmp_path / "ds" / "images" / "train" / "e.png"
    damage_png_pixels(bad)
    assert cv2.imread(str(bad)) is None
    return yaml, bad


def test_evaluation_failure_is_remembered_and_the_next_run_leaves_the_image_out(ds_with_bad_png, caplog):
    yaml, bad = ds_with_bad_png
    ds = YoloDataset(str(yaml), 64, split="train")
    assert len(ds) == 5  # the scan reads headers: it cannot know
    i = [Path(f).name for f in ds.im_files].index("e.png")
    with pytest.raises(ImageReadError):
        ds[i]
    record = failures.record_file(ds.split_labels.cache_file)
    assert record.is_file() and "e.png" in record.read_text()
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        again = YoloDataset(str(yaml), 64, split="train")
    assert len(again) == 4 and "e.png" not in [Path(f).name for f in again.im_files]
    assert any("e.png" in r.message and "could not be decoded when last loaded" in r.message for r in caplog.records)
    assert again.split_labels.counts["corrupt"] == 1 and again.split_labels.counts["boxes"] == 4
    assert [tuple(again[k][0].shape) for k in range(4)]  # the rest is used


def test_training_failure_is_remembered_too(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = YoloDataset(str(yaml), 64, 5, split="train", augment=True)
    for k in range(len(ds)):
        ds[k]  # mosaic partners include e.png sooner or later; training goes on around it
    assert "e.png" in failures.record_file(ds.split_labels.cache_file).read_text()
    assert len(YoloDataset(str(yaml), 64, split="train")) == 4


def test_a_repaired_file_is_used_again(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = YoloDataset(str(yaml), 64, split="train")
    with pytest.raises(ImageReadError):
        ds[[Path(f).name for f in ds.im_files].index("e.png")]
    write_image(bad, 64, 48, seed=9)  # the user replaces it
    os.utime(bad, ns=(1, 10 ** 18))  # a new modification time for sure
    again = YoloDataset(str(yaml), 64, split="train")
    assert len(again) == 5 and again[[Path(f).name for f in again.im_files].index("e.png")][0].shape[1:] == (64, 64)


def test_damaged_lines_of_the_record_are_skipped(ds_with_bad_png):
    yaml, bad = ds_with_bad_png
    ds = YoloDataset(str(yaml), 64, split="train")
    failures.remember(ds.split_labels.cache_file, str(bad), "cannot be decoded")
    record = failures.record_file(ds.split_labels.cache_file)
    record.write_bytes(b"{not json\n\x00\xff\n" + record.read_bytes() + b'{"file": "half a li')
    assert list(failures.read(ds.split_labels.cache_file)[0]) == [str(bad)]
