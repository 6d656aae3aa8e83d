"""Decoded, resized images of a split in one :mod:`~yolo_data.storage.container` file of kind ``images``.

``cache='ram'``: a file *without a name* (``O_TMPFILE``, mode 0600) in the shared-memory folder
(``$YOLO_DATA_SHM_DIR``, else /dev/shm).  Local rank 0 decodes each image once, inside
``torch_distributed_zero_first``, and publishes the file's descriptor in the process group's store; the
other local ranks open it through ``/proc/<pid>/fd/<fd>`` and every DataLoader worker inherits or reopens
it the same way.  One copy per node, and since it never has a name, no other user can open or plant it,
and the kernel frees it when the last process holding it ends, however that happens (exit, exception,
SIGTERM, SIGKILL): no signal handler and no clean-up pass are needed.  Linux only (``/proc``).

``cache='disk'``: a named file, found like the label cache: in ``cache_dir`` when given, else beside
the labels (``labels/train-images-640.imgcache``, ``train-images-640-linear.imgcache`` for a linear
resize), else the per-user cache folder (a read-only dataset).  Reused across runs; checked, and
rebuilt when damaged or made for other images or settings.

Space is reserved before any pixel is written (``posix_fallocate``), after leaving room for the
DataLoader's shared-memory batches: a full /dev/shm or disk gives a message naming the size needed and
the free space, never a SIGBUS.  When not every image fits, the first ones that do are cached and the
rest are read from their files.

Arrays of the file (n images): ``offsets`` int64 (n,) byte offset of each image in the payload (-1: not
cached), ``hw`` int32 (n, 2) resized [h, w], ``hw0`` int32 (n, 2) decoded [h, w], ``ok`` uint8 (n,)
whether the image was decoded.  The payload holds the (h, w, C) uint8 pixels back to back (C = 3: BGR;
the dataset's ``channels``, in the file's meta), uint16 for a dataset whose 16 bits are kept (``bits``
16 in the meta, in the key and in a disk cache's name, so a cache of 8 bits is never read as 16).  The
offsets and sizes are not taken on trust: they must equal the layout planned from the label store, so a
damaged or crafted index can neither move an image nor read outside the file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import cv2
import numpy as np

from .. import distributed
from ..formats.sources import cache_stem
from ..images.load import ImageReadError, load_image, resize_bands
from ..labels.store import LabelStore
from ..runtime import room
from ..storage import carried, container
from ..storage.container import CacheError, NoSpaceError

LOGGER = logging.getLogger("yolo_data")
KIND = "images"
VERSION = 2
SAFETY = 0.1  # keep this share of free RAM or disk untouched
SHM_DIR_ENV = "YOLO_DATA_SHM_DIR"


@dataclass(frozen=True)
class ImageCacheSpec:
    """What to cache and where.  ``mode``: 'ram' or 'disk'.  ``disk_files``: candidate files for
    'disk', in order (see :func:`disk_candidates`).  ``ram_dir``: folder of the RAM cache (None:
    :func:`shm_dir`).  ``reserve_bytes``: room to leave free for the DataLoader's shared-memory
    batches.  ``linear``: resize with linear interpolation also when shrinking (else area, as YOLOv5's
    evaluation), as in ``images.load.resize_long_side``; ``reduced``: JPEGs decoded at a reduced scale where
    they shrink 2x or more (``images.load.load_image``); ``capped``: no resized side above ``img_size``
    (``images.load.target_size``); ``channels``: the bands of each image (images.bands); ``keep16``:
    16-bit images kept as uint16 (2 bytes a sample)."""
    mode: str
    img_size: int
    linear: bool
    disk_files: Tuple[Path, ...] = ()
    ram_dir: Optional[Path] = None
    reserve_bytes: int = 0
    workers: int = 8
    prefix: str = ""
    reduced: bool = False
    capped: bool = False
    channels: int = 3
    keep16: bool = False

    @property
    def sample_bytes(self) -> int:
        return 2 if self.keep16 else 1


def shm_dir() -> Path:
    """$YOLO_DATA_SHM_DIR (read now), else /dev/shm."""
    return Path(os.environ.get(SHM_DIR_ENV) or "/dev/shm")


def normalise_mode(mode) -> str:
    if mode is True or mode == "ram":
        return "ram"
    if mode == "disk":
        return "disk"
    raise ValueError(f"cache={mode!r}: use False, True/'ram' or 'disk'")


def disk_candidates(default_labels_cache: Path, img_size: int, linear: bool, rect: bool, cache_dir,
                    user_dir: Path, reduced: bool = False, capped: bool = False, channels: int = 3,
                    keep16: bool = False) -> Tuple[Path, ...]:
    """The disk image cache's files, in the label cache's order: only ``cache_dir`` when given, else
    beside the labels, then the per-user folder.  Named after the split and the settings
    (``train2017-images-640-linear.imgcache`` for a linear resize); in a shared folder also after the
    split's full path, so two datasets never share a name."""
    from ..labels.cache import folder_cache_file
    d = Path(default_labels_cache)
    flags = (("-linear", linear), ("-rect", rect), ("-reduced", reduced), ("-capped", capped), ("-16", keep16))
    settings = f"{img_size}" + "".join(name for name, on in flags if on) + (f"-c{channels}" if channels != 3 else "")
    beside = d.with_name(f"{cache_stem(d)}-images-{settings}.imgcache")  # labels/train2017-images-640.imgcache
    shared = [folder_cache_file(beside, Path(f), ".imgcache") for f in ([cache_dir] if cache_dir else [user_dir])]
    return tuple(shared) if cache_dir else (beside, *shared)


