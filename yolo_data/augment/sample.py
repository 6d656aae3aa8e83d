"""One training sample between pipeline steps: an image, its boxes in the internal format, and what
each object carries besides its box.

Per-object extras (keypoints, the corners of a rotated box, ...) ride in ``Sample.extras`` by name,
each a :class:`PerObject`: every geometric step hands each one the point map it applies to the boxes
(:meth:`Sample.moved_extras`), dropping, concatenating and mirroring objects reach them through
:meth:`Sample.select`, :meth:`Sample.concat` and :meth:`PerObject.mirrored`, and the item hands them
to the batch normalised (:func:`extras_of`), so no function between the label reader and the collate
needs a parameter of its own for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

PointMap = Callable[[np.ndarray], np.ndarray]  # (m, 2) float pixel xy -> (m, 2) float pixel xy


class PerObject(Protocol):
    """Per-object data beside the boxes: one entry per box, in the boxes' order, in pixels of the
    sample's image.  Implementations are immutable; each method returns a new one."""

    def __len__(self) -> int: ...

    def select(self, idx: np.ndarray) -> "PerObject":
        """The entries at ``idx`` (int index array), in that order."""

    def moved(self, move: PointMap, hw: Tuple[int, int]) -> "PerObject":
        """Every point through ``move`` onto an (h, w) image (what lands outside is the kind's to
        handle: keypoints become invisible)."""

    def mirrored(self, w: int) -> "PerObject":
        """Mirrored left-right on an image ``w`` wide (x -> w - x), reordered where the kind says
        (keypoints: left and right swap by ``flip_idx``)."""

    def joined(self, others: Sequence["PerObject"]) -> "PerObject":
        """This one's entries followed by ``others``'."""

    def normalised(self, hw: Tuple[int, int]) -> np.ndarray:
        """float32 (n, ...) for the batch, coordinates as fractions of an (h, w) image."""


@dataclass(frozen=True)
class Points:
    """K points per object with a visibility each: ``xyv`` float32 (n, K, 3) pixel x, y and
    visibility (0: not visible; a point moved outside the image becomes 0).  ``flip_idx``: the point
    that takes each point's place in a left-right mirror (left eye <-> right eye), or None when the
    order stays."""
    xyv: np.ndarray
    flip_idx: Optional[Tuple[int, ...]] = None

    def __len__(self) -> int:
        return len(self.xyv)

    def select(self, idx: np.ndarray) -> "Points":
        return Points(self.xyv[idx], self.flip_idx)

    def moved(self, move: PointMap, hw: Tuple[int, int]) -> "Points":
        n, k = self.xyv.shape[:2]
        xy = np.asarray(move(self.xyv[..., :2].reshape(-1, 2).astype(np.float64)), np.float64).reshape(n, k, 2)
        h, w = hw
        outside = (xy[..., 0] < 0) | (xy[..., 1] < 0) | (xy[..., 0] > w) | (xy[..., 1] > h)
        v = np.where(outside, 0.0, self.xyv[..., 2])
        return Points(np.concatenate([xy, v[..., None]], -1).astype(np.float32), self.flip_idx)

    def mirrored(self, w: int) -> "Points":
        xyv = self.xyv.copy()
        xyv[..., 0] = w - xyv[..., 0]
        return Points(xyv if self.flip_idx is None else xyv[:, list(self.flip_idx)], self.flip_idx)

    def joined(self, others: Sequence["Points"]) -> "Points":
        return Points(np.concatenate([self.xyv] + [o.xyv for o in others]).astype(np.float32), self.flip_idx)

    def normalised(self, hw: Tuple[int, int]) -> np.ndarray:
        out = self.xyv.astype(np.float32)
        out[..., 0] /= hw[1]
        out[..., 1] /= hw[0]
        return out


