"""A local cache of objects fetched from a bucket, bounded in size: for datasets in a bucket too large
for an image cache (``cache='disk'`` holds decoded pixels, several times the JPEGs' size), the encoded
bytes of the images most recently read stay on local disk, and an epoch reads those from there.

One file per object version, named by a hash of its URL, size and ETag (a new version of an object is
another file, so nothing stale is ever served), under ``<folder>/<2 hex>/<hash>``; written under a
temporary name and renamed, so a reader sees a whole file or none.  The files and folders are the
user's own only (0600, 0700): the objects may come from a private bucket.

Trust: the names are computed from a listing anyone with access to the bucket can read, so in a
folder other users can write (a ``cache_dir`` in ``/tmp`` or a team scratch folder) another user
could put a file there first, and its pixels would be trained on.  So a file is served only when it
and each folder from the cache's own folder down are the user's and writable by nobody else
(trust.py, ``own_only``).  The folders are opened one below the other (``dir_fd``, links not
followed) and each checked on its open descriptor, so what was checked is what is read, even when
another user renames entries meanwhile.  An untrusted folder is not used (objects are fetched from
the bucket); an untrusted file in trusted folders is removed and the object fetched again and
written anew.  Each gets one warning per process naming it; :func:`prepare`, called before the
DataLoader workers are forked, gives them the verdict, so they do not warn again.  The ETag is not
compared with the bytes: it is an MD5 only for objects uploaded in one part without KMS, and a file
only the user can write holds what the user's process wrote.

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

import errno
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple

from .trust import file_problem, folder_problem

LOGGER = logging.getLogger("yolo_data")
STALE_DAYS = 7.0
RECOUNT = 1 / 16
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC  # a FIFO is opened without blocking, then refused
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_NOT_USED = "not used, objects are fetched from the bucket"
_warned = set()  # paths warned about in this process (forked DataLoader workers inherit it)
# Every step goes through a checked folder's descriptor; where that is not possible (Windows) no cache
_SUPPORTED = hasattr(os, "geteuid") and all(f in os.supports_dir_fd for f in (os.open, os.mkdir, os.unlink, os.rename))


def _warn(path: Path, why: str, then: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        LOGGER.warning(f"object cache {path}: {why}; {then}")


def _open_folder(name, shown: Path, dir_fd: Optional[int] = None, create: bool = False) -> Optional[int]:
    """A descriptor of the folder ``name`` (below ``dir_fd``, or a path), made (0700) where missing and
    ``create``; None when absent, not made, or not trusted (with one warning naming ``shown``)."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
        except OSError:  # an unwritable place only costs a later fetch
            return None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            _warn(shown, "not a folder (or a link to one), so not trusted", _NOT_USED)
        return None
    why = folder_problem(os.fstat(fd))
    if why is not None:
        os.close(fd)
        _warn(shown, why, _NOT_USED)
        return None
    return fd


def _open_root(folder: Path, create: bool) -> Optional[int]:
    if not _SUPPORTED:
        return None
    if create:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)  # cache_dir and above: as any folder of the user's
        except OSError:
            return None
    return _open_folder(folder, folder, create=create)


def prepare(folder: Path) -> bool:
    """Make the cache's folder (0700) where missing; False, with one warning naming it, when it cannot
    be trusted and so is not used.  Called before the DataLoader workers are forked, so that they
    inherit the warning instead of each giving it again."""
    fd = _open_root(Path(folder), create=True)
    if fd is None:
        return False
    os.close(fd)
    return True


