"""The composition root: the one place that assembles a loader from a path and a Settings.

    workers and the /dev/shm budget -> the dataset's parts (labels, index, images, mapper; rank 0
    first) -> dataset -> sampler (partner groups, class-balance repeat factors) -> collate -> loader
    -> the ranks agree

A caller's own ``mapper`` or ``sampler`` takes the place of the built one, as in detectron2's
``build_detection_train_loader(dataset, *, mapper, sampler)``.

Entry points are adapters over :func:`build_loader`: YOLOv5's ``create_dataloader`` (integrations/yolov5.py) maps
its arguments onto Settings, the Ultralytics plug-in (integrations/) passes its own dataset class,
collate and loader class.  An adapter for another trainer gives the same three, e.g.::

    def lightning_loader(path, imgsz, batch_size, train: bool):
        settings = Settings.training(img_size=imgsz, batch_size=batch_size) if train else \\
            Settings.evaluation(img_size=imgsz, batch_size=batch_size, rect=True, pad=0.5)
        return build_loader(path, settings, rank=int(os.environ.get("LOCAL_RANK", -1)))

Rank and world size are asked of torch.distributed when this runs (``rank``: the local rank under DDP,
-1 otherwise), never at import.
"""
from __future__ import annotations

import logging
import os
from typing import Callable, Optional

import numpy as np
import torch

from . import distributed
from .dataset import YoloDataset
from .device.stage import DeviceStage
from .formats import entry_of
from .items.parts import assemble
from .labels.summary import console, printing_rank
from .loading.collate import QuadCollate, collate_fn
from .loading.loader import YoloDataLoader
from .runtime.room import fit_workers_to_shm, shm_bytes_for_batches
from .runtime.workers import WorkerInit
from .sampling.balance import class_factors, class_image_counts, epoch_length, image_factors
from .sampling.runstate import RunState
from .sampling.sampler import ShardSampler, YoloSampler, partner_group_size
from .settings import Settings

LOGGER = logging.getLogger("yolo_data")


