"""Images that passed the scan but could not be decoded when training read them, remembered so that
the next run leaves them out with the reason, until the file changes.

The scan checks headers (and fully decodes only rare formats), so a file whose pixel data is damaged
past its header can pass it and then fail in ``cv2.imread``: training then uses another image, and
evaluation stops.  Without a memory of that, every later run would keep the file and fail again.

File: beside the label cache, ``<label cache>.failed``, one JSON line per failure
``{"file", "size", "mtime_ns", "reason"}``.  Lines are appended with one ``write`` each on an
``O_APPEND`` descriptor (under 4 KiB), so DataLoader workers and ranks writing at once never interleave.
An entry counts only while the image's size and modification time are what they were: a repaired or
replaced file is scanned again as any changed file is.

The record decides which images a run leaves out, so it is trusted only as the label cache beside it
is (``container.check_trust``): in a folder every user can write, a record another user planted is
ignored with one warning, and nothing is added to it.
"""
from __future__ import annotations

import errno
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from .container import CacheError, check_trust
from .labels import Problem

LOGGER = logging.getLogger("yolo_data")
SUFFIX = ".failed"
MAX_BYTES = 4 * 2**20  # read no more of it than this (a few thousand failures)
_LINE_MAX = 4000  # one write() below PIPE_BUF, so appends stay whole
# never writable by every user, or check_trust would refuse our own record; the umask narrows it further
_CREATE_MODE = 0o664
_OPEN_FLAGS = os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_warned = set()  # records already warned about in this process (forked DataLoader workers inherit it)


def record_file(cache_file: Path) -> Path:
    return Path(cache_file).with_name(Path(cache_file).name + SUFFIX)


def _stat(path: str) -> Tuple[int, int]:
    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except OSError:
        return -1, -1


def remember(cache_file: Optional[Path], im_file: str, reason: str) -> None:
    """Append one failure (quietly does nothing when the cache folder cannot be written)."""
    if cache_file is None:
        return
    size, mtime = _stat(im_file)
    line = json.dumps({"file": im_file, "size": size, "mtime_ns": mtime, "reason": reason[:1000]})
    if len(line) >= _LINE_MAX:
        return
    fd = _open_trusted(record_file(cache_file), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    if fd is None:
        return
    try:
        os.write(fd, (line + "\n").encode("utf-8", "surrogateescape"))
    except OSError:
        pass
    finally:
        os.close(fd)


def _open_trusted(path: Path, flags: int) -> Optional[int]:
    """A descriptor of the record ``path``, or None: absent, unreadable, or not trusted (a FIFO, a
    link, writable by every user, or another user's in a shared folder: one warning per process)."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, _CREATE_MODE)
    except OSError as e:
        if e.errno == errno.ELOOP:
            _warn_untrusted(path, "a symbolic link, not followed")
        return None
    try:
        check_trust(path, os.fstat(fd))
    except (OSError, CacheError) as e:
        os.close(fd)
        _warn_untrusted(path, str(e))
        return None
    return fd


def _warn_untrusted(path: Path, why: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        LOGGER.warning(f"{path}: {why}; the failures it lists are not left out, and none are added to it")


def read(cache_file: Optional[Path], upto: Optional[int] = None) -> Tuple[Dict[str, str], int]:
    """({image: reason} for failures whose file is unchanged since, bytes read).  ``upto``: read only
    that many bytes (what local rank 0 read, so every rank leaves out the same images)."""
    if cache_file is None:
        return {}, 0
    fd = _open_trusted(record_file(cache_file), os.O_RDONLY)
    if fd is None:
        return {}, 0
    try:
        raw = os.read(fd, min(MAX_BYTES, MAX_BYTES if upto is None else upto))
    finally:
        os.close(fd)
    raw = raw[:raw.rfind(b"\n") + 1]  # a line still being written is not read
    failed = {}
    for line in raw.decode("utf-8", "surrogateescape").splitlines():
        try:
            e = json.loads(line)
            if _stat(e["file"]) == (e["size"], e["mtime_ns"]) and e["size"] >= 0:
                failed[str(e["file"])] = str(e["reason"])
        except (ValueError, KeyError, TypeError):
            continue  # a damaged line costs only itself
    return failed, len(raw)


def leave_out(split, failed: Dict[str, str]):
    """The split without the images in ``failed`` (a SplitLabels; counts and problems updated)."""
    if not failed:
        return split
    store = split.store
    drop = np.array([store.im_file(i) in failed for i in range(len(store))], dtype=bool)
    if not drop.any():
        return split
    keep = np.flatnonzero(~drop)
    problems = [Problem(store.im_file(i), f"could not be decoded when last loaded ({failed[store.im_file(i)]}); "
                        "left out until the file changes", dropped=True) for i in np.flatnonzero(drop)]
    for p in problems:
        LOGGER.warning(str(p))
    sub = store.subset(keep)
    counts = dict(split.counts, ok=split.counts.get("ok", 0) - int(drop.sum()),
                  corrupt=split.counts.get("corrupt", 0) + int(drop.sum()),
                  boxes=sub.num_boxes(), backgrounds=sub.num_backgrounds())
    return replace(split, store=sub, counts=counts, problems=list(split.problems) + problems)
