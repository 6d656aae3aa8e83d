"""yolo_data's dataset and loader as Ultralytics' trainer and validator use them.

Pure: never imports ultralytics (the plug-in in ``ultralytics.py`` calls ``create_loader``).

    LoaderSettings -> UltralyticsDataset (YoloDataset + labels as dicts) -> sampler (YoloSampler; ShardSampler for evaluation under DDP) -> UltralyticsLoader
    (YoloDataLoader + reset/close, lazy passes) with DictCollate (batches as Ultralytics' dicts)

``create_loader`` follows ``yolo_data.create_dataloader`` step by step (worker count, the label cache
built by local rank 0 first, /dev/shm room, partner groups, the ranks' agreement check); it exists
only because that function builds a plain YoloDataset and collates to tuples.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Iterator, Optional

import torch
from torch.utils.data import Sampler

from .. import distributed, torch_private
from ..dataset import YoloDataset, resolve_split
from ..formats import kind_of
from ..loader import PARTNER_GROUP, YoloDataLoader
from ..workers import WorkerInit
from ..room import fit_workers_to_shm, shm_bytes_for_batches
from ..sampling import YoloSampler
from ..sources import list_image_files
from .ultralytics_args import LoaderSettings, fraction_count
from .ultralytics_batch import DictCollate, LabelDicts

LOGGER = logging.getLogger("yolo_data")


class UltralyticsDataset(YoloDataset):
    """A YoloDataset with what Ultralytics reads besides YOLOv5's names: ``labels`` as a list-like of
    dicts (``LabelDicts``) instead of YOLOv5's (n, 5) arrays.  YoloDataset itself has the rest:
    ``close_mosaic(hyp)`` (also in persistent workers), and evaluation resized linearly as Ultralytics'
    ``load_image`` does (``settings.linear_eval``; YOLOv5 uses area when shrinking).

    ``batch_size``: of the rect batches (global batch for training, per-rank batch for evaluation).
    ``path``: an image folder, list file, list of them or dataset yaml (``split`` picks for a yaml);
    with ``settings.fraction`` below 1 the first images of the split, in file order."""

    def __init__(self, path, settings: LoaderSettings, batch_size: int, prefix: str = "",
                 split: Optional[str] = None, shm_reserve_bytes: int = 0, cache_dir=None):
        if settings.fraction != 1.0:
            paths = resolve_split(path, split, settings.augment)[0]
            if any(kind_of(e) != "yolo" for e in (paths if isinstance(paths, (list, tuple)) else [paths])):
                raise ValueError(f"fraction={settings.fraction}: a part of a split is taken from YOLO image folders "
                                 f"or lists; {path} names COCO or VOC annotations (use fraction=1.0)")
            files = list_image_files(paths)
            path, split = files[:fraction_count(len(files), settings.fraction)], None
        super().__init__(path, settings.imgsz, batch_size, augment=settings.augment, hyp=settings.hyp,
                         rect=settings.rect, cache_images=settings.cache, single_cls=settings.single_cls,
                         stride=settings.stride, pad=settings.pad, prefix=prefix, workers=settings.workers or None,
                         split=split, cache_dir=cache_dir, seed=settings.seed, shm_reserve_bytes=shm_reserve_bytes,
                         linear_eval=settings.linear_eval)

    @property
    def labels(self) -> LabelDicts:
        """Per image a dict (see LabelDicts), as Ultralytics' datasets hold them."""
        return LabelDicts(self.store)


class ShardSampler(Sampler[int]):
    """Evaluation under DDP: rank ``rank`` of ``world`` takes a contiguous run of whole batches, every
    image exactly once (no padding: evaluation needs no equal step counts, and an image seen twice
    would count twice in the metrics).  The first ``nb % world`` ranks take one batch more.  Keeps
    rect batches whole, so each keeps its one shape."""

    def __init__(self, n: int, batch_size: int, rank: int, world: int):
        nb = math.ceil(n / batch_size)
        per, extra = divmod(nb, world)
        first = rank * per + min(rank, extra)
        count = per + (1 if rank < extra else 0)
        self.start = min(n, first * batch_size)
        self.stop = min(n, (first + count) * batch_size)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.stop - self.start

    def set_epoch(self, epoch: int) -> None:  # evaluation order does not change
        pass


