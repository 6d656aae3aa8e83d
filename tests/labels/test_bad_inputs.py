"""Bad and unusual inputs end to end: what is kept, what is left out, nothing is modified, and the
loader runs with augment on and off.  An image that disappears after the scan: training substitutes
with a warning, evaluation raises an error naming the file."""
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from yolo_data import create_dataloader
from yolo_data.images.decode import imread_bgr
from yolo_data.images.load import ImageReadError
from yolo_data.labels.split import load_split
from conftest import make_dataset, tree_digest, write_image

LOW = Path(__file__).resolve().parents[2] / "data" / "hyps" / "hyp.scratch-low.yaml"


@pytest.fixture
def zoo(tmp_path):
    """A dataset with one file of each odd kind (images/train/*, labels/train/*)."""
    root = tmp_path / "zoo"
    ok = "0 0.5 0.5 0.4 0.4\n"
    yaml = make_dataset(root, [("good.jpg", (64, 48), ok)])
    im, lb = root / "images" / "train", root / "labels" / "train"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (40, 50), dtype=np.uint8), "L").save(im / "gray.png")
    Image.fromarray(rng.integers(0, 255, (40, 50, 4), dtype=np.uint8), "RGBA").save(im / "rgba.png")
    cv2.imwrite(str(im / "deep.png"), rng.integers(0, 65535, (40, 50, 3), dtype=np.uint16))
    Image.new("CMYK", (50, 40), (10, 20, 30, 0)).save(im / "cmyk.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (60, 30), (200, 10, 10)).save(im / "rotated.jpg", exif=exif)
    (im / "empty.jpg").write_bytes(b"")
    (im / "text.jpg").write_text("not an image")
    write_image(im / "tiny.jpg", 4, 4)
    data = (im / "good.jpg").read_bytes()
    (im / "trailing.jpg").write_bytes(data + b"\0\0junk")
    (im / "truncated.jpg").write_bytes(data[: len(data) // 2])
    write_image(im / "png_named.jpg", 50, 40, ext=".png")
    for name in ("gray", "rgba", "deep", "cmyk", "rotated", "tiny", "trailing", "truncated", "png_named"):
        (lb / f"{name}.txt").write_text(ok)
    for name, text in {"nan": "0 nan 0.5 0.1 0.1\n", "neg": "0 -0.5 0.5 0.1 0.1\n", "words": "person 0.5 0.5 0.1 0.1\n",
                       "four": "0 0.5 0.5 0.1\n", "crlf": "0 0.5 0.5 0.1 0.1\r\n1 0.2 0.2 0.1 0.1\r\n",
                       "dups": ok + ok, "poly": "1 0.1 0.1 0.9 0.1 0.5 0.9\n", "big_class": "7 0.5 0.5 0.1 0.1\n"}.items():
        write_image(im / f"{name}.jpg", 48, 48)
        (lb / f"{name}.txt").write_text(text)
    write_image(im / "garbage.jpg", 48, 48)
    (lb / "garbage.txt").write_bytes(bytes(range(256)))
    write_image(im / "folder.jpg", 48, 48)
    (lb / "folder.txt").mkdir()
    return yaml


KEPT = {"good", "gray", "rgba", "deep", "cmyk", "rotated", "trailing", "truncated", "png_named", "crlf", "dups",
        "poly", "folder"}
LEFT_OUT = {"empty": "not an image", "text": "not an image", "tiny": "4x4", "nan": "non-finite",
            "neg": "normalised", "words": "not a number", "four": "4 columns", "big_class": "class 7",
            "garbage": "binary"}
WARNED = {"trailing": "after the JPEG end marker", "truncated": "truncated JPEG", "png_named": "PNG data",
          "dups": "duplicate", "folder": "folder"}


def test_each_odd_file_is_kept_warned_or_left_out_with_its_reason(zoo):
    before = tree_digest(zoo.parent)
    s = load_split(str(zoo.parent / "images" / "train"), nc=3)
    kept = {Path(s.store.im_file(i)).stem for i in range(len(s.store))}
    assert kept == KEPT
    for stem, reason in LEFT_OUT.items():
        hits = [p for p in s.problems if Path(p.file).stem == stem]
        assert len(hits) == 1 and hits[0].dropped and reason in hits[0].reason, (stem, hits)
    for stem, reason in WARNED.items():
        hits = [p for p in s.problems if Path(p.file).stem == stem]
        assert len(hits) == 1 and not hits[0].dropped and reason in hits[0].reason, (stem, hits)
    i = [Path(s.store.im_file(k)).stem for k in range(len(s.store))].index("rotated")
    assert tuple(s.store.shapes_hw[i]) == (60, 30)  # (h, w) after EXIF 6: OpenCV decodes it 30 wide, 60 high
    after = tree_digest(zoo.parent)
    after.pop("labels/train.yolo_data.cache")
    assert after == before  # byte for byte, nothing repaired


@pytest.mark.parametrize("augment", [False, True])
def test_loader_runs_over_the_odd_files(zoo, augment):
    before = tree_digest(zoo.parent / "images")
    loader, ds = create_dataloader(str(zoo), 64, 4, 32, augment=augment, hyp=str(LOW), workers=2,
                                   shuffle=augment, split="train")
    n = 0
    for imgs, targets, paths, _ in loader:
        assert imgs.shape[1:] == (3, 64, 64)
        n += len(imgs)
    assert n == len(KEPT)
    assert tree_digest(zoo.parent / "images") == before


def test_image_vanishing_after_the_scan(zoo, caplog):
    loader, ds = create_dataloader(str(zoo), 64, 4, 32, augment=True, hyp=str(LOW), workers=0, split="train")
    eval_loader, _ = create_dataloader(str(zoo), 64, 4, 32, augment=False, workers=2, split="train")
    victim = next(f for f in ds.im_files if f.endswith("good.jpg"))
    Path(victim).unlink()
    with caplog.at_level(logging.WARNING, logger="yolo_data"):
        n = sum(len(b[0]) for b in loader)
    assert n == len(KEPT)  # the epoch completes
    assert [r for r in caplog.records if victim in r.message and "another image" in r.message]
    with pytest.raises(ImageReadError, match="good.jpg"):  # from a worker process, not a hang
        for _ in eval_loader:
            pass
    # the next run rescans (the file list changed) and simply leaves the image out
    assert len(create_dataloader(str(zoo), 64, 4, 32, workers=0, split="train")[1]) == len(KEPT) - 1


def test_missing_labels_folder_keeps_every_image_as_background(tmp_path, user_cache_dir):
    yaml = make_dataset(tmp_path / "nolabels", [("a.jpg", (40, 30), None), ("b.jpg", (30, 40), None)])
    s = load_split(str(yaml.parent / "images" / "train"), nc=3)
    assert len(s.store) == 2 and s.counts["missing"] == 2 and s.counts["backgrounds"] == 2
    assert not (yaml.parent / "labels").exists()  # no folder is created in the dataset for the cache
    assert s.cache_file.parent == user_cache_dir
    loader, _ = create_dataloader(str(yaml), 32, 2, 32, augment=True, hyp=str(LOW), workers=0, split="train")
    imgs, targets, _, _ = next(iter(loader))
    assert imgs.shape == (2, 3, 32, 32) and targets.shape == (0, 6)


def test_tiffs_turned_upright_are_kept_with_their_upright_pixels_and_an_undecodable_one_is_left_out(tmp_path, capfd):
    """OpenCV 5.0's cv2.imread fails on a TIFF with EXIF orientation 5 to 8 (with 4 lines of error on
    stderr), while cv2.imdecode of its bytes decodes it, as Ultralytics reads every image: such TIFFs are
    kept, with the pixels Pillow turns upright, and no OpenCV error on the way (the scan and each load
    decode the bytes once).  A TIFF that no OpenCV decoder takes (32-bit float samples) is named and
    left out at scan time."""
    ok = "0 0.5 0.5 0.4 0.4\n"
    yaml = make_dataset(tmp_path / "tiffs", [("good.jpg", (64, 48), ok)])
    im, lb = yaml.parent / "images" / "train", yaml.parent / "labels" / "train"
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (30, 50, 3), dtype=np.uint8)
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        Image.fromarray(pixels).save(im / f"o{o}.tif", exif=exif, compression="tiff_lzw")
        (lb / f"o{o}.txt").write_text(ok)
    Image.fromarray(rng.random((30, 50), dtype=np.float32), "F").save(im / "float.tif")
    (lb / "float.txt").write_text(ok)
    before = tree_digest(yaml.parent / "images")
    capfd.readouterr()

    s = load_split(str(im), nc=3)
    shapes = {Path(s.store.im_file(i)).stem: tuple(s.store.shapes_hw[i]) for i in range(len(s.store))}
    assert shapes == {"good": (48, 64), **{f"o{o}": (30, 50) if o < 5 else (50, 30) for o in range(1, 9)}}
    hits = [p for p in s.problems if Path(p.file).name == "float.tif"]
    assert len(hits) == 1 and hits[0].dropped
    assert "OpenCV, the decoder used for training, cannot decode this TIFF image" in str(hits[0])
    for o in range(1, 9):
        with Image.open(im / f"o{o}.tif") as pil:
            upright = np.asarray(ImageOps.exif_transpose(pil).convert("RGB"))[:, :, ::-1]
        assert np.array_equal(imread_bgr(str(im / f"o{o}.tif")), upright), o
    loader, ds = create_dataloader(str(yaml), 64, 3, 32, workers=0, split="train")
    assert sum(len(b[0]) for b in loader) == 9
    assert "imread_" not in capfd.readouterr().err  # OpenCV's "imread_(...): can't read data" error
    assert tree_digest(yaml.parent / "images") == before


@pytest.mark.parametrize("mode,save", [("RGB", {}), ("RGB", {"compression": "tiff_lzw"}),
                                       ("RGB", {"compression": "jpeg"}), ("RGB", {"compression": "packbits"}),
                                       ("L", {}), ("RGBA", {}), ("CMYK", {}), ("P", {}), ("1", {}), ("I;16", {}),
                                       ("RGB", {"orientation": 3}), ("RGB", {"save_all": True, "pages": 2})])
def test_a_tiff_imread_decodes_gives_the_same_pixels_from_its_bytes(tmp_path, mode, save):
    """Why TIFFs may skip cv2.imread (decode.imread_bgr): where it decodes one, imdecode gives its pixels."""
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(rng.integers(0, 255, (30, 50, 3), dtype=np.uint8))
    picture = rgb.convert(mode) if mode != "I;16" else Image.fromarray(rng.integers(0, 65535, (30, 50), np.uint16))
    save = dict(save)
    if "orientation" in save:
        save["exif"] = Image.Exif()
        save["exif"][0x0112] = save.pop("orientation")
    if save.pop("pages", None):
        save["append_images"] = [picture.transpose(Image.Transpose.FLIP_TOP_BOTTOM)]
    path = tmp_path / "a.tif"
    picture.save(path, **save)
    want = cv2.imread(str(path))
    assert want is not None and np.array_equal(imread_bgr(str(path)), want)
