"""Images that passed the scan but could not be decoded when training read them, remembered so that
the next run leaves them out with the reason, until the file changes.

The scan checks headers (and fully decodes only rare formats), so a file whose pixel data is damaged
past its header can pass it and then fail to decode: training then uses another image, and evaluation
stops.  Without a memory of that, every later run would keep the file and fail again.  Only a file
read whole that no decoder takes is remembered (decode.ImageDecodeError); one that could not be read
(not permitted for a moment, an I/O error on a file server) is still a good image for the next run.

File: beside the label cache, ``<label cache>.failed``, one JSON line per failure
``{"file", "size", "mtime_ns", "reason"}``.  Lines are appended with one ``write`` each on an
``O_APPEND`` descriptor (under 4 KiB), so DataLoader workers and ranks writing at once never interleave,
and only when the record does not hold that (file, size, mtime) yet: it stays one line per broken file.
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
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

try:
    import fcntl
except ImportError:  # Windows: no POSIX locks; the worst outcome is a duplicate line
    fcntl = None

from ..formats.problems import Problem
from ..storage.container import CacheError, check_trust

LOGGER = logging.getLogger("yolo_data")
SUFFIX = ".failed"
# One line per broken file version keeps the record at a few KiB; this many bytes means something
# else wrote it, and no more is read.
MAX_BYTES = 64 * 2**20
_LINE_MAX = 4000  # one write() below PIPE_BUF, so appends stay whole
# never writable by every user, or check_trust would refuse our own record; the umask narrows it further
_CREATE_MODE = 0o664
_OPEN_FLAGS = os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_warned = set()  # records already warned about in this process (forked DataLoader workers inherit it)
_recorded = set()  # (image, size, mtime_ns) this process has put into, or found in, a record


def record_file(cache_file: Path) -> Path:
    return Path(cache_file).with_name(Path(cache_file).name + SUFFIX)


def _stat(path: str) -> Tuple[int, int]:
    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except OSError:
        return -1, -1


def remember(cache_file: Optional[Path], im_file: str, reason: str,
             version: Optional[Tuple[int, int]] = None) -> None:
    """Add one failure unless the record already holds this version of the file (quietly does nothing
    when the cache folder cannot be written).  ``version``: (size, mtime_ns) of the bytes that failed
    to decode (default: the file's now), so a file rewritten since is not left out for its old bytes.
    Every DataLoader worker of every epoch meets the same broken image; this process's memory and a
    look into the file, under a lock, keep it one line."""
    if cache_file is None:
        return
    size, mtime = _stat(im_file) if version is None else version
    key = (im_file, size, mtime)
    if size < 0 or key in _recorded:
        return
    line = json.dumps({"file": im_file, "size": size, "mtime_ns": mtime, "reason": reason[:1000]})
    if len(line) >= _LINE_MAX:
        return
    path = record_file(cache_file)
    fd = _open_trusted(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    if fd is None:
        return
    try:
        _lock(fd)
        if all(k != key for k, _ in _entries(_read_lines(fd, path))):
            os.write(fd, (line + "\n").encode("utf-8", "surrogateescape"))
        _recorded.add(key)
    except OSError:
        pass
    finally:
        os.close(fd)  # releases the lock too


def _lock(fd: int) -> None:
    """Hold the record's write lock (until ``fd`` closes), so that a check for a line and its append
    are one step among workers and ranks.  A POSIX lock needs write access, so no other user can hold
    it; where locks are not available (ENOLCK) the worst outcome is a duplicate line."""
    if fcntl is None:
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
    except OSError:
        pass


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
    if cache_file is None or upto == 0:
        return {}, 0
    path = record_file(cache_file)
    fd = _open_trusted(path, os.O_RDONLY)
    if fd is None:
        return {}, 0
    try:
        raw = _read_lines(fd, path, upto)
    except OSError:
        return {}, 0
    finally:
        os.close(fd)
    failed = {file: reason for (file, size, mtime), reason in _entries(raw)
              if size >= 0 and _stat(file) == (size, mtime)}
    return failed, len(raw)


def _read_lines(fd: int, path: Path, upto: Optional[int] = None) -> bytes:
    """The record's whole lines from its start: all of them, or those within ``upto`` bytes, and never
    more than MAX_BYTES (a warning names a record larger than that)."""
    size = os.fstat(fd).st_size
    if size > MAX_BYTES and upto is None and str(path) not in _warned:
        _warned.add(str(path))
        LOGGER.warning(f"{path}: {size / 2**20:,.0f} MiB, far more than a record of failures needs; only the "
                       f"failures in its first {MAX_BYTES // 2**20} MiB are left out (delete it to start afresh)")
    want = min(size, MAX_BYTES, MAX_BYTES if upto is None else upto)
    chunks, pos = [], 0
    while pos < want:
        chunk = os.pread(fd, want - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    raw = b"".join(chunks)
    return raw[:raw.rfind(b"\n") + 1]  # a line still being written is not read


def _entries(raw: bytes) -> Iterator[Tuple[Tuple[str, int, int], str]]:
    """((image, size, mtime_ns), reason) of each well-formed line of ``raw``."""
    for line in raw.decode("utf-8", "surrogateescape").splitlines():
        try:
            e = json.loads(line)
            yield (str(e["file"]), int(e["size"]), int(e["mtime_ns"])), str(e["reason"])
        except (ValueError, KeyError, TypeError):
            continue  # a damaged line costs only itself


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
