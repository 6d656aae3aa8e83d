"""The label cache: fingerprint, contents, load and save, and where the file lives.

The file is a :mod:`~yolo_data.container` of kind ``labels``: the store's flat arrays, and in the
header the fingerprint of the inputs, the scan counts and the problems found.  Loading never unpickles
anything, every offset is checked against the file, the arrays' values against each other
(``LabelStore.validate``), and the file is memory-mapped, not read: a million-image cache (about 300 MB)
loads in about 0.16 s, and every DataLoader worker and rank on a node shares its pages.  It is written
atomically under a unique temporary name, with the mode the umask gives.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import container
from .container import CacheError
from .labels import COORD_TOLERANCE, MAX_CLASS_ID, MAX_LABEL_BYTES, MIN_IMAGE_SIDE, Problem
from .sources import LABEL_CACHE_SUFFIX, MAX_CACHE_STEM, cache_stem
from .store import LabelStore

LOGGER = logging.getLogger("yolo_data")

KIND = "labels"
FORMAT_VERSION = 3  # of the contents; the container's own format is container.FORMAT
CACHE_DIR_ENV = "YOLO_DATA_CACHE_DIR"
__all__ = ["CacheError", "CacheContents", "fingerprint", "load", "save", "user_cache_dir", "folder_cache_file"]


@dataclass
class CacheContents:
    """What a cache file holds besides the arrays."""
    store: LabelStore
    fingerprint: str
    counts: Dict[str, int]
    problems: List[Problem] = field(default_factory=list)


# -- fingerprint ------------------------------------------------------------------------------------
def _stat_line(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}\0-\n"
    kind = "d" if stat.S_ISDIR(st.st_mode) else ""
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}{kind}\n"


def fingerprint(im_files: Sequence[str], lb_files: Sequence[str], nc: Optional[int]) -> str:
    """sha256 of everything that decides the scan's result: the format version, the scan settings and
    each image and label file's path, size and modification time (a missing file counts too)."""
    h = hashlib.sha256()
    h.update(json.dumps({"version": FORMAT_VERSION, "nc": nc, "tol": COORD_TOLERANCE, "min_side": MIN_IMAGE_SIDE,
                         "max_label_bytes": MAX_LABEL_BYTES, "max_class": MAX_CLASS_ID}).encode())
    for im, lb in zip(im_files, lb_files):
        h.update((_stat_line(im) + _stat_line(lb)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# -- files ------------------------------------------------------------------------------------------
def _layout(contents: CacheContents) -> container.Layout:
    arrays = contents.store.arrays()
    meta = {"version": FORMAT_VERSION, "fingerprint": contents.fingerprint, "counts": contents.counts,
            "problems": [[p.file, p.reason, p.dropped] for p in contents.problems]}
    return container.plan(KIND, meta, {k: (a.dtype.str, a.shape) for k, a in arrays.items()})


def load(path: Path) -> CacheContents:
    """Map and check a cache file.  Raises FileNotFoundError or CacheError.

    The store's arrays are read-only views of the mapping (kept alive by them).  yolo_data's writers
    never change a file in place (they rename a new one over it), so the mapping stays valid.
    """
    c = container.read(path, KIND)
    try:
        meta = c.meta
        if meta["version"] != FORMAT_VERSION:
            raise CacheError(f"label cache version {meta['version']}, this yolo_data reads {FORMAT_VERSION}")
        store = LabelStore.from_arrays(c.arrays)
        problems = [Problem(str(f), str(r), bool(d)) for f, r, d in meta["problems"]]
        return CacheContents(store, str(meta["fingerprint"]), dict(meta["counts"]), problems)
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"inconsistent contents ({type(e).__name__}: {e})") from None


def save(path: Path, contents: CacheContents) -> None:
    """Write atomically (see container.NewFile): a crash leaves the old file (or none) in place, never
    a torn one; concurrent writers each replace the file whole.  Raises OSError when the folder is not
    writable or full."""
    container.write(Path(path), _layout(contents), contents.store.arrays())


remove_stale_temps = container.remove_stale_temps


# -- where ------------------------------------------------------------------------------------------
def user_cache_dir() -> Path:
    """The per-user cache folder: $YOLO_DATA_CACHE_DIR, else $XDG_CACHE_HOME/yolo_data, else
    ~/.cache/yolo_data.  Read at call time."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "yolo_data"


def folder_cache_file(default: Path, folder: Path, suffix: str = LABEL_CACHE_SUFFIX) -> Path:
    """The file for ``default`` inside a shared cache folder (``train2017-<hash>.yolo_data.cache``); the
    hash of the full default path keeps two datasets with a split of the same name apart (and lets a
    very long stem be cut short)."""
    digest = hashlib.sha256(str(Path(default).absolute()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = cache_stem(default)
    while len(os.fsencode(stem)) > MAX_CACHE_STEM:
        stem = stem[:-1]
    return Path(folder) / f"{stem}-{digest}{suffix}"

