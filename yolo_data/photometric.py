"""Colour augmentation: random HSV gains (YOLOv5's ``augment_hsv``) with an explicit generator."""
from __future__ import annotations

import cv2
import numpy as np


def augment_hsv(img: np.ndarray, rng: np.random.Generator, hgain: float = 0.5, sgain: float = 0.5,
                vgain: float = 0.5) -> np.ndarray:
    """``img`` with hue, saturation and value scaled by random gains: a new (H, W, 3) uint8 BGR array.

    ``img``: (H, W, 3) BGR or (H, W, 4) BGRA uint8, any strides (alpha is ignored); it is not
    modified.  Each gain is drawn U(-1, 1) * gain + 1 (one draw of three numbers).  OpenCV's 8-bit
    hue runs 0..179, so the scaled hue wraps modulo 180; saturation and value saturate at 255.  With
    all gains 0 nothing is drawn (the generator does not advance) and ``img`` itself is returned.
    """
    if not (hgain or sgain or vgain):
        return img
    r = rng.uniform(-1, 1, 3) * np.array([hgain, sgain, vgain]) + 1
    hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)  # takes BGRA too
    # One 256-entry table per channel is far cheaper than float maths over every pixel.
    x = np.arange(256, dtype=np.float64)
    lut = np.stack([(x * r[0]) % 180, np.clip(x * r[1], 0, 255), np.clip(x * r[2], 0, 255)], axis=1)
    # A (256, 1, 3) table makes cv2.LUT map each channel through its own column in one pass.
    cv2.LUT(hsv, lut.astype(np.uint8).reshape(256, 1, 3), dst=hsv)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR, dst=hsv)  # same size and depth: in place
