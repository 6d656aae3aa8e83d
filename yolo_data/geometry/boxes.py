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
    return np.clip(xyxy, 0, np.array([w, h, w, h], xyxy.dtype), out=xyxy)


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


def bbox_ioa(box: np.ndarray, boxes: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """Intersection of one pixel xyxy ``box`` (4,) with each of ``boxes`` (n, 4) xyxy, over the area of
    each of ``boxes``: (n,) float, the fraction of every box that ``box`` would cover."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    iw = (np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])).clip(0)
    ih = (np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])).clip(0)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) + eps
    return iw * ih / area


def resample_polygon(points: np.ndarray, n: int = 1000) -> np.ndarray:
    """(k, 2) closed polygon -> (n, 2) float64 points spaced evenly in vertex index along its outline.

    The first vertex is repeated at the end so the closing edge is sampled too; spacing is uniform in
    vertex index (not arc length), which is what YOLOv5 does, so warped boxes match its statistics.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    closed = np.concatenate([pts, pts[:1]], axis=0)
    t = np.linspace(0, len(closed) - 1, n)
    at = np.arange(len(closed))
    return np.stack([np.interp(t, at, closed[:, 0]), np.interp(t, at, closed[:, 1])], axis=1)


def transform_points(points: np.ndarray, M: np.ndarray) -> np.ndarray:
    """(k, 2) pixel points -> (k, 2) float64 points ``M @ [x, y, 1]`` after the perspective divide.

    ``M`` is a (3, 3) homography; for an affine ``M`` (last row 0, 0, 1) the divide is by exactly 1.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    xyw = pts @ M[:, :2].T + M[:, 2]
    return xyw[:, :2] / xyw[:, 2:3]


def box_corners(boxes: np.ndarray) -> np.ndarray:
    """(n, 4) xyxy -> (n, 4, 2) float64 corners: top-left, top-right, bottom-right, bottom-left."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]], axis=1)
