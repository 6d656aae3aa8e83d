"""One training sample between pipeline steps: an image and its boxes in the internal format."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

import numpy as np


@dataclass
class Sample:
    """``img``: (H, W, 3) uint8 BGR (a mosaic canvas is (H, W, 4) BGRA until its perspective warp).  ``cls``: (n,) float32 class ids.  ``boxes``: (n, 4) float32 pixel
    xyxy on ``img``.  ``segments``: one (k, 2) float32 pixel polygon per box, or [] when the sample has
    no polygons (then only boxes are transformed)."""
    img: np.ndarray
    cls: np.ndarray
    boxes: np.ndarray
    segments: List[np.ndarray] = field(default_factory=list)

    def __post_init__(self):
        if len(self.cls) != len(self.boxes) or (self.segments and len(self.segments) != len(self.boxes)):
            raise ValueError(f"sample has {len(self.cls)} classes, {len(self.boxes)} boxes and "
                             f"{len(self.segments)} segments")

    def __len__(self) -> int:
        return len(self.cls)

    def select(self, keep: np.ndarray) -> "Sample":
        """The boxes where ``keep`` (bool mask or index array), with their classes and segments: the one
        place where boxes are dropped, so the three never fall out of step."""
        keep = np.asarray(keep)
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep
        segments = [self.segments[i] for i in idx] if self.segments else []
        return Sample(self.img, self.cls[idx], self.boxes[idx], segments)

    @staticmethod
    def concat(samples: List["Sample"], img: np.ndarray) -> "Sample":
        """Boxes of several samples (already in ``img``'s pixel frame) on one image.  If any part has
        polygons, the boxes of parts without them get their rectangle as polygon, so every box keeps one."""
        cls = np.concatenate([s.cls for s in samples] + [np.zeros(0, np.float32)]).astype(np.float32)
        boxes = np.concatenate([s.boxes for s in samples] + [np.zeros((0, 4), np.float32)]).astype(np.float32)
        segments = []
        if any(s.segments for s in samples):
            segments = [seg for s in samples for seg in (s.segments or box_polygons(s.boxes))]
        return Sample(img, cls, boxes, segments)


def box_polygons(boxes: np.ndarray) -> List[np.ndarray]:
    """(n, 4) xyxy -> n (4, 2) float32 rectangles (clockwise from top-left)."""
    return [np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float32) for x1, y1, x2, y2 in boxes]
