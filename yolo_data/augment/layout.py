"""An image not made yet: where each source image's pixels go, for a device to make them later.

The training pipeline (pipeline.py) moves pixels and labels together.  When a training loader's
device stage makes the pixels (yolo_data.device), the DataLoader workers run the same pipeline with
each image standing in as a :class:`Layout`: the labels take every step and every random draw as on
the CPU path, and each pixel step records what it would have done instead of doing it.  The steps
a layout records are those whose pixels are placements, resizes, one warp, a blend and flips:

    tiles placed or resized onto a canvas (PAD_VALUE elsewhere)   mosaic.mosaic4, mosaic4_resized,
                                                                  mosaic9, a letterbox
    -> one perspective warp onto the output (bilinear, PAD_VALUE  perspective.warp_image
       where nothing maps)
    -> a blend with another layout, a * r + b * (1 - r),          mosaic.mixup
       truncated to whole levels
    -> flips up-down and left-right                               perspective.flip_ud, flip_lr

A step that needs the pixels themselves (copy-paste, CutMix, Albumentations) is never given a layout:
the mapper makes such an item on the CPU.  Coordinates: pixel edges, x right, y down; a region is
(x1, y1, x2, y2) whole pixels, x2 and y2 excluded.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..geometry.shapes import LetterboxPlan

Region = Tuple[int, int, int, int]


@dataclass(frozen=True, eq=False)
class Tile:
    """Region ``src`` of source image ``source`` (its index in the dataset; pixels as the CPU path's
    ImageSource gives them: resized to long side img_size) drawn into region ``dst`` of the canvas:
    copied when both have one size, else resized bilinearly as cv2.resize(INTER_LINEAR) does.
    ``image``: what the device makes the source's pixels of (images.load.EncodedImage or LoadedImage)."""
    source: int
    src: Region
    dst: Region
    image: Any = None

    @property
    def resized(self) -> bool:
        return (self.src[2] - self.src[0], self.src[3] - self.src[1]) != (self.dst[2] - self.dst[0],
                                                                          self.dst[3] - self.dst[1])


@dataclass(frozen=True, eq=False)
class Layout:
    """An (H, W, C) image to be made: ``tiles`` drawn in order on a ``canvas_hw`` (h, w) canvas of
    PAD_VALUE; then, when ``matrix`` is set, that canvas warped by the (3, 3) float64 canvas-to-output
    ``matrix`` onto ``out_hw``; then, when ``mixed`` is set, blended with another layout
    (``(other, r)``: self * r + other * (1 - r), truncated); then flipped by ``flips`` (up-down,
    left-right).  ``channels``: C, the bands of its source images (3: colour).  ``shape`` is (H, W, C)
    as an image array's, so label code reads the size as usual."""
    canvas_hw: Tuple[int, int]
    tiles: Tuple[Tile, ...]
    matrix: Optional[np.ndarray] = None
    out_hw: Optional[Tuple[int, int]] = None
    mixed: Optional[Tuple["Layout", float]] = None
    flips: Tuple[bool, bool] = (False, False)
    channels: int = 3

    @classmethod
    def image(cls, source: int, hw: Tuple[int, int], image: Any = None, channels: int = 3) -> "Layout":
        """Source image ``source`` (``image``: see Tile; ``channels`` bands) as it is: an (h, w) canvas
        that is that image."""
        h, w = int(hw[0]), int(hw[1])
        return cls((h, w), (Tile(int(source), (0, 0, w, h), (0, 0, w, h), image),), channels=int(channels))

    @property
    def shape(self) -> Tuple[int, int, int]:
        h, w = self.out_hw or self.canvas_hw
        return int(h), int(w), self.channels

    @property
    def whole(self) -> Tile:
        """The one tile of a layout made by ``image`` (ValueError for any other layout)."""
        if self.matrix is not None or self.mixed is not None or any(self.flips) or len(self.tiles) != 1 \
                or self.tiles[0].src != (0, 0, self.canvas_hw[1], self.canvas_hw[0]) or self.tiles[0].resized:
            raise ValueError("only a layout of one whole source image can be placed on another canvas")
        return self.tiles[0]

    def images(self) -> Dict[int, Any]:
        """source index -> ``image`` of every source the layout draws from (its blend partner's too)."""
        out = {t.source: t.image for t in self.tiles}
        return {**out, **self.mixed[0].images()} if self.mixed is not None else out

    def letterboxed(self, plan: LetterboxPlan) -> "Layout":
        """This whole image resized and padded as ``plan`` says (geometry.shapes.letterbox_image)."""
        h, w = plan.resized_hw
        return placed(plan.shape, [(self, self.whole.src, (plan.left, plan.top, plan.left + w, plan.top + h))])

    def warped(self, matrix: np.ndarray, out_hw: Tuple[int, int]) -> "Layout":
        """This canvas warped by ``matrix`` onto ``out_hw`` (perspective.warp_image's step)."""
        if self.matrix is not None or self.mixed is not None or any(self.flips):
            raise ValueError("a layout is warped once, before it is blended or flipped")
        if tuple(out_hw) == self.canvas_hw and np.array_equal(matrix, np.eye(3)):
            return self  # as warp_image: nothing to resample
        return replace(self, matrix=np.asarray(matrix, np.float64).copy(), out_hw=(int(out_hw[0]), int(out_hw[1])))

    def blended(self, other: "Layout", r: float) -> "Layout":
        """This layout * r + ``other`` * (1 - r), truncated (mosaic.mixup's pixels)."""
        if self.mixed is not None or any(self.flips) or other.shape != self.shape:
            raise ValueError(f"a layout is blended once, before flips, with one of its shape ({other.shape} and {self.shape})")
        return replace(self, mixed=(other, float(r)))

    def __getitem__(self, key) -> "Layout":
        """The flipped views that perspective.flip_ud (``[::-1]``) and flip_lr (``[:, ::-1]``) take."""
        back = slice(None, None, -1)
        if key == back:
            return replace(self, flips=(not self.flips[0], self.flips[1]))
        if key == (slice(None), back):
            return replace(self, flips=(self.flips[0], not self.flips[1]))
        raise TypeError(f"a Layout takes the flips [::-1] and [:, ::-1] only, not {key!r}")


def placed(canvas_hw: Tuple[int, int], parts) -> Layout:
    """A canvas with each of ``parts`` ((layout of one source image, src region, dst region), in
    drawing order) drawn on it; empty regions are left out.  The canvas has the parts' channels."""
    parts = list(parts)
    tiles = tuple(Tile(part.whole.source, tuple(map(int, src)), tuple(map(int, dst)), part.whole.image)
                  for part, src, dst in parts if dst[2] > dst[0] and dst[3] > dst[1])
    return Layout((int(canvas_hw[0]), int(canvas_hw[1])), tiles, channels=parts[0][0].channels if parts else 3)
