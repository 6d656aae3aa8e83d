"""Data held in memory or made by the user's code: a small source protocol, read as a label format over
a storage backend of its own, so mosaic, the image caches, class balance, DDP, resume and the same
batches for any worker count work as for files.

A source (:class:`ItemSource`, or :class:`MemorySource` over lists) is handed to ``build_loader``,
``create_dataloader``, ``YoloDataset`` or the Ultralytics plug-in in place of a path.  :func:`entry_of`
names it by a URL, ``memory://<id>``, and everything above storage keeps naming images by strings: item
``i`` is ``memory://<id>/<i>.<ext>`` (``ext``: jpg, png, tif, ... as its bytes are, png for an array).
:class:`MemoryFormat` lists those URLs and reads each item's labels; :class:`MemoryBackend` serves each
item's bytes, so the scan, the decode (channels, keep16, EXIF), the image caches and the device stage
take them as they take a file's.

A decoded array is served as a PNG written at compression 0 (a TIFF for 2 or more than 4 bands): every
path that reads an image then reads it unchanged, at the cost of one encode per read, which a RAM image
cache (``cache='ram'``) pays once.  Handing pixels past the decoder instead would need a second way in
at the scan, the decode, both image caches and the device stage.

The id is the sha256 of the source's ``fingerprint()`` when it has one (the same in every rank and every
run: the label cache and the disk image cache are kept and found again), else ``source-<k>``, the k-th
source named in this process (the same in every rank running the same script); then nothing of the split
is written to disk (no label cache, and ``cache='disk'`` is refused), and a RAM image cache still works.

Processes: forked DataLoader workers inherit the source.  A spawned worker gets it pickled with the
dataset's storage (the backend holds every source it served): a source that cannot be pickled is refused
then with a message naming it.  The scan and the batch prefetch call a source from several threads at
once, so its ``image``, ``labels`` and ``shape`` must not change shared state.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import os
import pickle
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import cv2
import numpy as np
from PIL import Image

from ..storage import Backend, ObjectInfo, StorageOptions, backend_for, text_tag
from .base import LabelError, LabelFormat, SourceOptions, SplitSource
from .labelfile import MAX_CLASS_ID, without_duplicates
from .sources import user_cache_dir

SCHEME = "memory"
CACHE_FOLDER = "memory"  # the per-user cache folder's subfolder of label caches of sources with a fingerprint
_MAGIC = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"II*\x00", "tif"), (b"MM\x00*", "tif"),
          (b"BM", "bmp"))
_HELD_BYTES = 16  # items whose bytes a process keeps: a header walk's ranged reads encode an array once


@runtime_checkable
class ItemSource(Protocol):
    """What yolo_data reads of data held in memory or made by code.

    ``names``: the class names (index = class id).  ``len(source)``: the number of items.  For item ``i``
    (0 <= i < len):

    - ``shape(i)``: its (h, w) in pixels as decoded (EXIF orientation applied), without its pixels; it
      is checked against the pixels when the split is scanned.
    - ``labels(i)``: (n, 5) float32 [class, x, y, w, h], normalised to the image (an empty (0, 5) array:
      a background); or a tuple (labels, segments) with one (k, 2) float32 normalised polygon per row
      (task 'segment'; the 4 corners of a rotated box for 'obb'), or (labels, segments or None,
      keypoints) with keypoints (n, K, 3) float32 [x, y, visibility], x and y normalised (task 'pose').
    - ``image(i)``: its pixels, either encoded bytes (JPEG, PNG, TIFF, BMP, WebP: decoded as files are,
      so ``channels`` and ``keep16`` apply), or a decoded (h, w, C) or (h, w) uint8 or uint16 array,
      channels in OpenCV's order (BGR for C=3, as cv2.imread gives them).

    Optional: ``fingerprint()``, a string that changes whenever the items do; with it the label cache and
    the disk image cache are kept and reused, without it nothing is written to disk.
    """
    names: Sequence[str]

    def __len__(self) -> int: ...

    def shape(self, i: int) -> Tuple[int, int]: ...

    def labels(self, i: int) -> Any: ...

    def image(self, i: int) -> Union[bytes, np.ndarray]: ...


class MemorySource:
    """An :class:`ItemSource` over lists.

    Args:
        images: one per item: encoded bytes, or a (h, w, C) / (h, w) uint8 or uint16 array (BGR for C=3).
        labels: one per item, as ``ItemSource.labels`` returns them ((n, 5) float32 [class, x, y, w, h]
            normalised, or a tuple with segments and keypoints).
        names: the class names.
        shapes: each item's (h, w); default: an array's shape, encoded bytes' header (EXIF applied).
        fingerprint: a string that changes when the data does (see ItemSource); None: nothing on disk.
    """

    def __init__(self, images: Sequence[Union[bytes, np.ndarray]], labels: Sequence[Any], names: Sequence[str],
                 shapes: Optional[Sequence[Tuple[int, int]]] = None, fingerprint: Optional[str] = None):
        if len(images) != len(labels) or shapes is not None and len(shapes) != len(images):
            raise ValueError(f"MemorySource: {len(images)} images, {len(labels)} labels"
                             + (f", {len(shapes)} shapes" if shapes is not None else "") + ": one of each per item")
        self.images, self._labels, self.names = list(images), list(labels), list(names)
        self._shapes = None if shapes is None else [tuple(int(v) for v in s) for s in shapes]
        self._fingerprint = fingerprint

    def __len__(self) -> int:
        return len(self.images)

    def shape(self, i: int) -> Tuple[int, int]:
        if self._shapes is not None:
            return self._shapes[i]
        im = self.images[i]
        return tuple(int(v) for v in im.shape[:2]) if isinstance(im, np.ndarray) else header_shape(im)

    def labels(self, i: int):
        return self._labels[i]

    def image(self, i: int):
        return self.images[i]

    def fingerprint(self) -> Optional[str]:
        """The fingerprint given, or None (then nothing of the split is written to disk)."""
        return self._fingerprint


def header_shape(data: bytes) -> Tuple[int, int]:
    """(h, w) of encoded image bytes from their header, EXIF orientation applied (as OpenCV decodes them)."""
    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
        orientation = im.getexif().get(0x0112) if im.format != "PNG" else None
    return (w, h) if orientation in (5, 6, 7, 8) else (h, w)


def is_source(obj) -> bool:
    """Whether ``obj`` is an in-memory source (not a path, URL or list of them)."""
    if isinstance(obj, (str, bytes, os.PathLike, list, tuple, dict)):
        return False
    return all(hasattr(obj, a) for a in ("__len__", "names", "shape", "labels", "image"))


_named: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_strong: Dict[str, Any] = {}  # sources that cannot be weakly referenced stay here for the process
_ids: Dict[int, str] = {}  # id(source) -> its id, while the source lives
_count = itertools.count()


def _fingerprint_of(source) -> Optional[str]:
    fn = getattr(source, "fingerprint", None)
    value = fn() if callable(fn) else None
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{type(source).__name__}.fingerprint() must return a str or None, got {type(value).__name__}")
    return value


def entry_of(path, hold: bool = False):
    """The split entry of ``path``: ``memory://<id>`` for an in-memory source (named here once, see the
    module's docstring), ``path`` itself for anything else.

    Args:
        path: a source (ItemSource), or a path, URL, list of them or dataset yaml.
        hold: keep the source for the life of the process (a source named by a string that outlives the
            call, as Ultralytics' ``data=`` is); by default it is named while something holds it.

    Returns:
        A string URL for a source, else ``path`` unchanged.
    """
    if not is_source(path):
        return path
    known = _ids.get(id(path))
    if known is not None and _lookup(known) is path:
        if hold:
            _strong[known] = path
        return f"{SCHEME}://{known}"
    fp = _fingerprint_of(path)
    sid = "fp-" + hashlib.sha256(fp.encode()).hexdigest()[:20] if fp is not None else f"source-{next(_count)}"
    try:
        _named[sid] = path
        weakref.finalize(path, _ids.pop, id(path), None)  # its id() may be another object's later
    except TypeError:  # no weak reference to it: kept for the process
        hold = True
    if hold:
        _strong[sid] = path
    _ids[id(path)] = sid
    return f"{SCHEME}://{sid}"


def _lookup(sid: str):
    found = _named.get(sid)
    return _strong.get(sid) if found is None else found


def _split_url(url: str) -> Tuple[str, Optional[int]]:
    """(source id, item index or None) of ``memory://<id>[/<i>.<ext>]``."""
    rest = url[len(SCHEME) + 3:]
    sid, _, key = rest.partition("/")
    if not key:
        return sid, None
    stem = key.partition(".")[0]
    if not stem.isdigit():
        raise FileNotFoundError(2, "not an item of an in-memory source", url)
    return sid, int(stem)


class MemoryBackend(Backend):
    """The ``memory://`` storage backend: item ``i``'s bytes as its source gives them (an array encoded,
    see the module's docstring).  Holds each source it served, so that a spawned DataLoader worker gets it
    with the dataset's storage; the size of an item is its encoded length; the tag is the source's
    fingerprint's (0 without one)."""

    concurrency = 4

    def __init__(self, options: Optional[StorageOptions] = None):
        self.sources: Dict[str, Any] = {}
        self._reset()

    def _reset(self) -> None:
        self._pid, self._lock, self._held = os.getpid(), threading.Lock(), OrderedDict()

    def source(self, url: str):
        """The source ``url`` names.  Raises FileNotFoundError when no source of that id is known here."""
        sid, _ = _split_url(url)
        src = self.sources.get(sid)
        if src is None:
            src = _lookup(sid)
            if src is None:
                raise FileNotFoundError(2, "no in-memory source of this id in this process (pass the source "
                                        "object itself to build_loader / create_dataloader)", url)
            self.sources[sid] = src
        return src

    def item_bytes(self, url: str) -> bytes:
        """Item ``url``'s encoded bytes (kept for the next few reads of the same item)."""
        if self._pid != os.getpid():  # a forked worker: a lock another thread held at the fork stays held
            self._reset()
        with self._lock:
            data = self._held.get(url)
        if data is None:
            sid, i = _split_url(url)
            src = self.source(url)
            if i is None or not 0 <= i < len(src):
                raise FileNotFoundError(2, f"no item {i} in a source of {len(src)}", url)
            try:
                data = encoded(src.image(i), f"item {i} of {type(src).__name__}")
            except ValueError as e:  # an item that cannot be read, as a file that cannot be: an OSError
                raise OSError(str(e)) from None
            with self._lock:
                self._held[url] = data
                while len(self._held) > _HELD_BYTES:
                    self._held.popitem(last=False)
        return data

    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        data = self.item_bytes(url)
        return data[start:start + length] if length > 0 else data[start:]

    def stat(self, url: str) -> Optional[ObjectInfo]:
        try:
            data = self.item_bytes(url)
        except FileNotFoundError:
            return None
        fp = _fingerprint_of(self.source(url))
        return ObjectInfo(url, len(data), 0 if fp is None else text_tag(fp))

    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        """Every item of the source ``url`` names (a part of a split, ``fraction``, is its first items)."""
        src = self.source(url)
        return [ObjectInfo(u, 0, 0) for u in item_urls(url, src)]

    def __getstate__(self):
        # tried here first, so that a source which cannot be pickled is named (the worker's pickler
        # would only say which attribute of which object failed)
        try:
            pickle.dumps(self.sources)
        except Exception as e:
            names = ", ".join(f"{sid} ({type(s).__name__})" for sid, s in self.sources.items())
            raise TypeError(f"the in-memory source {names} cannot be pickled into a spawned DataLoader worker "
                            f"({type(e).__name__}: {e}); use workers=0, the 'fork' start method (Linux's "
                            "default), or make the source picklable") from None
        return {"sources": dict(self.sources)}

    def __setstate__(self, state) -> None:
        self.sources = state["sources"]
        self._reset()


def _suffix(data: bytes) -> str:
    for magic, ext in _MAGIC:
        if data.startswith(magic):
            return ext
    return "webp" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else "bin"


def encoded(image, what: str) -> bytes:
    """Encoded bytes of ``image`` (bytes as they are; an array as PNG at compression 0, TIFF for 2 or
    more than 4 bands).  Raises ValueError naming ``what`` for anything else."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{what}: image() must return encoded bytes or a numpy array, got {type(image).__name__}")
    if image.dtype not in (np.uint8, np.uint16) or image.ndim not in (2, 3) or min(image.shape[:2]) < 1:
        raise ValueError(f"{what}: a pixel array must be (h, w) or (h, w, C) uint8 or uint16, got "
                         f"{image.shape} {image.dtype}")
    bands = 1 if image.ndim == 2 else image.shape[2]
    ext, params = (".png", [cv2.IMWRITE_PNG_COMPRESSION, 0]) if bands in (1, 3, 4) else (".tiff", [])
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(image), params)
    if not ok:
        raise ValueError(f"{what}: OpenCV cannot encode a {image.shape} {image.dtype} array")
    return buf.tobytes()


def item_urls(entry: str, source) -> List[str]:
    """``memory://<id>/<i>.<ext>`` of each item, ``i`` zero-padded so that the names sort as the items
    (``ext`` as its bytes are: a start asks each item's image once here; png or tif for an array, whose
    bytes are not made)."""
    urls, width = [], len(str(max(len(source) - 1, 0)))
    for i in range(len(source)):
        im = source.image(i)
        if isinstance(im, np.ndarray):
            ext = "tif" if im.ndim == 3 and im.shape[2] not in (1, 3, 4) else "png"
        else:
            ext = _suffix(bytes(im[:16])) if isinstance(im, (bytes, bytearray, memoryview)) else "bin"
        urls.append(f"{entry.rstrip('/')}/{i:0{width}d}.{ext}")
    return urls


def _checked_rows(labels, nc: Optional[int]) -> np.ndarray:
    """``labels`` checked to be (n, 5) float32 [class, x, y, w, h]; raises LabelError saying what is wrong."""
    if not isinstance(labels, np.ndarray) or labels.dtype != np.float32 or labels.ndim != 2 or labels.shape[1] != 5:
        got = f"{labels.shape} {labels.dtype}" if isinstance(labels, np.ndarray) else type(labels).__name__
        raise LabelError(f"labels must be an (n, 5) float32 array [class, x, y, w, h], got {got}")
    if not np.isfinite(labels).all():
        raise LabelError("labels hold a value that is not finite")
    cls = labels[:, 0]
    top = MAX_CLASS_ID if nc is None else nc
    if ((cls != np.round(cls)) | (cls < 0) | (cls >= top)).any():
        raise LabelError(f"class ids must be whole numbers in [0, {top}), got {sorted(set(cls.tolist()))}")
    if ((labels[:, 1:] < 0) | (labels[:, 1:] > 1)).any():
        raise LabelError("box coordinates must be normalised to [0, 1]")
    return labels


class MemoryReader:
    """formats.base.LabelReader of a source: ``label`` is the item's URL; its labels are the source's,
    checked, and its declared shape is checked against the scan's (h, w) of its pixels."""

    def __init__(self, nc: Optional[int]):
        self.nc = nc

    def read(self, label: str, shape: Tuple[int, int]):
        src, i = backend_for(label).source(label), _split_url(label)[1]
        declared = tuple(int(v) for v in src.shape(i))
        if declared != tuple(shape):
            raise LabelError(f"shape({i}) is {declared} (h, w) but its pixels are {tuple(shape)}")
        got = src.labels(i)
        rows, segments, keypoints = (got, None, None) if not isinstance(got, tuple) else (tuple(got) + (None, None))[:3]
        rows = _checked_rows(rows, self.nc)
        warnings: List[str] = []
        if segments is not None:
            segments = [np.asarray(s, np.float32).reshape(-1, 2) for s in segments]
            if len(segments) != len(rows):
                raise LabelError(f"{len(segments)} segments for {len(rows)} label rows: one (k, 2) array per row")
        status = "ok" if len(rows) else "empty"
        if keypoints is not None:
            keypoints = np.asarray(keypoints, np.float32)
            if keypoints.ndim != 3 or len(keypoints) != len(rows) or keypoints.shape[2] not in (2, 3):
                raise LabelError(f"keypoints must be (n, K, 3) float32 for {len(rows)} rows, got {keypoints.shape}")
            return rows, segments, status, warnings, keypoints
        return (*without_duplicates(rows, segments, warnings), status, warnings)

    def describe(self, label: str) -> str:
        return f"{label} (labels of item {_split_url(label)[1]})"


class MemoryFormat(LabelFormat):
    """The label format of ``memory://<id>`` entries (see the module's docstring).  The fingerprint
    covers the source's fingerprint (each item's tag) and each item's encoded size."""
    name = "memory"
    cuts_by_files = True  # a fraction of a split: its first items (the backend lists them)
    tasks = ("detect", "segment", "pose", "obb")

    def claims(self, entry: Path) -> bool:
        return str(entry).startswith(f"{SCHEME}:/")  # (a Path folds the URL's //)

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        entry = str(entries[0]).split("/")[2]  # memory://<id>[/<item>]: the source's id
        if any(str(e).split("/")[2] != entry for e in entries):
            raise ValueError(f"a split reads one in-memory source, got several: {entries[:3]}")
        entry = f"{SCHEME}://{entry}"
        src = backend_for(entry).source(entry)
        names = list(options.names) if options.names else [str(n) for n in src.names]
        fp = _fingerprint_of(src)
        sid = _split_url(entry)[0]
        settings = {"format": self.name, "source": sid, "fingerprint": fp,
                    **({"nonce": f"{os.getpid()}-{id(src)}"} if fp is None else {})}
        whole = len(entries) == 1 and _split_url(str(entries[0]))[1] is None
        im_files = item_urls(entry, src) if whole else [str(e) for e in entries]  # all items, or those listed
        return SplitSource(self.name, im_files, im_files, None, MemoryReader(len(names) or options.nc), names,
                           settings, user_cache_dir() / CACHE_FOLDER / f"{sid}.yolo_data.cache", str,
                           nc=len(names) or options.nc, kept_on_disk=fp is not None)

    def annotation_file_of(self, first_label_file: Optional[str]):
        return str


FORMAT = MemoryFormat()
