"""ImageSource with ``keep16``: 16-bit images come as uint16, resized by OpenCV from their own pixels; an
8-bit image is an ImageBandsError told to ``on_failure``; without it 16 bits become 8 by the high byte."""
import cv2
import numpy as np
import pytest

from yolo_data.images.bands import ImageBandsError
from yolo_data.images.load import ImageSource, LoadedImage
from yolo_data.labels.store import LabelStore
from yolo_data.labels.verify import PairRecord


def source(tmp_path, keep16, channels=1):
    img = np.random.default_rng(0).integers(0, 65536, (50, 80), dtype=np.uint16)
    assert cv2.imwrite(str(tmp_path / "a.png"), img)
    assert cv2.imwrite(str(tmp_path / "b.png"), (img >> 8).astype(np.uint8))
    store = LabelStore.from_records([PairRecord(str(tmp_path / "a.png"), (50, 80)),
                                     PairRecord(str(tmp_path / "b.png"), (50, 80))])
    told = []
    return ImageSource(store, 32, linear=False, on_failure=told.append, channels=channels, keep16=keep16), img, told


def test_a_16_bit_image_is_kept_and_resized_from_its_own_pixels(tmp_path):
    src, img, told = source(tmp_path, True)
    got = src(0)
    assert got.img.dtype == np.uint16 and got.hw0 == (50, 80) and got.hw == (20, 32)
    assert np.array_equal(got.img[..., 0], cv2.resize(img, (32, 20), interpolation=cv2.INTER_AREA))
    assert isinstance(src.encoded(0), LoadedImage)  # decoded here: a device decodes 8-bit JPEGs only
    with pytest.raises(ImageBandsError, match="b.png: image has 1 band of 8 bits.*16-bit samples asked"):
        src(1)
    assert [e.path for e in told] == [str(tmp_path / "b.png")]


def test_without_keep16_16_bits_become_8_by_the_high_byte(tmp_path):
    src, img, told = source(tmp_path, False)
    got = src(0)
    assert got.img.dtype == np.uint8
    assert np.array_equal(got.img[..., 0], cv2.resize((img >> 8).astype(np.uint8), (32, 20),
                                                      interpolation=cv2.INTER_AREA))
    assert src(1).img.dtype == np.uint8 and not told
