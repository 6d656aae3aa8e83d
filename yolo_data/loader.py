"""``create_dataloader``: YOLOv5's signature and return value, on top of :class:`YoloDataset`."""
from __future__ import annotations

import logging
import os
from typing import Optional

import numpy as np
import torch
from torch.utils.data import DataLoader

from . import distributed
from .room import fit_workers_to_shm, shm_bytes_for_batches
from .collate import QuadCollate, collate_fn
from .dataset import YoloDataset
from .sampling import YoloSampler, digest
from .workers import WorkerInit

LOGGER = logging.getLogger("yolo_data")
STATE_VERSION = 1  # of YoloDataLoader.state_dict()
MAX_EPOCH = 2**62  # the epoch is kept in an int64 and mixed into seeds
PARTNER_GROUP = 8  # default partner-group size (see create_dataloader)


class YoloDataLoader(DataLoader):
    """A DataLoader whose persistent workers start, and begin on the first pass's batches, when it is
    built, as YOLOv5's InfiniteDataLoader does: the first batches are ready when training starts, instead
    of costing their full time at the first ``iter`` (about 1.7 s on YOLOv5's first validation pass).

    The early pass is handed out by the first ``iter`` only if nothing that decides it changed since:
    the epoch (``sampler.set_epoch`` to another one), the sampler's weights or resume point,
    ``dataset.indices``, the dataset's ``item_settings()`` (its hyp, ``mosaic``, ``close_mosaic()``).
    Otherwise it is dropped (torch's reset discards what the workers had fetched) and the pass is made
    anew with the new settings, exactly as without the early start.
    ``early_start=False``: the workers start at the first ``iter``, as with a plain DataLoader.

    ``state_dict()`` / ``load_state_dict(state)`` (torchdata's StatefulDataLoader convention): where
    the loader stands in its epoch, as a small JSON-serialisable dict; after loading it, the loader
    yields exactly the batches the saved run would have yielded next, on any number of ranks with the
    same global batch (see sampling.py).
    """

    def __init__(self, *args, early_start: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self._early = None
        self._yielded = 0  # batches handed out by the current pass
        self._expect = None  # (what, digest) a resumed pass checks before it starts
        self._digest = None  # of the dataset's names and labels, for state_dict
        if (early_start and self.num_workers > 0 and self.persistent_workers
                and isinstance(self.sampler, YoloSampler)):
            DataLoader.__iter__(self)  # persistent workers: makes self._iterator, forking them; the sampler starts its pass
            self._early = self._settings()

    def discard_early_pass(self) -> None:
        """Drop the pass the workers began at construction: the next ``iter`` makes its pass anew, with
        whatever changed since (what ``__iter__`` does itself for the epoch, weights and indices; call
        this after changing something else those batches depend on, e.g. ``dataset.close_mosaic()``)."""
        if self._early is not None:
            self._early = None
            self.sampler.forget_pass()

    def _settings(self):
        items = getattr(self.dataset, "item_settings", None)  # also takes in a hyp dict changed in place
        return (self.sampler.epoch, self.sampler.version, getattr(self.dataset, "indices_version", 0),
                items() if items is not None else None)

    def __iter__(self):
        early, self._early = self._early, None
        now = self._settings()  # at every pass start: a hyp dict changed in place is taken in here
        if self._expect is not None:
            self._check_resumed()
        if early is not None:
            if now[1:] == early[1:] and self.sampler.keep_started_pass(early[0]):
                return _Counted(self._iterator, self)
            self.sampler.forget_pass()  # the reset below makes the pass the script asked for
        return _Counted(super().__iter__(), self)

    # -- resuming ------------------------------------------------------------------------------------
    def _fixed(self) -> dict:
        """What must be equal for a saved state to mean the same batches here."""
        s = self.sampler
        return {"images": s.n, "dataset": self._dataset_digest(), "global_batch": s.global_batch,
                "seed": s.seed, "shuffle": bool(s.shuffle), "rect": bool(s.rect), "group": s.group,
                "drop_last": bool(s.drop_last)}

    def _dataset_digest(self) -> Optional[str]:
        """The images' names and labels (store.names_digest), computed once; None for another dataset."""
        if self._digest is None:
            store = getattr(self.dataset, "store", None)
            self._digest = store.names_digest() if hasattr(store, "names_digest") else ""
        return self._digest or None

    def _varying(self) -> dict:
        """Digests of what a training script sets per epoch (checked when the resumed pass starts)."""
        indices = getattr(self.dataset, "indices", None)
        identity = indices is None or np.array_equal(indices, np.arange(len(indices)))
        return {"weights": digest(self.sampler.weights), "indices": None if identity else digest(indices)}

    def state_dict(self) -> dict:
        """{'epoch', 'step' (global steps handed out in that epoch), ...}: JSON-serialisable, a few
        hundred bytes.  Take it after the step's batch was used (e.g. with the model's checkpoint)."""
        if not isinstance(self.sampler, YoloSampler):
            raise TypeError("state_dict needs the loader's own YoloSampler")
        epoch, step = self.sampler.position(self._yielded)
        return {"yolo_data_loader": STATE_VERSION, "epoch": epoch, "step": step,
                **self._fixed(), **self._varying()}

    def load_state_dict(self, state: dict) -> None:
        """Go on from ``state`` (see state_dict): the next pass is the saved epoch from the saved step
        (or the next epoch when that one was done).  Raises ValueError when ``state`` was made by a
        loader that would give other batches (other images, global batch, seed, shuffle, rect).  Image
        weights and ``dataset.indices`` are set by the training script each epoch: the resumed pass
        checks that they equal the saved run's when it starts."""
        if not isinstance(state, dict) or state.get("yolo_data_loader") != STATE_VERSION:
            raise ValueError(f"not a yolo_data loader state (version {STATE_VERSION}): {str(state)[:200]}")
        steps = self.sampler.layout.steps
        for key, top in (("epoch", MAX_EPOCH), ("step", steps)):
            value = state.get(key)
            if type(value) is not int or not 0 <= value <= top:  # bool, float, text: a damaged state
                raise ValueError(f"loader state: '{key}' must be a whole number in 0..{top}"
                                 f"{' (steps per epoch here)' if key == 'step' else ''}, got {value!r}")
        here = self._fixed()
        if "dataset" not in state:  # made before states named their dataset: compared by size alone
            here.pop("dataset")
        differ = [f"{k} {state.get(k)!r} -> {v!r}" for k, v in here.items() if state.get(k) != v and k != "group"]
        if state.get("group") != here["group"] and not differ:  # the same images, other mosaic partners
            LOGGER.warning(f"resuming with partner groups of {here['group']} where the saved run had "
                           f"{state.get('group')}: the remaining steps have the saved run's images, but their "
                           "mosaics differ (see create_dataloader's partner_group)")
        if differ:
            raise ValueError("this loader would give other batches than the saved one: " + ", ".join(differ)
                             + " (resuming needs the same dataset, seed, settings and global batch = "
                             "per-rank batch x world size; 'dataset' is a digest of the image names and labels)")
        self.sampler.resume_at(int(state["epoch"]), int(state["step"]))
        self._expect = {"weights": state.get("weights"), "indices": state.get("indices")}
        self._yielded = 0

    def _check_resumed(self) -> None:
        expect, self._expect = self._expect, None
        now = self._varying()
        for what, fix in (("weights", "sampler.set_weights"), ("indices", "dataset.indices")):
            if now[what] != expect[what]:
                raise ValueError(f"resumed pass: the {what} differ from the saved run's (set them with {fix} "
                                 "as that run had them for this epoch before iterating)")


class _Counted:
    """The loader's iterator, counting the batches it hands out (for ``state_dict``)."""

    def __init__(self, it, loader: YoloDataLoader):
        self._it, self._loader = it, loader
        loader._yielded = 0

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._it)
        self._loader._yielded += 1
        return batch

    def __len__(self) -> int:
        return len(self._it)


