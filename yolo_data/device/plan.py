"""What DataLoader workers hand the device stage instead of pixels: each item's layout and the images
it draws from, and how a batch of them travels.

A training item of a loader with a device (Settings.loader.device) is ``(ItemPlan, targets, path,
shapes[, extras][, masks])``: everything but the pixels is final.  The collate function joins a
batch's plans into one :class:`BatchPlan` (each image once, however many mosaics use it), which crosses
to the main process in place of the (B, 3, H, W) image tensor; stage.DeviceStage makes the pixels there.

The batch's JPEG bytes cross as one uint8 tensor (``BatchPlan.blob``): in a DataLoader worker it is
shared memory, written with ``os.pwrite`` through its descriptor (no page faults, as the batch tensors
of loading/tensors.py), and it reaches the main process as a descriptor, not pickled bytes (which cost
a worker about 0.24 ms per coco128 image).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..augment.layout import Layout
from ..augment.photometric import BandGains
from ..images.load import CachedImage, EncodedImage, LoadedImage
from ..runtime import torch_private

# a JPEG to decode, an image of the node's image cache, or pixels (resized BGR) a worker decoded
Source = Union[EncodedImage, CachedImage, LoadedImage]


@dataclass
class ItemPlan:
    """One item's pixels, to be made: ``layout`` (augment.layout; its tiles carry the Sources they draw
    from), its HSV gains ((3,) float64, or None for none; applied to 3-channel items only) and its
    per-band gains and offsets (augment.photometric.BandGains of its C bands, or None; applied to items
    of other than 3 channels), or ``made``: the uint8 (C, H, W) tensor a worker made itself (a step
    that needs pixels, such as copy-paste; RGB for C = 3), every colour step and the flips applied."""
    layout: Optional[Layout] = None
    hsv_gains: Optional[np.ndarray] = None
    made: Optional[torch.Tensor] = None
    band_gains: Optional[BandGains] = None

    @property
    def hw(self) -> Tuple[int, int]:
        return tuple(self.made.shape[1:]) if self.made is not None else self.layout.shape[:2]

    @property
    def channels(self) -> int:
        return int(self.made.shape[0]) if self.made is not None else self.layout.channels


@dataclass
class BatchPlan:
    """A batch's items (ItemPlan, in batch order) and every image they draw from, once: ``sources``
    index -> Source.  ``hw``: the (H, W) of every item.  ``blob``: uint8 (n,) the bytes of every
    EncodedImage of ``sources``, back to back (each one's ``span`` says where; its ``data`` is then None)."""
    items: List[ItemPlan]
    sources: Dict[int, Source]
    hw: Tuple[int, int]
    blob: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return len(self.items)

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """(B, C, H, W): the shape of the image tensor the batch becomes."""
        return len(self.items), self.items[0].channels, int(self.hw[0]), int(self.hw[1])

    @classmethod
    def join(cls, items: Sequence[ItemPlan]) -> "BatchPlan":
        """The batch of ``items``.  Raises ValueError when they are not all one size (items of a batch
        are stacked into one tensor)."""
        sizes = {tuple(int(v) for v in p.hw) for p in items}
        if len(sizes) != 1:
            raise ValueError(f"the items of a batch have different sizes: {sorted(sizes)}")
        sources: Dict[int, Source] = {}
        for p in items:
            if p.layout is not None:
                sources.update(p.layout.images())
        jpegs = [s for s in sources.values() if isinstance(s, EncodedImage)]
        return cls(list(items), sources, sizes.pop(), packed(jpegs))



def bytes_of(s: EncodedImage, blob: Optional[torch.Tensor]) -> torch.Tensor:
    """uint8 (n,) CPU tensor of the bytes of ``s``: its span of its batch's ``blob``, or its own data."""
    return torch.from_numpy(s.data) if s.span is None else blob[s.span[0]:s.span[1]]


def packed(jpegs: Sequence[EncodedImage]) -> Optional[torch.Tensor]:
    """The bytes of ``jpegs`` in one uint8 tensor (shared memory in a DataLoader worker), each
    EncodedImage given its ``span`` there and its ``data`` dropped (every reference to it, the layouts'
    tiles too, then pickles without the bytes); None without JPEGs."""
    if not jpegs:
        return None
    sizes = [s.data.nbytes for s in jpegs]
    ends = np.cumsum(sizes).tolist()
    fd = None
    if get_worker_info() is None:
        blob = torch.empty(ends[-1], dtype=torch.uint8)
    else:
        storage = torch_private.new_shared_storage(ends[-1])
        blob = torch.empty(0, dtype=torch.uint8).set_(storage)
        if torch.multiprocessing.get_sharing_strategy() == "file_descriptor":
            fd = torch_private.shared_fd(storage)
    array = blob.numpy()
    for s, end, n in zip(jpegs, ends, sizes):
        if fd is None:
            array[end - n:end] = s.data
        else:
            view, offset = memoryview(s.data).cast("B"), end - n
            while len(view):  # pwrite may write less than asked
                done = os.pwrite(fd, view, offset)
                view, offset = view[done:], offset + done
        s.data, s.span = None, (end - n, end)
    return blob
