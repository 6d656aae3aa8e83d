"""``create_dataloader``: YOLOv5's signature and return value, on top of :class:`YoloDataset`."""
from __future__ import annotations

import logging
import os

import cv2
import torch
from torch.utils.data import DataLoader

from . import distributed
from .room import fit_workers_to_shm, shm_bytes_for_batches
from .collate import QuadCollate, collate_fn
from .dataset import YoloDataset
from .sampling import YoloSampler

LOGGER = logging.getLogger("yolo_data")


class YoloDataLoader(DataLoader):
    """A DataLoader whose persistent workers start, and begin on the first pass's batches, when it is
    built, as YOLOv5's InfiniteDataLoader does: the first batches are ready when training starts, instead
    of costing their full time at the first ``iter`` (about 1.7 s on YOLOv5's first validation pass).

    The early pass is handed out by the first ``iter`` only if nothing that decides it changed since:
    the epoch (``sampler.set_epoch`` to another one), the sampler's weights, ``dataset.indices``.
    Otherwise it is dropped (torch's reset discards what the workers had fetched) and the pass is made
    anew with the new settings, exactly as without the early start.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._early = None
        if self.num_workers > 0 and self.persistent_workers and isinstance(self.sampler, YoloSampler):
            self._iterator = self._get_iterator()  # forks the workers; the sampler starts its pass
            self._early = self._settings()

    def _settings(self):
        return (self.sampler.epoch, self.sampler.weights_version, getattr(self.dataset, "indices_version", 0))

    def __iter__(self):
        early, self._early = self._early, None
        if early is not None:
            if self._settings()[1:] == early[1:] and self.sampler.keep_started_pass(early[0]):
                return self._iterator
            self.sampler.forget_pass()  # the reset below makes the pass the script asked for
        return super().__iter__()


def init_worker(worker_id: int) -> None:
    """In each DataLoader worker (never in the user's process): OpenCV single-threaded, as torch makes
    itself in workers, so N workers do not each start a pool as large as the machine.  No random
    seeding is needed: items draw from their own (seed, epoch, index) generators."""
    cv2.setNumThreads(0)


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, seed=0, *, split=None, cache_dir=None, min_items=0, batch_partners=True,
                      ram_cache_dir=None):
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

    ``cache``: False, True/'ram' (one copy per node, in a file without a name in ``ram_cache_dir``,
    default $YOLO_DATA_SHM_DIR or /dev/shm) or 'disk'; room for the workers' batches is left free.
    When /dev/shm cannot hold the workers' batches (Docker's 64 MB), fewer workers are used, with a
    warning naming the fix.
    """
    nd = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nw = min((os.cpu_count() or 1) // max(nd, 1), batch_size if batch_size > 1 else 0, workers)
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or 1) if rank != -1 else 1
    with distributed.torch_distributed_zero_first(rank):
        dataset = YoloDataset(path, imgsz, batch_size, augment=augment, hyp=hyp, rect=rect,
                              image_weights=image_weights, cache_images=cache, single_cls=single_cls,
                              stride=int(stride), pad=pad, min_items=min_items, prefix=prefix,
                              split=split, cache_dir=cache_dir, seed=seed, batch_partners=batch_partners,
                              ram_dir=ram_cache_dir,
                              shm_reserve_bytes=shm_bytes_for_batches(nw, batch_size, imgsz, stride, local_ranks))
    batch_size = min(batch_size, len(dataset))
    if quad and batch_size < 4:
        raise ValueError(f"quad=True makes one image of every 4 items: the batch size must be at least 4, "
                         f"got {batch_size}")
    if quad and batch_size % 4:  # YOLOv5's collate_fn4 does the same, silently
        LOGGER.warning(f"{prefix}quad=True with batch size {batch_size}: the last {batch_size % 4} items of "
                       f"each batch are not used (as in YOLOv5); a multiple of 4 uses them all")
    nw = min(nw, batch_size if batch_size > 1 else 0)
    nw = fit_workers_to_shm(nw, batch_size, imgsz, stride, local_ranks, prefix)
    ddp = rank != -1 and distributed.is_initialized()
    sampler = YoloSampler(len(dataset), batch_size, shuffle=shuffle, seed=seed,
                          rank=distributed.get_rank() if ddp else 0,
                          world_size=distributed.get_world_size() if ddp else 1,
                          batch_index=dataset.batch if dataset.rect else None, drop_last=quad,
                          on_epoch=dataset.shared_epoch.set, draw_tokens=True)
    # image_weights=True: the training script weights the draws, as with YOLOv5 (whose train.py sets
    # dataset.indices each epoch) or with sampler.set_weights; weighting here too would apply it twice
    collate = QuadCollate(seed, dataset.shared_epoch) if quad else collate_fn
    loader = YoloDataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=nw,
                            pin_memory=torch.cuda.is_available(), collate_fn=collate, drop_last=quad,
                            persistent_workers=nw > 0, worker_init_fn=init_worker)
    if ddp:  # a rank with other data would hang the first collective instead of failing here
        distributed.check_ranks_agree({"images": len(dataset), "boxes": dataset.store.num_boxes(),
                                       "steps per epoch": len(loader)}, f"{prefix}{path}")
    return loader, dataset
