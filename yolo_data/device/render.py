"""Layouts (augment.layout) made into pixels on the device: tiles placed and resized on a canvas, one
perspective warp per image, mixup's blend and the flips, with torch ops that run on CUDA and CPU alike.

Each step does what its CPU counterpart does, in float32 where OpenCV works in fixed point:

    tiles        copied, or resized bilinearly with half-pixel centres (cv2.resize, INTER_LINEAR)
    warp         bilinear sampling at M^-1 of each output pixel centre, PAD_VALUE outside the canvas
                 (cv2.warpAffine / warpPerspective with borderValue PAD_VALUE)
    blend        a * r + b * (1 - r) of the two images rounded to whole levels, truncated (mosaic.mixup)
    flips        exact

so an item's pixels differ from the CPU path's only by interpolation rounding (the bound is stated in
docs/device.md and tested).  Pixels are held minus PAD_VALUE, so the empty canvas and a warp's border
are zeros.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ..augment.layout import Layout
from ..geometry.shapes import PAD_VALUE


def made(layouts: Sequence[Layout], pixels: Dict[int, torch.Tensor]) -> torch.Tensor:
    """float32 (n, C, H, W) whole levels 0..255 of ``layouts`` (all of one ``shape``), from ``pixels``
    (index -> float32 (C, h, w) minus PAD_VALUE, any C >= 1, RGB when C = 3, as decode.decoded gives
    them), flips applied.  Every step works on each band alone.  Canvases of one size are warped
    together."""
    h, w = layouts[0].shape[:2]
    first = next(iter(pixels.values()))
    out = torch.empty((len(layouts), first.shape[0], h, w), dtype=torch.float32, device=first.device)
    sizes: Dict[Tuple[int, int], List[int]] = {}
    for k, layout in enumerate(layouts):
        if layout.matrix is None:
            out[k] = _canvas(layout, pixels)
        else:
            sizes.setdefault(layout.canvas_hw, []).append(k)
    for ks in sizes.values():
        canvases = torch.stack([_canvas(layouts[k], pixels) for k in ks])
        out[ks] = warped(canvases, np.stack([layouts[k].matrix for k in ks]), (h, w))
    out.add_(PAD_VALUE).round_().clamp_(0, 255)
    blended = [k for k, layout in enumerate(layouts) if layout.mixed is not None]
    if blended:
        others = made([layouts[k].mixed[0] for k in blended], pixels)
        r = torch.tensor([layouts[k].mixed[1] for k in blended], dtype=torch.float32, device=out.device)
        r = r.view(-1, 1, 1, 1)
        out[blended] = (out[blended] * r + others * (1 - r)).floor_()
    for k, layout in enumerate(layouts):
        dims = [d for d, on in ((1, layout.flips[0]), (2, layout.flips[1])) if on]
        if dims:
            out[k] = out[k].flip(dims)
    return out


def _canvas(layout: Layout, pixels: Dict[int, torch.Tensor]) -> torch.Tensor:
    """float32 (C, h, w) canvas (minus PAD_VALUE) with the layout's tiles drawn in order, C being the
    bands of ``pixels``."""
    h, w = layout.canvas_hw
    first = next(iter(pixels.values()))
    canvas = torch.zeros((first.shape[0], h, w), dtype=torch.float32, device=first.device)
    for tile in layout.tiles:
        x1, y1, x2, y2 = tile.src
        src = pixels[tile.source][:, y1:y2, x1:x2]
        u1, v1, u2, v2 = tile.dst
        if tile.resized:
            src = F.interpolate(src[None], size=(v2 - v1, u2 - u1), mode="bilinear", align_corners=False)[0]
        canvas[:, v1:v2, u1:u2] = src
    return canvas


def warped(images: torch.Tensor, matrices: np.ndarray, out_hw: Tuple[int, int]) -> torch.Tensor:
    """float32 (n, C, h, w) ``images`` (any C; zero outside) each warped by its (3, 3) input-to-output pixel
    matrix (``matrices`` (n, 3, 3) float64) onto ``out_hw``: each output pixel centre (x, y) samples
    bilinearly at M^-1 (x, y) after the perspective divide, pixel centres at whole coordinates as in
    OpenCV.  Returns float32 (n, C, out_h, out_w)."""
    h, w = int(out_hw[0]), int(out_hw[1])
    dev = images.device
    inv = torch.from_numpy(np.linalg.inv(np.asarray(matrices, np.float64))).to(dev, torch.float32)
    inv = inv.view(-1, 3, 3, 1, 1)
    ys = torch.arange(h, device=dev, dtype=torch.float32).view(1, h, 1)
    xs = torch.arange(w, device=dev, dtype=torch.float32).view(1, 1, w)
    sx = inv[:, 0, 0] * xs + inv[:, 0, 1] * ys + inv[:, 0, 2]
    sy = inv[:, 1, 0] * xs + inv[:, 1, 1] * ys + inv[:, 1, 2]
    sz = inv[:, 2, 0] * xs + inv[:, 2, 1] * ys + inv[:, 2, 2]  # exactly 1 for an affine matrix
    ih, iw = images.shape[2:]
    # grid_sample's coordinates (align_corners=False): -1 and 1 are the outer edges of the image
    grid = torch.stack([(2 * sx / sz + 1) / iw - 1, (2 * sy / sz + 1) / ih - 1], -1)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
