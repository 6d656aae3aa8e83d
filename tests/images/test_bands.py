"""Images of any number of channels (images/bands.py): grayscale, multi-page TIFF bands, 4-channel PNG,
16-bit samples, band counts from headers, images that do not fit named, C = 3 exactly as before."""
import re
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from conftest import SHARED

from yolo_data.images import (ImageBands, ImageBandsError, ImageDecodeError, image_bands, imread_bands, imread_bgr,
                              load_image, resize_bands)
from yolo_data.images.bands import decoded_bands, fits

COCO128 = SHARED / "coco128" / "images" / "train2017"


def rng_image(shape, dtype=np.uint8, seed=0):
    high = 256 if dtype == np.uint8 else 65536
    return np.random.default_rng(seed).integers(0, high, shape).astype(dtype)


def write_chunky_tiff(path, im):
    """(h, w, c) as one uncompressed TIFF page of c samples a pixel (OpenCV writes at most 4)."""
    h, w, c = im.shape
    data = np.ascontiguousarray(im).astype(im.dtype.newbyteorder("<")).tobytes()
    bits, ifd = im.dtype.itemsize * 8, 8 + len(data)
    bits_at = ifd + 2 + 12 * 9 + 4
    entries = [(256, 4, 1, struct.pack("<I", w)), (257, 4, 1, struct.pack("<I", h)),
               (258, 3, c, struct.pack("<I", bits_at)), (259, 3, 1, struct.pack("<HH", 1, 0)),
               (262, 3, 1, struct.pack("<HH", 1, 0)), (273, 4, 1, struct.pack("<I", 8)),
               (277, 3, 1, struct.pack("<HH", c, 0)), (278, 4, 1, struct.pack("<I", h)),
               (279, 4, 1, struct.pack("<I", len(data)))]
    table = b"".join(struct.pack("<HHI", t, k, n) + v for t, k, n, v in entries)
    Path(path).write_bytes(b"II*\x00" + struct.pack("<I", ifd) + data + struct.pack("<H", 9) + table
                           + b"\x00" * 4 + struct.pack(f"<{c}H", *[bits] * c))


@pytest.fixture
def files(tmp_path):
    """A colour JPEG and PNG, a grayscale JPEG and PNG, a 10-page TIFF, a 4-channel PNG, a 16-bit 3-page
    TIFF and 16-bit gray PNG, with the arrays they were written from."""
    colour = cv2.GaussianBlur(rng_image((48, 64, 3)), (7, 7), 0)
    gray = cv2.cvtColor(colour, cv2.COLOR_BGR2GRAY)
    bands = [rng_image((40, 50), seed=k) for k in range(10)]
    bgra = rng_image((30, 40, 4))
    b16 = [rng_image((20, 30), np.uint16, seed=k) for k in range(3)]
    out = {"colour": colour, "gray": gray, "bands": np.stack(bands, 2), "bgra": bgra, "b16": np.stack(b16, 2),
           "g16": b16[0]}
    for name, im in (("colour.jpg", colour), ("colour.png", colour), ("gray.jpg", gray), ("gray.png", gray),
                     ("bgra.png", bgra), ("g16.png", b16[0])):
        assert cv2.imwrite(str(tmp_path / name), im)
    assert cv2.imwritemulti(str(tmp_path / "bands.tif"), bands)
    assert cv2.imwritemulti(str(tmp_path / "b16.tif"), b16)
    return tmp_path, out


@pytest.mark.parametrize("name", ["colour.jpg", "colour.png", "gray.jpg", "gray.png"])
def test_jpeg_and_png_at_1_channel_are_opencvs_grayscale_and_at_3_its_colour(files, name):
    folder, _ = files
    path = str(folder / name)
    one = imread_bands(path, 1)
    assert one.shape == (*cv2.imread(path).shape[:2], 1) and one.dtype == np.uint8
    assert np.array_equal(one[..., 0], cv2.imread(path, cv2.IMREAD_GRAYSCALE))
    three = imread_bands(path, 3)
    assert three.shape[2] == 3 and np.array_equal(three, cv2.imread(path, cv2.IMREAD_COLOR))


def test_a_10_page_tiff_is_its_pages_stacked_in_order(files):
    folder, arrays = files
    im = imread_bands(str(folder / "bands.tif"), 10)
    assert im.shape == (40, 50, 10) and im.dtype == np.uint8 and im.flags.c_contiguous
    assert np.array_equal(im, arrays["bands"])
    assert image_bands(str(folder / "bands.tif")).bands == 10 and image_bands(str(folder / "bands.tif")).pages


def test_a_4_channel_png_is_its_bgra_pixels(files):
    folder, arrays = files
    im = imread_bands(str(folder / "bgra.png"), 4)
    assert im.shape == (30, 40, 4) and np.array_equal(im, arrays["bgra"])


