"""Letterbox and rectangular batch shapes (pure functions of arrays and numbers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Union

import cv2
import numpy as np

PAD_VALUE = 114  # the gray YOLOv5 pads with


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


def letterbox(im: np.ndarray, new_shape: Union[int, Tuple[int, int]] = 640, color=(PAD_VALUE,) * 3,
              auto: bool = True, scale_fill: bool = False, scaleup: bool = True, stride: int = 32,
              center: bool = True, scaleFill: bool = None) -> LetterboxResult:
    """Resize ``im`` (H, W, C) to fit ``new_shape`` (h, w) keeping its aspect ratio, then pad.

    Numbers are YOLOv5's: ``auto`` pads only to a multiple of ``stride``; ``scale_fill`` (YOLOv5 spells
    it ``scaleFill``) stretches to fill; ``scaleup=False`` never enlarges.  ``center=False`` puts all
    padding right and bottom.  The result unpacks as YOLOv5's tuple: ``im, ratio, (dw, dh)``.
    """
    if scaleFill is not None:
        scale_fill = scaleFill
    shape = im.shape[:2]
    if isinstance(new_shape, (int, np.integer)):
        new_shape = (int(new_shape), int(new_shape))
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:
        r = min(r, 1.0)
    ratio = r, r
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if auto:
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)
    elif scale_fill:
        dw, dh = 0.0, 0.0
        new_unpad = (new_shape[1], new_shape[0])
        ratio = new_shape[1] / shape[1], new_shape[0] / shape[0]
    dw, dh = float(dw), float(dh)
    if center:
        dw /= 2
        dh /= 2
    if shape[::-1] != new_unpad:
        im = cv2.resize(im, new_unpad, interpolation=cv2.INTER_LINEAR)
    # The +-0.1 splits an odd padding as YOLOv5 does (one more pixel bottom/right).
    top, bottom = (int(round(dh - 0.1)), int(round(dh + 0.1))) if center else (0, int(round(dh)))
    left, right = (int(round(dw - 0.1)), int(round(dw + 0.1))) if center else (0, int(round(dw)))
    im = cv2.copyMakeBorder(im, top, bottom, left, right, cv2.BORDER_CONSTANT, value=color)
    return LetterboxResult(im, ratio, (dw, dh) if center else (0.0, 0.0))


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


def rect_plan(shapes_wh: np.ndarray, batch_size: int, img_size: int, stride: int, pad: float) -> RectPlan:
    """Batch images of similar aspect ratio and give each batch the smallest stride-multiple shape
    that holds all of them at ``img_size`` long side (plus ``pad`` strides)."""
    s = np.asarray(shapes_wh, dtype=np.float64)
    ar = s[:, 1] / s[:, 0]
    order = ar.argsort()
    ar = ar[order]
    n = len(s)
    bi = np.floor(np.arange(n) / batch_size).astype(np.int64)
    nb = int(bi[-1]) + 1 if n else 0
    shapes = np.ones((nb, 2))
    for i in range(nb):
        ari = ar[bi == i]
        mini, maxi = ari.min(), ari.max()
        if maxi < 1:
            shapes[i] = [maxi, 1]
        elif mini > 1:
            shapes[i] = [1, 1 / mini]
    batch_shapes = (np.ceil(shapes * img_size / stride + pad).astype(np.int64) * stride)
    return RectPlan(order.astype(np.int64), bi, batch_shapes)
