"""The split's index, built once: which images are items, in which order, with which labels, and the
letterbox shape of each (pure: a label store in, an index out; no files are read here)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from ..geometry.shapes import rect_plan
from ..labels.store import LabelStore
from ..labels.summary import printing_rank
from ..settings import IndexSettings, Settings  # noqa: F401 (IndexSettings: its part, re-exported)

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


def keep_classes(store: LabelStore, names: List[str], classes: Sequence[int], remap: bool = False,
                 prefix: str = "", data="") -> Tuple[LabelStore, List[str]]:
    """(store, names) with the label rows of ``classes`` only (their polygons and keypoints with them;
    an image left without rows stays, a background), as Ultralytics' ``classes`` does.  ``remap``: the
    kept ids become 0..k-1 in the order of ``classes`` and the names the kept names in that order (the
    ids as text where the dataset has no names).  ``names``: the dataset's, against which ``classes``
    is checked (ValueError naming ``data``); without names any id >= 0 is taken.  Logs what was kept."""
    classes = [int(c) for c in classes]
    outside = [c for c in classes if names and c >= len(names)]
    if outside:
        raise ValueError(f"{prefix}classes={classes}: {data or 'the dataset'} has {len(names)} classes "
                         f"(ids 0..{len(names) - 1}); {', '.join(map(str, outside))} is not one of them")
    ids = store.labels[:, 0].astype(np.int64)
    table = np.full(max(classes + [int(ids.max()) if len(ids) else 0]) + 1, -1, np.int64)
    table[classes] = np.arange(len(classes))
    new = table[ids]
    keep = new >= 0
    before = store.num_backgrounds()
    store = store.keep_rows(keep, new if remap else None)
    named = bool(names)
    kept_names = [names[c] if named else str(c) for c in classes]
    if remap:
        names = kept_names
    missing = [kept_names[k] for k in range(len(classes)) if not np.any(new == k)]
    if printing_rank():
        line = (f"{prefix}classes={classes}" + (f" ({', '.join(kept_names)})" if named else "")
                + f": {int(keep.sum()):,} of {len(keep):,} labels kept; {store.num_backgrounds() - before:,} of "
                f"{len(store):,} images left without labels, kept as backgrounds"
                + (f"; ids remapped to {'0..' if len(classes) > 1 else ''}{len(classes) - 1}" if remap else ""))
        (LOGGER.warning if missing else LOGGER.info)(line + (f"; no labels of {', '.join(missing)}" if missing else ""))
    return store, list(names)


def build_index(store: LabelStore, names: List[str], settings: Settings, rect_batch: int,
                prefix: str = "", data="") -> SplitIndex:
    """Filters (``classes`` with ``remap_classes``, ``min_items``, ``single_cls``), then the rect order
    and shapes.  ``rect_batch``: the batch rect shapes are made of (Settings.rect_batch: the global
    batch, so every rank's images of a step share one shape).  ``data``: the dataset, for messages.
    The classes filter comes first, so ``min_items`` counts the rows an item keeps; ``names`` are then
    the kept ones with ``remap_classes``."""
    part = settings.index
    if part.classes is not None:
        store, names = keep_classes(store, names, part.classes, part.remap_classes, prefix, data)
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
