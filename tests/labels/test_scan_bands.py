"""The scan records each image's bands and bits (images.bands.ImageBands) in its record, the label
store and the label cache; which images a run of C channels leaves out is the decode's own rule
(images.bands.fits), so the scan and imread_bands never disagree."""
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from yolo_data.images import ImageBandsError, imread_bands
from yolo_data.labels import cache
from yolo_data.labels.split import fit_channels, load_split
from yolo_data.labels.store import LabelStore
from yolo_data.labels.verify import image_size, verify_pair

LABEL = "0 0.5 0.5 0.4 0.4\n"


def rng_image(shape, dtype=np.uint8, seed=0):
    high = 256 if dtype == np.uint8 else 65536
    return np.random.default_rng(seed).integers(0, high, shape).astype(dtype)


@pytest.fixture
def zoo(tmp_path):
    """{name: (bands, bits)}: images of every kind a dataset may hold, in images/, each with a label."""
    folder = tmp_path / "images"
    folder.mkdir()
    colour = cv2.GaussianBlur(rng_image((48, 64, 3)), (7, 7), 0)
    gray = cv2.cvtColor(colour, cv2.COLOR_BGR2GRAY)
    want = {}
    for name, im, bands, bits in (("colour.jpg", colour, 3, 8), ("gray.jpg", gray, 1, 8), ("colour.png", colour, 3, 8),
                                  ("gray.png", gray, 1, 8), ("bgra.png", rng_image((30, 40, 4)), 4, 8),
                                  ("g16.png", rng_image((30, 40), np.uint16), 1, 16),
                                  ("bgra.webp", rng_image((30, 40, 4)), 4, 8), ("colour.bmp", colour, 3, 8),
                                  ("gray.tif", gray, 1, 8), ("colour.tif", colour, 3, 8)):
        assert cv2.imwrite(str(folder / name), im)
        want[name] = (bands, bits)
    for name, pages, dtype in (("bands.tif", 10, np.uint8), ("four.tif", 4, np.uint8), ("b16.tif", 3, np.uint16)):
        assert cv2.imwritemulti(str(folder / name), [rng_image((40, 50), dtype, seed=k) for k in range(pages)])
        want[name] = (pages, dtype().itemsize * 8)
    assert cv2.imwritemulti(str(folder / "pyramid.tif"), [rng_image((40, 50)), rng_image((20, 25))])
    want["pyramid.tif"] = (1, 8)
    Image.fromarray(rng_image((30, 40, 2)), "LA").save(folder / "la.png")
    want["la.png"] = (4, 8)  # OpenCV gives gray and alpha as BGRA
    Image.fromarray(rng_image((30, 40, 4)), "CMYK").save(folder / "cmyk.jpg")
    want["cmyk.jpg"] = (3, 8)
    (tmp_path / "labels").mkdir()
    for name in want:
        (tmp_path / "labels" / (Path(name).stem + Path(name).suffix.replace(".", "_") + ".txt")).write_text(LABEL)
    return folder, want


def label_of(folder: Path, name: str) -> Path:
    return folder.parent / "labels" / (Path(name).stem + Path(name).suffix.replace(".", "_") + ".txt")


def test_the_scan_records_each_images_bands_and_bits(zoo):
    folder, want = zoo
    for name, (bands, bits) in want.items():
        rec = verify_pair(str(folder / name), str(label_of(folder, name)), nc=1)
        assert rec.status == "ok", (name, rec.problems)
        assert (rec.bands.bands, rec.bands.bits) == (bands, bits), name
        assert rec.bands.pages == (name in ("bands.tif", "four.tif", "b16.tif")), name
    store = LabelStore.from_records([verify_pair(str(folder / n), str(label_of(folder, n)), nc=1) for n in want])
    assert store.bands.dtype == np.int32 and store.bands.shape == (len(want), 4)
    assert [tuple(store.bands[i, :2]) for i in range(len(want))] == list(want.values())
    assert store.subset(np.array([2, 0])).bands_of(1) == store.bands_of(0)
    assert image_size(str(folder / "bands.tif")) == ((40, 50), [])  # its size as before


@pytest.mark.parametrize("channels", [1, 3, 4, 10])
def test_the_scan_leaves_out_exactly_what_imread_bands_refuses(zoo, channels):
    folder, want = zoo
    records = [verify_pair(str(folder / n), str(label_of(folder, n)), nc=1) for n in want]
    for name, rec in zip(want, records):
        split_ok = _kept(rec, channels)
        try:
            im = imread_bands(str(folder / name), channels)
            decoded = True
            assert im.shape[2] == channels
        except ImageBandsError:
            decoded = False
        assert split_ok == decoded, (name, channels, rec.bands)


def _kept(rec, channels) -> bool:
    """Whether a split of this one record keeps it at ``channels`` (labels.split.fit_channels)."""
    from yolo_data.labels.split import SplitLabels
    store = LabelStore.from_records([rec])
    split = SplitLabels(store, None, True, 0.0, {"found": 1, "corrupt": 0, "boxes": 1, "backgrounds": 0})
    return len(fit_channels(split, channels).store) == 1


def test_the_cache_holds_the_bands_and_serves_any_channels(zoo, tmp_path):
    folder, want = zoo
    first = load_split(str(folder), nc=1, cache_dir=str(tmp_path / "cache"))
    again = load_split(str(folder), nc=1, cache_dir=str(tmp_path / "cache"))
    assert first.built and not again.built
    assert np.array_equal(first.store.bands, again.store.bands) and again.store.bands.shape == (len(want), 4)
    by_name = {Path(again.store.im_file(i)).name: tuple(again.store.bands[i, :2]) for i in range(len(again.store))}
    assert by_name == want
    three = fit_channels(again, 3)
    assert sorted(p.file for p in three.problems) == sorted(str(folder / n) for n in
                                                            ("b16.tif", "bands.tif", "four.tif"))
    assert three.counts["other_bands"] == 3 and len(three.store) == len(want) - 3
    assert len(again.store) == len(want)  # the split it was given is as it was
    ten = fit_channels(again, 10)
    assert [Path(ten.store.im_file(i)).name for i in range(len(ten.store))] == ["bands.tif"]
    assert fit_channels(ten, 10) is ten  # nothing to leave out: the same split


def test_a_cache_of_the_previous_version_is_rescanned(zoo, tmp_path, monkeypatch, caplog):
    """A version 8 cache (no bands) is of another version: the split is scanned again, saying why, and
    its bands known."""
    folder, want = zoo
    with monkeypatch.context() as m:
        m.setattr(cache, "FORMAT_VERSION", 8)
        m.setattr(LabelStore, "arrays", lambda self: {k: v for k, v in vars(self).items() if k != "bands"})
        old = load_split(str(folder), nc=1, cache_dir=str(tmp_path / "cache"))
    assert old.built and old.cache_file.exists()
    with caplog.at_level(logging.INFO, logger="yolo_data"):
        new = load_split(str(folder), nc=1, cache_dir=str(tmp_path / "cache"))
    assert new.built and new.cache_file == old.cache_file
    assert new.store.bands[:, 0].min() >= 1
    assert "label cache version 8, this yolo_data reads 9; rebuilding it" in caplog.text
