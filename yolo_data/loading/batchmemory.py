"""Shared memory for the batches a DataLoader worker hands to the training process, reused from batch
to batch instead of made anew for each one.

torch gives every batch fresh shared memory: the kernel allocates (and zeroes) each page when the
worker first writes it, the training process maps it, and every page is freed again when the batch is
dropped.  Measured on coco128's rect validation (2 workers): 0.75 ms of the workers' system time per
image and 0.18 ms of the training process's, against 0.34 and 0.04 with the buffers reused; CPU time per
image 3.71 -> 2.98 ms, an item being otherwise mostly one JPEG decode.

Here each worker keeps up to POOL_SIZE buffers.  The protocol, owned by this module:

* worker, ``BatchPool.take``: a FREE buffer of enough capacity (or a new one), marked IN_USE in its
  last byte, which lives in the shared memory itself;
* worker, ``BatchPool.transport`` (called by collate.stack on the whole batch tensor): the tensor as a
  ``_PooledImages``, whose pickling sends the buffer (torch's own file-descriptor sharing) and its shape;
* training process, ``_rebuild`` (unpickling): the batch as a tensor over the received shared storage
  itself (``is_shared()`` is True, as for torch's batches, so ``share_memory_()`` copies nothing), and a
  finalizer on that storage: only when every view of the batch (tensors, NumPy arrays) is gone is the
  buffer marked FREE, and the worker may write it again;
* a batch that another process can still see is never written again: the training process marks its
  buffer RETIRED instead of FREE when it forked while holding the batch (a logger started with the batch
  as an argument; ``os.register_at_fork``), or when the batch was pickled for another process
  (``torch.multiprocessing.Queue``: torch's sharing then records the storage anew, which ``_Held``
  notices); the worker drops a RETIRED buffer from its pool, and its memory lives on as long as anyone
  maps it, as torch's batches do;
* worker: a buffer taken for a batch that never went out through ``transport`` (the batch failed, or a
  custom collate copied it or sent it its own way) stays IN_USE, since only the training process's
  release makes a buffer FREE, and leaves the pool at the next ``take`` (else the pool would fill with
  buffers it can never write again).

The state byte is written by the training process through a second mapping of the buffer (not through
the batch's storage, which is being freed when the finalizer runs).  A FREE buffer not taken for
IDLE_SECONDS is given back to the system by the worker's idle thread, so a persistent worker between
passes holds no shared memory; when the worker ends normally (the loader shuts it down, or a pass of
non-persistent workers ends), its pool is given back too: under torch's ``file_system`` sharing a
buffer is a named file in /dev/shm that lives until its last holder lets go, and a process that exits
without freeing its storages never lets go.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.util import Finalize
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..runtime.room import PREFETCH
from ..runtime.torch_private import disabled_torch_function, new_shared_storage, second_mapping, sharing_record

#: Buffers a worker keeps: the PREFETCH batches it has ready or in progress, and the one the training
#: loop holds.  When all are in use (a loop that keeps batches) the batch gets fresh memory as in torch.
POOL_SIZE = PREFETCH + 1
#: A FREE buffer not taken for this long goes back to the system (between passes, a persistent worker
#: would otherwise hold POOL_SIZE batches of /dev/shm, which the other loader of a job may need).
IDLE_SECONDS = 2.0
FREE, IN_USE, RETIRED = 0, 1, 2


@dataclass
class _Buffer:
    """``storage``: shared memory of ``capacity`` image bytes and one state byte after them.  ``state``:
    (1,) uint8 numpy view of that byte."""
    storage: torch.UntypedStorage
    capacity: int
    state: np.ndarray
    batch_bytes: int = 0  # of the batch last taken
    taken: float = 0.0  # time.monotonic() when last taken

    @classmethod
    def new(cls, capacity: int) -> "_Buffer":
        storage = new_shared_storage(capacity + 1)
        whole = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
        return cls(storage, capacity, whole[capacity:])


class BatchPool:
    """One worker's buffers (see the module docstring).  A worker makes one batch at a time; the lock
    is for ``trim``, which the worker's idle thread calls."""

    def __init__(self, size: int):
        self.size = size
        self.buffers: List[_Buffer] = []
        self.building: Optional[_Buffer] = None  # taken for the batch in progress, not yet transported
        self.lock = threading.Lock()

    def take(self, n: int, h: int, w: int, channels: int = 3,
             dtype: torch.dtype = torch.uint8) -> Optional[torch.Tensor]:
        """An (n, channels, h, w) tensor of ``dtype`` (uint8, or uint16) at the start of a pooled
        buffer; None when every buffer the pool may keep is in use."""
        with self.lock:
            return self._take(n, h, w, channels, dtype)

    def trim(self, idle_seconds: float, now: Optional[float] = None) -> int:
        """Drop the FREE buffers not taken for ``idle_seconds`` (their memory goes back to the system:
        nothing else maps a FREE buffer); returns how many.  A persistent worker between passes (a
        validation loader during a training epoch) then holds no shared memory, as with torch."""
        now = time.monotonic() if now is None else now
        with self.lock:
            idle = [b for b in self.buffers if b.state[0] == FREE and now - b.taken >= idle_seconds]
            for b in idle:
                self.buffers.remove(b)
            return len(idle)

    def close(self) -> None:
        """Give every buffer back (the worker is ending): a buffer the training process still holds
        lives on with it."""
        with self.lock:
            self.buffers, self.building = [], None

    def _take(self, n: int, h: int, w: int, channels: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
        if self.building is not None:  # the last batch did not go out through transport: never reuse it
            self.buffers.remove(self.building)
            self.building = None
        self.buffers = [b for b in self.buffers if b.state[0] != RETIRED]  # another process may see them
        need = n * channels * h * w * dtype.itemsize
        free = [b for b in self.buffers if b.state[0] == FREE]
        fitting = [b for b in free if b.capacity >= need]
        if fitting:
            buf = min(fitting, key=lambda b: b.capacity)
        else:
            if len(self.buffers) >= self.size:
                if not free:
                    return None
                self.buffers.remove(min(free, key=lambda b: b.capacity))  # too small: make room
            buf = _Buffer.new(need)
            self.buffers.append(buf)
        buf.state[0] = IN_USE
        buf.batch_bytes, buf.taken = need, time.monotonic()
        self.building = buf
        return torch.empty(0, dtype=dtype).set_(buf.storage, 0, (n, channels, h, w))

    def batch_bytes(self, storage: torch.UntypedStorage) -> Optional[int]:
        """The bytes of the batch in progress when ``storage`` is its buffer, else None."""
        buf = self.building
        return buf.batch_bytes if buf is not None and storage.data_ptr() == buf.storage.data_ptr() else None

    def transport(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` ready to be sent to the training process: when it is the whole batch tensor of
        the buffer in progress, a view whose pickling hands the buffer over (see _PooledImages); any
        other tensor is returned as it is."""
        buf = self.building
        if (buf is None or images.untyped_storage().data_ptr() != buf.storage.data_ptr()
                or images.storage_offset() != 0 or not images.is_contiguous()
                or images.numel() * images.element_size() != buf.batch_bytes):
            return images
        self.building = None
        out = images.as_subclass(_PooledImages)
        out._pool_storage, out._pool_capacity = buf.storage, buf.capacity
        return out


class _PooledImages(torch.Tensor):
    """A batch tensor in a pooled buffer, as it leaves the worker.  Operations on it give plain
    tensors; pickling sends the buffer and the shape, and ``_rebuild`` unpickles it."""
    __torch_function__ = disabled_torch_function()

    def __reduce_ex__(self, protocol):
        return _rebuild, (self._pool_storage, self._pool_capacity, tuple(self.shape), self.dtype)


class _Held:
    """A pooled batch alive in the training process, and what its buffer's state byte becomes when the
    batch dies: FREE, or RETIRED when another process may still see it (see the module docstring)."""

    def __init__(self, state: np.ndarray, key, record):
        self.state = state  # (1,) uint8 view of the state byte through a mapping of our own
        self.key, self.record = key, record  # torch's record of the storage when it arrived
        self.retired = False
        self.pid = os.getpid()

    @classmethod
    def of(cls, storage: torch.UntypedStorage, capacity: int) -> Optional["_Held"]:
        """None where the buffer cannot be followed (it then stays IN_USE: never written again).  The
        state byte is reached through a second mapping of the buffer, made as torch maps a storage
        received from another process: the batch's own storage is being freed when its finalizer runs."""
        mapped = second_mapping(storage)
        if mapped is None or mapped[1].nbytes() <= capacity:
            return None
        key, second = mapped
        state = torch.empty(0, dtype=torch.uint8).set_(second).numpy()[capacity:capacity + 1]
        return cls(state, key, sharing_record(key))

    def retire(self) -> None:
        self.retired = True
        self.state[0] = RETIRED

    def release(self) -> None:
        """The batch's storage died (every view of it is gone)."""
        _HELD.pop(id(self), None)
        if os.getpid() != self.pid:  # a forked copy of the training process: the buffer is not its own
            return
        if sharing_record(self.key) is not self.record:  # pickled for another process since it arrived
            self.retired = True
        self.state[0] = RETIRED if self.retired else FREE
        self.state = None  # our mapping goes


_HELD = {}  # id -> _Held: the pooled batches alive in this process


def _retire_held() -> None:
    """Before this process forks: a child gets a copy of every batch it holds, so their buffers are
    never written again."""
    for held in list(_HELD.values()):
        held.retire()


_fork_hook = []  # registered with the first batch this process receives


def _rebuild(storage: torch.UntypedStorage, capacity: int, shape: Tuple[int, ...],
             dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """In the training process: the batch as a ``dtype`` tensor of ``shape`` over the received shared
    storage.  Its finalizer runs when the storage dies, i.e. when every view of the batch is gone (torch
    keeps a storage's Python object for as long as any tensor uses the storage)."""
    images = torch.empty(0, dtype=dtype).set_(storage, 0, shape)
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_retire_held)
        _fork_hook.append(_retire_held)
    held = _Held.of(storage, capacity)
    if held is not None:
        _HELD[id(held)] = held
        weakref.finalize(storage, held.release).atexit = False  # at exit nothing reads the buffer again
    return images


def _storage_outlives_its_python_object() -> bool:
    """Whether a storage's finalizer waits for the last tensor over it (torch keeps the Python object
    of a storage alive while tensors use it, since 2.1); without that the release above would come too
    early, so the workers then make every batch in fresh memory, as torch does."""
    died = []
    storage = torch.UntypedStorage(8)
    view = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (8,))
    weakref.finalize(storage, died.append, True)
    del storage
    early = bool(died)
    del view
    return not early and bool(died)


_POOLS = {}  # pid -> this process's BatchPool (a forked child never uses its parent's)


def _trim_when_idle(pool: BatchPool) -> None:
    """The worker's idle thread: every second, drop the buffers idle for IDLE_SECONDS."""
    while True:
        time.sleep(1.0)
        pool.trim(IDLE_SECONDS)


def worker_pool() -> Optional[BatchPool]:
    """The calling DataLoader worker's pool (and its idle thread, a daemon that ends with the worker);
    None outside a worker (batches stay in private memory) or where the pool cannot be used safely."""
    if get_worker_info() is None:
        return None
    pid = os.getpid()
    if pid not in _POOLS:
        _POOLS.clear()
        if not _storage_outlives_its_python_object():
            _POOLS[pid] = None
            return None
        pool = _POOLS[pid] = BatchPool(POOL_SIZE)
        threading.Thread(target=_trim_when_idle, args=(pool,), name="yolo_data batch memory", daemon=True).start()
        Finalize(pool, pool.close, exitpriority=10)  # run when the worker's process ends normally
    return _POOLS[pid]


def batch_bytes(storage: torch.UntypedStorage) -> Optional[int]:
    """The bytes of the batch this worker is making in ``storage`` (a pool buffer is longer than its
    batch), else None."""
    pool = _POOLS.get(os.getpid())
    return None if pool is None else pool.batch_bytes(storage)


def transport(images: torch.Tensor) -> torch.Tensor:
    """``images`` as it should leave this process (see BatchPool.transport); unchanged outside a worker."""
    pool = _POOLS.get(os.getpid())
    return images if pool is None else pool.transport(images)
