"""A DataLoader worker keeps the heap memory it frees, for its next batch, instead of giving it back to
the kernel after every batch.

A worker's batch makes and drops the same large arrays again and again (16 decoded photos, their
tiles, the finished images: tens of MB).  glibc's malloc returns freed memory at the top of its heap
to the kernel once more than M_TRIM_THRESHOLD is free there, and serves arrays larger than
M_MMAP_THRESHOLD with fresh mappings; both thresholds adapt to the sizes seen, and between them a
worker's next batch often finds its memory gone and page-faults it in again (the kernel zeroes every
4 KiB page first).  Measured on the generated 640-px set (mosaic training, 2 workers): 40-180 minor
faults and 0.43-0.79 ms of system time per image, against about 1 fault and 0.25-0.35 ms with both
thresholds fixed high, as set here.

Set only in DataLoader workers (``workers.WorkerInit``), never in the training process; only on glibc
(elsewhere the allocator is left as it is).  A worker's resident memory then stays at the largest its
batches needed, which it reaches anyway on every batch.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
#: Free memory at the heap's top beyond this goes back to the kernel (glibc's default: 128 KiB, adapting).
TRIM_BYTES = 256 << 20
#: Blocks from this size up get their own mapping (glibc's default: 128 KiB, adapting up to 32 MiB);
#: a 12-megapixel photo decoded in full (36 MiB) still does.
MMAP_BYTES = 32 << 20


def keep_freed_heap() -> bool:
    """Fix glibc's trim and mmap thresholds high in this process (see the module docstring).  Returns
    whether both were set: False where the C library is not glibc or refuses."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # no such confstr name (not glibc), no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES)) & bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES))
