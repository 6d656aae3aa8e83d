"""How much room there is, and who may take it: free space of a folder (and of RAM for a folder in
shared memory), the lock under which a job plans and reserves its share, and the shared memory that the
DataLoader's workers need for their batches.  The image caches (imagecache) and the loader ask here.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from ..geometry.shapes import rect_max_side

try:
    import fcntl
except ImportError:  # Windows: no flock; planning goes on without the lock
    fcntl = None

LOGGER = logging.getLogger("yolo_data")
LOCK_WAIT_SECONDS = 10.0
PREFETCH = 2  # torch's default prefetch_factor: batches each worker keeps ready
TORCH_SHM = Path("/dev/shm")  # where torch's workers put their batches (shm_open)


def free_bytes(folder: Path, ram: bool = False) -> int:
    """Free bytes for a cache in ``folder``; for RAM also no more than the memory available."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if ram:
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            free = min(free, int(info["MemAvailable"].split()[0]) * 1024)
        except (OSError, KeyError, ValueError):
            pass
    return free


@contextlib.contextmanager
def planning_lock(folder: Path):
    """Held while a job measures the free room of ``folder`` and reserves its share, so two jobs
    starting together do not both plan with the same room (on tmpfs both reservations can then fail).
    An advisory ``flock`` on the folder itself: no lock file to leave behind.  Waits at most
    LOCK_WAIT_SECONDS (another user's process could hold it), then goes on without it."""
    fd = -1
    try:
        if fcntl is None:
            raise OSError("no flock")
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    LOGGER.info(f"{folder} stayed locked for {LOCK_WAIT_SECONDS:.0f} s; planning without the lock")
                    break
                time.sleep(0.02)
    except OSError:  # no flock here (or not a folder we may open): plan without it
        pass
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


def batch_side(imgsz: int, stride: int, pad: float = 0.0) -> int:
    """The longest side a batch image can have: ``imgsz`` (square letterbox, mosaic) plus a stride of
    margin, or more for rect batches with a large ``pad`` (``ceil(imgsz / stride + pad)`` strides,
    see shapes.rect_max_side).  Pass ``pad=0`` when the batches are not rect."""
    return max(int(imgsz) + int(stride), rect_max_side(imgsz, stride, pad))


def shm_bytes_for_batches(workers: int, batch_size: int, imgsz: int, stride: int, local_ranks: int = 1,
                          pad: float = 0.0, channels: int = 3, sample_bytes: int = 1) -> int:
    """Shared memory the DataLoader's workers of ``local_ranks`` processes need at once for their
    batches: each worker keeps PREFETCH + 1 batch buffers (its prefetched batches and the one the
    training loop holds; see batchmemory.POOL_SIZE), of images of ``channels`` bands of
    ``sample_bytes`` each (1: uint8, 2: uint16) at most ``batch_side`` on a side (``pad``: the rect
    pad, in strides; 0 without rect)."""
    if workers <= 0:
        return 0
    side = batch_side(imgsz, stride, pad)
    return local_ranks * workers * (PREFETCH + 1) * batch_size * channels * sample_bytes * side * side


def fit_workers_to_shm(workers: int, batch_size: int, imgsz: int, stride: int, local_ranks: int = 1,
                       prefix: str = "", folder: Path = TORCH_SHM, pad: float = 0.0, channels: int = 3,
                       sample_bytes: int = 1) -> int:
    """The number of workers whose batches (of ``channels`` bands of ``sample_bytes``) fit in ``folder``
    (Docker gives containers 64 MB): the requested one when it fits, else fewer, with a warning that names the fix.
    Without this the first batch fails with "No space left on device" or a worker dies of a bus error."""
    if workers <= 0 or not folder.is_dir():
        return workers
    free = free_bytes(folder)
    need = shm_bytes_for_batches(workers, batch_size, imgsz, stride, local_ranks, pad, channels, sample_bytes)
    if need <= free:
        return workers
    fit = workers
    while fit > 0 and shm_bytes_for_batches(fit, batch_size, imgsz, stride, local_ranks, pad, channels,
                                            sample_bytes) > free:
        fit -= 1
    LOGGER.warning(f"{prefix}{folder} has {free / 2**20:,.0f} MiB free, but {workers} DataLoader workers"
                   f"{f' on each of {local_ranks} ranks' if local_ranks > 1 else ''} need about "
                   f"{need / 2**20:,.0f} MiB of shared memory for their batches; using {fit} workers. "
                   f"Under Docker start the container with --shm-size=8g (or --ipc=host), or pass "
                   f"workers={fit} to keep this setting.")
    return fit
