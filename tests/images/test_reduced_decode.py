"""JPEGs decoded by libjpeg at 1/2, 1/4 or 1/8 scale where they shrink that much: same shapes, sizes and
boxes as a full decode, nearly the same pixels, EXIF orientation kept; training uses it, evaluation
keeps YOLOv5's pixels unless asked; an image cache holds what the files give."""
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from yolo_data import LoadImagesAndLabels
from yolo_data.images import load as images
from yolo_data.images.load import load_image, reduction


def photo(w: int, h: int, seed: int = 0) -> np.ndarray:
    """A smooth, asymmetric photo-like RGB image (gradients and soft blobs, a little noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([255 * x / w, 255 * y / h, 128 + 60 * np.sin(x / 97 + y / 61)], -1)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(w / 20, w / 6)
        img += rng.uniform(-80, 80, 3) * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
    img += rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def save_jpeg(path: Path, rgb: np.ndarray, orientation: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    Image.fromarray(rgb).save(path, quality=92, exif=exif.tobytes())
    return path


@pytest.fixture
def flags_used(monkeypatch):
    """The cv2 flags of every decode made through images.imread_bgr."""
    seen = []
    real = images.imread_bgr

    def spy(path, flags=cv2.IMREAD_COLOR, data=None):
        seen.append(flags)
        return real(path, flags, data)
    monkeypatch.setattr(images, "imread_bgr", spy)
    return seen


def test_reduction_keeps_the_decode_at_least_as_large_as_the_target():
    assert reduction((3024, 4032), 640) == 4  # 1008 x 756 >= 640 long side; 1/8 would be 504
    assert reduction((1200, 1600), 200) == 8 and reduction((1200, 1600), 400) == 4
    assert reduction((1200, 1600), 800) == 2 and reduction((1200, 1600), 801) == 1
    assert reduction((480, 640), 640) == 1


@pytest.mark.parametrize("orientation", [1, 6])
def test_reduced_decode_gives_the_full_decodes_sizes_and_nearly_its_pixels(tmp_path, flags_used, orientation):
    f = save_jpeg(tmp_path / "a.jpg", photo(1600, 1200), orientation)
    full = load_image(str(f), 200, True)
    assert flags_used == [cv2.IMREAD_COLOR]
    hw0 = (1600, 1200) if orientation == 6 else (1200, 1600)  # what the scan records (EXIF applied)
    assert full.hw0 == hw0
    fast = load_image(str(f), 200, True, hw0, reduced=True)
    assert flags_used[-1] == cv2.IMREAD_REDUCED_COLOR_8  # 1600 / 8 = 200: decoded at 1/8, no resize left
    assert fast.hw0 == full.hw0 and fast.hw == full.hw == fast.img.shape[:2] and fast.img.dtype == np.uint8
    diff = np.abs(fast.img.astype(np.int16) - full.img.astype(np.int16))
    # the same picture (a wrong orientation or scale would differ by tens of levels on average)
    assert diff.mean() < 2.5, diff.mean()
    evaluation = load_image(str(f), 100, False, hw0, reduced=True)  # area interpolation after the 1/8 decode
    assert evaluation.hw == (tuple(np.ceil(np.array(hw0) * 100 / 1600).astype(int)))


def test_what_is_not_a_shrunk_jpeg_is_decoded_in_full(tmp_path, flags_used):
    rgb = photo(900, 600)
    png = tmp_path / "a.png"
    cv2.imwrite(str(png), rgb[:, :, ::-1])
    assert np.array_equal(load_image(str(png), 200, True, (600, 900), reduced=True).img,
                          load_image(str(png), 200, True).img)
    small = save_jpeg(tmp_path / "small.jpg", rgb)  # 900 < 2 x 640: nothing to skip
    assert np.array_equal(load_image(str(small), 640, True, (600, 900), reduced=True).img,
                          load_image(str(small), 640, True).img)
    assert set(flags_used) == {cv2.IMREAD_COLOR}
    # PNG data in a .jpg file: whichever decode OpenCV makes, the size is the full decode's
    fake = tmp_path / "fake.jpg"
    fake.write_bytes(png.read_bytes())
    li = load_image(str(fake), 100, True, (600, 900), reduced=True)
    assert li.hw == (67, 100) and li.img.shape[:2] == (67, 100)


def yolo_set(root: Path, n: int = 3) -> Path:
    for k in range(n):
        save_jpeg(root / "images" / "train" / f"{k}.jpg", photo(1280, 960, seed=k), 6 if k == 1 else 1)
        lb = root / "labels" / "train" / f"{k}.txt"
        lb.parent.mkdir(parents=True, exist_ok=True)
        lb.write_text("0 0.5 0.5 0.2 0.3\n")
    return root / "images" / "train"


def test_training_decodes_reduced_evaluation_keeps_yolov5_pixels_unless_asked(tmp_path, flags_used):
    folder = yolo_set(tmp_path / "ds")
    train = LoadImagesAndLabels(str(folder), 160, augment=True)
    assert train.reduced_decode and train.images(1).hw0 == (1280, 960)
    assert flags_used[-1] == cv2.IMREAD_REDUCED_COLOR_8  # 1280 / 160 = 8: decoded at 1/8
    ev = LoadImagesAndLabels(str(folder), 160)
    assert not ev.reduced_decode
    flags_used.clear()
    img, _, _, shapes = ev[0]
    assert flags_used == [cv2.IMREAD_COLOR] and shapes[0] == (960, 1280)
    fast = LoadImagesAndLabels(str(folder), 160, reduced_decode=True)
    flags_used.clear()
    img2, _, _, shapes2 = fast[0]
    assert flags_used == [cv2.IMREAD_REDUCED_COLOR_8] and shapes2 == shapes and img2.shape == img.shape
    assert np.abs(img2.numpy().astype(int) - img.numpy().astype(int)).mean() < 2.5


@pytest.mark.parametrize("augment", [True, False])
def test_an_image_cache_holds_what_the_files_give(tmp_path, augment):
    folder = yolo_set(tmp_path / "ds")
    plain = LoadImagesAndLabels(str(folder), 160, augment=augment, reduced_decode=True)
    cached = LoadImagesAndLabels(str(folder), 160, augment=augment, reduced_decode=True, cache_images="disk")
    assert cached.image_cache is not None and "-reduced" in cached.image_cache.path.name
    for i in range(3):
        a, b = plain.images(i), cached.images(i)
        assert a.hw0 == b.hw0 and a.hw == b.hw and np.array_equal(a.img, b.img)
    full = LoadImagesAndLabels(str(folder), 160, augment=augment, reduced_decode=False, cache_images="disk")
    assert full.image_cache.path != cached.image_cache.path  # another file: other pixels
    assert not np.array_equal(full.images(0).img, cached.images(0).img)


def test_a_file_replaced_since_the_scan_is_decoded_in_full(tmp_path, flags_used):
    """The scan's size is what a reduced decode is checked against: a photo replaced by another of
    another size during training is decoded in full (and resized from its own size)."""
    folder = yolo_set(tmp_path / "ds", n=1)
    ds = LoadImagesAndLabels(str(folder), 160, augment=True)
    save_jpeg(folder / "0.jpg", photo(1600, 1280, seed=9))
    flags_used.clear()
    li = ds.images(0)
    assert flags_used == [cv2.IMREAD_REDUCED_COLOR_8, cv2.IMREAD_COLOR]
    assert li.hw0 == (1280, 1600) and li.hw == (128, 160)
