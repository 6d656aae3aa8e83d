"""The edge of the pipeline: a finished item's pixels into its slot of the batch tensor, and its boxes
into YOLOv5's target rows.

Items of one batch are written straight into one (B, C, H, W) uint8 tensor (``BatchImages``; uint16
for a dataset whose 16 bits are kept, Settings.images.keep16), planar, with the last photometric
steps (HSV gains, flips) applied on the way; the collate function then hands that tensor on as it
is.  Channels in the batch: 3-channel BGR images become RGB planes (HSV applied, to 8-bit images
only); images of any other number of channels keep their bands in their stored order (no HSV), as
Ultralytics batches them, with their per-band gains and offsets applied when the hyp asks for them.
Compared with making each item its own tensor and stacking them, that saves a transpose copy and a
stack copy per image.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Optional, Tuple

import cv2
import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..augment.photometric import BandGains, apply_band_gains, apply_hsv
from ..geometry.boxes import xyxy_to_xywhn
from ..geometry.shapes import LetterboxPlan, pad_value, resize_to
from ..runtime import torch_private
from .batchmemory import worker_pool


def new_images(n: int, h: int, w: int, channels: int = 3, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialised (n, channels, h, w) tensor of ``dtype`` (uint8, or uint16); inside a DataLoader
    worker it lives in shared memory, so the batch crosses to the main process without another copy
    (torch's default_collate does the same for the stack it makes)."""
    if get_worker_info() is None:
        return torch.empty((n, channels, h, w), dtype=dtype)
    storage = torch_private.new_shared_storage(n * channels * h * w * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage).view(n, channels, h, w)


def shared_fd(images: torch.Tensor) -> Optional[int]:
    """The file descriptor of ``images``' shared memory when torch shares it by descriptor (Linux's
    default), else None.  The storage keeps the descriptor open as long as it lives."""
    if not images.is_shared() or torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        return None
    return torch_private.shared_fd(images.untyped_storage())  # None: written through the mapping


class BatchImages:
    """The images of one batch of ``n`` items: slot k is item k's (C, H, W) view of one tensor (RGB
    planes for C = 3).

    The tensor is allocated at the shape (channels, h, w) of the first slot written; a slot of another
    shape (which only a custom pipeline could make) gets a tensor of its own, and the collate function
    then stacks.

    In a worker the tensor is shared memory: a buffer of the worker's pool (batchmemory.py), reused
    once the training process has dropped the batch it last held, or fresh memory when none is free.
    Writing fresh shared memory through its mapping costs a page fault per 4 KiB page (a 640² image:
    300 faults, ~1 ms here).  Slots are therefore rendered into a reused scratch array and written
    with ``os.pwrite`` into the shared memory's descriptor: the kernel then fills the pages without
    faulting (about 0.5 ms less per image).  A reused buffer is written the same way: through its
    mapping the worker spent more user time (the destination is cold in the cache) than the copy
    costs the kernel.
    """

    def __init__(self, n: int, scratch: Optional["Scratch"] = None):
        self.n = n
        self.images: Optional[torch.Tensor] = None
        self._fd: Optional[int] = None
        self._scratch = scratch or Scratch()

    def write(self, k: int, hw: Tuple[int, int], fill: Callable[[np.ndarray], None],
              channels: int = 3, dtype=np.uint8) -> torch.Tensor:
        """Item ``k``'s image tensor, after ``fill(out)`` wrote its planes into ``out`` ((channels, h, w)
        of ``dtype``: uint8, or uint16 for 16-bit images)."""
        h, w = int(hw[0]), int(hw[1])
        dtype = np.dtype(dtype)
        tdtype = torch.uint16 if dtype == np.uint16 else torch.uint8
        if self.images is None:
            self.images, self._fd = self._allocate(h, w, channels, tdtype)
        if tuple(self.images.shape[1:]) != (channels, h, w) or self.images.dtype != tdtype:
            own = torch.empty((channels, h, w), dtype=tdtype)
            fill(own.numpy())
            return own
        if self._fd is None:
            fill(self.images[k].numpy())
            return self.images[k]
        buf = self._scratch.get("slot", (channels, h, w), dtype)
        fill(buf)
        view, offset = memoryview(buf).cast("B"), k * buf.nbytes
        while len(view):  # pwrite may write less than asked
            done = os.pwrite(self._fd, view, offset)
            view, offset = view[done:], offset + done
        return self.images[k]

    def _allocate(self, h: int, w: int, channels: int, dtype: torch.dtype) -> Tuple[torch.Tensor, Optional[int]]:
        """The (n, channels, h, w) batch tensor of ``dtype``, and the descriptor to ``pwrite`` it through
        (None: write it directly).  In a worker, a buffer of its pool (batchmemory.py) when one is free,
        else fresh shared memory."""
        pool = worker_pool()
        images = pool.take(self.n, h, w, channels, dtype) if pool is not None else None
        if images is None:
            images = new_images(self.n, h, w, channels, dtype)
        return images, shared_fd(images)


class Scratch:
    """Arrays reused from item to item, by name and shape, one set per thread: a fresh 1 MB array costs
    page faults (~0.3 ms per MB here) every time it is first touched."""

    def __init__(self):
        self._local = threading.local()

    def get(self, name: str, shape: tuple, dtype=np.uint8) -> np.ndarray:
        arrays = self._local.__dict__.setdefault("arrays", {})
        key = (name, np.dtype(dtype).char) + tuple(shape)
        if key not in arrays:
            arrays[key] = np.empty(shape, dtype)
        return arrays[key]

    def __getstate__(self):  # a copy for a worker starts empty
        return {}

    def __setstate__(self, state):
        self._local = threading.local()


