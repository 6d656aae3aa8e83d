"""The label cache: fingerprint, contents, load and save, and where the file lives.

The file is a :mod:`~yolo_data.storage.container` of kind ``labels``: the store's flat arrays, and in the
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
import multiprocessing as mp
import os
import sys
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..formats.labelfile import COORD_TOLERANCE, MAX_CLASS_ID, MAX_LABEL_BYTES
from ..formats.problems import Problem
from ..formats.sources import CACHE_DIR_ENV, LABEL_CACHE_SUFFIX, MAX_CACHE_STEM, cache_stem, user_cache_dir  # noqa: F401
from ..storage import backend_for, carried, container, scheme_of
from ..storage.container import CacheError
from .scan import default_workers
from .store import LabelStore
from .verify import MIN_IMAGE_SIDE

LOGGER = logging.getLogger("yolo_data")

KIND = "labels"
# Of the contents (4: class names; 5: a format's settings and listed images; 6: which listed images
# the store kept; 7: image sizes as shapes_hw [h, w], no longer shapes [w, h]; 8: keypoints; 9: each
# image's bands and bits, LabelStore.bands); the container's own format is container.FORMAT.
FORMAT_VERSION = 9
__all__ = ["CacheError", "CacheContents", "fingerprint", "check_listing", "load", "save", "user_cache_dir",
           "folder_cache_file"]


@dataclass
class CacheContents:
    """What a cache file holds besides the arrays."""
    store: LabelStore
    fingerprint: str
    counts: Dict[str, int]
    problems: List[Problem] = field(default_factory=list)
    names: List[str] = field(default_factory=list)  # the class names (the yaml's or the annotations' own)
    # The label format's settings (formats/base.py: SplitSource.settings), and, for a format with a warm
    # start, every image the split listed, so the fingerprint is checked without listing it again.
    settings: Optional[Dict] = None
    listed: Optional[List[str]] = None
    # bool (number of listed images,): which of the split's listed images the store holds (the scan
    # leaves corrupt ones out); None: all of them.  See check_listing.
    kept: Optional[np.ndarray] = None


# -- fingerprint ------------------------------------------------------------------------------------
FINGERPRINT_CHUNK = 16384  # pairs per digest: the unit of work of the parallel fingerprint
PARALLEL_FINGERPRINT_MIN = 65536  # fewer pairs are stat'ed in this process (a pool costs ~30 ms to start)
SLOW_STAT_S = 50e-6  # stats slower than this on average (a network filesystem) are waited for in threads
STAT_THREADS, STAT_BATCH = 32, 512
_MISSING = (-1, -1, -1)  # (size, mtime, type) of a path that cannot be stat'ed; no real file has size -1
_REGULAR = 8  # a regular file's type (st_mode >> 12): what an object at a URL is


def _stats(paths: Sequence[str], objects: bool = True) -> array:
    """(size, mtime in ns, file type ``st_mode >> 12``: regular, folder, FIFO, ...) of each path, as
    int64s.  One stat per file and no string formatting per file (a stat costs about 1.5 us on local
    disk, and at a million images this loop is the warm start's main cost).  An object's at a URL are
    (size, its tag, regular file), from its backend's stat (S3's: from its folder's listing, its ETag as
    a number: no request per object).
    ``objects=False``: the caller knows no path is a URL, and the loop does not ask each one."""
    stat, vals = os.stat, array("q")
    if not objects:
        for p in paths:
            try:
                st = stat(p)
            except (OSError, ValueError):  # ValueError: a name with a NUL byte, which no file has
                vals.extend(_MISSING)
                continue
            vals.extend((st.st_size, st.st_mtime_ns, st.st_mode >> 12))
        return vals
    backends = {}  # scheme -> its backend, asked once
    for p in paths:
        scheme = scheme_of(p)
        if scheme:  # an object: its listed size and tag (an ETag), as its backend's stat gives them
            try:
                backend = backends.get(scheme) or backends.setdefault(scheme, backend_for(p))
                info = backend.stat(p)
            except (OSError, ValueError):  # (ValueError: a scheme nobody registered)
                info = None
            vals.extend(_MISSING if info is None else (info.size, info.tag, _REGULAR))
            continue
        try:
            st = stat(p)
        except (OSError, ValueError):
            vals.extend(_MISSING)
            continue
        vals.extend((st.st_size, st.st_mtime_ns, st.st_mode >> 12))
    return vals


def _chunk_digest(im_files: Sequence[str], lb_files: Sequence[str], lo: int, hi: int, threads=None) -> bytes:
    """sha256 of pairs [lo, hi): every path (NUL-separated: no path contains NUL), then their stats.
    ``threads``: an executor that stats batches of paths concurrently (slow filesystems)."""
    if lb_files is None:  # a format whose labels are not one file per image (its settings hold the file)
        paths = list(im_files[lo:hi])
    else:
        paths = [""] * (2 * (hi - lo))
        paths[0::2], paths[1::2] = im_files[lo:hi], lb_files[lo:hi]
    joined = "\0".join(paths)
    if threads is None:  # one search of the joined names tells whether any is a URL
        vals = _stats(paths, objects="://" in joined)
    else:
        vals = array("q")
        batches = [paths[i:i + STAT_BATCH] for i in range(0, len(paths), STAT_BATCH)]
        for part in threads.map(carried(_stats), batches):  # objects at URLs: through this thread's storage
            vals.extend(part)
    h = hashlib.sha256(joined.encode("utf-8", "surrogateescape"))
    h.update(b"\1")
    h.update(vals.tobytes())
    return h.digest()


_POOL_FILES: tuple = ()  # the file lists, in the fingerprint pool's forked processes only


def _pool_start(im_files, lb_files) -> None:
    global _POOL_FILES
    _POOL_FILES = (im_files, lb_files)  # inherited through fork, never pickled


def _pool_chunk(lo_hi) -> bytes:
    return _chunk_digest(*_POOL_FILES, *lo_hi)


def _slow_stats(im_files: Sequence[str], lb_files: Sequence[str]) -> bool:
    """Whether stat is slow here (a network filesystem): the first 128 pairs take over SLOW_STAT_S a
    file on average.  (Local disk: about 1.5 us, so a pause of the probe has to last over 10 ms to be
    taken for a slow filesystem, which would only cost speed.)"""
    k = min(len(im_files), 128)
    t0 = time.perf_counter()
    _stats(list(im_files[:k]) + list(lb_files[:k] if lb_files is not None else im_files[:k]))
    return k > 0 and time.perf_counter() - t0 > SLOW_STAT_S * 2 * k


def fingerprint(im_files: Sequence[str], lb_files: Optional[Sequence[str]], nc: Optional[int], *,
                workers: Optional[int] = None, parallel_min: Optional[int] = None,
                settings: Optional[Dict] = None) -> str:
    """sha256 of everything that decides the scan's result: the format version, the scan settings
    (``nc``, and ``settings``: the label format's, JSON-serialisable, e.g. an annotation file's path,
    size and mtime, or class names) and each image and label file's path, size, modification time (ns) and file
    type; a missing file counts too.  ``lb_files`` None: only the images are stat'ed per pair.  Every file is stat'ed on every call, so an edited file (new mtime, or new size) or a
    replaced one is noticed; folder times are never used as a shortcut.

    The pairs are hashed in chunks of FINGERPRINT_CHUNK and the chunks' digests in order, so the value
    does not depend on how it is computed:

    - from ``parallel_min`` pairs on (default PARALLEL_FINGERPRINT_MIN), the chunks are stat'ed in
      ``workers`` forked processes (default: the usable cores; Linux only), each returning its chunks'
      digests: 1M images (2M files) in 2.3 s instead of 4.0 s on 2 cores;
    - where a stat is slow (over SLOW_STAT_S, as on NFS) the stats are waited for in STAT_THREADS
      threads of this process instead: there the latency, not the CPU, is the cost.
    """
    n = len(im_files)
    if lb_files is not None and len(lb_files) != n:
        raise ValueError(f"{n} image files but {len(lb_files)} label files")
    h = hashlib.sha256(json.dumps({
        "version": FORMAT_VERSION, "nc": nc, "tol": COORD_TOLERANCE, "min_side": MIN_IMAGE_SIDE,
        "max_label_bytes": MAX_LABEL_BYTES, "max_class": MAX_CLASS_ID, "fingerprint": 2,
        "chunk": FINGERPRINT_CHUNK, "pairs": n, **({"source": settings} if settings else {})}).encode())
    bounds = [(lo, min(lo + FINGERPRINT_CHUNK, n)) for lo in range(0, n, FINGERPRINT_CHUNK)]
    workers = min(workers or default_workers(), len(bounds))
    parallel_min = PARALLEL_FINGERPRINT_MIN if parallel_min is None else parallel_min
    if _slow_stats(im_files, lb_files):
        with ThreadPoolExecutor(STAT_THREADS) as threads:
            digests = [_chunk_digest(im_files, lb_files, lo, hi, threads) for lo, hi in bounds]
    elif n < parallel_min or workers < 2 or sys.platform != "linux":
        digests = [_chunk_digest(im_files, lb_files, lo, hi) for lo, hi in bounds]
    else:
        # fork: the children only stat files (never CUDA), as the scan's pool does
        with mp.get_context("fork").Pool(workers, _pool_start, (im_files, lb_files)) as pool:
            digests = pool.map(_pool_chunk, bounds, chunksize=1)
    for d in digests:
        h.update(d)
    return h.hexdigest()


# -- the stored paths ------------------------------------------------------------------------------
LISTING_CHUNK = 65536  # paths compared at a time: a few MB of temporaries, never the whole listing's


def check_listing(contents: CacheContents, im_files: Sequence[str]) -> None:
    """Raise CacheError unless the store's image paths are ``im_files`` (the split's listing, in order)
    less those the scan left out (``contents.kept``), byte for byte.

    Neither the checksum nor the fingerprint covers this: a damaged or hand-edited file with a
    recomputed checksum could name a file that does not exist (failing on every run, never rebuilt)
    or another image (its pixels with these labels).  Compared with NumPy on the flat path bytes, a
    chunk of paths at a time, with no Python step per path: about 70 ms for a million paths.
    """
    store, n = contents.store, len(im_files)
    kept = np.ones(n, bool) if contents.kept is None else np.asarray(contents.kept, dtype=bool)
    if len(kept) != n:
        raise CacheError(f"it records {len(kept)} listed images, but the split lists {n}")
    if int(np.count_nonzero(kept)) != len(store):
        raise CacheError(f"it holds {len(store)} images, but records {int(np.count_nonzero(kept))} of the "
                         "listed images as kept")
    offsets, data = store.path_offsets, store.path_bytes
    j = 0  # the store's index of the chunk's first kept image
    for lo in range(0, n, LISTING_CHUNK):
        hi = min(lo + LISTING_CHUNK, n)
        raw = np.frombuffer(os.fsencode("\0".join(im_files[lo:hi])), np.uint8)
        sep = raw == 0
        ends = np.append(np.flatnonzero(sep), len(raw))
        if len(ends) != hi - lo:
            raise CacheError("a listed image's name holds a NUL byte")
        lens = ends - np.concatenate([[0], ends[:-1] + 1])
        k = kept[lo:hi]
        m = int(np.count_nonzero(k))
        if m == hi - lo:
            want = raw[~sep]
        else:  # each path's bytes and the separator after it share the path's flag
            want = raw[np.repeat(k, lens + 1)[:len(raw)] & ~sep]
        want_offsets = offsets[j] + np.concatenate([[0], np.cumsum(lens[k])])
        if not (np.array_equal(offsets[j:j + m + 1], want_offsets)
                and np.array_equal(data[offsets[j]:offsets[j + m]], want)):
            raise CacheError(_first_difference(store, j, [f for f, keep in zip(im_files[lo:hi], k.tolist()) if keep]))
        j += m


def _first_difference(store: LabelStore, j: int, listed: List[str]) -> str:
    """What check_listing says when store images j, j + 1, ... are not ``listed``."""
    for i, f in enumerate(listed):
        if store.im_file(j + i) != f:
            return f"its image {j + i} is {store.im_file(j + i)!r}, but the listed file there is {f!r}"
    return "its image paths are not the listed files"


# -- files ------------------------------------------------------------------------------------------
def _arrays(contents: CacheContents) -> Dict:
    arrays = contents.store.arrays()
    if contents.listed is not None:  # the listed images, encoded as the store encodes its paths
        encoded = [os.fsencode(f) for f in contents.listed]
        arrays["listed_bytes"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        arrays["listed_offsets"] = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
    if contents.kept is not None:
        arrays["kept"] = np.asarray(contents.kept, dtype=bool).astype(np.uint8)
    return arrays


def _layout(contents: CacheContents, arrays: Dict) -> container.Layout:
    meta = {"version": FORMAT_VERSION, "fingerprint": contents.fingerprint, "counts": contents.counts,
            "problems": [[p.file, p.reason, p.dropped] for p in contents.problems], "names": contents.names,
            "settings": contents.settings}
    return container.plan(KIND, meta, {k: (a.dtype.str, a.shape) for k, a in arrays.items()})


def load(path: Path) -> CacheContents:
    """Map and check a cache file.

    The store's arrays are read-only views of the mapping (kept alive by them).  yolo_data's writers
    never change a file in place (they rename a new one over it), so the mapping stays valid.

    Args:
        path: the label cache file (``*.yolo_data.cache``).

    Returns:
        CacheContents: ``store`` (the LabelStore, read-only: labels float32 (L, 5) [class, x, y, w, h]
        normalised xywh with label_offsets per image, shapes_hw int32 (n, 2) [h, w], image paths,
        polygons, keypoints, bands int32 (n, 4)), the fingerprint it was made for, the scan's counts
        and problems, class names, the format's settings, the listed and the kept images.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CacheError: the file is damaged, foreign, untrusted, of another version, or its contents
            disagree with each other; the message says which.
    """
    c = container.read(path, KIND)
    try:
        meta = c.meta
        if meta["version"] != FORMAT_VERSION:
            raise CacheError(f"label cache version {meta['version']}, this yolo_data reads {FORMAT_VERSION}")
        store = LabelStore.from_arrays(c.arrays)
        problems = [Problem(str(f), str(r), bool(d)) for f, r, d in meta["problems"]]
        names = meta["names"]
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise CacheError("class names are not a list of texts")
        listed = None
        if "listed_bytes" in c.arrays:
            raw, offsets = c.arrays["listed_bytes"].tobytes(), c.arrays["listed_offsets"]
            if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(raw) or np.any(np.diff(offsets) < 0):
                raise CacheError("the listed images' offsets do not run from 0 to the end")
            listed = [os.fsdecode(raw[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        settings = meta["settings"]
        if settings is not None and not isinstance(settings, dict):
            raise CacheError("format settings are not a mapping")
        kept = c.arrays["kept"] != 0 if "kept" in c.arrays else None
        if kept is not None and kept.ndim != 1:
            raise CacheError("the kept images' flags are not one row")
        return CacheContents(store, str(meta["fingerprint"]), dict(meta["counts"]), problems, names, settings, listed,
                             kept)
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"inconsistent contents ({type(e).__name__}: {e})") from None


def save(path: Path, contents: CacheContents) -> None:
    """Write atomically (see container.NewFile): a crash leaves the old file (or none) in place, never
    a torn one; concurrent writers each replace the file whole.

    Args:
        path: the label cache file to write (its folder must exist).
        contents: the store and what the file holds besides it.

    Raises:
        OSError: the folder is not writable or full.
    """
    arrays = _arrays(contents)
    container.write(Path(path), _layout(contents, arrays), arrays)


remove_stale_temps = container.remove_stale_temps


# -- where ------------------------------------------------------------------------------------------
def folder_cache_file(default: Path, folder: Path, suffix: str = LABEL_CACHE_SUFFIX) -> Path:
    """The file for ``default`` inside a shared cache folder (``train2017-<hash>.yolo_data.cache``); the
    hash of the full default path keeps two datasets with a split of the same name apart (and lets a
    very long stem be cut short)."""
    digest = hashlib.sha256(str(Path(default).absolute()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = cache_stem(default)
    while len(os.fsencode(stem)) > MAX_CACHE_STEM:
        stem = stem[:-1]
    return Path(folder) / f"{stem}-{digest}{suffix}"

