"""A local cache of objects fetched from a bucket, bounded in size: for datasets in a bucket too large
for an image cache (``cache='disk'`` holds decoded pixels, several times the JPEGs' size), the encoded
bytes of the images most recently read stay on local disk, and an epoch reads those from there.

One file per object version, named by a hash of its URL, size and ETag (a new version of an object is
another file, so nothing stale is ever served), under ``<folder>/<2 hex>/<hash>``; written under a
temporary name and renamed, so a reader sees a whole file or none.  The files and folders are the
user's own only (0600, 0700): the objects may come from a private bucket.

The bound: once the folder holds ``limit_bytes``, nothing more is added.  Training reads a dataset in
a loop, and for a loop over more than fits, keeping a fixed part is best: every epoch then reads that
part from disk, where evicting the least recently read file would evict, each time, the one that is
about to be read again, and serve nothing.  Files nobody has read for STALE_DAYS (an object's old
version, a dataset no longer used; a read renews a file's modification time) are removed when a
process first counts the folder, which makes room for what is read now.  Each writing process (the
DataLoader workers of a node) counts the folder again after adding RECOUNT of the bound, so the
others' files are seen: the bound is overshot by at most that much per other writing process.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Optional

STALE_DAYS = 7.0
RECOUNT = 1 / 16


class ObjectCache:
    """``folder``: where the files go; ``limit_bytes``: the most they may hold (about)."""

    def __init__(self, folder: Path, limit_bytes: int):
        self.folder, self.limit = Path(folder), int(limit_bytes)
        self._lock = threading.Lock()
        self._total: Optional[int] = None  # this process's idea of the folder's size; counted on first write
        self._added = 0  # bytes this process added since it last counted
        self._writing = 0  # bytes this process's threads are writing now

    def _file(self, url: str, size: int, tag: int) -> Path:
        h = hashlib.sha256(f"{url}\0{size}\0{tag}".encode("utf-8", "surrogateescape")).hexdigest()
        return self.folder / h[:2] / h[2:]

    def get(self, url: str, size: int, tag: int) -> Optional[bytes]:
        """The object's bytes when this version is cached whole, else None."""
        f = self._file(url, size, tag)
        try:
            with open(f, "rb") as fh:
                data = fh.read()
            if len(data) != size:
                return None
            os.utime(f)  # read now: not stale
            return data
        except OSError:
            return None

    def put(self, url: str, size: int, tag: int, data: bytes) -> None:
        """Keep ``data`` (best effort: a full disk or an unwritable folder only costs a later fetch)."""
        if len(data) != size:
            return
        with self._lock:
            if self._total is None or self._added > self.limit * RECOUNT:
                # files this process's threads are still writing are not on disk yet: they count too
                self._total, self._added = self._count() + self._writing, 0
            if self._total + size > self.limit:
                return
            self._total += size
            self._added += size
            self._writing += size
        try:
            self._write(self._file(url, size, tag), data)
        finally:
            with self._lock:
                self._writing -= size

    def _write(self, f: Path, data: bytes) -> None:
        try:
            f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = f.with_name(f"{f.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, f)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        except OSError:
            return

    def size(self) -> int:
        """Bytes the folder's cached objects take now."""
        return sum(st.st_size for _, st in self._files())

    def _files(self):
        try:
            subs = list(os.scandir(self.folder))
        except OSError:
            return
        for sub in subs:
            if not sub.is_dir(follow_symlinks=False):
                continue
            try:
                entries = list(os.scandir(sub.path))
            except OSError:
                continue
            for e in entries:
                if e.name.endswith(".tmp"):
                    continue
                try:
                    yield e.path, e.stat(follow_symlinks=False)
                except OSError:
                    continue

    def _count(self) -> int:
        """Remove the files nobody has read for STALE_DAYS; the bytes the others take."""
        old = time.time() - STALE_DAYS * 86400
        total = 0
        for path, st in self._files():
            if st.st_mtime < old:
                try:
                    os.unlink(path)
                    continue
                except OSError:
                    pass
            total += st.st_size
        return total
