"""decode.py: every image file gives cv2.imread's pixels, whether simplejpeg decodes it or OpenCV does;
simplejpeg is used only where that is certain (plain JPEGs, upright by EXIF, undamaged)."""
import io
import struct
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from yolo_data import LoadImagesAndLabels
from yolo_data.images import decode
from yolo_data.loading.collate import collate_fn
from yolo_data.images.decode import REDUCED_FLAGS, exif_orientation, imread_bgr

from conftest import copy_shared
from crafting import exif_block, with_app1

REPO = Path(__file__).resolve().parents[2]
ALL_FLAGS = [cv2.IMREAD_COLOR] + list(REDUCED_FLAGS.values())


def noisy(w: int, h: int, seed: int = 0) -> np.ndarray:
    """An asymmetric RGB image: gradients plus noise (every orientation decodes differently)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([255 * x / w, 255 * y / h, 128 + 0 * x], -1) + rng.normal(0, 20, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg(rgb: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


def kinds() -> dict:
    """name -> JPEG bytes: the cases simplejpeg should decode, and those it must leave to OpenCV."""
    rgb = noisy(83, 61)
    plain = jpeg(rgb)
    out = {
        "plain 4:2:0": plain, "4:4:4": jpeg(rgb, subsampling=0), "4:2:2": jpeg(rgb, subsampling=1),
        "progressive": jpeg(rgb, progressive=True), "gray": jpeg(rgb[..., 0]),
        "cmyk": _cmyk(rgb), "exif without orientation": with_app1(plain, b"Exif\0\0" + exif_block()),
        "big-endian exif, orientation 1": with_app1(plain, b"Exif\0\0" + exif_block(1, ">")),
        "two exif blocks": with_app1(plain, b"Exif\0\0" + exif_block(1), b"Exif\0\0" + exif_block(6)),
        "truncated": plain[:len(plain) * 2 // 3], "bytes after the end": plain + b"\0" * 100,
        # phones write XMP in an APP1 segment too: not an EXIF block, OpenCV still finds the orientation
        "xmp before exif, orientation 6": with_app1(plain, b"http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>",
                                                    b"Exif\0\0" + exif_block(6)),
    }
    for o in range(2, 9):
        out[f"orientation {o}"] = with_app1(plain, b"Exif\0\0" + exif_block(o, "<" if o % 2 else ">"))
    for o in (0, 9):
        out[f"invalid orientation {o}"] = with_app1(plain, b"Exif\0\0" + exif_block(o))
    return out


def _cmyk(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


# decoded by simplejpeg when it is installed; every other kind goes to OpenCV
SIMPLEJPEG_KINDS = {"plain 4:2:0", "4:4:4", "4:2:2", "progressive", "gray", "cmyk", "exif without orientation",
                    "big-endian exif, orientation 1", "bytes after the end", "xmp before exif, orientation 6"}
SIMPLEJPEG_KINDS |= {f"orientation {o}" for o in range(2, 9)}


@pytest.fixture
def decoded_by(monkeypatch):
    """Which decoder gave each imread_bgr result: a list of 'simplejpeg' / 'opencv'."""
    seen = []
    real = decode.decode_jpeg

    def spy(data, factor=1):
        im = real(data, factor)
        seen.append("opencv" if im is None else "simplejpeg")
        return im
    monkeypatch.setattr(decode, "decode_jpeg", spy)
    return seen


def test_exif_orientation_is_read_or_called_unknown():
    plain = jpeg(noisy(16, 16))
    assert exif_orientation(plain) == 1
    for o in range(1, 9):
        for order in "<>":
            assert exif_orientation(with_app1(plain, b"Exif\0\0" + exif_block(o, order))) == o
    assert exif_orientation(with_app1(plain, b"Exif\0\0" + exif_block())) == 1
    assert exif_orientation(with_app1(plain, b"http://ns.adobe.com/xap/1.0/\0<x/>")) == 1  # XMP: no EXIF
    assert exif_orientation(with_app1(plain, b"Exif\0\0" + exif_block(1), b"Exif\0\0" + exif_block(1))) == -1
    assert exif_orientation(with_app1(plain, b"Exif\0\0" + b"XX" + exif_block(6)[2:])) == -1  # no byte order
    assert exif_orientation(with_app1(plain, b"Exif\0\0" + exif_block(6)[:12])) == -1  # cut inside IFD0
    long_tag = exif_block(6).replace(struct.pack("<HHI", 0x0112, 3, 1), struct.pack("<HHI", 0x0112, 4, 1))
    assert exif_orientation(with_app1(plain, b"Exif\0\0" + long_tag)) == -1  # a LONG, not a SHORT
    assert exif_orientation(plain[:2] + b"\xff\xe1\x00\x40Exif") == -1  # a segment longer than the file


def test_every_kind_of_jpeg_gives_cv2_imreads_pixels(tmp_path, decoded_by):
    pytest.importorskip("simplejpeg", reason="the [dev] extra installs simplejpeg")
    for name, data in kinds().items():
        f = tmp_path / f"{name.replace(' ', '_').replace(',', '')}.jpg"
        f.write_bytes(data)
        for flags in ALL_FLAGS:
            decoded_by.clear()
            want = cv2.imread(str(f), flags)
            got = imread_bgr(str(f), flags)
            assert want is not None and got.shape == want.shape and np.array_equal(got, want), (name, flags)
            assert decoded_by == ["simplejpeg" if name in SIMPLEJPEG_KINDS else "opencv"], (name, flags)


def test_without_simplejpeg_opencv_decodes_everything(tmp_path, monkeypatch, decoded_by):
    monkeypatch.setattr(decode, "_simplejpeg", None)  # as where it is not installed (the import gave None)
    for name, data in kinds().items():
        f = tmp_path / f"{name.replace(' ', '_').replace(',', '')}.jpg"
        f.write_bytes(data)
        assert np.array_equal(imread_bgr(str(f)), cv2.imread(str(f))), name
    assert decoded_by == []  # the file is not even read for it


def test_other_formats_and_misnamed_files_are_opencvs(tmp_path, decoded_by):
    rgb = noisy(40, 30)
    png = tmp_path / "a.png"
    Image.fromarray(rgb).save(png)
    misnamed = tmp_path / "really_png.jpg"
    misnamed.write_bytes(png.read_bytes())
    for f in (png, misnamed):
        assert np.array_equal(imread_bgr(str(f)), cv2.imread(str(f)))
    assert decoded_by in ([], ["opencv"])  # the .jpg is read, then left to OpenCV
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(decode.ImageReadError, match="empty.jpg"):
        imread_bgr(str(empty))


@pytest.mark.parametrize("dataset", ["coco128", "bccd"])
def test_real_photos_decode_as_cv2_imread_decodes_them(dataset, decoded_by, tmp_path):
    pytest.importorskip("simplejpeg", reason="the [dev] extra installs simplejpeg")
    files = sorted(copy_shared(dataset, tmp_path).rglob("*.jpg"))[:40]
    assert files
    for f in files:
        for flags in (cv2.IMREAD_COLOR, cv2.IMREAD_REDUCED_COLOR_2):
            assert np.array_equal(imread_bgr(str(f), flags), cv2.imread(str(f), flags)), (f, flags)
    assert set(decoded_by) == {"simplejpeg"}


def test_training_batches_are_the_same_with_and_without_simplejpeg(monkeypatch, decoded_by):
    pytest.importorskip("simplejpeg", reason="the [dev] extra installs simplejpeg")

    def batches():  # the bundled sample's photos, in training (simplejpeg's full and 1/2 scale decodes)
        ds = LoadImagesAndLabels(str(REPO / "data" / "sample.yaml"), 160, 4, augment=True,
                         hyp=str(REPO / "data" / "hyps" / "hyp.scratch-low.yaml"))
        return [collate_fn(ds.__getitems__(list(range(k, k + 4)))) for k in (0, 4)]
    monkeypatch.setattr(decode, "_simplejpeg", decode._simplejpeg)  # restored afterwards
    decode.use_simplejpeg(True)
    fast = batches()
    assert decoded_by and set(decoded_by) == {"simplejpeg"}
    decoded_by.clear()
    decode.use_simplejpeg(False)
    slow = batches()
    assert decoded_by == []  # simplejpeg off: every file straight to cv2.imread
    for (im_a, t_a, _, _), (im_b, t_b, _, _) in zip(fast, slow):
        assert torch_equal(im_a, im_b) and torch_equal(t_a, t_b)


def torch_equal(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


def test_a_scaled_decode_of_another_size_is_left_to_opencv(tmp_path, monkeypatch):
    """libjpeg scales to ceil(side / f); a simplejpeg that chose another scale is not trusted."""
    class OtherScale:  # stands in for a simplejpeg build that picks its scale differently
        @staticmethod
        def decode_jpeg_header(data):
            return 61, 83, "YCbCr", "420"

        @staticmethod
        def decode_jpeg(data, colorspace, min_height=0, min_width=0):
            return np.zeros((max(min_height, 61) + 1, max(min_width, 83), 3), np.uint8)
    monkeypatch.setattr(decode, "_simplejpeg", OtherScale)
    f = tmp_path / "a.jpg"
    f.write_bytes(jpeg(noisy(83, 61)))
    want = cv2.imread(str(f), cv2.IMREAD_REDUCED_COLOR_2)
    assert want.shape[:2] == (31, 42) and np.array_equal(imread_bgr(str(f), cv2.IMREAD_REDUCED_COLOR_2), want)


@pytest.mark.parametrize("body, warns", [
    (None, False),  # not installed: nothing to say
    ("raise ImportError('numpy.core.multiarray failed to import')", True),  # a wheel for another NumPy
    ("raise RuntimeError('module compiled against ABI version 0x1000009')", True),
])
def test_a_simplejpeg_that_does_not_import_leaves_every_file_to_opencv(tmp_path, monkeypatch, caplog, body, warns):
    """An optional speed-up that fails to load never stops a run: OpenCV decodes, one warning says why."""
    monkeypatch.delitem(sys.modules, "simplejpeg", raising=False)
    if body is None:
        monkeypatch.setitem(sys.modules, "simplejpeg", None)  # import raises: not installed
    else:
        fake = tmp_path / "fake"
        fake.mkdir()
        (fake / "simplejpeg.py").write_text(body + "\n")
        monkeypatch.syspath_prepend(str(fake))
    monkeypatch.setattr(decode, "_simplejpeg", decode._MISSING)
    f = tmp_path / "a.jpg"
    f.write_bytes(jpeg(noisy(83, 61)))
    with caplog.at_level("WARNING", logger="yolo_data"):
        assert decode.simplejpeg_module() is None
        assert np.array_equal(imread_bgr(str(f)), cv2.imread(str(f)))
    said = [r.getMessage() for r in caplog.records if "simplejpeg" in r.getMessage()]
    assert len(said) == (1 if warns else 0), said
    if warns:
        assert "does not import" in said[0] and "decoded by OpenCV" in said[0] and body.split("'")[1] in said[0]


@pytest.mark.parametrize("error", [OSError("read error"), TypeError("unexpected keyword"), MemoryError()])
def test_any_error_inside_simplejpeg_leaves_the_file_to_opencv(tmp_path, monkeypatch, error):
    class Failing:  # stands in for a simplejpeg that fails in a way the plain decode never does
        @staticmethod
        def decode_jpeg_header(data):
            return 61, 83, "YCbCr", "420"

        @staticmethod
        def decode_jpeg(data, colorspace, **kw):
            raise error
    monkeypatch.setattr(decode, "_simplejpeg", Failing)
    f = tmp_path / "a.jpg"
    f.write_bytes(jpeg(noisy(83, 61)))
    for flags in ALL_FLAGS:
        assert np.array_equal(imread_bgr(str(f), flags), cv2.imread(str(f), flags)), flags


def test_the_dataset_settles_the_decoder_before_workers_fork(tmp_path, monkeypatch):
    """The process that builds the dataset imports simplejpeg (or finds it missing or broken), so forked
    DataLoader workers inherit the answer instead of each importing it, and warning, every epoch."""
    monkeypatch.setattr(decode, "_simplejpeg", decode._MISSING)
    LoadImagesAndLabels(str(REPO / "data" / "sample.yaml"), 160, 4, cache_dir=str(tmp_path))
    assert decode._simplejpeg is not decode._MISSING


def test_simplejpeg_is_a_dependency_of_the_default_install():
    """A plain ``pip install yolo-data`` decodes JPEGs by simplejpeg: it is in the package's requirements
    without an extra, and the environment the tests run in has it."""
    import importlib.metadata
    import re

    plain = [r for r in importlib.metadata.requires("yolo-data") or [] if "extra ==" not in r]
    assert any(re.match(r"simplejpeg\b", r) for r in plain), plain
    assert decode.simplejpeg_module() is not None
