"""Decode an image and resize it so its long side is ``img_size`` (YOLOv5's ``load_image``)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import cv2
import numpy as np


class ImageReadError(OSError):
    """An image that passed the scan could not be decoded now (deleted, replaced or damaged since)."""


@dataclass
class LoadedImage:
    """``img``: (h, w, 3) uint8 BGR, resized.  ``hw0``: (h0, w0) as decoded.  ``hw``: (h, w) after resize."""
    img: np.ndarray
    hw0: Tuple[int, int]
    hw: Tuple[int, int]


def imread_bgr(path: str) -> np.ndarray:
    """(h, w, 3) uint8 BGR with EXIF orientation applied (cv2.imread, as YOLOv5: gray, RGBA and 16-bit
    images come out as 8-bit BGR).  Raises ImageReadError naming the file.

    cv2.imread takes the path as UTF-8 (and crashes the process on a name with lone surrogates, i.e. one
    whose bytes are not UTF-8): other names are read here and decoded with the same flags."""
    path = os.fspath(path)
    try:
        utf8 = os.fsencode(path) == path.encode("utf-8")
    except UnicodeEncodeError:
        utf8 = False
    if utf8:
        im = cv2.imread(path)
    else:
        try:
            buf = np.fromfile(path, dtype=np.uint8)
            im = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None
        except (OSError, cv2.error):  # as cv2.imread: unreadable or undecodable is None
            im = None
    if im is None:
        raise ImageReadError(f"{path}: image cannot be read (missing, or not decodable)")
    return im


def resize_long_side(im: np.ndarray, img_size: int, augment: bool) -> np.ndarray:
    """Scale so the long side is ``img_size``.  Interpolation as YOLOv5: linear when training or
    enlarging, area when shrinking for evaluation; sizes rounded up."""
    h0, w0 = im.shape[:2]
    r = img_size / max(h0, w0)
    if r == 1:
        return im
    interp = cv2.INTER_LINEAR if (augment or r > 1) else cv2.INTER_AREA
    return cv2.resize(im, (math.ceil(w0 * r), math.ceil(h0 * r)), interpolation=interp)


def load_image(path: str, img_size: int, augment: bool) -> LoadedImage:
    im = imread_bgr(path)
    hw0 = im.shape[:2]
    im = resize_long_side(im, img_size, augment)
    return LoadedImage(im, hw0, im.shape[:2])


class ImageSource:
    """Image ``i`` of a label store, resized to long side ``img_size``: from the image cache when it
    holds it, else decoded from its file.  ``linear``: linear interpolation when shrinking too (YOLOv5
    does for training; area for evaluation).  ``on_failure(path, reason)``: told of an image that
    passed the scan but cannot be read now (the split remembers it, and the next run leaves it out)."""

    def __init__(self, store, img_size: int, linear: bool, cache=None,
                 on_failure: Optional[Callable[[str, str], None]] = None):
        self.store, self.img_size, self.linear = store, int(img_size), linear
        self.cache = cache
        self.on_failure = on_failure

    def __call__(self, i: int) -> LoadedImage:
        if self.cache is not None:
            cached = self.cache.get(i)
            if cached is not None:
                return LoadedImage(*cached)
        path = self.store.im_file(i)
        try:
            return load_image(path, self.img_size, self.linear)
        except ImageReadError as e:
            if self.on_failure is not None:
                self.on_failure(path, str(e))
            raise
