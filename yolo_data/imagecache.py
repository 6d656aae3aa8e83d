"""Decoded, resized images of a dataset in one flat file that every process of a node maps.

``cache='ram'``: the file lives in shared memory (/dev/shm).  Local rank 0 decodes each image once
(inside ``torch_distributed_zero_first``), the other ranks and every DataLoader worker map the same
pages: one copy per node instead of one per rank (YOLOv5, Ultralytics) or per worker.  It is removed
when the process that built it exits.
``cache='disk'``: the same file in the cache folder beside the label cache (not .npy files beside
the user's images), reused across runs and rebuilt when the labels' fingerprint, the image size or
the interpolation changes.

File layout::

    b"YOLOIMGS" | u32 version | u32 header length | header (JSON) | index arrays | pixels (4 KiB aligned)

The header names the key (what the pixels depend on) and the arrays: ``offsets`` int64 (n,) byte
offset of each image, ``hw`` int32 (n, 2) resized size, ``hw0`` int32 (n, 2) decoded size, ``ok``
uint8 (n,) whether the image could be decoded.  The file is written under a temporary name and
renamed into place, so it is whole or absent.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import logging
import mmap
import os
import shutil
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Tuple

import cv2
import numpy as np

from .images import ImageReadError, imread_bgr, resize_long_side
from .store import LabelStore

LOGGER = logging.getLogger("yolo_data")
MAGIC = b"YOLOIMGS"
VERSION = 1
_PREFIX = struct.Struct("<8sII")
_PAGE = 4096
SAFETY = 0.1  # keep this share of free RAM or disk untouched


def cache_key(store: LabelStore, labels_fingerprint: str, img_size: int, augment: bool) -> str:
    """What the cached pixels depend on: the image files (through the label cache's fingerprint of
    their sizes and times), their order, the target size and the interpolation (augment picks it)."""
    h = hashlib.sha256(f"{VERSION}|{labels_fingerprint}|{img_size}|{bool(augment)}|".encode())
    h.update(store.path_bytes.tobytes())
    h.update(store.path_offsets.tobytes())
    return h.hexdigest()


def planned_sizes(shapes_wh: np.ndarray, img_size: int) -> np.ndarray:
    """(n, 2) int64 [h, w] each image will have after ``resize_long_side`` (sizes rounded up)."""
    w0, h0 = shapes_wh[:, 0].astype(np.int64), shapes_wh[:, 1].astype(np.int64)
    r = img_size / np.maximum(h0, w0)
    h = np.where(r == 1, h0, np.ceil(h0 * r)).astype(np.int64)
    w = np.where(r == 1, w0, np.ceil(w0 * r)).astype(np.int64)
    return np.stack([h, w], 1)


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


class ImageCache:
    """Read-only access to a built image cache file (memory-mapped)."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = Path(path), key
        self._open()

    def _open(self) -> None:
        with open(self.path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, hlen = _PREFIX.unpack_from(self._mm)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"{self.path}: not a yolo_data image cache of version {VERSION}")
        header = json.loads(bytes(self._mm[_PREFIX.size:_PREFIX.size + hlen]).decode("utf-8"))
        if header["key"] != self.key:
            raise ValueError(f"{self.path}: made for other images or settings")
        if header["size"] != len(self._mm):
            raise ValueError(f"{self.path}: {len(self._mm)} bytes, expected {header['size']}")
        arrays = {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            count = int(np.prod(spec["shape"]))
            arrays[name] = np.frombuffer(self._mm, dtype, count, spec["offset"]).reshape(spec["shape"])
        self.offsets, self.hw, self.hw0, self.ok = arrays["offsets"], arrays["hw"], arrays["hw0"], arrays["ok"]
        self.nbytes = int(header["pixels"])

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, i: int) -> Optional[Tuple[np.ndarray, Tuple[int, int], Tuple[int, int]]]:
        """(img (h, w, 3) uint8 BGR read-only view, (h0, w0), (h, w)), or None if it was unreadable."""
        if not self.ok[i]:
            return None
        h, w = int(self.hw[i, 0]), int(self.hw[i, 1])
        img = np.frombuffer(self._mm, np.uint8, h * w * 3, int(self.offsets[i])).reshape(h, w, 3)
        return img, (int(self.hw0[i, 0]), int(self.hw0[i, 1])), (h, w)

    # spawned DataLoader workers get the path and map the file themselves
    def __getstate__(self):
        return {"path": self.path, "key": self.key}

    def __setstate__(self, state):
        self.path, self.key = state["path"], state["key"]
        self._open()


def _free_bytes(folder: Path, ram: bool) -> int:
    free = shutil.disk_usage(folder).free
    if ram:
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            free = min(free, int(info["MemAvailable"].split()[0]) * 1024)
        except (OSError, KeyError, ValueError):
            pass
    return free


