"""Verify every image/label pair of a split in parallel -> list of :class:`PairRecord`."""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

from PIL import Image

from ..storage import backend_for, carried, is_url
from .verify import LabelReader, PairRecord, verify_pair

Progress = Callable[[int, int], None]  # (done, total)


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _verify_chunk(args):
    im_files, lb_files, nc, reader = args
    return [verify_pair(i, l, nc, reader) for i, l in zip(im_files, lb_files)]


def scan_pairs(im_files: Sequence[str], lb_files: Sequence, nc: Optional[int] = None,
               workers: Optional[int] = None, progress: Optional[Progress] = None,
               reader: Optional[LabelReader] = None) -> List[PairRecord]:
    """Verify each (image, label) pair, in input order, using ``workers`` processes.  ``lb_files``:
    YOLO label files, or what ``reader`` reads (see formats.base.LabelReader).

    Header parsing and label parsing are Python-bound, so threads would share one core; the pairs are
    cut into chunks and checked in worker processes.  A pool is not worth starting for a few hundred
    pairs, which are checked in threads instead.  So are the pairs of a split in a bucket, where the
    requests' latency is the cost: the backend's ``concurrency`` threads, a few pairs each.
    """
    n = len(im_files)
    far = n > 0 and is_url(im_files[0])
    if far:  # objects in a bucket: the wait is the requests', so many threads each wait for a few pairs
        workers = max(1, min(backend_for(im_files[0]).concurrency, n))
        chunk = 4
    else:
        workers = max(1, min(workers or default_workers(), n))
        chunk = max(16, min(512, n // (workers * 8) or 1))
    jobs = [(list(im_files[i:i + chunk]), list(lb_files[i:i + chunk]), nc, reader) for i in range(0, n, chunk)]
    records: List[PairRecord] = []
    if far or workers == 1 or n < 500 or sys.platform != "linux":
        pool_cm = ThreadPoolExecutor(workers)
        results = pool_cm.map(carried(_verify_chunk), jobs)  # objects read through this thread's storage
    else:
        # fork (Linux only): the children run nothing but verify_pair, never CUDA, so forking a
        # process that already initialised CUDA is safe here, as it is for DataLoader workers.
        # verify.image_size gives Pillow an open file, not a name, so Pillow's first open in a process
        # imports its five common plugins (Image.preinit: BMP, GIF, JPEG, PPM, PNG, and what they
        # import) instead of the one the name's extension asks for.  Done here, once per process, the
        # workers inherit them; else each worker of each scan imported them again (~25M instructions).
        Image.preinit()
        pool_cm = mp.get_context("fork").Pool(workers)
        results = pool_cm.imap(_verify_chunk, jobs)
    with pool_cm:
        for part in results:
            records.extend(part)
            if progress is not None:
                progress(len(records), n)
    return records
