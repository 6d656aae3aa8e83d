"""Decode an image and resize it so its long side is ``img_size`` (YOLOv5's ``load_image``).

A JPEG that will be shrunk at least 2x can be decoded at 1/2, 1/4 or 1/8 scale by libjpeg itself
(``reduced``): the decoder skips most of its work, and the result is resized to exactly the size the
full decode would give, so shapes, ``hw0`` and normalised boxes are unchanged; only the pixels differ a
little (libjpeg's scaled IDCT is a box filter of the same 8x8 blocks).  Training uses it by default;
evaluation keeps YOLOv5's pixels unless asked.

Images of any number of channels (bands.py) are resized as colour ones: OpenCV resizes up to 4 channels
in one call, and any number below 512 with linear interpolation (as Ultralytics resizes its N-band
images, whose pixels this keeps); its area interpolation refuses more than 4 channels at a scale that is
not a whole number, so an image of more than 4 channels is resized there 4 channels at a time.  Each
channel of a resize is computed on its own, except that an exact 2x linear shrink of more than 4
channels rounds differently from one of 4 (by at most 1): a whole call keeps Ultralytics' pixels.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from ..storage import Storage, current_storage, is_url
from .decode import JPEG_SUFFIXES, REDUCED_FLAGS, ImageDecodeError, ImageReadError, imread_bgr  # noqa: F401
from .decode import JPEG_SIGNATURE, TIFF_SUFFIXES, exif_orientation, read_whole, simplejpeg_module
from .bands import imread_bands


@dataclass
class LoadedImage:
    """``img``: (h, w, C) uint8 (uint16 when 16 bits are kept; BGR when C = 3), resized.  ``hw0``: (h0, w0) as decoded.  ``hw``: (h, w) after resize."""
    img: np.ndarray
    hw0: Tuple[int, int]
    hw: Tuple[int, int]


@dataclass
class EncodedImage:
    """A JPEG for a device to decode (yolo_data.device), with what the CPU path would do with it:
    ``data`` uint8 (n,) the file's bytes; ``orientation`` its EXIF orientation (1..8: the decoded pixels
    are turned upright by it); ``hw0`` (h0, w0) upright as decoded; ``hw`` (h, w) after the resize to
    long side img_size; ``factor`` the reduced decode the CPU path makes (1, 2, 4 or 8: the decoded
    image is averaged over f x f blocks first, as libjpeg's scaled decode does); ``linear``: bilinear
    when shrinking (else area)."""
    path: str
    data: Optional[np.ndarray]
    orientation: int
    hw0: Tuple[int, int]
    hw: Tuple[int, int]
    factor: int
    linear: bool
    span: Optional[Tuple[int, int]] = None  # [start, end) of the bytes in a batch's blob (device.plan), data None


@dataclass(frozen=True)
class CachedImage:
    """Image ``index`` of the image cache (items.imagecache), which every process of the node maps:
    the device stage reads its pixels there instead of having them sent.  ``hw0``, ``hw``: as LoadedImage's."""
    index: int
    hw0: Tuple[int, int]
    hw: Tuple[int, int]


def reduction(hw0: Tuple[int, int], img_size: int) -> int:
    """The largest f of 8, 4, 2 for which a 1/f decode of an (h0, w0) image is still at least as large
    as the resize target (long side >= img_size * f), else 1: the resize after it then only shrinks."""
    long0 = max(hw0)
    return next((f for f in (8, 4, 2) if long0 >= img_size * f), 1)


def target_size(hw0: Tuple[int, int], img_size: int, capped: bool = False) -> Tuple[int, int]:
    """(h, w) int after ``resize_long_side`` of an (h0, w0) image: each side times r = img_size / max(h0,
    w0), rounded up.  ``capped``: no side above ``img_size`` (Ultralytics' rule).  Without the cap
    (YOLOv5's rule) a long side whose product is not whole in floating point comes out img_size + 1:
    640 / 1050 * 1050 is 640.0000000000001, whose ceil is 641."""
    h0, w0 = hw0
    r = img_size / max(h0, w0)
    if r == 1:
        return h0, w0
    h, w = math.ceil(h0 * r), math.ceil(w0 * r)
    return (min(h, img_size), min(w, img_size)) if capped else (h, w)


def resize_bands(im: np.ndarray, size: Tuple[int, int], interpolation: int) -> np.ndarray:
    """cv2.resize of ``im`` (h0, w0) or (h0, w0, C), any C, uint8 or uint16, to ``size`` (w, h), OpenCV's
    order; the result keeps ``im``'s number of dimensions (cv2.resize drops a last axis of 1).  See the
    module docstring for C above 4."""
    c = im.shape[2] if im.ndim == 3 else 1
    if c <= 4 or c < 512 and interpolation == cv2.INTER_LINEAR:
        out = cv2.resize(im, dsize=size, interpolation=interpolation)
        return out[..., None] if out.ndim < im.ndim else out
    return np.concatenate([resize_bands(im[..., k:k + 4], size, interpolation) for k in range(0, c, 4)], axis=2)


def resize_long_side(im: np.ndarray, img_size: int, linear: bool, capped: bool = False) -> np.ndarray:
    """``im`` (h0, w0, C) scaled to ``target_size`` (long side ``img_size``; ``capped``: see there).
    Interpolation as YOLOv5: linear when enlarging, and when shrinking too with ``linear`` (YOLOv5 does
    for training, Ultralytics always), else area."""
    h0, w0 = im.shape[:2]
    r = img_size / max(h0, w0)
    if r == 1:
        return im
    interp = cv2.INTER_LINEAR if (linear or r > 1) else cv2.INTER_AREA
    h, w = target_size((h0, w0), img_size, capped)
    return resize_bands(im, (w, h), interp)  # OpenCV's dsize: (width, height)


def load_image(path: str, img_size: int, linear: bool, hw0: Optional[Tuple[int, int]] = None,
               reduced: bool = False, capped: bool = False, data: Optional[bytes] = None, channels: int = 3,
               keep16: bool = False) -> LoadedImage:
    """Decode and resize ``path`` (see resize_long_side; ``linear`` picks the interpolation, ``capped``
    the rounding of the size).  ``channels``, ``keep16``: the dataset's channels and whether 16-bit
    samples are kept (bands.imread_bands: ImageBandsError for an image that does not fit them).
    ``reduced`` with ``hw0`` (the (h0, w0) a full decode gives, as the scan recorded it): a JPEG is
    decoded at 1/f scale (see ``reduction``) and resized from there to the same target size; anything
    else, or a scaled decode of another size than libjpeg's ceil(side / f) (not JPEG data after all),
    is decoded in full (a reduced decode is made for 1 and 3 channels, 8 bits).  ``data``: the file's
    bytes, when they were fetched already (from a bucket)."""
    if (reduced and hw0 is not None and channels in (1, 3) and not keep16
            and path.rpartition(".")[2].lower() in JPEG_SUFFIXES):
        f = reduction(hw0, img_size)
        if f > 1:
            im = (imread_bgr(path, REDUCED_FLAGS[f], data) if channels == 3
                  else imread_bands(path, channels, data=data, factor=f))
            if im.shape[:2] == (-(-hw0[0] // f), -(-hw0[1] // f)):
                h, w = target_size(hw0, img_size, capped)
                interp = cv2.INTER_LINEAR if linear else cv2.INTER_AREA  # as resize_long_side when shrinking
                resized = resize_bands(im, (w, h), interp)  # OpenCV's dsize: (width, height)
                return LoadedImage(resized, tuple(hw0), (h, w))
    # a TIFF at 3 channels too goes through imread_bands, whose header check names one whose pages are bands
    colour = channels == 3 and not keep16 and path.rpartition(".")[2].lower() not in TIFF_SUFFIXES
    im = imread_bgr(path, data=data) if colour else imread_bands(path, channels, keep16, data)
    hw0 = im.shape[:2]
    im = resize_long_side(im, img_size, linear, capped)
    return LoadedImage(im, hw0, im.shape[:2])


class ImageSource:
    """Image ``i`` of a label store, resized to long side ``img_size``: from the image cache when it
    holds it, else decoded from its file.  ``linear``: linear interpolation when shrinking too (YOLOv5
    does for training; area for evaluation).  ``reduced``: JPEGs shrunk 2x or more are decoded at a
    reduced scale (see load_image).  ``on_failure(error)``: told of an image that passed the scan and
    was now read whole but could not be decoded (an ImageDecodeError: the split remembers it, and the
    next run leaves it out).  A file that could not be read is not told: that may pass (a permission
    being changed, a busy file server), and the image is still good.  ``capped``: no resized side above
    ``img_size`` (see target_size).  ``storage``: what images at URLs are read through (default: the
    storage in use where the source is made: the dataset's own while it is built); it goes with the
    source into DataLoader workers.  ``channels``: the bands each image is read with (images.bands;
    an image that has others is an ImageBandsError, told to ``on_failure`` as any undecodable one).
    ``keep16``: images are read as uint16 (an image that is not 16-bit is an ImageBandsError too)."""

    def __init__(self, store, img_size: int, linear: bool, cache=None,
                 on_failure: Optional[Callable[[ImageDecodeError], None]] = None, reduced: bool = False,
                 capped: bool = False, storage: Optional[Storage] = None, channels: int = 3, keep16: bool = False):
        self.store, self.img_size, self.linear, self.reduced = store, int(img_size), linear, reduced
        self.channels, self.keep16 = int(channels), bool(keep16)
        self.storage = storage or current_storage()
        self.capped = capped
        self.cache = cache
        self.on_failure = on_failure
        self.fetched: Dict[int, object] = {}  # image -> its bytes (or OSError), fetched with its batch
        self._ahead: Optional[_Ahead] = None  # the next batch's bytes, on their way
        # a split is in a bucket (a storage at URLs) or on disk (sources.py lists one or the other)
        self.in_bucket = len(store) > 0 and is_url(store.im_file(0))
        # Import the optional decoder here, in the process that builds the dataset: forked DataLoader
        # workers then inherit it (or its absence, and any warning about it, said once) every epoch.
        simplejpeg_module()

    def fetch(self, ids: Sequence[int], ahead: Sequence[int] = ()) -> None:
        """Fetch the bytes of the images ``ids`` (a batch's) that are in a bucket and not in the image
        cache, all at once (Backend.read_many), for the calls that follow; ``forget`` drops them.

        ``ahead``: the images of the batch this process is given next (YoloDataLoader tells each worker
        its next batch).  Their bytes are fetched by a background thread while this batch is decoded,
        so that a worker does not wait one round trip per batch; the next ``fetch`` takes what it needs
        of them.  At most two batches' encoded bytes are held per process, never decoded images."""
        if not self.in_bucket:  # a local split: nothing to fetch, and no path decoded per item
            return
        early, self._ahead = self._ahead, None
        if early is not None and early.pid == os.getpid():  # one forked from another process never ends
            got = early.result()
            self.fetched.update((i, got[i]) for i in ids if i in got)
        todo = self._to_fetch(ids)
        if todo:
            self.fetched.update(zip(todo, self._read_many(list(todo.values()))))
        later = self._to_fetch(ahead)
        if later:
            self._ahead = _Ahead(self._read_many, later, {i: self.fetched[i] for i in ahead if i in self.fetched})

    def _read_many(self, urls: List[str]) -> List[object]:
        """The bytes (or OSError) of each URL, all at once, through this source's storage."""
        return self.storage.backend_for(urls[0]).read_many(urls)

    def _to_fetch(self, ids: Sequence[int]) -> Dict[int, str]:
        """{image: URL} of those of ``ids`` neither fetched nor in the image cache."""
        return {i: self.store.im_file(i) for i in ids
                if i not in self.fetched and not (self.cache is not None and self.cache.ok[i])}

    def forget(self) -> None:
        self.fetched.clear()

    def __getstate__(self):  # a copy for a spawned worker: the thread stays with its process
        state = self.__dict__.copy()
        state["_ahead"], state["fetched"] = None, {}
        return state

    def __call__(self, i: int) -> LoadedImage:
        if self.cache is not None:
            cached = self.cache.get(i)
            if cached is not None:
                return LoadedImage(*cached)
        path = self.store.im_file(i)
        return self._decoded(i, path, self._bytes(i, path) if self.in_bucket else self.fetched.get(i))

    def _bytes(self, i: int, path: str) -> bytes:
        """Image ``i``'s bytes: fetched with its batch, else read now.  ImageReadError when they cannot be."""
        data = self.fetched.get(i)
        if data is None:  # not fetched with a batch (an item asked for on its own)
            data = self._read_many([path])[0] if self.in_bucket else read_whole(path)[0]
        if isinstance(data, OSError):  # its fetch failed, retries and all: as a file that cannot be read
            raise ImageReadError(f"{path}: image cannot be read ({data.strerror or data})")
        return data

    def encoded(self, i: int):
        """Image ``i`` for a device to decode (yolo_data.device): a CachedImage when the image cache holds
        it, an EncodedImage for a JPEG whose EXIF orientation is known for certain, anything else as
        ``self(i)`` gives it (a LoadedImage, decoded here).  Raises ImageReadError as ``self(i)``."""
        if self.cache is not None and self.cache.ok[i]:
            cached = self.cache.get(i)
            if cached is not None:
                return CachedImage(i, tuple(cached[1]), tuple(cached[2]))
        path = self.store.im_file(i)
        # the device decodes 8-bit colour JPEGs only
        if path.rpartition(".")[2].lower() not in JPEG_SUFFIXES or self.channels != 3 or self.keep16:
            return self(i)
        data = self._bytes(i, path)
        orientation = exif_orientation(data) if data.startswith(JPEG_SIGNATURE) else -1
        if not 1 <= orientation <= 8:  # not a JPEG after all, or an orientation OpenCV reads its own way
            return self._decoded(i, path, data)
        hw0 = tuple(int(v) for v in self.store.shapes_hw[i])
        return EncodedImage(path, np.frombuffer(data, np.uint8), orientation, hw0,
                            target_size(hw0, self.img_size, self.capped),
                            reduction(hw0, self.img_size) if self.reduced else 1, self.linear)

    def _decoded(self, i: int, path: str, data: Optional[bytes]) -> LoadedImage:
        """Image ``i`` decoded and resized (from ``data`` when given, else from its file)."""
        h0, w0 = self.store.shapes_hw[i]
        try:
            return load_image(path, self.img_size, self.linear, (int(h0), int(w0)), self.reduced, self.capped, data,
                              self.channels, self.keep16)
        except ImageDecodeError as e:
            if self.on_failure is not None:
                self.on_failure(e)
            raise


class _Ahead:
    """The bytes (or OSError) of ``urls`` ({image: URL}) by ``read_many``, fetched by a daemon thread: a
    process that ends (an interrupted epoch) does not wait for it.  ``known``: bytes already at hand,
    handed on."""

    def __init__(self, read_many: Callable, urls: Dict[int, str], known: Dict[int, object]):
        self.pid, self.got, self._done = os.getpid(), dict(known), threading.Event()
        threading.Thread(target=self._run, args=(read_many, urls), name="yolo_data-ahead", daemon=True).start()

    def _run(self, read_many: Callable, urls: Dict[int, str]) -> None:
        try:
            self.got.update(zip(urls, read_many(list(urls.values()))))
        except Exception:  # noqa: BLE001 - what is missing here is fetched again, and raised, by the next fetch
            pass
        finally:
            self._done.set()

    def result(self) -> Dict[int, object]:
        self._done.wait()
        return self.got