def build(path: Path, key: str, store: LabelStore, img_size: int, augment: bool, workers: int) -> None:
    """Decode and resize every image of ``store`` into ``path`` (atomically; see the module doc)."""
    n = len(store)
    hw = planned_sizes(store.shapes, img_size)
    sizes = hw[:, 0] * hw[:, 1] * 3
    index = {"offsets": (n,), "hw": (n, 2), "hw0": (n, 2), "ok": (n,)}
    dtypes = {"offsets": "<i8", "hw": "<i4", "hw0": "<i4", "ok": "|u1"}
    header_guess = 512 + 64 * len(index)  # room reserved for the JSON header, checked below
    layout, pos = {}, _align(_PREFIX.size + header_guess, 64)
    for name, shape in index.items():
        layout[name] = {"dtype": dtypes[name], "shape": list(shape), "offset": pos}
        pos = _align(pos + int(np.prod(shape)) * np.dtype(dtypes[name]).itemsize, 64)
    data_start = _align(pos, _PAGE)
    offsets = data_start + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    total = int(data_start + sizes.sum())
    header = json.dumps({"key": key, "size": total, "pixels": int(sizes.sum()), "arrays": layout}).encode()
    if len(header) > header_guess:
        raise RuntimeError("image cache header larger than planned")

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.ftruncate(fd, total)
        with mmap.mmap(fd, total) as mm:
            hw0 = np.zeros((n, 2), np.int32)
            ok = np.zeros(n, np.uint8)

            def fill(i: int) -> None:
                try:
                    im = imread_bgr(store.im_file(i))
                except ImageReadError as e:
                    LOGGER.warning(f"{e}; not cached, it will be read from disk when needed")
                    return
                hw0[i] = im.shape[:2]
                im = resize_long_side(im, img_size, augment)
                h, w = int(hw[i, 0]), int(hw[i, 1])
                if im.shape[:2] != (h, w):  # the header and the decoder disagree (rare, odd EXIF)
                    im = cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR)
                dst = np.frombuffer(mm, np.uint8, h * w * 3, int(offsets[i])).reshape(h, w, 3)
                dst[...] = im
                ok[i] = 1

            with ThreadPoolExecutor(max(1, workers)) as pool:  # OpenCV decodes without the GIL
                list(pool.map(fill, range(n)))
            mm[:_PREFIX.size] = _PREFIX.pack(MAGIC, VERSION, len(header))
            mm[_PREFIX.size:_PREFIX.size + len(header)] = header
            for name, a in (("offsets", offsets), ("hw", hw.astype(np.int32)), ("hw0", hw0), ("ok", ok)):
                raw = np.ascontiguousarray(a, dtype=dtypes[name]).tobytes()
                start = layout[name]["offset"]
                mm[start:start + len(raw)] = raw
            mm.flush()
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _shm_folder() -> Path:
    return Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(tempfile.gettempdir())


def open_or_build(mode, store: LabelStore, labels_fingerprint: str, img_size: int, augment: bool,
                  disk_path: Path, workers: int, prefix: str = "") -> Optional[ImageCache]:
    """The image cache for ``mode`` ('ram'/True or 'disk'): reuse a valid file, else build one.

    ``disk_path``: the file for 'disk' (named after the split and settings, not the key, so a cache
    made stale by edited files is replaced rather than left beside the new one).  'ram' files are
    named by their key in shared memory.  Returns None (with a warning) when there is not enough
    free memory or disk for it."""
    if mode not in (True, "ram", "disk"):
        raise ValueError(f"cache={mode!r}: use False, True/'ram' or 'disk'")
    ram = mode != "disk"
    key = cache_key(store, labels_fingerprint, img_size, augment)
    path = _shm_folder() / f"yolo_data-{key[:32]}.imgcache" if ram else Path(disk_path)
    folder = path.parent
    try:
        return ImageCache(path, key)
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, struct.error) as e:
        LOGGER.warning(f"{prefix}image cache {path}: {e}; rebuilding it")
    need = int(planned_sizes(store.shapes, img_size).prod(1).sum() * 3)
    free = _free_bytes(folder, ram)
    if need > free * (1 - SAFETY):
        LOGGER.warning(f"{prefix}cache={mode!r} needs {need / 2**30:.1f} GiB but {folder} has "
                       f"{free / 2**30:.1f} GiB free; images will be read from their files")
        return None
    build(path, key, store, img_size, augment, workers)
    if ram:  # shared memory is the machine's RAM: give it back when this job ends
        atexit.register(_unlink_quietly, path)
    LOGGER.info(f"{prefix}cached {len(store)} images ({need / 2**30:.2f} GiB) in {path}")
    return ImageCache(path, key)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
