"""Small torch functions YOLOv5 training scripts import: device choice, timing, seeding."""
from __future__ import annotations

import logging
import platform
import random
import re
import time

import numpy as np
import torch

from ..labels import summary

LOGGER = logging.getLogger("yolo_data")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def select_device(device="", batch_size: int = 0) -> torch.device:
    """YOLOv5's device choice: a device string to a ``torch.device``.

    With several CUDA ids the first one is returned (the training script spreads over the rest with
    DDP), and ``batch_size`` must divide by their number.  Unlike YOLOv5 this never sets
    CUDA_VISIBLE_DEVICES: ids are the ones torch sees now.  The printing rank (LOCAL_RANK 0 or unset)
    logs one line, as YOLOv5 does:
    ``yolo_data 0.2.0 Python-3.11.7 torch-2.3.1 CUDA:0 (NVIDIA H100 80GB HBM3, 81559MiB)``.

    Args:
        device: ``''`` (first CUDA device, else CPU), ``'cpu'``, ``'mps'``, ``'0'``, ``'0,1'`` or
            ``'cuda:1'`` (case and spaces ignored; None counts as ``''``).
        batch_size: the total batch, which must divide by the number of CUDA ids given; 0: not checked.

    Returns:
        ``cpu``, ``mps`` or ``cuda:<first id>``.

    Raises:
        ValueError: naming what is missing (a CUDA id torch does not see, MPS where there is none), a
            device string of another form, or a ``batch_size`` that the number of GPUs does not divide.
    """
    spec = str(device).strip().lower().replace("cuda:", "").replace("none", "").replace(" ", "")
    if spec == "cpu":
        return _announce(torch.device("cpu"))
    if spec == "mps":
        if not _mps_available():
            raise ValueError("device 'mps' requested but Apple MPS is not available here")
        return _announce(torch.device("mps"))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if spec == "":
        return _announce(torch.device("cuda:0")) if count else _announce(torch.device("cpu"))
    if not re.fullmatch(r"\d+(,\d+)*", spec):
        raise ValueError(f"invalid device {device!r}: use '', 'cpu', 'mps', '0', '0,1' or 'cuda:1'")
    ids = [int(x) for x in spec.split(",")]
    missing = [i for i in ids if i >= count]
    if missing:
        raise ValueError(f"CUDA device {device!r} requested but {count} CUDA device(s) are visible"
                         + ("" if count else " (no CUDA here: use device='cpu')"))
    if len(ids) > 1 and batch_size > 0 and batch_size % len(ids):
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {len(ids)} GPUs in {device!r}")
    return _announce(torch.device(f"cuda:{ids[0]}"), ids)


def device_line(device: torch.device, cuda_ids=()) -> str:
    """``yolo_data <version> Python-<version> torch-<version> CPU`` (or ``MPS``, or one
    ``CUDA:<id> (<name>, <memory>MiB)`` per id, each further one on its own line, aligned)."""
    from ..version import __version__
    head = f"yolo_data {__version__} Python-{platform.python_version()} torch-{torch.__version__} "
    if device.type != "cuda":
        return head + device.type.upper()
    gpus = []
    for i in cuda_ids or [device.index or 0]:
        p = torch.cuda.get_device_properties(i)
        gpus.append(f"CUDA:{i} ({p.name}, {p.total_memory / (1 << 20):.0f}MiB)")
    return head + ("\n" + " " * len(head)).join(gpus)


def _announce(device: torch.device, cuda_ids=()) -> torch.device:
    """Log the device line on the printing rank (see :mod:`~yolo_data.labels.summary`); return ``device``."""
    if summary.printing_rank():
        summary.console()
        LOGGER.info(device_line(device, cuda_ids))
    return device


def time_synchronized() -> float:
    """The time once queued CUDA work is done (when CUDA is in use), as YOLOv5's ``time_synchronized``.

    Returns:
        Seconds of a monotonic clock (``time.perf_counter``): only differences mean something.
    """
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def init_torch_seeds(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's global generators (for the user's own code: yolo_data's
    augmentation draws from explicit generators and needs none of this).

    As YOLOv5 v5.0: seed 0 asks cuDNN for deterministic kernels without benchmarking (slower,
    reproducible); any other seed lets cuDNN benchmark (faster, less reproducible).

    Args:
        seed: the seed of all three generators; 0 also makes cuDNN deterministic.

    Returns:
        None; the process-wide generators and ``torch.backends.cudnn`` flags are set.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = seed == 0
    torch.backends.cudnn.benchmark = seed != 0


def smart_DDP(model: torch.nn.Module) -> torch.nn.Module:
    """Wrap ``model`` in DistributedDataParallel: with its device id when it lives on a CUDA device
    (NCCL), without device ids on the CPU (gloo), where passing them is an error.

    Args:
        model: the model, on the device of this rank (its first parameter's device decides);
            torch.distributed must be initialised.

    Returns:
        ``DistributedDataParallel(model)``, with ``device_ids`` and ``output_device`` its CUDA index
        on a GPU.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP
    device = next(model.parameters()).device
    if device.type == "cuda":
        return DDP(model, device_ids=[device.index], output_device=device.index)
    return DDP(model)
