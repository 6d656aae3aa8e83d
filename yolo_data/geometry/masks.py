"""Instance masks from polygons, for segmentation training (YOLOv5-seg's batch format).

Polygons are (k, 2) float pixel xy on an (h, w) image.  Masks are 1/``ratio`` of its height and width:
(h // ratio, w // ratio).  Two layouts:

    per instance:  (n, h // r, w // r) uint8, 1 inside instance i's polygon, 0 elsewhere
    overlap:       (h // r, w // r), each pixel the 1-based rank of the instance covering it, instances
                   ranked by area descending, so a smaller instance lies on top of a larger one (0: none);
                   uint8 up to 255 instances, int32 above; the targets must be put in the same order

Rasterisation follows YOLOv5 7.0 step for step, so that evaluation batches equal its batches bit for bit:
the points are truncated to int32, the polygon is filled (edges included) at full image size, and the
fill is shrunk with OpenCV's bilinear resize.  Each mask pixel of a shrink by a whole ratio depends
only on its own ratio x ratio block of the full-size fill, so only the blocks under a polygon's bounding
box are filled and shrunk: the same pixels at a cost that follows the polygon's size, not the image's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch

MAX_UINT8_INSTANCES = 255  # an overlap mask holds ranks 1..n; above 255 they need a wider type
ULTRALYTICS_POINTS = 1000  # Ultralytics resamples every polygon it reads to this many points


def mask_shape(hw: Tuple[int, int], ratio: int) -> Tuple[int, int]:
    """(h // ratio, w // ratio): the mask size for an (h, w) image."""
    return hw[0] // ratio, hw[1] // ratio


def polygon_mask(hw: Tuple[int, int], polygon: np.ndarray, ratio: int = 1) -> np.ndarray:
    """(h // ratio, w // ratio) uint8 0/1 mask of one (k, 2) float pixel polygon on an (h, w) image,
    filled at full size and then shrunk (the reference: every pixel of the image is filled)."""
    full = np.zeros(hw, np.uint8)
    pts = np.asarray(polygon, np.float32).reshape(-1, 2).astype(np.int32)
    if len(pts):
        cv2.fillPoly(full, [pts], color=1)
    h, w = mask_shape(hw, ratio)
    return cv2.resize(full, (w, h))


def _instance(hw: Tuple[int, int], polygon: np.ndarray, ratio: int):
    """One polygon's mask as (crop uint8 0/1, mask row, mask column of the crop's top-left), or None
    when it covers no mask pixel's block.  Equal to the crop of ``polygon_mask`` at that place."""
    h, w = hw
    if h % ratio or w % ratio:
        # the shrink then is not by a whole ratio, and a mask pixel mixes neighbouring blocks
        m = polygon_mask(hw, polygon, ratio)
        return m, 0, 0
    pts = np.asarray(polygon, np.float32).reshape(-1, 2).astype(np.int32)
    if not len(pts):
        return None
    # blocks that hold any filled pixel: fillPoly fills the pixels of the truncated points' envelope
    x0, y0 = (max(int(v), 0) // ratio for v in pts.min(0))
    x1, y1 = (min(int(v) // ratio + 1, n // ratio) for v, n in zip(pts.max(0), (w, h)))
    if x1 <= x0 or y1 <= y0:
        return None
    full = np.zeros(((y1 - y0) * ratio, (x1 - x0) * ratio), np.uint8)
    cv2.fillPoly(full, [pts - np.array([x0 * ratio, y0 * ratio], np.int32)], color=1)
    return (full if ratio == 1 else cv2.resize(full, (x1 - x0, y1 - y0))), y0, x0


def instance_masks(hw: Tuple[int, int], polygons: Sequence[np.ndarray], ratio: int = 1) -> np.ndarray:
    """(n, h // ratio, w // ratio) uint8 0/1: mask i is polygon i's (pixel polygons on an (h, w) image)."""
    out = np.zeros((len(polygons),) + mask_shape(hw, ratio), np.uint8)
    for i, polygon in enumerate(polygons):
        part = _instance(hw, polygon, ratio)
        if part is not None:
            m, y, x = part
            out[i, y:y + m.shape[0], x:x + m.shape[1]] = m
    return out


def overlap_mask(hw: Tuple[int, int], polygons: Sequence[np.ndarray], ratio: int = 1):
    """All instances in one mask: ``(mask, order)``.

    ``order``: (n,) int64, the instances by area (mask pixels) descending; ``mask``: (h // ratio,
    w // ratio), pixel = 1 + the position in ``order`` of the last instance in that order covering it
    (so the smaller of two overlapping instances is seen), 0 where none; uint8 for up to 255 instances,
    int32 above, so every instance keeps its own value.  Reorder targets by ``order``.

    The order is YOLOv5 7.0's exactly: it sorts the negated areas as unsigned integers, which puts
    instances without a mask pixel first (their value is 0, they paint nothing), and ties fall as
    NumPy's default sort leaves them.
    """
    n = len(polygons)
    parts = [_instance(hw, p, ratio) for p in polygons]
    areas = np.array([0 if p is None else int(p[0].sum()) for p in parts], np.uint64)
    order = np.argsort(-areas).astype(np.int64)
    out = np.zeros(mask_shape(hw, ratio), np.uint8 if n <= MAX_UINT8_INSTANCES else np.int32)
    for rank, i in enumerate(order, 1):
        if parts[i] is not None:
            m, y, x = parts[i]
            region = out[y:y + m.shape[0], x:x + m.shape[1]]
            region[m > 0] = rank
    return out, order


@dataclass(frozen=True)
class MaskSpec:
    """What masks a segmentation batch carries: ``ratio`` (masks are 1/ratio of the image's height and
    width), ``overlap`` (one mask per image, else one per instance) and ``rule`` ('yolov5': polygons
    drawn as given; 'ultralytics': each first resampled to ULTRALYTICS_POINTS points along its outline,
    its vertices kept, as Ultralytics reads every polygon, and placed at the letterbox's whole-pixel
    border in evaluation, see EvalMapper)."""
    ratio: int = 4
    overlap: bool = True
    rule: str = "yolov5"

    @property
    def points(self) -> int:
        """Points each polygon is resampled to before it is drawn (0: as given)."""
        return ULTRALYTICS_POINTS if self.rule == "ultralytics" else 0

    @staticmethod
    def of(targets) -> Optional["MaskSpec"]:
        """The spec for a TargetSettings, or None when its task is not 'segment' (no masks)."""
        if getattr(targets, "task", None) != "segment":
            return None
        return MaskSpec(int(targets.mask_ratio), bool(targets.overlap_mask), targets.mask_rule)


def resample_outline(polygon: np.ndarray, n: int) -> np.ndarray:
    """(k, 2) polygon -> (n, 2) float32 points along its closed outline, evenly spaced in vertex
    index (so a longer edge gets no more points than a short one), with every vertex among them when
    k + 1 < n; a polygon of n points is returned as it is."""
    polygon = np.asarray(polygon, np.float32)
    if len(polygon) in (0, n):
        return polygon
    closed = np.concatenate([polygon, polygon[:1]])
    at = np.arange(len(closed))
    if len(closed) < n:
        x = np.linspace(0, len(closed) - 1, n - len(closed))
        x = np.insert(x, np.searchsorted(x, at), at)
    else:
        x = np.linspace(0, len(closed) - 1, n)
    return np.stack([np.interp(x, at, closed[:, j]) for j in range(2)], 1).astype(np.float32)


def item_masks(segments: List[np.ndarray], n: int, hw: Tuple[int, int], spec: MaskSpec,
               flip_ud: bool = False, flip_lr: bool = False):
    """(masks tensor, order or None) for an item of ``n`` objects on an (h, w) image.

    ``segments``: one pixel polygon per object, or [] when the objects have none (their masks are
    empty).  Per instance: (n, h // r, w // r) uint8; overlap: (1, h // r, w // r) (see
    :func:`overlap_mask`) and ``order``, the objects' new order.  Without objects: zeros of (1 or 0,
    h // r, w // r) uint8, as YOLOv5-seg gives (it gives them as float32).  ``flip_ud``/``flip_lr``:
    the masks are mirrored after rasterising, as the image is, so that a mask lies on the same pixels
    of its object whether or not the image was flipped.
    """
    hw = tuple(int(v) for v in hw)
    if n and segments and len(segments) != n:
        raise ValueError(f"{n} objects but {len(segments)} polygons")
    if spec.points:
        segments = [resample_outline(s, spec.points) for s in segments]
    order = None
    if spec.overlap:
        if n and segments:
            m, order = overlap_mask(hw, segments, spec.ratio)
        else:
            m = np.zeros(mask_shape(hw, spec.ratio), np.uint8)
        m = m[None]
    else:
        m = instance_masks(hw, segments, spec.ratio) if segments else \
            np.zeros((n,) + mask_shape(hw, spec.ratio), np.uint8)
    if flip_ud:
        m = m[:, ::-1]
    if flip_lr:
        m = m[:, :, ::-1]
    return torch.from_numpy(np.ascontiguousarray(m)), order


def with_masks(item: tuple, segments: List[np.ndarray], hw: Tuple[int, int], spec: MaskSpec,
               flip_ud: bool = False, flip_lr: bool = False) -> tuple:
    """``item`` (img, targets, path, shapes[, extras]) with ``"masks"`` added to its per-object extras
    (the fifth part, made when missing); in overlap mode the targets' rows and every other extra are
    put in the masks' order.  ``segments``, ``hw``, flips: as :func:`item_masks`."""
    img, targets, path, shapes, *rest = item
    extras = dict(rest[0]) if rest else {}
    masks, order = item_masks(segments, len(targets), hw, spec, flip_ud, flip_lr)
    if order is not None:
        idx = torch.from_numpy(order)
        targets = targets[idx]
        extras = {k: v[idx] for k, v in extras.items()}
    extras["masks"] = masks
    return img, targets, path, shapes, extras
