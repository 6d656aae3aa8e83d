"""Ray Train: yolo_data's loader built in a ``TorchTrainer`` worker, its place in the epoch kept in Ray's
checkpoints.  The only module that imports Ray, when it is imported (``pip install "yolo-data[ray]"``).

Ray Train starts one worker process per rank, sets up ``torch.distributed`` for them (gloo on CPUs, NCCL
on GPUs) and puts RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE in each worker's environment, as
torchrun does.  So inside ``train_loop_per_worker`` the loader is the one torchrun gets:

    * each node's local rank 0 builds the dataset first, the other workers of that node wait through
      the process group's store and then read its label cache; a split in a bucket is listed and
      scanned once per job (global rank 0), its label cache handed to the other nodes through the store;
    * ``cache='ram'`` is one file in the node's shared memory, opened by every Ray worker of that node;
    * global step k holds the same images on any number of workers (the elastic sampler), so a
      checkpoint saved on 2 workers goes on, batch for batch, on 4.

    build_ray_loader (the loader of this worker) -> report (metrics, with a checkpoint of the loader's
    place and the caller's state, made by world rank 0) -> resume (after a restart: the loader goes on at
    the next batch, the caller's state comes back)

A checkpoint is a folder with ``yolo_data_loader.json`` (``loader.state_dict()``) and, when the caller
passes one, ``state.pt`` (``torch.save`` of a dict of tensors, numbers and strings, loaded with
``weights_only=True``).  It is written to a private temporary folder (``tempfile``, mode 0700), which
Ray copies to the run's ``storage_path`` before :func:`report` returns and which is then removed.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .. import distributed
from ..build import build_loader
from ..loading.loader import YoloDataLoader
from ..settings import Settings

LOADER_FILE = "yolo_data_loader.json"  # loader.state_dict() in a checkpoint's folder
STATE_FILE = "state.pt"  # the caller's state (model, optimizer) in a checkpoint's folder
INSTALL = 'Ray Train is not installed: pip install "yolo-data[ray]"'


def _train():
    """``ray.train``, imported now; ImportError naming the extra where Ray is missing."""
    try:
        import ray.train
    except ImportError:
        raise ImportError(INSTALL) from None
    return ray.train


@dataclass(frozen=True)
class RayPlace:
    """This worker's place in the Ray Train run: ``world_rank`` of ``world_size`` workers, number
    ``local_rank`` of the ``local_world_size`` workers on node ``node_rank``."""
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int

    def per_rank(self, global_batch: int) -> int:
        """The per-worker batch of a global batch, which the worker count must divide: the global batch
        fixes the batches of every step, so it is what a resumed run on other workers must keep.

        Raises:
            ValueError: ``global_batch`` is not a multiple of the world size.
        """
        if global_batch < self.world_size or global_batch % self.world_size:
            raise ValueError(f"a global batch of {global_batch} does not split over {self.world_size} Ray workers: "
                             "pick a multiple of the number of workers")
        return global_batch // self.world_size


def ray_place() -> RayPlace:
    """This worker's place, asked of ``ray.train.get_context()`` now.

    Raises:
        ImportError: Ray Train is not installed.
    """
    ctx = _train().get_context()
    return RayPlace(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(), ctx.get_local_world_size(),
                    ctx.get_node_rank())


def _check_environment(place: RayPlace) -> None:
    """The ranks torch.distributed and the environment give must be Ray's: rank-0-first finds a node's
    first rank as RANK - LOCAL_RANK and its workers by LOCAL_WORLD_SIZE, which TorchTrainer sets."""
    if place.world_size > 1 and not distributed.is_initialized():
        raise RuntimeError(f"Ray Train worker {place.world_rank} of {place.world_size} has no torch.distributed process "
                           "group: build the loader inside a TorchTrainer's train_loop_per_worker, which sets it up")
    want = {"LOCAL_RANK": place.local_rank, "LOCAL_WORLD_SIZE": place.local_world_size}
    differ = [f"{k}={os.environ.get(k)!r} (Ray: {v})" for k, v in want.items() if os.environ.get(k) != str(v)]
    if distributed.is_initialized() and distributed.get_rank() != place.world_rank:
        differ.append(f"torch.distributed rank {distributed.get_rank()} (Ray: {place.world_rank})")
    if differ:
        raise RuntimeError("this Ray Train worker's environment disagrees with Ray's context: " + ", ".join(differ)
                           + "; build the loader in a TorchTrainer worker without changing these variables")


def build_ray_loader(path, settings: Settings, prefix: str = "", **kwargs) -> YoloDataLoader:
    """The loader of ``path`` for this Ray Train worker: :func:`yolo_data.build.build_loader` with the
    worker's local rank, inside ``train_loop_per_worker``.

    Args:
        path: as for build_loader (a folder, .txt list, dataset yaml, a split in a bucket, another label
            format, an in-memory source).
        settings: every decision; ``settings.batch_size`` is the per-worker batch
            (``ray_place().per_rank(global_batch)``).
        prefix: put before every line logged.
        **kwargs: build_loader's keyword arguments (dataset_class, collate, loader_class, mapper, sampler).

    Returns:
        The loader, its batches as under torchrun: (imgs uint8 (B, C, H, W), targets float32 (n, 6)
        [image, class, x, y, w, h] normalised, paths, shapes) for the box tasks.

    Raises:
        ImportError: Ray Train is not installed.
        RuntimeError: called outside a TorchTrainer worker of several workers (no process group), or with
            ranks in the environment that are not Ray's.
    """
    place = ray_place()
    _check_environment(place)
    rank = place.local_rank if distributed.is_initialized() else -1
    return build_loader(path, settings, rank=rank, prefix=prefix, **kwargs)


def report(metrics: dict, loader: YoloDataLoader, state: Optional[dict] = None) -> None:
    """``ray.train.report(metrics)`` with a checkpoint of where ``loader`` stands (and of ``state``),
    made by world rank 0; the other workers report the metrics alone.  Call it on every worker after the
    step whose batch was used, as Ray needs every worker to report.

    Args:
        metrics: numbers for Ray's result (e.g. {'loss': 0.3, 'epoch': 2}).
        loader: the training loader (``loader.state_dict()``: the same on every worker).
        state: what else to resume (e.g. {'model': model.state_dict(), 'opt': opt.state_dict()}), saved
            with ``torch.save``: tensors, numbers, strings, lists and dicts of them.
    """
    train = _train()
    if train.get_context().get_world_rank() != 0:
        train.report(metrics, checkpoint=None)
        return
    with tempfile.TemporaryDirectory(prefix="yolo_data_ray_") as folder:
        Path(folder, LOADER_FILE).write_text(json.dumps(loader.state_dict()))
        if state is not None:
            torch.save(state, Path(folder, STATE_FILE))
        train.report(metrics, checkpoint=train.Checkpoint.from_directory(folder))


def resume(loader: YoloDataLoader) -> Optional[dict]:
    """Go on from the run's last checkpoint (``ray.train.get_checkpoint()``), on every worker: the
    loader's next pass starts at the batch after the saved one, on this run's number of workers.

    Args:
        loader: the training loader, built as the saved run built it (same data, seed, settings and
            global batch).

    Returns:
        None when the run has no checkpoint (a fresh start); else the ``state`` saved with it ({} when
        none was).  The epoch to go on in is ``loader.sampler.epoch``.

    Raises:
        ValueError: the checkpoint was not made by :func:`report`, or by a loader that gives other
            batches (the differences named).
    """
    checkpoint = _train().get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        saved = Path(folder, LOADER_FILE)
        if not saved.is_file():
            raise ValueError(f"Ray checkpoint {checkpoint.path} holds no {LOADER_FILE}: it was not made by "
                             "yolo_data.integrations.ray.report")
        loader.load_state_dict(json.loads(saved.read_text()))
        extra = Path(folder, STATE_FILE)
        return torch.load(extra, map_location="cpu", weights_only=True) if extra.is_file() else {}
