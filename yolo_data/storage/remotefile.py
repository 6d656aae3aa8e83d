"""One object of a storage backend as a read-only, seekable file over ranged reads.

RangedFile: each read is one ranged read of what it asks (pyarrow reading a table in a bucket).
RemoteFile: for readers that walk a file's header (an image's size and EXIF in the scan, through
labelfile.open_regular): an object's first bytes cost one request, and a walk further into it one more
per READ_AHEAD bytes.
"""
from __future__ import annotations

import io
import os
from typing import List, Tuple

from .base import Backend

HEAD_BYTES = 65536  # the first read of a larger object fetches this much: a JPEG's header and EXIF
WHOLE_BYTES = 262144  # an object up to this size is read whole by its first read: one request, not two
READ_AHEAD = 1 << 20  # a read past what was fetched fetches this much more (a PNG's chunk walk: 1 request)


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over ranged reads of one object of known ``size`` (what pyarrow reads
    a table in a bucket through): each read is one ranged read of exactly what is asked, nothing kept.
    ``backend``: where the object is (base.Backend)."""

    def __init__(self, backend: Backend, url: str, size: int):
        super().__init__()
        self.backend, self.url, self.size, self.pos = backend, url, int(size), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        data = self.backend.read(self.url, self.pos, n)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


class RemoteFile(RangedFile):
    """A read-only, seekable file over ranged reads of one object of known ``size``: the first read
    fetches the whole object up to WHOLE_BYTES, else its first HEAD_BYTES; a later read that needs
    more fetches from there READ_AHEAD bytes (or what it asks, if more), the object's end at most.
    ``pread(n, pos)`` reads without moving.  ``backend``: where the object is (base.Backend)."""

    def __init__(self, backend: Backend, url: str, size: int):
        super().__init__(backend, url, size)
        self._blocks: List[Tuple[int, bytes]] = []  # (start, bytes), fetched so far

    def pread(self, n: int, pos: int) -> bytes:
        if n <= 0 or pos >= self.size:
            return b""
        end = min(self.size, pos + n)
        for start, data in self._blocks:
            if start <= pos and end <= start + len(data):
                return data[pos - start:end - start]
        lo, hi = pos, min(self.size, max(end, pos + READ_AHEAD))
        if not self._blocks:
            lo, hi = 0, self.size if self.size <= WHOLE_BYTES else max(end, HEAD_BYTES)
        data = self.backend.read(self.url, lo, hi - lo)
        self._blocks.append((lo, data))
        return data[pos - lo:end - lo]

    def readinto(self, b) -> int:
        data = self.pread(len(b), self.pos)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)

    def readall(self) -> bytes:
        return self.read(max(0, self.size - self.pos))


def open_object(backend: Backend, url: str) -> Tuple[RemoteFile, os.stat_result]:
    """A RemoteFile over the object ``url`` of ``backend`` and a stat_result of it (a regular file of
    its listed size).  Raises FileNotFoundError for an object that is not there."""
    info = backend.stat(url)
    if info is None:
        raise FileNotFoundError(2, "no such object", url)
    st = os.stat_result((0o100444, 0, 0, 1, 0, 0, info.size, 0, 0, 0))
    return RemoteFile(backend, url, info.size), st