def cache_key(store: LabelStore, labels_fingerprint: str, img_size: int, linear: bool, reduced: bool = False,
              capped: bool = False, channels: int = 3, keep16: bool = False) -> str:
    """What the cached pixels depend on: the image files (through the label cache's fingerprint of
    their sizes and times), their order, the target size, the interpolation (``linear``), whether
    JPEGs were decoded at a reduced scale, whether sizes were capped, the bands read and their depth."""
    h = hashlib.sha256(f"{VERSION}|{labels_fingerprint}|{img_size}|{bool(linear)}|{'reduced|' if reduced else ''}"
                       f"{'capped|' if capped else ''}{f'channels {channels}|' if channels != 3 else ''}"
                       f"{'bits 16|' if keep16 else ''}".encode())
    h.update(store.path_bytes.tobytes())
    h.update(store.path_offsets.tobytes())
    return h.hexdigest()


def planned_sizes(shapes_hw: np.ndarray, img_size: int, capped: bool = False) -> np.ndarray:
    """(n, 2) int64 [h, w] each image of decoded size ``shapes_hw`` (n, 2) [h, w] will have after
    ``resize_long_side`` (sizes rounded up; ``capped``: at most ``img_size``), as ``images.load.target_size``
    computes it one image at a time."""
    h0, w0 = shapes_hw[:, 0].astype(np.int64), shapes_hw[:, 1].astype(np.int64)
    r = img_size / np.maximum(h0, w0)
    h = np.where(r == 1, h0, np.ceil(h0 * r)).astype(np.int64)
    w = np.where(r == 1, w0, np.ceil(w0 * r)).astype(np.int64)
    hw = np.stack([h, w], 1)
    return np.where((r != 1)[:, None], np.minimum(hw, img_size), hw) if capped else hw


def planned_offsets(hw: np.ndarray, count: int, channels: int = 3, sample_bytes: int = 1) -> Tuple[np.ndarray, int]:
    """(offsets int64 (n,), payload bytes) when the first ``count`` images of ``channels`` bands of
    ``sample_bytes`` each (1: uint8, 2: uint16) get a slot (-1: none)."""
    sizes = hw[:, 0] * hw[:, 1] * channels * sample_bytes
    offsets = np.full(len(hw), -1, np.int64)
    ends = np.cumsum(sizes[:count])
    offsets[:count] = ends - sizes[:count]
    return offsets, int(ends[-1]) if count else 0