class ObjectCache:
    """``folder``: where the files go; ``limit_bytes``: the most they may hold (about)."""

    def __init__(self, folder: Path, limit_bytes: int):
        self.folder, self.limit = Path(folder), int(limit_bytes)
        self._lock = threading.Lock()
        self._total: Optional[int] = None  # this process's idea of the folder's size; counted on first write
        self._added = 0  # bytes this process added since it last counted
        self._writing = 0  # bytes this process's threads are writing now

    def _name(self, url: str, size: int, tag: int) -> Tuple[str, str]:
        h = hashlib.sha256(f"{url}\0{size}\0{tag}".encode("utf-8", "surrogateescape")).hexdigest()
        return h[:2], h[2:]

    def _open_sub(self, sub: str, create: bool) -> Optional[int]:
        """A descriptor of the trusted folder ``<folder>/<sub>``, reached through the trusted root."""
        root = _open_root(self.folder, create)
        if root is None:
            return None
        try:
            return _open_folder(sub, self.folder / sub, dir_fd=root, create=create)
        finally:
            os.close(root)

    def get(self, url: str, size: int, tag: int) -> Optional[bytes]:
        """The object's bytes when this version is cached whole in a file that may be trusted, else None."""
        sub, name = self._name(url, size, tag)
        d = self._open_sub(sub, create=False)
        if d is None:
            return None
        try:
            return self._read(d, name, size, self.folder / sub / name)
        finally:
            os.close(d)

    def _read(self, d: int, name: str, size: int, shown: Path) -> Optional[bytes]:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=d)
        except OSError as e:
            if e.errno == errno.ELOOP:
                self._refuse(d, name, shown, "a symbolic link, not followed")
            return None
        try:
            st = os.fstat(fd)
            why = file_problem(shown, st, own_only=True)
            if why is not None:
                self._refuse(d, name, shown, why)
                return None
            if st.st_size != size:
                return None
            with open(fd, "rb", closefd=False) as fh:
                data = fh.read(size + 1)
            if len(data) != size:
                return None
            os.utime(fd)  # read now: not stale
            return data
        except OSError:
            return None
        finally:
            os.close(fd)

    @staticmethod
    def _refuse(d: int, name: str, shown: Path, why: str) -> None:
        """An untrusted entry in a folder of ours: removed, so the object is fetched and written anew."""
        _warn(shown, why, "removed, the object is fetched from the bucket again")
        try:
            os.unlink(name, dir_fd=d)
        except OSError:
            pass

    def put(self, url: str, size: int, tag: int, data: bytes) -> None:
        """Keep ``data`` (best effort: a full disk, an unwritable or untrusted folder only cost a later fetch)."""
        if len(data) != size:
            return
        sub, name = self._name(url, size, tag)
        d = self._open_sub(sub, create=True)
        if d is None:
            return
        try:
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
                self._write(d, name, data)
            finally:
                with self._lock:
                    self._writing -= size
        finally:
            os.close(d)

    @staticmethod
    def _write(d: int, name: str, data: bytes) -> None:
        tmp = f"{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(tmp, _WRITE_FLAGS, 0o600, dir_fd=d)
            try:
                with open(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)  # over an untrusted one too
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=d)
                except OSError:
                    pass
                raise
        except OSError:
            return

    def size(self) -> int:
        """Bytes the folder's cached objects take now (trusted folders only)."""
        return sum(st.st_size for _, _, st in self._files())

    def _files(self) -> Iterator[Tuple[int, str, os.stat_result]]:
        """(folder descriptor, name, lstat) of each cached file, in the trusted folders only; a
        descriptor is valid until the next item."""
        root = _open_root(self.folder, create=False)
        if root is None:
            return
        try:
            subs = [e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
            for sub in subs:
                d = _open_folder(sub, self.folder / sub, dir_fd=root)
                if d is None:
                    continue
                try:
                    for e in list(os.scandir(d)):
                        if e.name.endswith(".tmp"):
                            continue
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        yield d, e.name, st
                finally:
                    os.close(d)
        except OSError:
            return
        finally:
            os.close(root)

    def _count(self) -> int:
        """Remove the files nobody has read for STALE_DAYS; the bytes the others take."""
        old = time.time() - STALE_DAYS * 86400
        total = 0
        for d, name, st in self._files():
            if st.st_mtime < old:
                try:
                    os.unlink(name, dir_fd=d)
                    continue
                except OSError:
                    pass
            total += st.st_size
        return total


class ProcessCache:
    """The ObjectCache a backend's options ask for, made once in each process that asks for it (a forked
    worker makes its own: its lock and its count of bytes are per process)."""

    def __init__(self):
        self._held: Tuple[int, Optional[ObjectCache]] = (-1, None)  # (pid, that process's cache)

    def get(self, options, lock) -> Optional[ObjectCache]:
        """This process's ObjectCache, or None where ``options`` (StorageOptions: ``object_dir``,
        ``object_cache_bytes``) ask for none.  ``lock``: the backend's own (renewed in a forked child),
        held while the cache is made, as a batch's fetching threads ask at once."""
        if options.object_cache_bytes <= 0 or not options.object_dir:
            return None
        pid, c = self._held
        if pid != os.getpid():
            with lock:
                pid, c = self._held
                if pid != os.getpid():
                    c = ObjectCache(Path(options.object_dir), options.object_cache_bytes)
                    self._held = (os.getpid(), c)
        return c
