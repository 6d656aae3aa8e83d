"""Local disk as a backend: plain paths, and ``file://`` URLs (``file:///data/coco``, or
``file://localhost/data/coco``) for the places that take a URL.

The package reads local datasets by their paths directly where that is faster (OpenCV reads an image by
its name, the scan forks processes, the fingerprint stats millions of files); this backend is what a
``file://`` dataset, and any caller that asks ``backend_for`` of a path, reads through.  A tag is the
file's modification time in ns; a folder is not an object (``stat`` of one is None).
"""
from __future__ import annotations

import os
import stat as stat_module
from pathlib import Path
from typing import List, Optional, Tuple

from .base import Backend, ObjectInfo, StorageOptions

SCHEME = "file"


def _split(url: str) -> Tuple[str, str]:
    """(the path on disk, what goes before it in the URLs this gives back) of a path or file:// URL."""
    if not url.lower().startswith("file://"):
        return url, ""
    place, slash, path = url[len("file://"):].partition("/")
    if place not in ("", "localhost"):
        raise FileNotFoundError(2, "a file:// URL names this machine only (file:///path)", url)
    return slash + path, url[:len("file://") + len(place)]


class LocalBackend(Backend):
    """Files on this machine (see the module's docstring).  Holds no state: safe in any thread and
    process."""

    concurrency = 8

    def __init__(self, options: Optional[StorageOptions] = None):
        self.options = options or StorageOptions()

    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        path, _ = _split(url)
        with open(path, "rb") as f:
            if not stat_module.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise IsADirectoryError(21, "not a regular file", url)
            if start:
                f.seek(start)
            return f.read(length) if length > 0 else f.read()

    def stat(self, url: str) -> Optional[ObjectInfo]:
        path, _ = _split(url)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except ValueError:  # a NUL byte: no file has that name
            return None
        if not stat_module.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(url, st.st_size, st.st_mtime_ns)

    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        root, head = _split(url)
        root = root.rstrip("/") or "/"
        if not os.path.isdir(root):
            return []
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            if not recursive:
                dirnames[:] = []
            for name in filenames:
                full = os.path.join(dirpath, name)
                info = self.stat(full)
                if info is not None:
                    found.append(ObjectInfo(head + full, info.size, info.tag))
        return sorted(found, key=lambda o: o.url)

    def write(self, url: str, data: bytes) -> None:
        """Write ``data`` whole (:func:`write_whole`)."""
        write_whole(_split(url)[0], data)


def write_whole(path, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` whole or not at all: to a temporary beside it
    (``.<name>.<pid>.tmp``), renamed over it; the temporary is removed when anything fails."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def local_backend(options: StorageOptions) -> LocalBackend:
    """The factory the registry holds for plain paths and ``file://``."""
    return LocalBackend(options)