def build_loader(path, settings: Settings, rank: int = -1, prefix: str = "", *, dataset_class=YoloDataset,
                 collate: Optional[Callable] = None, loader_class=YoloDataLoader, mapper: Optional[Callable] = None,
                 sampler=None) -> YoloDataLoader:
    """The loader of ``path`` built with ``settings``.

    Workers: at most ``settings.loader.workers``, CPUs per GPU and the per-rank batch, and as many as
    /dev/shm holds batches for (with a warning naming the fix).  The dataset's parts (labels, index,
    images, mapper: items/parts.py) are assembled inside ``torch_distributed_zero_first(rank)``: local
    rank 0 scans and writes the label cache (and builds a RAM image cache, leaving the workers' batches
    room), the others read them.  Under DDP every rank checks that all ranks have the same images,
    boxes and steps, which would otherwise hang the first collective.

    Args:
        path: image folder, .txt list, list of them, dataset yaml (``settings.split_name`` picks), a split of
            another label format (COCO .json, VOC, LabelMe), or an in-memory source (``ItemSource``).
        settings: every decision (settings.Settings; its training and evaluation presets).
        rank: the local rank under DDP, -1 otherwise.
        prefix: put before every line logged.
        dataset_class: YoloDataset or a subclass, called as ``dataset_class(path, settings, prefix, run,
            parts=parts)``.
        collate: the batch of a list of items; default YOLOv5's collate_fn (its quad variant with
            ``settings.loader.quad``).
        loader_class: YoloDataLoader or a subclass.
        mapper: ``mapper(item, key) -> (img, targets, path, shapes)``, used instead of the built evaluation
            or training mapper: ``item`` an items.mapping.IndexItem (the image's file, labels as (n, 5)
            float32 [class, x, y, w, h] normalised, polygons, keypoints, letterbox shape, and ``image()``:
            (h, w, 3) uint8 BGR with its long side at img_size), ``key`` its DrawKey (``epoch``, ``draw``);
            it returns img uint8 (3, H, W) RGB CPU tensor (one shape per batch), targets float32 (n, 6)
            [0, class, x, y, w, h] normalised xywh to img, the path, and YOLOv5's shapes or None
            (items.mapping.ItemMapper states the whole contract).
        sampler: used instead of YoloSampler (and DDP evaluation's ShardSampler): an iterable with
            ``len()`` of positions 0..len(dataset)-1 (``int`` or sampling.sampler.ItemKey) batched by
            ``settings.batch_size``, or a function of the dataset returning one.  Under DDP it gives
            each rank its share.  Lost with it: the global order (the same batches on any number of
            ranks and workers), ``state_dict()`` and resuming, class balance, partner groups across
            ranks and the early start; ``loader.dataset.set_epoch(epoch)`` sets the augmentation's
            epoch.  With rect=True a batch's items must share a rect batch (``dataset.batch``).

    Returns:
        The loader (``loader.dataset``: the ``dataset_class``; ``loader.sampler``: the sampler).
    """
    source, path = path, entry_of(path)  # noqa: F841 - a source's memory:// URL; ``source`` keeps it alive
    per_rank, opts = settings.batch_size, settings.loader
    _check_balance(settings, sampler, prefix)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    workers = min((os.cpu_count() or 1) // max(gpus, 1), per_rank if per_rank > 1 else 0, opts.workers)
    # the ranks of this node share /dev/shm (RAM cache and batches); srun and mpirun set no
    # LOCAL_WORLD_SIZE, so the process group is asked (every rank with rank != -1 gets here)
    local_ranks = distributed.local_world_size() if rank != -1 else 1
    ddp = rank != -1 and distributed.is_initialized()
    world = distributed.get_world_size() if ddp else 1
    pad = settings.index.pad if settings.rect else 0.0  # pad widens rect batches only
    sample_bytes = 2 if settings.images.keep16 else 1  # uint16 batches
    run = RunState(rect_batch=settings.rect_batch(world), sampled=sampler is None,
                   shm_reserve_band_bytes=shm_bytes_for_batches(workers, per_rank, settings.img_size,
                                                                settings.stride, local_ranks, pad, channels=1,
                                                                sample_bytes=sample_bytes))
    with distributed.torch_distributed_zero_first(rank, key=f"dataset {prefix}{path} {settings.split_name}"):
        parts = assemble(path, settings, prefix, run, mapper=mapper)
        dataset = dataset_class(path, settings, prefix, run, parts=parts)
    batch_size = min(per_rank, len(dataset))
    if opts.quad:
        _check_quad(batch_size, prefix, opts.device)
    workers = fit_workers_to_shm(min(workers, batch_size if batch_size > 1 else 0), batch_size, settings.img_size,
                                 settings.stride, local_ranks, prefix, pad=pad,
                                 channels=getattr(getattr(dataset, "images", None), "channels", 3),
                                 sample_bytes=sample_bytes)
    sampler = choose_sampler(sampler, dataset, settings, run, batch_size, world, ddp, prefix)
    if collate is None:
        collate = QuadCollate(settings.seed, run.epoch) if opts.quad else collate_fn
    loader = loader_class(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                          pin_memory=torch.cuda.is_available(), collate_fn=collate, drop_last=opts.quad,
                          persistent_workers=workers > 0, worker_init_fn=WorkerInit(), early_start=opts.early_start)
    if opts.device is not None:
        loader.device_stage = DeviceStage(opts.device, getattr(dataset, "image_cache", None))
    if ddp and not settings.sharded(world):  # a rank with other data would hang the first collective
        distributed.check_ranks_agree({"images": len(dataset), "boxes": dataset.store.num_boxes(),
                                       "steps per epoch": len(loader)}, f"{prefix}{path}",
                                      key=f"loader {prefix}{settings.split_name}")
    return loader


def _check_balance(settings: Settings, sampler, prefix: str) -> None:
    """Refuse class balance where it cannot apply; say that it turns rect batches off."""
    if settings.index.balance_threshold is None:
        return
    if not settings.augment:
        raise ValueError(f"class_balance={settings.index.class_balance!r} is for training loaders (augment=True): "
                         "an evaluation loader gives every image once, so that each counts once in the metrics")
    if sampler is not None:  # the repeat factors live in YoloSampler
        raise ValueError(f"class_balance={settings.index.class_balance!r} with a sampler of your own: leave one out")
    if settings.index.rect:
        LOGGER.warning(f"{prefix}rect=True is off with class_balance (repeated images would break the rect "
                       "batches' shapes), as with image_weights")


def choose_sampler(given, dataset, settings: Settings, run: RunState, batch_size: int, world: int, ddp: bool,
                   prefix: str = ""):
    """The loader's sampler: ``given`` (or what ``given(dataset)`` returns, for a function), else the
    ShardSampler of DDP evaluation, else a YoloSampler (one rank's share of the epoch's global order),
    with the run's partner groups set before the workers fork (they draw by them) and the class-balance
    repeat factors ``settings`` ask for."""
    if given is not None:
        return given if hasattr(given, "__iter__") else given(dataset)
    if settings.sharded(world):
        return ShardSampler(len(dataset), batch_size, distributed.get_rank(), world)
    wanted, threshold = settings.partner_group, settings.index.balance_threshold
    run.partner_group = partner_group_size(wanted, batch_size)
    if run.partner_group != wanted:  # the sampler's fallback: groups of the rank's batch
        (LOGGER.warning if world > 1 else LOGGER.info)(
            f"{prefix}partner_group={wanted} does not divide the per-rank batch {batch_size}: mosaic partners "
            f"come from each rank's batch, so the same seed gives other mosaics on another number of ranks "
            f"(a partner_group that divides every per-rank batch you use keeps them equal)")
    # image_weights: the training script weights the draws (YOLOv5's train.py sets dataset.indices
    # each epoch, or sampler.set_weights); weighting here too would apply it twice
    factors = None if threshold is None else balance_factors(dataset, threshold, settings.index.single_cls, prefix)
    return YoloSampler(len(dataset), batch_size, shuffle=settings.shuffle, seed=settings.seed,
                       rank=distributed.get_rank() if ddp else 0, world_size=world, rect=dataset.rect,
                       drop_last=settings.loader.quad, shared_epoch=run.epoch, group=run.partner_group,
                       repeat_factors=factors)


def balance_factors(dataset, threshold: float, single_cls: bool = False, prefix: str = "") -> np.ndarray:
    """(n,) float64 repeat factors of ``dataset``'s images (balance.py), from its label store as the
    dataset uses it (after ``min_items`` and ``single_cls``) and its own class names; says on the
    printing rank how long the epoch becomes and which class is repeated most."""
    store = dataset.store
    classes, offsets = store.labels[:, 0], store.label_offsets
    names = list(dataset.names)
    nc = max(len(names), int(classes.max()) + 1 if len(classes) else 1)
    counts = class_image_counts(classes, offsets, nc)
    r = class_factors(counts, len(store), threshold)
    factors = image_factors(r, classes, offsets)
    if printing_rank():
        r[counts == 0] = 0  # the rarest class present, not one without images
        c = int(np.argmax(r))
        name = str(c) if single_cls or c >= len(names) else names[c]
        console()
        LOGGER.info(f"{prefix}class_balance={threshold:g}: epoch of {epoch_length(factors):,} draws from "
                    f"{len(factors):,} images (rarest class {name!r} x{max(r[c], 1.0):.2f}, in {int(counts[c]):,} images)")
    return factors


def _check_quad(batch_size: int, prefix: str, device: Optional[str]) -> None:
    if device is not None:
        raise ValueError(f"quad=True (YOLOv5's collate_fn4) with device={device!r}: the device stage makes "
                         "batches of one image per item; leave one of them out")
    if batch_size < 4:
        raise ValueError(f"quad=True makes one image of every 4 items: the batch size must be at least 4, "
                         f"got {batch_size}")
    if batch_size % 4:  # YOLOv5's collate_fn4 does the same, silently
        LOGGER.warning(f"{prefix}quad=True with batch size {batch_size}: the last {batch_size % 4} items of "
                       f"each batch are not used (as in YOLOv5); a multiple of 4 uses them all")