class ImageCache:
    """Read-only access to a built image cache (memory-mapped).  ``fd`` stays open for as long as the
    object lives: spawned DataLoader workers reopen the file through it (a RAM cache has no name)."""

    def __init__(self, fd: int, key: str, planned_hw: Optional[np.ndarray] = None, path: Optional[Path] = None):
        self.fd, self.key, self.path = fd, key, path
        c = container.read(fd, KIND)
        self._mm, self._payload, self._st = c.mm, c.payload, c.st
        a = c.arrays
        try:
            self.offsets, self.hw, self.hw0, self.ok = a["offsets"], a["hw"], a["hw0"], a["ok"]
            if c.meta.get("key") != key:
                raise CacheError("made for other images or settings")
        except KeyError as e:
            raise CacheError(f"index array {e} missing") from None
        self.count = int(c.meta.get("count", -1))
        self.channels = int(c.meta.get("channels", 3))  # (a cache of 3 bands says nothing)
        self.dtype = np.dtype(np.uint16 if c.meta.get("bits") == 16 else np.uint8)  # (nor one of 8 bits)
        if planned_hw is not None:
            self._check(planned_hw, len(self._payload))
        self.nbytes = len(self._payload)

    def _check(self, planned_hw: np.ndarray, payload_size: int) -> None:
        n = len(planned_hw)
        if not (self.offsets.shape == (n,) and self.hw.shape == (n, 2) and self.hw0.shape == (n, 2)
                and self.ok.shape == (n,) and 0 <= self.count <= n):
            raise CacheError(f"index is not for {n} images")
        offsets, size = planned_offsets(planned_hw, self.count, self.channels, self.dtype.itemsize)
        if (not np.array_equal(self.hw, planned_hw) or not np.array_equal(self.offsets, offsets)
                or size != payload_size):
            raise CacheError("image offsets or sizes do not match the images' layout: damaged index")
        if self.ok.max(initial=0) > 1 or self.ok[self.count:].any() or (self.hw0[self.ok == 1] < 1).any():
            raise CacheError("inconsistent image flags or sizes")

    @property
    def anonymous(self) -> bool:
        return self._st.st_nlink == 0

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, i: int) -> Optional[Tuple[np.ndarray, Tuple[int, int], Tuple[int, int]]]:
        """(img (h, w, C) uint8 (or uint16) read-only view (C = 3: BGR), (h0, w0), (h, w)), or None when image ``i``
        is not cached (unreadable when the cache was built, or beyond what fitted)."""
        if not self.ok[i]:
            return None
        h, w = int(self.hw[i, 0]), int(self.hw[i, 1])
        c = self.channels
        img = np.frombuffer(self._payload, self.dtype, h * w * c, int(self.offsets[i])).reshape(h, w, c)
        return img, (int(self.hw0[i, 0]), int(self.hw0[i, 1])), (h, w)

    # Spawned DataLoader workers reopen the same file (same device and inode) through this process.
    def __getstate__(self):
        return {"proc": f"/proc/{os.getpid()}/fd/{self.fd}", "path": self.path, "key": self.key,
                "id": (self._st.st_dev, self._st.st_ino)}

    def __setstate__(self, state):
        try:
            fd = _open_same(state["proc"], state["id"])
        except OSError:  # no /proc (not Linux): a disk cache still has its name
            if state["path"] is None:
                raise
            fd = _open_same(state["path"], state["id"])
        self.__init__(fd, state["key"], None, state["path"])

    def __del__(self):
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd is not None and fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _open_same(proc_path: str, ident) -> int:
    """Open a file another process of this job holds, checking it is the same file and ours."""
    fd = os.open(proc_path, os.O_RDONLY | os.O_CLOEXEC)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != tuple(ident) or st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CacheError(f"{proc_path} is not the image cache it should be")
    return fd


# -- how much fits ---------------------------------------------------------------------------------
def _fitting(hw: np.ndarray, budget: int, pixel_bytes: int = 3) -> int:
    """How many leading images of ``pixel_bytes`` bytes a pixel fit in ``budget`` bytes."""
    return int(np.searchsorted(np.cumsum(hw[:, 0] * hw[:, 1] * pixel_bytes), budget, side="right"))


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# -- building ---------------------------------------------------------------------------------------
def _fill(payload: memoryview, store: LabelStore, hw: np.ndarray, offsets: np.ndarray, count: int,
          spec: ImageCacheSpec) -> Tuple[np.ndarray, np.ndarray]:
    """Decode and resize the first ``count`` images into ``payload``; returns (hw0, ok)."""
    n = len(store)
    hw0 = np.zeros((n, 2), np.int32)
    ok = np.zeros(n, np.uint8)

    def one(i: int) -> None:
        h_scan, w_scan = store.shapes_hw[i]
        try:  # as ImageSource reads a file, so cached and uncached pixels are the same
            li = load_image(store.im_file(i), spec.img_size, spec.linear, (int(h_scan), int(w_scan)), spec.reduced,
                            spec.capped, None, spec.channels, spec.keep16)
        except ImageReadError as e:
            LOGGER.warning(f"{spec.prefix}{e}; not cached, it will be read from its file when needed")
            return
        hw0[i] = li.hw0
        im = li.img
        h, w = int(hw[i, 0]), int(hw[i, 1])
        if im.shape[:2] != (h, w):  # the header and the decoder disagree (rare, odd EXIF)
            im = resize_bands(im, (w, h), cv2.INTER_LINEAR)  # OpenCV's order: (width, height)
        c = spec.channels
        np.frombuffer(payload, im.dtype, h * w * c, int(offsets[i])).reshape(h, w, c)[...] = im
        ok[i] = 1

    with ThreadPoolExecutor(max(1, spec.workers)) as pool:  # OpenCV decodes without the GIL
        list(pool.map(carried(one), range(count)))  # images at URLs: through the dataset's storage
    return hw0, ok