def write_rgb(img: np.ndarray, out: np.ndarray, hsv_gains: Optional[np.ndarray] = None, flip_ud: bool = False,
              flip_lr: bool = False, scratch: Optional[Scratch] = None, band_gains: Optional[BandGains] = None) -> None:
    """Write ``img`` into ``out`` after HSV ``hsv_gains`` (see photometric.apply_hsv) and the flips, as
    YOLOv5 applies them.

    ``out`` (C, H, W) uint8 says the channels: with C = 3, ``img`` is (H, W, 3) BGR or (H, W, 4) BGRA
    uint8 and ``out`` gets planar RGB; with any other C, ``img`` is (H, W, C) uint8, ``out`` gets its
    bands in their stored order and ``hsv_gains`` are not applied (HSV is for colour images only, as in
    Ultralytics; the caller still draws them, see pipeline.FinishDraws), but ``band_gains`` (C bands'
    draws, photometric.BandGains) are, when given.  ``img`` is not modified.  uint16 ``img`` and ``out``
    (16 bits kept) likewise, without HSV (an 8-bit table).

    HSV and flips commute (one works per pixel, the other only moves pixels), so the image is flipped
    last, on its way into the planes; the per-band step, per pixel too, is applied to the planes.
    """
    if out.shape[0] != 3:
        write_bands(img, out, flip_ud, flip_lr, scratch)
        if band_gains is not None:
            apply_band_gains(out, band_gains)
        return
    h, w = img.shape[:2]
    scratch = scratch or Scratch()
    planes = [out[0], out[1], out[2]]
    if hsv_gains is not None and img.dtype == np.uint8:
        rgb = apply_hsv(img, hsv_gains, cv2.COLOR_HSV2RGB, hsv=scratch.get("hsv", (h, w, 3)),
                        planes=[scratch.get(f"plane{c}", (h, w)) for c in range(3)])
    elif flip_ud or flip_lr or img.shape[2] == 4:
        rgb = cv2.cvtColor(img, cv2.COLOR_BGRA2RGB if img.shape[2] == 4 else cv2.COLOR_BGR2RGB,
                           dst=scratch.get("hsv", (h, w, 3), img.dtype))
    else:  # BGR straight into reversed planes
        rgb, planes = img, planes[::-1]
    if flip_ud or flip_lr:
        rgb = cv2.flip(rgb, -1 if flip_ud and flip_lr else (0 if flip_ud else 1),
                       dst=scratch.get("flip", (h, w, 3), img.dtype))
    cv2.split(rgb, planes)


def write_bands(img: np.ndarray, out: np.ndarray, flip_ud: bool = False, flip_lr: bool = False,
                scratch: Optional[Scratch] = None) -> None:
    """Write ``img`` ((H, W, C) uint8 or uint16, any C >= 1; not modified) into ``out`` ((C, H, W) of
    its dtype), band c into plane c, flipped as asked."""
    h, w, bands = img.shape
    if out.shape != (bands, h, w):
        raise ValueError(f"an image of shape {img.shape} does not fit planes of shape {out.shape}")
    if bands == 1:
        np.copyto(out[0], img[::-1 if flip_ud else 1, ::-1 if flip_lr else 1, 0])
        return
    if flip_ud or flip_lr:
        img = cv2.flip(img, -1 if flip_ud and flip_lr else (0 if flip_ud else 1),
                       dst=(scratch or Scratch()).get("flip", (h, w, bands), img.dtype))
    cv2.split(img, list(out))


def write_letterboxed(img: np.ndarray, plan: LetterboxPlan, out: np.ndarray) -> None:
    """Letterbox ``img`` by ``plan`` straight into ``out`` ((C, H, W) uint8, H, W = ``plan.shape``):
    resize when the plan says so, PAD_VALUE around it.  ``img``: (h, w, 3) BGR uint8 when C = 3 (``out``
    gets planar RGB), else (h, w, C) uint8 (``out`` gets its bands in their stored order); uint16
    ``img`` and ``out`` alike, padded with the same grey at 16 bits (geometry.shapes.pad_value)."""
    img = resize_to(img, plan)
    top, left = plan.top, plan.left
    bottom, right = top + img.shape[0], left + img.shape[1]
    fill = pad_value(out.dtype)
    # only the border strips are filled; the image covers the rest
    out[:, :top] = fill
    out[:, bottom:] = fill
    out[:, top:bottom, :left] = fill
    out[:, top:bottom, right:] = fill
    region = out[:, top:bottom, left:right]
    if len(out) != 3:
        write_bands(img, region)
        return
    cv2.split(img, [region[2], region[1], region[0]])


def targets_of(classes: np.ndarray, boxes_xyxy: np.ndarray, hw: Tuple[int, int]) -> torch.Tensor:
    """(n, 6) float32 targets [0, class, x, y, w, h] normalised to an (h, w) image, from (n,) class ids
    and (n, 4) pixel xyxy boxes, clipped just inside the image (column 0 is the collate function's)."""
    targets = np.zeros((len(classes), 6), np.float32)
    if len(classes):
        targets[:, 1] = classes
        targets[:, 2:] = xyxy_to_xywhn(boxes_xyxy, w=hw[1], h=hw[0], clip=True, eps=1e-3)
    return torch.from_numpy(targets)
