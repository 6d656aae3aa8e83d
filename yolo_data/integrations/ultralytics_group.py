"""Ultralytics' trainer as one rank of a process group that was set up before it: a Ray Train worker
(``TorchTrainer`` sets up ``torch.distributed`` for every worker before ``train_loop_per_worker``) or a
torchrun process that called ``init_process_group`` itself.

Pure: never imports ultralytics.  The plug-in (``ultralytics.py``) asks :func:`group_size` when its
trainer is made and wraps a CPU model with :func:`wrap_cpu_model`.

Ultralytics' trainer starts DDP only by itself, and in such a group it would train alone:

* it counts its ranks by its ``device`` argument (``BaseTrainer.__init__``): 0 for ``'cpu'``, 1 for
  one GPU (``ray.train.torch.get_device()``), so no model is wrapped in DDP and every rank trains a
  model of its own on its share of the images; on CPU it also multiplies the loss by that count (0);
* with several devices (``'0,1'``) its ``_setup_ddp`` picks ``devices[LOCAL_RANK]`` and opens the
  process group again (``ValueError: trying to initialize the default process group twice!``);
* it wraps the model with ``device_ids=[device.index]``, which DDP refuses for a CPU model.

So the plug-in's trainer counts the group's ranks, keeps the group and the device it was given, and
wraps a CPU model itself (AMP is never used on CPU, as Ultralytics' own check decides there).  The
group's ranks must be the ones Ultralytics read from RANK / LOCAL_RANK / WORLD_SIZE when it was
imported: it saves checkpoints on rank 0 and shares the data among the ranks by them.
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .. import distributed


def group_size(ultralytics_rank: int, ultralytics_local_rank: int, device) -> int:
    """The number of ranks of the process group this process is in now, when it has more than one
    (the trainer is one rank of it); 1 without a group or in a group of one.

    Args:
        ultralytics_rank: the RANK Ultralytics read at import (``ultralytics.utils.RANK``; -1 when
            WORLD_SIZE was not above 1).
        ultralytics_local_rank: its LOCAL_RANK (``ultralytics.utils.LOCAL_RANK``).
        device: the trainer's ``device`` argument as Ultralytics parsed it ('cpu', '0', '0,1', ...).

    Raises:
        RuntimeError: Ultralytics read other ranks than the group's (it was imported before the
            launcher set RANK, LOCAL_RANK and WORLD_SIZE, or they were never set).
        ValueError: ``device`` names several devices: in a group each rank trains on one.
    """
    if not distributed.is_initialized() or dist.get_world_size() == 1:
        return 1
    world, rank = dist.get_world_size(), dist.get_rank()
    if ultralytics_rank != rank or ultralytics_local_rank < 0:
        raise RuntimeError(
            f"this process is rank {rank} of a process group of {world}, but Ultralytics read RANK="
            f"{ultralytics_rank} LOCAL_RANK={ultralytics_local_rank} from the environment when it was imported: "
            "import ultralytics after RANK, LOCAL_RANK and WORLD_SIZE are set (torchrun and Ray Train's workers "
            "set them before the training function runs)")
    if "," in str(device):
        raise ValueError(
            f"device={device!r} names several devices, but this process is rank {rank} of a process group of "
            f"{world}, one device each: give each rank its own (ray.train.torch.get_device() in a Ray Train "
            "worker, 'cpu' on CPUs)")
    return world


def wrap_cpu_model(model: torch.nn.Module, compiled: bool) -> DistributedDataParallel:
    """``model`` (on the CPU) in DistributedDataParallel over the default process group, with the
    options Ultralytics gives a GPU model: unused parameters found unless ``compiled`` (a static graph
    then), buffers not synchronised at every forward (each rank keeps its BatchNorm statistics, rank
    0's are saved).  The parameters start as rank 0's on every rank (DDP broadcasts them)."""
    # torch 2.13 renamed broadcast_buffers (still taken, with a deprecation warning) to forward_sync_buffers
    key = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
           else "broadcast_buffers")
    return DistributedDataParallel(model, find_unused_parameters=not compiled, static_graph=compiled, **{key: False})
