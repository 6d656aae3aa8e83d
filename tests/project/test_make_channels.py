"""benchmarks/generators/make_channels.py, run as a user runs it on a few images of the bundled sample:
a grayscale and an N-band copy with their labels and a yaml saying ``channels``, the source untouched."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import yaml

from conftest import run_all
from yolo_data.images import image_bands, imread_bands

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "generators" / "make_channels.py"
sys.path.insert(0, str(SCRIPT.parent))
from make_channels import spectral_bands  # noqa: E402


def tree(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_make_channels_writes_a_gray_and_a_10_band_copy(tmp_path):
    source = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", source)
    (source / "sample.yaml").write_text("path: .\ntrain: images/train\nval: images/val\nnames: [a, b, c]\n")
    before = tree(source)
    p = run_all([sys.executable, str(SCRIPT), str(tmp_path / "out"), "--source", str(source), "--limit", "2"],
                120, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    gray, bands = tmp_path / "out" / "sample-gray", tmp_path / "out" / "sample-10band"
    assert p.stdout.split() == [str(gray / "sample-gray.yaml"), str(bands / "sample-10band.yaml")]
    assert tree(source) == before  # nothing written into the source
    labels = 0
    for folder, channels, suffix in ((gray, 1, ".jpg"), (bands, 10, ".tif")):
        doc = yaml.safe_load((folder / f"{folder.name}.yaml").read_text())
        assert doc == {"path": ".", "train": "images/train", "val": "images/val", "names": ["a", "b", "c"],
                       "channels": channels}
        for split in ("train", "val"):
            originals = sorted((source / "images" / split).iterdir())[:2]
            copies = sorted((folder / "images" / split).iterdir())
            assert [c.name for c in copies] == [o.with_suffix(suffix).name for o in originals]
            for original, copy in zip(originals, copies):
                im = imread_bands(str(copy), channels)
                bgr = cv2.imread(str(original))
                assert im.shape == (*bgr.shape[:2], channels)
                assert image_bands(str(copy)).bands == channels
                label = source / "labels" / split / (original.stem + ".txt")
                if label.is_file():
                    assert (folder / "labels" / split / label.name).read_bytes() == label.read_bytes()
                    labels += 1
                if channels == 10:  # lossless: exactly the interpolated bands, B first and R last
                    assert np.array_equal(im, np.stack(spectral_bands(bgr, 10), 2))
                    assert np.array_equal(im[..., 0], bgr[..., 0]) and np.array_equal(im[..., 9], bgr[..., 2])
                else:  # a JPEG of the luma: near OpenCV's gray of the photo
                    assert np.abs(im[..., 0].astype(int) - cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)).mean() < 3
    assert labels >= 2


def test_spectral_bands_interpolate_between_the_colours():
    bgr = np.array([[[0, 100, 200]]], np.uint8)
    assert [int(b[0, 0]) for b in spectral_bands(bgr, 5)] == [0, 50, 100, 150, 200]
    assert [int(b[0, 0]) for b in spectral_bands(bgr, 3)] == [0, 100, 200]


def test_make_channels_refuses_to_write_into_its_source(tmp_path):
    source = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", source)
    p = run_all([sys.executable, str(SCRIPT), str(source / "out"), "--source", str(source)], 60,
                capture_output=True, text=True)
    assert p.returncode != 0 and "inside the source" in p.stderr and not (source / "out").exists()
