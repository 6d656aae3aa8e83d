"""What DataLoader workers hand the device stage instead of pixels: each item's layout and the images
it draws from, and how a batch of them travels.

A training item of a loader with a device (Settings.loader.device) is ``(ItemPlan, targets, path,
shapes[, extras][, masks])``: everything but the pixels is final.  The collate function joins a
batch's plans into one :class:`BatchPlan` (each image once, however many mosaics use it), which crosses
to the main process in place of the (B, 3, H, W) image tensor; stage.DeviceStage makes the pixels there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..augment.layout import Layout
from ..images.load import CachedImage, EncodedImage, LoadedImage

# a JPEG to decode, an image of the node's image cache, or pixels (resized BGR) a worker decoded
Source = Union[EncodedImage, CachedImage, LoadedImage]


@dataclass
class ItemPlan:
    """One item's pixels, to be made: ``layout`` (augment.layout; its tiles carry the Sources they draw
    from) and its HSV gains ((3,) float64, or None for none), or ``made``: the uint8 (3, H, W) RGB
    tensor a worker made itself (a step that needs pixels, such as copy-paste), HSV and flips applied."""
    layout: Optional[Layout] = None
    hsv_gains: Optional[np.ndarray] = None
    made: Optional[torch.Tensor] = None

    @property
    def hw(self) -> Tuple[int, int]:
        return tuple(self.made.shape[1:]) if self.made is not None else self.layout.shape[:2]


@dataclass
class BatchPlan:
    """A batch's items (ItemPlan, in batch order) and every image they draw from, once: ``sources``
    index -> Source.  ``hw``: the (H, W) of every item."""
    items: List[ItemPlan]
    sources: Dict[int, Source]
    hw: Tuple[int, int]

    def __len__(self) -> int:
        return len(self.items)

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """(B, 3, H, W): the shape of the image tensor the batch becomes."""
        return len(self.items), 3, int(self.hw[0]), int(self.hw[1])

    @classmethod
    def join(cls, items: Sequence[ItemPlan]) -> "BatchPlan":
        """The batch of ``items``.  Raises ValueError when they are not all one size (items of a batch
        are stacked into one tensor)."""
        sizes = {tuple(int(v) for v in p.hw) for p in items}
        if len(sizes) != 1:
            raise ValueError(f"the items of a batch have different sizes: {sorted(sizes)}")
        sources: Dict[int, Source] = {}
        for p in items:
            if p.layout is not None:
                sources.update(p.layout.images())
        return cls(list(items), sources, sizes.pop())