def create_dataloader(path, imgsz, batch_size, stride, single_cls=False, hyp=None, augment=False, cache=False,
                      pad=0.0, rect=False, rank=-1, workers=8, image_weights=False, quad=False, prefix="",
                      shuffle=False, seed=0, *, split=None, cache_dir=None, min_items=0, batch_partners=True,
                      ram_cache_dir=None, partner_group=PARTNER_GROUP, keep_difficult=False, reduced_decode=None,
                      early_start=True):
    """Build ``(loader, dataset)`` as YOLOv5 7.0's ``create_dataloader`` does.

    ``path``: image folder, .txt list, list of these, or a dataset yaml (then ``split`` picks
    'train'/'val'/'test'; default 'train' when ``augment`` else 'val'); also a COCO .json or a Pascal
    VOC folder or ImageSets list, read in place (``keep_difficult``: keep VOC's difficult objects).
    ``reduced_decode``: decode JPEGs at 1/2-1/8 scale where they shrink that much (default: when
    augmenting; see images.py).  ``batch_size``: per rank, as in
    YOLOv5.  ``rank``: the local rank under DDP (-1 otherwise): the dataset is built inside
    ``torch_distributed_zero_first(rank)``, so only local rank 0 scans and writes the label cache.
    ``cache_dir``: where label caches go (default: beside the labels, or the per-user cache folder when
    that is read-only).

    Batches are cut from one global order per epoch (sampling.py): for a fixed ``seed`` and global
    batch (``batch_size`` x world size), step k holds the same images, targets and paths on any number
    of ranks and workers, and ``loader.state_dict()`` / ``load_state_dict()`` resume mid-epoch on any of
    them.  ``rect`` batches are made of global-batch size, so all ranks of a step share one shape.
    ``batch_partners``: mosaic/mixup partners come from the item's group of ``partner_group``
    consecutive items of the global order (each rank takes whole groups when ``partner_group`` divides
    ``batch_size``; otherwise the group is the rank's batch), so each image is decoded once per batch
    (about 4x fewer decodes); False draws them from the whole dataset, as YOLOv5 does.

    ``cache``: False, True/'ram' (one copy per node, in a file without a name in ``ram_cache_dir``,
    default $YOLO_DATA_SHM_DIR or /dev/shm) or 'disk'; room for the workers' batches is left free.
    When /dev/shm cannot hold the workers' batches (Docker's 64 MB), fewer workers are used, with a
    warning naming the fix.  Both plan for every rank of the node ($LOCAL_WORLD_SIZE, else counted
    through the process group's store, as srun and mpirun do not set it) and for ``pad`` of rect batches.
    Workers persist across epochs and start when the loader is built (``early_start=False``: at the first ``iter``).
    """
    nd = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nw = min((os.cpu_count() or 1) // max(nd, 1), batch_size if batch_size > 1 else 0, workers)
    # the ranks of this node share /dev/shm (RAM cache and batches); srun and mpirun set no
    # LOCAL_WORLD_SIZE, so the process group is asked (every rank with rank != -1 gets here)
    local_ranks = distributed.local_world_size() if rank != -1 else 1
    rect_pad = pad if rect else 0.0  # pad widens rect batches only
    ddp = rank != -1 and distributed.is_initialized()
    world = distributed.get_world_size() if ddp else 1
    with distributed.torch_distributed_zero_first(rank):
        dataset = YoloDataset(path, imgsz, batch_size * world, augment=augment, hyp=hyp, rect=rect,
                              image_weights=image_weights, cache_images=cache, single_cls=single_cls,
                              stride=int(stride), pad=pad, min_items=min_items, prefix=prefix,
                              split=split, cache_dir=cache_dir, seed=seed, batch_partners=batch_partners,
                              ram_dir=ram_cache_dir, keep_difficult=keep_difficult, reduced_decode=reduced_decode,
                              shm_reserve_bytes=shm_bytes_for_batches(nw, batch_size, imgsz, stride, local_ranks,
                                                                      rect_pad))
    batch_size = min(batch_size, len(dataset))
    if quad and batch_size < 4:
        raise ValueError(f"quad=True makes one image of every 4 items: the batch size must be at least 4, "
                         f"got {batch_size}")
    if quad and batch_size % 4:  # YOLOv5's collate_fn4 does the same, silently
        LOGGER.warning(f"{prefix}quad=True with batch size {batch_size}: the last {batch_size % 4} items of "
                       f"each batch are not used (as in YOLOv5); a multiple of 4 uses them all")
    # groups only matter for mosaic partners drawn from the batch (and for sharing an epoch's last step)
    wanted = partner_group if dataset.mosaic and dataset.batch_partners else 1
    nw = min(nw, batch_size if batch_size > 1 else 0)
    nw = fit_workers_to_shm(nw, batch_size, imgsz, stride, local_ranks, prefix,
                            pad=pad if dataset.rect else 0.0)
    sampler = YoloSampler(len(dataset), batch_size, shuffle=shuffle, seed=seed,
                          rank=distributed.get_rank() if ddp else 0, world_size=world, rect=dataset.rect,
                          drop_last=quad, on_epoch=dataset.shared_epoch.set, draw_tokens=True, group=wanted)
    if sampler.group != wanted:  # the sampler's fallback: groups of the rank's batch
        (LOGGER.warning if world > 1 else LOGGER.info)(
            f"{prefix}partner_group={wanted} does not divide the per-rank batch {batch_size}: mosaic partners "
            f"come from each rank's batch, so the same seed gives other mosaics on another number of ranks "
            f"(a partner_group that divides every per-rank batch you use keeps them equal)")
    dataset.partner_group = sampler.group  # before the workers fork: they draw partners by it
    # image_weights=True: the training script weights the draws, as with YOLOv5 (whose train.py sets
    # dataset.indices each epoch) or with sampler.set_weights; weighting here too would apply it twice
    collate = QuadCollate(seed, dataset.shared_epoch) if quad else collate_fn
    loader = YoloDataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=nw,
                            pin_memory=torch.cuda.is_available(), collate_fn=collate, drop_last=quad,
                            persistent_workers=nw > 0, worker_init_fn=WorkerInit(), early_start=early_start)
    if ddp:  # a rank with other data would hang the first collective instead of failing here
        distributed.check_ranks_agree({"images": len(dataset), "boxes": dataset.store.num_boxes(),
                                       "steps per epoch": len(loader)}, f"{prefix}{path}")
    return loader, dataset

