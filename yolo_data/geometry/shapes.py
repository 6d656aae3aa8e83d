"""Letterbox and rectangular batch shapes (pure functions of arrays and numbers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Union

import cv2
import numpy as np

PAD_VALUE = 114  # the gray YOLOv5 pads with


def pad_value(dtype) -> int:
    """PAD_VALUE at the depth of ``dtype``: 114 for uint8; for uint16, 114 * 257 = 29298, the same grey
    at full scale (257 = 65535 / 255 maps 0..255 onto 0..65535, so 29298 >> 8 is 114 again)."""
    return PAD_VALUE * 257 if np.dtype(dtype) == np.uint16 else PAD_VALUE


@dataclass
class LetterboxResult:
    """``img``: (H, W, C) padded image.  ``ratio``: (rw, rh) scale applied to the input.
    ``pad``: (padw, padh) offset of the content's top-left corner in the output, in pixels (may be .5,
    as YOLOv5 reports it).  A point p of the input lands at p * ratio + pad."""
    img: np.ndarray
    ratio: Tuple[float, float]
    pad: Tuple[float, float]

    def __iter__(self):  # ``im, ratio, (dw, dh) = letterbox(...)`` as with YOLOv5's tuple
        return iter((self.img, self.ratio, self.pad))


@dataclass
class LetterboxPlan:
    """Where an image goes in its letterbox: ``resized_hw`` (h, w) size after resizing, ``ratio`` and
    ``pad`` as in `LetterboxResult` ((x, y) pairs: they scale and move points), and the whole pixels of
    border ``top``, ``bottom``, ``left``, ``right`` around the resized image."""
    resized_hw: Tuple[int, int]
    ratio: Tuple[float, float]
    pad: Tuple[float, float]
    top: int
    bottom: int
    left: int
    right: int

    @property
    def shape(self) -> Tuple[int, int]:
        """(h, w) of the letterboxed image."""
        return self.top + self.resized_hw[0] + self.bottom, self.left + self.resized_hw[1] + self.right


def letterbox_plan(shape: Tuple[int, int], new_shape: Union[int, Tuple[int, int]] = 640, auto: bool = True,
                   scale_fill: bool = False, scaleup: bool = True, stride: int = 32,
                   center: bool = True) -> LetterboxPlan:
    """The letterbox of an image of ``shape`` (h, w), without touching pixels (see `letterbox`)."""
    if isinstance(new_shape, (int, np.integer)):
        new_shape = (int(new_shape), int(new_shape))
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:
        r = min(r, 1.0)
    ratio = r, r
    resized_hw = int(round(shape[0] * r)), int(round(shape[1] * r))
    dw, dh = new_shape[1] - resized_hw[1], new_shape[0] - resized_hw[0]
    if auto:
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)
    elif scale_fill:
        dw, dh = 0.0, 0.0
        resized_hw = (new_shape[0], new_shape[1])
        ratio = new_shape[1] / shape[1], new_shape[0] / shape[0]
    dw, dh = float(dw), float(dh)
    if center:
        dw /= 2
        dh /= 2
    # The +-0.1 splits an odd padding as YOLOv5 does (one more pixel bottom/right).
    top, bottom = (int(round(dh - 0.1)), int(round(dh + 0.1))) if center else (0, int(round(dh)))
    left, right = (int(round(dw - 0.1)), int(round(dw + 0.1))) if center else (0, int(round(dw)))
    return LetterboxPlan(resized_hw, ratio, (dw, dh) if center else (0.0, 0.0), top, bottom, left, right)


def resize_to(im: np.ndarray, plan: LetterboxPlan) -> np.ndarray:
    """``im`` ((H, W, C), any C >= 1) resized (bilinear) to ``plan.resized_hw``, or ``im`` itself when it
    has that size already; OpenCV resizes each band as it resizes a band alone."""
    if im.shape[:2] == plan.resized_hw:
        return im
    h, w = plan.resized_hw
    out = cv2.resize(im, dsize=(w, h), interpolation=cv2.INTER_LINEAR)  # OpenCV's dsize is (width, height)
    return out[..., None] if out.ndim < im.ndim else out  # OpenCV drops the axis of one band


def band_values(color, bands: int) -> Tuple:
    """The padding value of each of ``bands`` channels: ``color`` as given when it has one value a band;
    else its one value (a number, or a tuple of equal values such as the default (114, 114, 114)) for
    every band.  A ValueError for anything else."""
    values = tuple(np.atleast_1d(np.asarray(color)).tolist())
    if len(values) == bands:
        return values
    if len(set(values)) == 1:
        return values[:1] * bands
    raise ValueError(f"a padding colour of {len(values)} different values for an image of {bands} channels")


def letterbox_image(im: np.ndarray, plan: LetterboxPlan, color=(PAD_VALUE,) * 3) -> np.ndarray:
    """``im`` (H, W, C) resized and padded with ``color`` as ``plan`` says: a new (*plan.shape, C) array.
    Any C >= 1: for C other than 3 a ``color`` of one value pads every band with it (band_values)."""
    bands = im.shape[2] if im.ndim == 3 else 0
    if bands in (0, 3):
        return cv2.copyMakeBorder(resize_to(im, plan), plan.top, plan.bottom, plan.left, plan.right,
                                  cv2.BORDER_CONSTANT, value=color)
    # OpenCV takes at most 4 border values (repeated in blocks of 4 bands), so the border is drawn here
    out = np.empty(plan.shape + (bands,), im.dtype)
    out[...] = band_values(color, bands)
    h, w = plan.resized_hw
    out[plan.top:plan.top + h, plan.left:plan.left + w] = resize_to(im, plan)
    return out


def letterbox(im: np.ndarray, new_shape: Union[int, Tuple[int, int]] = 640, color=(PAD_VALUE,) * 3,
              auto: bool = True, scale_fill: bool = False, scaleup: bool = True, stride: int = 32,
              center: bool = True, scaleFill: bool = None) -> LetterboxResult:
    """Resize ``im`` (H, W, C) to fit ``new_shape`` (h, w) keeping its aspect ratio, then pad.

    Numbers are YOLOv5's.  The result unpacks as YOLOv5's tuple: ``im, ratio, (dw, dh)``.

    Args:
        im: (H, W, C) image, any dtype OpenCV resizes (uint8 BGR in the loaders).
        new_shape: the letterbox (h, w), or one int for a square.
        color: the padding's value per channel (114 gray); for other than 3 channels, one value for every
            band or one per band (band_values).
        auto: pad only to a multiple of ``stride`` (the smallest stride-multiple shape), not to ``new_shape``.
        scale_fill: with ``auto=False``, stretch to fill ``new_shape`` exactly, without padding (the aspect
            ratio is not kept).
        scaleup: False never enlarges (only shrinks to fit).
        stride: the multiple ``auto`` pads to.
        center: False puts all padding right and bottom.
        scaleFill: YOLOv5's spelling of ``scale_fill``; wins when given.

    Returns:
        LetterboxResult: ``img`` the padded (h', w', C) image of ``im``'s dtype; ``ratio`` (rw, rh); ``pad``
        (padw, padh) in pixels, possibly .5.  A point (x, y) in pixels of ``im`` lands at
        (x * rw + padw, y * rh + padh) in ``img``.
    """
    if scaleFill is not None:
        scale_fill = scaleFill
    plan = letterbox_plan(im.shape[:2], new_shape, auto, scale_fill, scaleup, stride, center)
    return LetterboxResult(letterbox_image(im, plan, color), plan.ratio, plan.pad)


@dataclass
class RectPlan:
    """Rectangular batching (YOLOv5 ``rect=True``).

    ``order``: (n,) int64, the dataset's images sorted by aspect ratio h/w.  ``batch_index``: (n,) int64,
    the batch of each image in that order.  ``batch_shapes``: (nb, 2) int64 [h, w] letterbox shape per
    batch, multiples of ``stride``.
    """
    order: np.ndarray
    batch_index: np.ndarray
    batch_shapes: np.ndarray


def rect_max_side(img_size: int, stride: int, pad: float) -> int:
    """The longest side any batch of ``rect_plan`` can have: that of a batch whose long side is
    ``img_size``, i.e. ``ceil(img_size / stride + pad)`` strides (computed as rect_plan does)."""
    return int(np.ceil(1.0 * img_size / stride + pad)) * int(stride)


def rect_plan(shapes_hw: np.ndarray, batch_size: int, img_size: int, stride: int, pad: float) -> RectPlan:
    """Batch images of similar aspect ratio and give each batch the smallest stride-multiple shape
    that holds all of them at ``img_size`` long side (plus ``pad`` strides).  ``shapes_hw``: (n, 2)
    [h, w] of the images.  O(n log n): one sort, then one pass over the batches (``reduceat``), so a
    million images take well under a second."""
    s = np.asarray(shapes_hw, dtype=np.float64)
    ar = s[:, 0] / s[:, 1]  # h / w, as YOLOv5's
    order = ar.argsort()  # the default kind, as YOLOv5 sorts: equal ratios come in the same order
    ar = ar[order]
    n = len(s)
    bi = np.arange(n, dtype=np.int64) // batch_size
    starts = np.arange(0, n, batch_size)
    batch_hw = np.ones((len(starts), 2))  # [h, w] of each batch as a share of img_size
    if n:
        mini, maxi = np.minimum.reduceat(ar, starts), np.maximum.reduceat(ar, starts)
        tall, wide = maxi < 1, mini > 1  # every image of the batch wider than tall, or taller than wide
        batch_hw[tall, 0] = maxi[tall]
        batch_hw[wide, 1] = 1 / mini[wide]
    batch_shapes = (np.ceil(batch_hw * img_size / stride + pad).astype(np.int64) * stride)
    return RectPlan(order.astype(np.int64), bi, batch_shapes)
