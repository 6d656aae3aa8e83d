"""A batch's images as pixels on the device: its JPEGs decoded there in one call, each resized to the
size the CPU path gives it (images.load: long side img_size), the rest uploaded as the workers made them.

JPEGs go to ``torchvision.io.decode_jpeg`` as one list (nvJPEG's batched decode on CUDA, libjpeg-turbo
on the CPU, where the pixels equal OpenCV's), are turned upright by their EXIF orientation, averaged
over f x f blocks where the CPU path decodes at 1/f scale, then resized bilinearly (area when shrinking
without ``linear``), as cv2.resize does.  A JPEG the device's decoder refuses is decoded by OpenCV here
(images.decode.imread_bgr, which also reads what it can of a damaged file); one nothing decodes
becomes PAD_VALUE, with a warning naming the file.
"""
from __future__ import annotations

import logging
import warnings
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from ..geometry.shapes import PAD_VALUE
from ..images.decode import ImageReadError, imread_bgr
from ..images.load import CachedImage, EncodedImage
from .plan import Source, bytes_of

LOGGER = logging.getLogger("yolo_data")


def decoded(sources: Dict[int, Source], device: torch.device, cache=None,
            blob: Optional[torch.Tensor] = None) -> Dict[int, torch.Tensor]:
    """index -> float32 (3, h, w) RGB pixels on ``device`` minus PAD_VALUE (so that zero is the pad and a
    warp's empty border needs no fill), at each source's resized size ``hw``.  ``cache``: the image
    cache (items.imagecache) that CachedImage sources are read from; ``blob``: the batch's packed JPEG
    bytes (plan.BatchPlan.blob)."""
    out: Dict[int, torch.Tensor] = {}
    jpegs = [(i, s) for i, s in sources.items() if isinstance(s, EncodedImage)]
    for (i, s), rgb in zip(jpegs, _decode_all([s for _, s in jpegs], device, blob)):
        out[i] = _resized(_upright(rgb, s.orientation), s) - PAD_VALUE
    for i, s in sources.items():
        if isinstance(s, EncodedImage):
            continue
        # (h, w, 3) BGR resized: in this process's view of the image cache, or made by the worker
        img = cache.get(s.index)[0] if isinstance(s, CachedImage) else s.img
        with warnings.catch_warnings():  # a cache's pages are read-only; nothing writes them
            warnings.simplefilter("ignore")
            bgr = torch.from_numpy(img).to(device, non_blocking=True)
        planes = bgr.permute(2, 0, 1)  # BGR to RGB; other bands stay in their stored order
        out[i] = (planes.flip(0) if planes.shape[0] == 3 else planes).float() - PAD_VALUE
    return out


def _decode_all(jpegs: List[EncodedImage], device: torch.device,
                blob: Optional[torch.Tensor]) -> List[torch.Tensor]:
    """uint8 (3, h0, w0) RGB of each JPEG as stored (before its orientation), on ``device``."""
    if not jpegs:
        return []
    from torchvision.io import ImageReadMode, decode_jpeg  # torchvision: imported where it is used
    with warnings.catch_warnings():  # torchvision names its successor on every call; the decode is the same
        warnings.simplefilter("ignore")  # (and torch warns of the bytes' read-only buffer, which nothing writes)
        datas = [bytes_of(s, blob) for s in jpegs]
        try:
            return decode_jpeg(datas, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # one file the device's decoder refuses fails the whole call: one by one
            pass
        out = []
        for s, data in zip(jpegs, datas):
            try:
                out.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
            except RuntimeError:
                out.append(_by_opencv(s, data, device))
        return out


def _by_opencv(s: EncodedImage, data: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 (3, h0, w0) RGB of a JPEG the device's decoder refused, as stored (its orientation is
    undone, so the caller applies it like any other's); PAD_VALUE with a warning where OpenCV cannot
    decode it either."""
    try:
        bgr = imread_bgr(s.path, data=data.numpy().tobytes())
        rgb = torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1])).permute(2, 0, 1)
        return _stored(rgb, s.orientation).to(device)
    except ImageReadError as e:
        LOGGER.warning(f"{e}; its pixels are {PAD_VALUE} in this batch")
        h0, w0 = s.hw0 if s.orientation < 5 else s.hw0[::-1]
        return torch.full((3, h0, w0), PAD_VALUE, dtype=torch.uint8, device=device)


# EXIF orientation -> the stored pixels turned upright, as OpenCV turns them (images.decode._UPRIGHT):
# on (C, H, W), dims 1 and 2 are rows and columns
_UPRIGHT = {
    1: lambda t: t,
    2: lambda t: t.flip(2),
    3: lambda t: t.flip(1, 2),
    4: lambda t: t.flip(1),
    5: lambda t: t.transpose(1, 2),
    6: lambda t: t.transpose(1, 2).flip(2),
    7: lambda t: t.transpose(1, 2).flip(1, 2),
    8: lambda t: t.transpose(1, 2).flip(1),
}
# and the way back (each of 1-4 and 5, 7 is its own inverse; 6 and 8 undo each other)
_STORED = {**_UPRIGHT, 6: _UPRIGHT[8], 8: _UPRIGHT[6]}


def _upright(rgb: torch.Tensor, orientation: int) -> torch.Tensor:
    return _UPRIGHT[orientation](rgb)


def _stored(rgb: torch.Tensor, orientation: int) -> torch.Tensor:
    return _STORED[orientation](rgb)


def _resized(rgb: torch.Tensor, s: EncodedImage) -> torch.Tensor:
    """float32 (3, h, w) of uint8 (3, h0, w0) ``rgb``, as images.load.load_image resizes it: libjpeg's
    1/f scaled decode stood in for by the mean of each f x f block (the last ones partial), then
    bilinear (or area, shrinking without ``linear``) to ``s.hw``."""
    x = rgb.float()[None]
    if s.factor > 1:
        x = F.avg_pool2d(x, s.factor, ceil_mode=True, count_include_pad=False)
    h, w = s.hw
    if tuple(x.shape[2:]) == (h, w):
        return x[0]
    shrink = h * w < x.shape[2] * x.shape[3]
    if shrink and not s.linear:
        return F.interpolate(x, size=(h, w), mode="area")[0]
    return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)[0]

