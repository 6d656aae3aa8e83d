"""The split's index, built once: which images are items, in which order, with which labels, and the
letterbox shape of each (pure: a label store in, an index out; no files are read here)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import List, Optional, Union

import numpy as np

from .geometry import rect_plan
from .settings import IndexSettings, Settings  # noqa: F401 (IndexSettings: its part, re-exported)
from .store import LabelStore

LOGGER = logging.getLogger("yolo_data")


@dataclass
class SplitIndex:
    """``store``: the items' labels in item order.  ``batch``: (n,) int64 batch of each item (YOLOv5's
    ``dataset.batch``).  ``batch_shapes``: (nb, 2) int64 [h, w] per rect batch, or None (every item is
    letterboxed to ``img_size`` square)."""
    store: LabelStore
    names: List[str]
    batch: np.ndarray
    batch_shapes: Optional[np.ndarray]
    img_size: int

    def __len__(self) -> int:
        return len(self.store)

    def shape_of(self, i: int) -> Union[int, np.ndarray]:
        """Item ``i``'s letterbox target: its rect batch's (2,) int64 [h, w], or img_size.

        NumPy integers on purpose: the letterbox ratio is then a float64 NumPy scalar, and the boxes are
        scaled in float64 before rounding to float32, as YOLOv5 does (Python numbers would keep them
        float32 under NumPy 2's promotion rules: targets 1e-7 off YOLOv5's)."""
        if self.batch_shapes is None:
            return self.img_size
        return self.batch_shapes[self.batch[i]]

    def num_classes(self) -> int:
        """The number of names, or (without names) the largest class id + 1."""
        labels = self.store.labels
        return len(self.names) or (int(labels[:, 0].max()) + 1 if len(labels) else 1)


def build_index(store: LabelStore, names: List[str], settings: Settings, rect_batch: int,
                prefix: str = "") -> SplitIndex:
    """Filters (``min_items``, ``single_cls``), then the rect order and shapes.  ``rect_batch``: the
    batch rect shapes are made of (Settings.rect_batch: the global batch, so every rank's images of a
    step share one shape)."""
    part = settings.index
    if part.min_items:
        keep = np.flatnonzero(np.diff(store.label_offsets) >= part.min_items)
        LOGGER.info(f"{prefix}{len(store) - len(keep)}/{len(store)} images with fewer than {part.min_items} "
                    "labels left out")
        store = store.subset(keep)
    if part.single_cls:
        labels = store.labels.copy()
        labels[:, 0] = 0
        store = replace(store, labels=labels)
    n = len(store)
    batch = np.arange(n, dtype=np.int64) // rect_batch
    shapes = None
    if settings.rect:
        plan = rect_plan(store.shapes_hw, rect_batch, settings.img_size, settings.stride, part.pad)
        store = store.subset(plan.order)
        batch, shapes = plan.batch_index, plan.batch_shapes
    return SplitIndex(store, list(names), batch, shapes, settings.img_size)
