"""``create_dataloader``: YOLOv5's signature and return value, on top of :class:`YoloDataset`."""
from __future__ import annotations

import logging
import os

import cv2
import torch
from torch.utils.data import DataLoader

from . import distributed
from .collate import QuadCollate, collate_fn
from .dataset import YoloDataset
from .sampling import YoloSampler
from .weights import labels_to_image_weights

LOGGER = logging.getLogger("yolo_data")


def init_worker(worker_id: int) -> None:
    """In each DataLoader worker (never in the user's process): OpenCV single-threaded, as torch makes
    itself in workers, so N workers do not each start a pool as large as the machine.  No random
    seeding is needed: items draw from their own (seed, epoch, index) generators."""
    cv2.setNumThreads(0)


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, seed=0, *, split=None, cache_dir=None, min_items=0, batch_partners=True):
    """Build ``(loader, dataset)`` as YOLOv5 7.0's ``create_dataloader`` does.

    ``path``: image folder, .txt list, list of these, or a dataset yaml (then ``split`` picks
    'train'/'val'/'test'; default 'train' when ``augment`` else 'val').  ``rank``: the local rank
    under DDP (-1 otherwise): the dataset is built inside ``torch_distributed_zero_first(rank)``, so
    only local rank 0 scans and writes the label cache.  ``cache_dir``: where label caches go
    (default: beside the labels, or the per-user cache folder when that is read-only).
    ``batch_partners``: mosaic/mixup partners come from the same batch, so each image is decoded once
    per batch (about 4x fewer decodes); False draws them from the whole dataset, as YOLOv5 does.

    The loader's sampler (``loader.sampler``, a :class:`YoloSampler`) gives each rank a disjoint share
    that changes with ``set_epoch``; with ``rect`` and ``shuffle`` it shuffles whole batches.  Workers
    persist across epochs.  Augmentation depends only on (seed, epoch, item), not on ``workers``.
    """
    with distributed.torch_distributed_zero_first(rank):
        dataset = YoloDataset(path, imgsz, batch_size, augment=augment, hyp=hyp, rect=rect,
                              image_weights=image_weights, cache_images=cache, single_cls=single_cls,
                              stride=int(stride), pad=pad, min_items=min_items, prefix=prefix,
                              split=split, cache_dir=cache_dir, seed=seed, batch_partners=batch_partners)
    batch_size = min(batch_size, len(dataset))
    if quad and batch_size % 4:
        raise ValueError(f"quad=True needs a batch size divisible by 4, got {batch_size}")
    nd = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nw = min((os.cpu_count() or 1) // max(nd, 1), batch_size if batch_size > 1 else 0, workers)
    ddp = rank != -1 and distributed.is_initialized()
    sampler = YoloSampler(len(dataset), batch_size, shuffle=shuffle, seed=seed,
                          rank=distributed.get_rank() if ddp else 0,
                          world_size=distributed.get_world_size() if ddp else 1,
                          batch_index=dataset.batch if dataset.rect else None, drop_last=quad,
                          on_epoch=dataset.shared_epoch.set)
    if image_weights:  # rare classes first, until the training script sets its own weights
        sampler.set_weights(labels_to_image_weights(dataset.labels, dataset.num_classes()))
    collate = QuadCollate(seed, dataset.shared_epoch) if quad else collate_fn
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=nw,
                        pin_memory=torch.cuda.is_available(), collate_fn=collate, drop_last=quad,
                        persistent_workers=nw > 0, worker_init_fn=init_worker)
    return loader, dataset
