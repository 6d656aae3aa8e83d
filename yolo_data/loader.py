"""``create_dataloader``: YOLOv5's signature and return value, on top of :class:`YoloDataset`."""
from __future__ import annotations

import logging
import os

import torch
from torch.utils.data import DataLoader, DistributedSampler

from . import distributed
from .dataset import YoloDataset

LOGGER = logging.getLogger("yolo_data")
_SEED_BASE = 6148914691236517205  # YOLOv5's generator offset, so shuffles match for the same seed


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, seed=0, *, split=None, cache_dir=None, min_items=0):
    """Build ``(loader, dataset)`` as YOLOv5 7.0's ``create_dataloader`` does.

    ``path``: image folder, .txt list, list of these, or a dataset yaml (then ``split`` picks
    'train'/'val'/'test'; default 'train' when ``augment`` else 'val').  ``rank``: the local rank
    under DDP (-1 otherwise): the dataset is built inside ``torch_distributed_zero_first(rank)``, so
    only local rank 0 scans and writes the label cache.  ``cache_dir``: where label caches go
    (default: beside the labels, or the per-user cache folder when that is read-only).
    """
    if quad:
        raise NotImplementedError("quad=True (YOLOv5's collate_fn4) is not implemented yet")
    if rect and shuffle:
        LOGGER.warning(f"{prefix}rect=True keeps images in aspect-ratio order; shuffle=False is used")
        shuffle = False
    with distributed.torch_distributed_zero_first(rank):
        dataset = YoloDataset(path, imgsz, batch_size, augment=augment, hyp=hyp, rect=rect,
                              image_weights=image_weights, cache_images=cache, single_cls=single_cls,
                              stride=int(stride), pad=pad, min_items=min_items, prefix=prefix,
                              split=split, cache_dir=cache_dir)
    batch_size = min(batch_size, len(dataset))
    nd = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nw = min((os.cpu_count() or 1) // max(nd, 1), batch_size if batch_size > 1 else 0, workers)
    sampler = None if rank == -1 else DistributedSampler(dataset, shuffle=shuffle, seed=seed)
    generator = torch.Generator()
    generator.manual_seed(_SEED_BASE + seed + max(distributed.get_rank(), 0))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle and sampler is None, num_workers=nw,
                        sampler=sampler, pin_memory=torch.cuda.is_available(),
                        collate_fn=YoloDataset.collate_fn, generator=generator, persistent_workers=nw > 0)
    return loader, dataset