def test_bands_stored_in_one_tiff_page_are_named_not_read_in_part(tmp_path):
    write_chunky_tiff(tmp_path / "chunky.tif", rng_image((20, 30, 6)))
    info = image_bands(str(tmp_path / "chunky.tif"))
    assert (info.bands, info.samples, info.pages) == (6, 6, False)
    with pytest.raises(ImageBandsError, match="6 samples a pixel in one page"):
        imread_bands(str(tmp_path / "chunky.tif"), 6)


def test_16_bit_samples_are_scaled_by_their_high_byte_or_kept(files):
    folder, arrays = files
    # (a 3-page TIFF's pages are bands, named at C = 3: the stack is checked at C = 2)
    pages = [arrays["b16"][..., k] for k in range(2)]
    assert cv2.imwritemulti(str(folder / "b16x2.tif"), pages)
    im8 = imread_bands(str(folder / "b16x2.tif"), 2)
    assert im8.dtype == np.uint8 and np.array_equal(im8, (arrays["b16"][..., :2] >> 8).astype(np.uint8))
    im16 = imread_bands(str(folder / "b16x2.tif"), 2, keep16=True)
    assert im16.dtype == np.uint16 and np.array_equal(im16, arrays["b16"][..., :2])
    g8 = imread_bands(str(folder / "g16.png"), 1)
    assert g8.dtype == np.uint8 and np.array_equal(g8[..., 0], (arrays["g16"] >> 8).astype(np.uint8))
    g16 = imread_bands(str(folder / "g16.png"), 1, keep16=True)
    assert g16.dtype == np.uint16 and np.array_equal(g16[..., 0], arrays["g16"])
    assert image_bands(str(folder / "g16.png")).bits == 16 and image_bands(str(folder / "b16x2.tif")).bits == 16


@pytest.mark.parametrize("name,channels,bands", [("bands.tif", 4, 10), ("bands.tif", 1, 10), ("colour.jpg", 4, 3),
                                                 ("gray.png", 10, 1), ("bgra.png", 10, 4)])
def test_an_image_whose_bands_do_not_fit_is_named(files, name, channels, bands):
    folder, _ = files
    with pytest.raises(ImageBandsError) as e:
        imread_bands(str(folder / name), channels)
    assert isinstance(e.value, ImageDecodeError)  # left out by a scan, replaced in training, as damaged files
    message = str(e.value)
    assert str(folder / name) in message and f"has {bands} band" in message and f"the dataset {channels} channel" in message
    assert (e.value.bands, e.value.channels) == (bands, channels)
    assert e.value.size == (folder / name).stat().st_size


@pytest.mark.parametrize("name,channels", [("bands.tif", 10), ("gray.png", 1), ("colour.png", 3)])
def test_an_8_bit_image_is_named_where_16_bits_are_asked(files, name, channels):
    folder, _ = files
    with pytest.raises(ImageBandsError, match="of 8 bits.*16-bit samples asked"):
        imread_bands(str(folder / name), channels, keep16=True)


def test_header_band_counts_agree_with_the_decode(files, tmp_path):
    folder, _ = files
    Image.fromarray(rng_image((20, 30, 2)), "LA").save(tmp_path / "la.png")
    Image.fromarray(rng_image((20, 30))).convert("P").save(tmp_path / "p.png")
    Image.fromarray(rng_image((20, 30))).convert("P").save(tmp_path / "pt.png", transparency=0)
    Image.fromarray(rng_image((20, 30, 3)), "RGB").save(tmp_path / "rgb.tif")
    Image.fromarray(rng_image((20, 30, 4)), "CMYK").save(tmp_path / "cmyk.jpg")
    cv2.imwritemulti(str(tmp_path / "mixed.tif"), [rng_image((20, 30)), rng_image((10, 15))])  # a pyramid
    names = ["colour.jpg", "gray.jpg", "colour.png", "gray.png", "bgra.png", "g16.png", "bands.tif", "b16.tif"]
    paths = [folder / n for n in names] + sorted(tmp_path.glob("*.*"))
    for path in paths:
        info = image_bands(path.read_bytes())
        assert info == image_bands(str(path)), path
        want = info.bands
        if want in (1, 3):  # read as gray or colour
            continue
        assert imread_bands(str(path), want).shape[2] == want, path
    assert [image_bands(str(tmp_path / n)).bands for n in ("la.png", "p.png", "pt.png", "rgb.tif", "cmyk.jpg",
                                                             "mixed.tif")] == [4, 3, 4, 3, 3, 1]
    one = imread_bands(str(tmp_path / "mixed.tif"), 1)
    assert one.shape == (20, 30, 1)  # pages of two sizes are not bands: the first page, as Ultralytics
    assert image_bands(b"GIF89a" + bytes(50)) is None and image_bands(b"\x89PNG\r\n\x1a\n" + bytes(8)) is None