def reserve_file(hw: np.ndarray, key: str, count: int, path: Optional[Path] = None,
                 anonymous_in: Optional[Path] = None, channels: int = 3, keep16: bool = False) -> container.NewFile:
    """A new cache file for the first ``count`` of the images of planned sizes ``hw`` (n, 2) and
    ``channels`` bands (of 16 bits with ``keep16``), its whole size reserved: named (``path``, written
    atomically) or anonymous (in ``anonymous_in``).  Raises OSError (NoSpaceError: no room)."""
    _, size = planned_offsets(hw, count, channels, 2 if keep16 else 1)
    n = len(hw)
    meta = {"version": VERSION, "key": key, "count": int(count), **({"channels": channels} if channels != 3 else {}),
            **({"bits": 16} if keep16 else {})}
    layout = container.plan(KIND, meta,
                            {"offsets": ("<i8", (n,)), "hw": ("<i4", (n, 2)), "hw0": ("<i4", (n, 2)),
                             "ok": ("|u1", (n,))}, size)
    # decoded pixels are the dataset's content: readable by their owner only, named or not
    return container.NewFile(layout, path=path, anonymous_in=anonymous_in, mode=0o600)


def write_images(f: container.NewFile, store: LabelStore, spec: ImageCacheSpec, hw: np.ndarray) -> int:
    """Decode the images into a reserved file and commit it; returns a read-only descriptor of it."""
    count = int(f.layout.meta["count"])
    offsets, size = planned_offsets(hw, count, spec.channels, spec.sample_bytes)
    with f:
        hw0, ok = _fill(f.payload() if size else memoryview(b""), store, hw, offsets, count, spec)
        fd = f.commit({"offsets": offsets, "hw": hw, "hw0": hw0, "ok": ok})
    if f.path is not None:  # reopen read-only: the write descriptor is not what workers should inherit
        os.close(fd)
        fd = container.open_regular(f.path)
    return fd


def _plan_count(hw: np.ndarray, folder: Path, spec: ImageCacheSpec, ram: bool) -> Tuple[int, str]:
    """How many images to cache in ``folder`` now, and a message when that is not all of them."""
    need = int((hw[:, 0] * hw[:, 1] * spec.channels * spec.sample_bytes).sum())
    free = room.free_bytes(folder, ram)
    budget = int(free * (1 - SAFETY)) - spec.reserve_bytes
    count = min(len(hw), _fitting(hw, max(budget, 0), spec.channels * spec.sample_bytes))
    if count == len(hw):
        return count, ""
    reserve = (f" after leaving {_gib(spec.reserve_bytes)} for the DataLoader's shared-memory batches"
               if spec.reserve_bytes else "")
    what = (f"cached {count:,} of {len(hw):,} images, the rest are read from their files" if count
            else "no image cached, images are read from their files")
    return count, (f"{spec.prefix}cache={spec.mode!r} needs {_gib(need)} but {folder} has {_gib(free)} free"
                   f"{reserve}: {what}")


def _build_with_room(store: LabelStore, key: str, spec: ImageCacheSpec, hw: np.ndarray, folder: Path, ram: bool,
                     path: Optional[Path] = None) -> Optional[int]:
    """Build as much of the cache as fits; None (with a warning) when nothing fits.  Planning and
    reserving happen under :func:`room.planning_lock`; decoding after it is released.  If the room is gone
    anyway before it is reserved (another program took it), plan once more with what is left.
    ``hw``: (n, 2) planned sizes of the images (``planned_sizes``)."""
    for attempt in range(2):
        with room.planning_lock(folder):
            count, message = _plan_count(hw, folder, spec, ram)
            if message:
                LOGGER.warning(message)
            if not count:
                return None
            try:
                f = reserve_file(hw, key, count, path=path, anonymous_in=folder if ram else None,
                                 channels=spec.channels, keep16=spec.keep16)
            except NoSpaceError as e:
                LOGGER.warning(f"{spec.prefix}image cache in {folder}: could not reserve the space ({e})"
                               + ("; planning again with the room left" if attempt == 0 else
                                  "; images will be read from their files"))
                continue
        return write_images(f, store, spec, hw)
    return None


