"""yolo_data's dataset and loader as Ultralytics' trainer and validator use them.

Pure: never imports ultralytics (the plug-in in ``ultralytics.py`` calls ``create_loader``).

    LoaderSettings -> UltralyticsDataset (YoloDataset + labels as dicts, close_mosaic, linear evaluation
    resize) -> sampler (YoloSampler; ShardSampler for evaluation under DDP) -> UltralyticsLoader
    (YoloDataLoader + reset/close, lazy passes) with DictCollate (batches as Ultralytics' dicts)

``create_loader`` follows ``yolo_data.create_dataloader`` step by step (worker count, the label cache
built by local rank 0 first, /dev/shm room, partner groups, the ranks' agreement check); it exists
only because that function builds a plain YoloDataset and collates to tuples.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import replace
from typing import Iterator, Optional

import torch
from torch.utils.data import Sampler

from .. import distributed
from ..cache import user_cache_dir
from ..dataset import YoloDataset, resolve_split
from ..imagecache import ImageCacheSpec, disk_candidates, normalise_mode, open_or_build
from ..images import ImageSource
from ..loader import PARTNER_GROUP, YoloDataLoader, init_worker
from ..mapping import EvalMapper, TrainSettings
from ..room import fit_workers_to_shm, shm_bytes_for_batches
from ..sampling import YoloSampler
from ..formats import kind_of
from ..sources import list_image_files
from .ultralytics_args import LoaderSettings, closed_mosaic, fraction_count
from .ultralytics_batch import DictCollate, LabelDicts

LOGGER = logging.getLogger("yolo_data")


class ClosableSettings:
    """A TrainMapper's settings whose mosaic, mixup and copy-paste can be closed for every process at
    once.  The mapper reads ``cfg``/``mosaic`` per item; ``closed`` is a bool tensor in shared memory,
    so persistent DataLoader workers (forked or spawned) see the main process close it without being
    restarted.  Duck-types :class:`~yolo_data.mapping.TrainSettings`."""

    def __init__(self, settings: TrainSettings, closed: torch.Tensor):
        self.open_settings = settings
        self.closed_settings = replace(settings, cfg=closed_mosaic(settings.cfg), mosaic=False)
        self.closed = closed

    def _now(self) -> TrainSettings:
        return self.closed_settings if bool(self.closed[0]) else self.open_settings

    @property
    def cfg(self):
        return self._now().cfg

    @property
    def mosaic(self) -> bool:
        return self._now().mosaic

    @property
    def img_size(self) -> int:
        return self.open_settings.img_size

    @property
    def seed(self) -> int:
        return self.open_settings.seed


class UltralyticsDataset(YoloDataset):
    """A YoloDataset with what Ultralytics reads besides YOLOv5's names:

    - ``labels``: a list-like of dicts (``LabelDicts``) instead of YOLOv5's (n, 5) arrays;
    - ``close_mosaic(hyp)``: no more mosaic, mixup or copy-paste, in this process and in workers;
    - evaluation images resized with linear interpolation when ``settings.linear_eval`` (Ultralytics'
      ``load_image`` does; YOLOv5 uses area when shrinking), so validation sees Ultralytics' pixels.

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
        linear_eval = settings.linear_eval and not settings.augment
        super().__init__(path, settings.imgsz, batch_size, augment=settings.augment, hyp=settings.hyp,
                         rect=settings.rect, cache_images=False if linear_eval else settings.cache,
                         single_cls=settings.single_cls, stride=settings.stride, pad=settings.pad, prefix=prefix,
                         workers=settings.workers or None, split=split, cache_dir=cache_dir, seed=settings.seed,
                         shm_reserve_bytes=shm_reserve_bytes)
        self._mosaic_closed = torch.zeros(1, dtype=torch.bool).share_memory_()
        if linear_eval:
            if settings.cache:  # cached pixels must be resized as the files would be (the key says so too)
                mode = normalise_mode(settings.cache)
                spec = ImageCacheSpec(mode, self.img_size, True,
                                      disk_candidates(self.split_labels.default_file, self.img_size, True, self.rect,
                                                      cache_dir, user_cache_dir()),
                                      reserve_bytes=int(shm_reserve_bytes) if mode == "ram" else 0,
                                      workers=settings.workers or 8, prefix=prefix)
                self.image_cache = open_or_build(spec, self.store, self.split_labels.fingerprint)
            self.images = ImageSource(self.store, self.img_size, linear=True, cache=self.image_cache,
                                      on_failure=self._remember_failure)
            self.mapper = EvalMapper(self.index, self.images)
        elif settings.augment:
            self.mapper.settings = ClosableSettings(self.mapper.settings, self._mosaic_closed)

    @property
    def labels(self) -> LabelDicts:
        """Per image a dict (see LabelDicts), as Ultralytics' datasets hold them."""
        return LabelDicts(self.store)

    @property
    def mosaic_closed(self) -> bool:
        return bool(self._mosaic_closed[0])

    def close_mosaic(self, hyp=None) -> None:
        """Ultralytics calls this ``close_mosaic`` epochs before the end (then ``loader.reset()``): from
        the next pass on, items are letterboxed single images with perspective, HSV and flips; no
        mosaic, mixup or copy-paste.  ``hyp``: Ultralytics' arguments (unused: what closes is fixed)."""
        self.mosaic = False
        self._mosaic_closed.fill_(True)


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
        # YoloDataLoader keeps its early pass in _early (see its __iter__); dropping it is the same
        # bookkeeping its own __iter__ does when the script changed something before the first pass.
        if self._early is not None:
            self._early = None
            self.sampler.forget_pass()

    def close(self) -> None:
        """Shut the persistent workers down now (Ultralytics calls this at the end of training)."""
        self.reset()
        it, self._iterator = self._iterator, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


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
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or 1) if rank != -1 else 1
    ddp = rank != -1 and distributed.is_initialized()
    world = distributed.get_world_size() if ddp else 1
    rect_batch = batch_size * world if settings.augment else batch_size
    with distributed.torch_distributed_zero_first(rank):
        dataset = UltralyticsDataset(path, settings, rect_batch, prefix=prefix, split=split, cache_dir=cache_dir,
                                     shm_reserve_bytes=shm_bytes_for_batches(nw, batch_size, settings.imgsz,
                                                                             settings.stride, local_ranks))
    batch_size = min(batch_size, len(dataset))
    nw = min(nw, batch_size if batch_size > 1 else 0)
    nw = fit_workers_to_shm(nw, batch_size, settings.imgsz, settings.stride, local_ranks, prefix)
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
                               persistent_workers=nw > 0, worker_init_fn=init_worker)
    if ddp and settings.augment:  # a rank with other data would hang the first collective instead of failing
        distributed.check_ranks_agree({"images": len(dataset), "boxes": dataset.store.num_boxes(),
                                       "steps per epoch": len(loader)}, f"{prefix}{path}")
    return loader