def test_a_tiff_whose_pages_are_bands_is_named_at_1_and_3_channels_and_read_at_its_own(files):
    """Reading its first page as gray or colour would drop its other bands: never silently converted."""
    folder, arrays = files
    for name, bands in (("b16.tif", 3), ("bands.tif", 10)):
        info = image_bands(str(folder / name))
        assert (info.bands, info.pages) == (bands, True)
        for channels in (1, 3):
            assert fits(info, channels) == "its bands are TIFF pages, and a multi-band image is not converted to " + (
                "gray" if channels == 1 else "colour")
            with pytest.raises(ImageBandsError, match=f"image has {bands} bands of (16|8) bits, the dataset {channels} "
                                                      "channels?: its bands are TIFF pages"):
                imread_bands(str(folder / name), channels)
            with pytest.raises(ImageBandsError):
                load_image(str(folder / name), 32, False, channels=channels)
    info = image_bands(str(folder / "bands.tif"))
    assert fits(info, 10) is None and imread_bands(str(folder / "bands.tif"), 10).shape[2] == 10
    assert fits(image_bands(str(folder / "colour.png")), 3) is None


@pytest.mark.parametrize("name,channels,keep16,why", [
    ("gray.jpg", 3, False, None), ("gray.png", 1, False, None), ("colour.jpg", 1, False, None),
    ("bgra.png", 3, False, None), ("bgra.png", 4, False, None), ("bands.tif", 10, False, None),
    ("g16.png", 1, True, None), ("b16.tif", 3, False, "TIFF pages"), ("colour.jpg", 4, False, "bands of a dataset"),
    ("gray.png", 3, True, "16-bit samples asked"), ("bands.tif", 10, True, "16-bit samples asked")])
def test_fits_says_what_imread_bands_does(files, name, channels, keep16, why):
    folder, _ = files
    said = fits(image_bands(str(folder / name)), channels, keep16)
    assert (said is None) == (why is None) and (why is None or why in said)
    if why is None:
        assert imread_bands(str(folder / name), channels, keep16).shape[2] == channels
    else:
        with pytest.raises(ImageBandsError, match=re.escape(said)):
            imread_bands(str(folder / name), channels, keep16)


def test_unknown_bands_fit_and_a_decode_tells_the_other_formats(tmp_path):
    assert fits(None, 10) is None and fits(ImageBands(0, 0, False, "webp"), 10) is None
    assert cv2.imwrite(str(tmp_path / "a.webp"), rng_image((20, 30, 4)))
    info = decoded_bands((tmp_path / "a.webp").read_bytes(), "webp")
    assert (info.bands, info.bits, info.pages) == (4, 8, False)
    assert fits(info, 4) is None and imread_bands(str(tmp_path / "a.webp"), 4).shape == (20, 30, 4)
    assert "bands of a dataset" in fits(info, 10)
    assert decoded_bands(b"not an image", "webp") is None


@pytest.mark.parametrize("channels", [1, 4, 10, 600])
@pytest.mark.parametrize("interpolation", [cv2.INTER_LINEAR, cv2.INTER_AREA])
def test_resize_takes_any_number_of_channels(channels, interpolation):
    im = rng_image((50, 60, channels))
    for size in ((37, 29), (30, 25), (90, 75)):
        out = resize_bands(im, size, interpolation)
        assert out.shape == (size[1], size[0], channels)
        each = np.stack([cv2.resize(im[..., k], size, interpolation=interpolation) for k in range(channels)], 2)
        assert np.abs(out.astype(int) - each).max() <= 1  # each band on its own (an exact 2x may round apart)


def test_load_image_keeps_the_channels(files):
    folder, arrays = files
    for name, channels in (("bands.tif", 10), ("gray.jpg", 1), ("bgra.png", 4)):
        loaded = load_image(str(folder / name), 32, linear=False, channels=channels)
        assert loaded.img.shape == (*loaded.hw, channels) and max(loaded.hw) == 32
    gray = load_image(str(folder / "gray.jpg"), 16, True, (48, 64), reduced=True, channels=1)
    assert gray.img.shape == (12, 16, 1) and gray.hw0 == (48, 64)


def coco_photos(n=12):
    photos = sorted(COCO128.glob("*.jpg"))[:n] if COCO128.is_dir() else []
    if not photos:
        pytest.skip("../shared/datasets/coco128 is not here")
    return photos


def test_3_channels_are_imread_bgr_exactly_on_coco128():
    for path in coco_photos():
        assert np.array_equal(imread_bands(str(path), 3), imread_bgr(str(path)))
        for size, reduced in ((640, False), (160, True)):
            hw0 = imread_bgr(str(path)).shape[:2]
            a = load_image(str(path), size, True, hw0, reduced=reduced)
            b = load_image(str(path), size, True, hw0, reduced=reduced, channels=3)
            assert np.array_equal(a.img, b.img) and a.hw0 == b.hw0


def test_1_channel_is_opencvs_grayscale_on_coco128():
    for path in coco_photos(4):
        assert np.array_equal(imread_bands(str(path), 1)[..., 0], cv2.imread(str(path), cv2.IMREAD_GRAYSCALE))
