"""DataLoader workers: what each one sets up when it starts, what a fork must not hand it, and how it
ends with the process that made it.

* OpenCV's thread pool and fork.  OpenCV runs its parallel loops (``cv2.resize`` of a large image,
  colour conversions) on a pool of threads that, between jobs, wait on mutexes they lock and unlock.
  A process forked at that moment inherits the pool's bookkeeping and a locked mutex, but none of the
  threads: its next parallel call (or ``cv2.setNumThreads``) waits forever.  The training process uses
  that pool (the RAM cache is decoded in threads, the user's own code may use OpenCV) and then forks
  the workers, so :func:`guard_opencv_pool` takes the pool down before every ``os.fork`` of the process
  (``setNumThreads(1)`` joins its threads) and sets it back after, in parent and child; the threads are
  made again at the next parallel call.  The child then inherits no pool, whatever the timing.
* The parent's end.  torch's worker notices its parent is gone by comparing ``os.getppid()`` with the
  pid it saw when its loop began; a worker that gets there after the parent died (SIGTERM right after
  the loader was built) records its new parent (init) and would run for ever, holding the RAM cache.
  :class:`WorkerInit` carries the parent's pid from before the fork: the worker exits at once when its
  parent is already another process, and a daemon thread checks it every PARENT_CHECK_SECONDS.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional

import cv2

from .workerheap import keep_freed_heap

PARENT_CHECK_SECONDS = 1.0

_guarded = False
_saved = threading.local()


def _pool_down() -> None:
    _saved.threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # joins the pool's threads (0 would leave them running)


def _pool_back() -> None:
    threads = getattr(_saved, "threads", None)
    if threads is not None:
        _saved.threads = None
        cv2.setNumThreads(threads)


def guard_opencv_pool() -> None:
    """From now on every ``os.fork`` of this process (DataLoader workers, multiprocessing) happens with
    OpenCV's thread pool taken down (see the module docstring).  Idempotent; the user's thread count
    is kept."""
    global _guarded
    if not _guarded and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_pool_down, after_in_parent=_pool_back, after_in_child=_pool_back)
        _guarded = True


def _exit_when_orphaned(parent: int) -> None:
    while True:
        time.sleep(PARENT_CHECK_SECONDS)
        if os.getppid() != parent:
            os._exit(0)


class WorkerInit:
    """The loader's ``worker_init_fn``, made in the training process (it records that process's pid).
    In each worker: OpenCV single-threaded, as torch makes itself in workers, so N workers do not
    each start a pool as large as the machine; freed heap memory kept for the next batch
    (workerheap.py); and the end of the worker when its parent is gone (see the module docstring).
    No random seeding is needed: items draw from their own (seed, epoch, index) generators."""

    def __init__(self, parent: Optional[int] = None):
        self.parent = os.getpid() if parent is None else parent
        guard_opencv_pool()

    def __call__(self, worker_id: int) -> None:
        if os.getppid() != self.parent:  # the training process ended before this worker started
            os._exit(0)
        cv2.setNumThreads(0)
        keep_freed_heap()
        threading.Thread(target=_exit_when_orphaned, args=(self.parent,), name="yolo_data parent watch",
                         daemon=True).start()
