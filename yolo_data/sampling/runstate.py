"""What one run shares between the dataset, its sampler and its collate, beside the settings: the
decisions the composition root (:mod:`~yolo_data.build`) makes at run time, and the epoch.

Each has one writer:

    rect_batch, shm_reserve_band_bytes   build_loader, before the dataset is built
    partner_group                        build_loader, once, before the DataLoader's workers fork
    epoch                                the loader's YoloSampler, when a pass starts (dataset.set_epoch
                                         for a dataset used without one)

``dataset.indices`` (YOLOv5's, set each epoch by its train.py) is the dataset's own, written by its
setter only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .sampler import SharedEpoch


@dataclass
class RunState:
    """``rect_batch``: the batch rect shapes are made of (Settings.rect_batch).  ``shm_reserve_band_bytes``:
    room a RAM image cache leaves free in shared memory for the workers' batches, for one band of the
    images (of their samples' bytes; the dataset's channels, known once its yaml is read, multiply it).  ``partner_group``:
    mosaic partners come from groups of this many consecutive draws of the epoch's global order (0: the
    item's whole batch).  ``epoch``: in shared memory, read by persistent workers.  ``sampled``: whether
    a loader's sampler writes the epoch."""
    rect_batch: int
    shm_reserve_band_bytes: int = 0
    partner_group: int = 0
    epoch: SharedEpoch = field(default_factory=SharedEpoch)
    sampled: bool = False