class UltralyticsLoader(YoloDataLoader):
    """A YoloDataLoader with Ultralytics' ``reset()`` and ``close()``, whose passes start lazily.

    Ultralytics' trainer calls ``enumerate(loader)`` before it may close the mosaic, and again after
    (on rank 0 only): a pass starts at its first batch, as with Ultralytics' own loader, so that
    first, unused ``enumerate`` fetches nothing with the old settings.  ``reset()`` drops the pass the
    workers began at construction (the early start), which was made with the settings of then."""

    def __iter__(self):
        yield from super().__iter__()

    def reset(self) -> None:
        self.discard_early_pass()

    def close(self) -> None:
        """Shut the persistent workers down now (Ultralytics calls this at the end of training)."""
        self.reset()
        it, self._iterator = self._iterator, None
        if it is not None:
            torch_private.shutdown_workers(it)


def create_loader(path, settings: LoaderSettings, rank: int = -1, prefix: str = "", split: Optional[str] = None,
                  cache_dir=None) -> UltralyticsLoader:
    """The loader of one split for Ultralytics (its ``dataset`` is an UltralyticsDataset).

    ``rank``: the local rank under DDP (-1 otherwise); the dataset is built inside
    ``torch_distributed_zero_first(rank)``.  ``settings.batch_size``: per rank.  Training batches are
    cut from one global order per epoch (the same on any number of ranks and workers, see
    ``create_dataloader``); evaluation under DDP gives each rank whole batches, each image once."""
    batch_size = settings.batch_size
    nd = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nw = min((os.cpu_count() or 1) // max(nd, 1), batch_size if batch_size > 1 else 0, settings.workers)
    local_ranks = distributed.local_world_size() if rank != -1 else 1  # see create_dataloader
    rect_pad = settings.pad if settings.rect else 0.0
    ddp = rank != -1 and distributed.is_initialized()
    world = distributed.get_world_size() if ddp else 1
    rect_batch = batch_size * world if settings.augment else batch_size
    with distributed.torch_distributed_zero_first(rank):
        dataset = UltralyticsDataset(path, settings, rect_batch, prefix=prefix, split=split, cache_dir=cache_dir,
                                     shm_reserve_bytes=shm_bytes_for_batches(nw, batch_size, settings.imgsz,
                                                                             settings.stride, local_ranks,
                                                                             rect_pad))
    batch_size = min(batch_size, len(dataset))
    nw = min(nw, batch_size if batch_size > 1 else 0)
    nw = fit_workers_to_shm(nw, batch_size, settings.imgsz, settings.stride, local_ranks, prefix,
                            pad=settings.pad if dataset.rect else 0.0)
    if settings.augment or world == 1:
        wanted = PARTNER_GROUP if dataset.mosaic and dataset.batch_partners else 1
        sampler = YoloSampler(len(dataset), batch_size, shuffle=settings.shuffle, seed=settings.seed,
                              rank=distributed.get_rank() if ddp else 0, world_size=world, rect=dataset.rect,
                              on_epoch=dataset.shared_epoch.set, draw_tokens=settings.augment, group=wanted)
        dataset.partner_group = sampler.group  # before the workers fork: they draw partners by it
    else:
        sampler = ShardSampler(len(dataset), batch_size, distributed.get_rank(), world)
    loader = UltralyticsLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=nw,
                               pin_memory=torch.cuda.is_available(),
                               collate_fn=DictCollate(evaluation=not settings.augment),
                               persistent_workers=nw > 0, worker_init_fn=WorkerInit())
    if ddp and settings.augment:  # a rank with other data would hang the first collective instead of failing
        distributed.check_ranks_agree({"images": len(dataset), "boxes": dataset.store.num_boxes(),
                                       "steps per epoch": len(loader)}, f"{prefix}{path}")
    return loader
