"""Pure NumPy box math.

The internal box format is pixel ``xyxy`` float32 (x1, y1, x2, y2).  Label files use normalised
``xywh`` (centre x, centre y, width, height, each a fraction of the image side); conversions happen
only at the edges: when labels enter the pipeline and when a sample leaves it.
"""
from __future__ import annotations

import numpy as np


def xywhn_to_xyxy(xywhn: np.ndarray, w: float, h: float, padw: float = 0.0, padh: float = 0.0) -> np.ndarray:
    """(n, 4) normalised xywh -> (n, 4) pixel xyxy on a ``w`` x ``h`` image placed at (padw, padh)."""
    out = np.empty_like(xywhn)
    out[:, 0] = w * (xywhn[:, 0] - xywhn[:, 2] / 2) + padw
    out[:, 1] = h * (xywhn[:, 1] - xywhn[:, 3] / 2) + padh
    out[:, 2] = w * (xywhn[:, 0] + xywhn[:, 2] / 2) + padw
    out[:, 3] = h * (xywhn[:, 1] + xywhn[:, 3] / 2) + padh
    return out


def clip_xyxy(xyxy: np.ndarray, w: float, h: float) -> np.ndarray:
    """(n, 4) pixel xyxy clipped to the canvas [0, w] x [0, h], in place; returns it."""
    xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0, w)
    xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0, h)
    return xyxy


def xyxy_to_xywhn(xyxy: np.ndarray, w: float, h: float, clip: bool = False, eps: float = 0.0) -> np.ndarray:
    """(n, 4) pixel xyxy -> (n, 4) normalised xywh on a ``w`` x ``h`` image.

    With ``clip`` the boxes are first clipped to the image shrunk by ``eps`` pixels, as YOLOv5 does
    before writing targets (so a box touching the border stays strictly inside [0, 1]).
    """
    if clip:
        xyxy = clip_xyxy(xyxy.copy(), w - eps, h - eps)
    out = np.empty_like(xyxy)
    out[:, 0] = ((xyxy[:, 0] + xyxy[:, 2]) / 2) / w
    out[:, 1] = ((xyxy[:, 1] + xyxy[:, 3]) / 2) / h
    out[:, 2] = (xyxy[:, 2] - xyxy[:, 0]) / w
    out[:, 3] = (xyxy[:, 3] - xyxy[:, 1]) / h
    return out


def xyxy_to_xywh(xyxy: np.ndarray) -> np.ndarray:
    """(n, 4) xyxy -> (n, 4) centre xywh in the same units and dtype."""
    out = np.empty_like(xyxy)
    out[:, 0] = (xyxy[:, 0] + xyxy[:, 2]) / 2
    out[:, 1] = (xyxy[:, 1] + xyxy[:, 3]) / 2
    out[:, 2] = xyxy[:, 2] - xyxy[:, 0]
    out[:, 3] = xyxy[:, 3] - xyxy[:, 1]
    return out


def polygon_to_xyxy(points: np.ndarray) -> np.ndarray:
    """(k, 2) polygon points -> (4,) their envelope x1, y1, x2, y2 (same dtype)."""
    return np.array([points[:, 0].min(), points[:, 1].min(), points[:, 0].max(), points[:, 1].max()],
                    dtype=points.dtype)