@dataclass
class Sample:
    """``img``: (H, W, C) uint8 (uint16 when 16 bits are kept), any C >= 1: BGR for C = 3 (a mosaic
    canvas of BGR tiles is (H, W, 4) BGRA until its perspective warp), else C bands in their stored order.
    ``cls``: (n,) float32 class ids.  ``boxes``: (n, 4) float32 pixel xyxy on ``img``.  ``segments``:
    one (k, 2) float32 pixel polygon per box, or [] when the sample has no polygons (then only boxes
    are transformed; with polygons a warped box is its polygon's envelope, as in YOLOv5).  ``extras``:
    per-object data by name (see :class:`PerObject`), each with n entries."""
    img: np.ndarray
    cls: np.ndarray
    boxes: np.ndarray
    segments: List[np.ndarray] = field(default_factory=list)
    extras: Dict[str, PerObject] = field(default_factory=dict)

    def __post_init__(self):
        n = len(self.boxes)
        if len(self.cls) != n or (self.segments and len(self.segments) != n) or \
                any(len(e) != n for e in self.extras.values()):
            raise ValueError(f"sample has {len(self.cls)} classes, {n} boxes, {len(self.segments)} segments and "
                             + ", ".join(f"{len(e)} {k}" for k, e in self.extras.items()))

    def __len__(self) -> int:
        return len(self.cls)

    def select(self, keep: np.ndarray) -> "Sample":
        """The boxes where ``keep`` (bool mask or index array), with their classes, segments and extras:
        the one place where boxes are dropped, so they never fall out of step."""
        keep = np.asarray(keep)
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep
        segments = [self.segments[i] for i in idx] if self.segments else []
        return Sample(self.img, self.cls[idx], self.boxes[idx], segments,
                      {k: e.select(idx) for k, e in self.extras.items()})

    def moved_extras(self, move: PointMap, hw: Tuple[int, int]) -> Dict[str, PerObject]:
        """The extras with every point through ``move`` onto an (h, w) image (each geometric step
        calls this with the map it applies to the boxes)."""
        return {k: e.moved(move, hw) for k, e in self.extras.items()}

    def mirrored_extras(self, w: int) -> Dict[str, PerObject]:
        """The extras mirrored left-right on an image ``w`` wide."""
        return {k: e.mirrored(w) for k, e in self.extras.items()}

    @staticmethod
    def concat(samples: List["Sample"], img: np.ndarray) -> "Sample":
        """Boxes of several samples (already in ``img``'s pixel frame) on one image.  If any part has
        polygons, the boxes of parts without them get their rectangle as polygon, so every box keeps one.
        Extras are joined by name; every part must carry the same ones."""
        cls = np.concatenate([s.cls for s in samples] + [np.zeros(0, np.float32)]).astype(np.float32)
        boxes = np.concatenate([s.boxes for s in samples] + [np.zeros((0, 4), np.float32)]).astype(np.float32)
        segments = []
        if any(s.segments for s in samples):
            segments = [seg for s in samples for seg in (s.segments or box_polygons(s.boxes))]
        return Sample(img, cls, boxes, segments, join_extras([s.extras for s in samples]))


def join_extras(parts: Sequence[Dict[str, PerObject]]) -> Dict[str, PerObject]:
    """Extras of several samples joined by name, in order.  Raises ValueError when the parts carry
    different ones (a mosaic of a pose image and a detection image cannot be one sample)."""
    if not parts or not parts[0]:
        if any(parts):
            raise ValueError(f"samples carry different extras: {[sorted(p) for p in parts]}")
        return {}
    names = sorted(parts[0])
    if any(sorted(p) != names for p in parts):
        raise ValueError(f"samples carry different extras: {[sorted(p) for p in parts]}")
    return {k: parts[0][k].joined([p[k] for p in parts[1:]]) for k in names}


def extras_of(sample: Sample, hw: Tuple[int, int]) -> Dict[str, np.ndarray]:
    """The item's extras for the batch: per name a float32 (n, ...) array normalised to an (h, w)
    image, row i belonging to target row i."""
    return {k: e.normalised(hw) for k, e in sample.extras.items()}


def box_polygons(boxes: np.ndarray) -> List[np.ndarray]:
    """(n, 4) xyxy -> n (4, 2) float32 rectangles (clockwise from top-left)."""
    return [np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float32) for x1, y1, x2, y2 in boxes]