# -- RAM --------------------------------------------------------------------------------------------
def _make_ram(store: LabelStore, key: str, spec: ImageCacheSpec, hw: np.ndarray, made: dict) -> str:
    """Build the anonymous RAM cache (its descriptor goes into ``made['fd']``); the JSON handle other
    local ranks open it by, or 'none: why'."""
    folder = spec.ram_dir or shm_dir()
    if not os.path.isdir(f"/proc/{os.getpid()}/fd"):
        return "none: cache='ram' needs Linux (/proc); use cache='disk'"
    if not folder.is_dir():
        return f"none: {folder} does not exist; set ${SHM_DIR_ENV} to a RAM-backed folder"
    try:
        fd = _build_with_room(store, key, spec, hw, folder, ram=True)
    except OSError as e:  # e.g. O_TMPFILE refused by the folder's filesystem
        return f"none: cannot create the RAM image cache in {folder} ({e.strerror or e})"
    if fd is None:
        return "none: not enough room"
    st = os.fstat(fd)
    made["fd"] = fd
    return json.dumps({"pid": os.getpid(), "fd": fd, "id": [st.st_dev, st.st_ino]})


def _open_ram(store: LabelStore, key: str, spec: ImageCacheSpec, planned_hw: np.ndarray) -> Optional[ImageCache]:
    tag = f"imgcache-{key[:16]}"
    made = {}
    handle, built_here = distributed.share_from_local_rank_0(tag, lambda: _make_ram(store, key, spec, planned_hw, made))
    if handle.startswith("none: "):
        if handle != "none: not enough room":  # that one was already explained
            LOGGER.warning(f"{spec.prefix}{handle[6:]}; images will be read from their files")
        return None
    h = json.loads(handle)
    try:
        if built_here:
            fd = made["fd"]
        else:
            fd = _open_same(f"/proc/{h['pid']}/fd/{h['fd']}", h["id"])
        cache = ImageCache(fd, key, planned_hw)
    except (OSError, CacheError) as e:
        LOGGER.warning(f"{spec.prefix}cannot open local rank 0's RAM image cache ({e}); "
                       "images will be read from their files")
        return None
    if built_here:
        LOGGER.info(f"{spec.prefix}cached {int(cache.ok.sum()):,} images ({_gib(cache.nbytes)}) in RAM "
                    f"(a file without a name in {spec.ram_dir or shm_dir()}, freed when the job ends)")
    return cache


# -- disk -------------------------------------------------------------------------------------------
def _open_disk(store: LabelStore, key: str, spec: ImageCacheSpec, planned_hw: np.ndarray) -> Optional[ImageCache]:
    for path in spec.disk_files:  # reuse the first valid one
        try:
            fd = container.open_regular(path)
        except FileNotFoundError:
            continue
        except (OSError, CacheError) as e:
            LOGGER.warning(f"{spec.prefix}image cache {path}: {getattr(e, 'strerror', None) or e}; not used")
            continue
        try:
            container.check_trust(path, os.fstat(fd))
            cache = ImageCache(fd, key, planned_hw, path)
            container.remove_stale_temps(path)
            return cache
        except CacheError as e:
            os.close(fd)
            LOGGER.warning(f"{spec.prefix}image cache {path}: {e}; rebuilding it")
    for i, path in enumerate(spec.disk_files):  # build in the first place that takes it
        try:
            if i > 0 or len(spec.disk_files) == 1:  # never create folders inside the user's dataset
                path.parent.mkdir(parents=True, exist_ok=True)
            fd = _build_with_room(store, key, spec, planned_hw, path.parent, ram=False, path=path)
            if fd is None:
                return None
            try:
                cache = ImageCache(fd, key, planned_hw, path)
            except BaseException:
                os.close(fd)
                raise
            LOGGER.info(f"{spec.prefix}cached {int(cache.ok.sum()):,} images ({_gib(cache.nbytes)}) in {path}")
            return cache
        except (OSError, CacheError) as e:
            nxt = spec.disk_files[i + 1] if i + 1 < len(spec.disk_files) else None
            LOGGER.warning(f"{spec.prefix}cannot write image cache {path} ({getattr(e, 'strerror', None) or e})"
                           + (f"; using {nxt} instead" if nxt else "; images will be read from their files"))
    return None


def open_or_build(spec: ImageCacheSpec, store: LabelStore, labels_fingerprint: str) -> Optional[ImageCache]:
    """The image cache of ``store`` as ``spec`` asks: reuse a valid one, else build one.  Returns None
    (with a warning saying why) when none can be had; the images are then read from their files."""
    key = cache_key(store, labels_fingerprint, spec.img_size, spec.linear, spec.reduced, spec.capped, spec.channels,
                    spec.keep16)
    planned_hw = planned_sizes(store.shapes_hw, spec.img_size, spec.capped)
    if normalise_mode(spec.mode) == "ram":
        return _open_ram(store, key, spec, planned_hw)
    return _open_disk(store, key, spec, planned_hw)
