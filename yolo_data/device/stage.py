"""The device stage: a batch from the DataLoader workers made into the batch a training step takes, on
its device.

A training batch arrives as ``(BatchPlan, targets, paths, shapes[, ...])`` (plan.py): its JPEGs are
decoded on the device in one call (decode.py), the items' layouts are made there and their HSV gains
(3 channels) or per-band gains and offsets (other channels) applied, CHUNK items at a time (render.py,
colour.py), and the image tensor goes on as uint8 (B, C, H, W) (RGB for C = 3) on the device, as the
CPU path's would after ``.to(device)``.  Any other batch (an evaluation loader's, a caller's own
mapper's) has its tensors moved to the device, unchanged.
Targets, masks and per-object extras are moved too, so that the training step's ``.to(device)`` calls
cost nothing.
"""
from __future__ import annotations

import numpy as np
import torch

from .colour import apply_band_gains, apply_hsv
from .decode import decoded
from .plan import BatchPlan
from .render import made

#: items made at once: their float32 canvases (a warped mosaic's is (3, 2s, 2s): 19.7 MB at s = 640)
#: and the HSV step's working memory (about 50 bytes per pixel) bound the stage's GPU memory
CHUNK = 16


class DeviceStage:
    """Called with each batch the loader yields (loading.loader.YoloDataLoader's ``device_stage``);
    returns it on ``device`` (a torch.device or its name: 'cuda', 'cuda:1', 'cpu')."""

    def __init__(self, device, cache=None):
        self.device = torch.device(device)
        self.cache = cache  # the image cache (items.imagecache) the workers' CachedImages point into

    def __call__(self, batch):
        """``batch`` (a tuple whose first part is the images, or a dict whose 'img' is: Ultralytics'
        batch) with its images made or moved, and every tensor moved, to the device."""
        if isinstance(batch, dict):
            return {k: self._part(v) for k, v in batch.items()}
        return tuple(self._part(v) for v in batch)

    def _part(self, part):
        return self.images(part) if isinstance(part, BatchPlan) else to_device(part, self.device)

    def images(self, plan: BatchPlan) -> torch.Tensor:
        """uint8 (B, C, H, W) on the device (RGB for C = 3): the batch's items made from their layouts
        (HSV gains, or per-band gains and offsets, applied), or copied where a worker made them."""
        pixels = decoded(plan.sources, self.device, self.cache, plan.blob)
        out = torch.empty(plan.shape, dtype=torch.uint8, device=self.device)
        laid = [k for k, item in enumerate(plan.items) if item.made is None]
        colour = out.shape[1] == 3  # HSV is for colour; other bands have the per-band step instead
        for k, item in enumerate(plan.items):
            if item.made is not None:
                out[k] = item.made.to(self.device, non_blocking=True)
        for c in range(0, len(laid), CHUNK):  # CHUNK items at a time bound the float32 working memory
            part = laid[c:c + CHUNK]
            out[part] = made([plan.items[k].layout for k in part], pixels).to(torch.uint8)
            rows = [k for k in part if plan.items[k].hsv_gains is not None and colour]
            if rows:  # the gains stay on the CPU: colour.apply_hsv reads them there without a device wait
                out[rows] = apply_hsv(out[rows], torch.from_numpy(np.stack([plan.items[k].hsv_gains for k in rows])))
            rows = [k for k in part if plan.items[k].band_gains is not None and not colour]
            if rows:
                out[rows] = apply_band_gains(out[rows], [plan.items[k].band_gains for k in rows])
        return out


def to_device(part, device: torch.device):
    """``part`` with its tensors (also inside a dict, list or tuple) moved to ``device``, non-blocking
    from pinned memory; anything else as it is."""
    if isinstance(part, torch.Tensor):
        return part.to(device, non_blocking=True)
    if isinstance(part, dict):
        return {k: to_device(v, device) for k, v in part.items()}
    if isinstance(part, (list, tuple)) and any(isinstance(v, (torch.Tensor, dict)) for v in part):
        return type(part)(to_device(v, device) for v in part)
    return part
