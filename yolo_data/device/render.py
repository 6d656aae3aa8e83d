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

from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ..augment.layout import Layout
from ..geometry.shapes import PAD_VALUE


def made(layout: Layout, pixels: Dict[int, torch.Tensor]) -> torch.Tensor:
    """float32 (3, H, W) whole levels 0..255 of ``layout`` (H, W = ``layout.shape[:2]``), from ``pixels``
    (index -> float32 (3, h, w) RGB minus PAD_VALUE, as decode.decoded gives them), flips applied."""
    img = _canvas(layout, pixels)
    if layout.matrix is not None:
        img = warped(img, layout.matrix, layout.out_hw)
    img = (img + PAD_VALUE).round_().clamp_(0, 255)
    if layout.mixed is not None:
        other, r = layout.mixed
        img = (img * r + made(other, pixels) * (1 - r)).floor_()
    dims = [d for d, on in ((1, layout.flips[0]), (2, layout.flips[1])) if on]
    return img.flip(dims) if dims else img


def _canvas(layout: Layout, pixels: Dict[int, torch.Tensor]) -> torch.Tensor:
    """float32 (3, h, w) canvas (minus PAD_VALUE) with the layout's tiles drawn in order."""
    h, w = layout.canvas_hw
    first = next(iter(pixels.values()))
    canvas = torch.zeros((3, h, w), dtype=torch.float32, device=first.device)
    for tile in layout.tiles:
        x1, y1, x2, y2 = tile.src
        src = pixels[tile.source][:, y1:y2, x1:x2]
        u1, v1, u2, v2 = tile.dst
        if tile.resized:
            src = F.interpolate(src[None], size=(v2 - v1, u2 - u1), mode="bilinear", align_corners=False)[0]
        canvas[:, v1:v2, u1:u2] = src
    return canvas


def warped(img: torch.Tensor, matrix: np.ndarray, out_hw: Tuple[int, int]) -> torch.Tensor:
    """float32 (3, h, w) ``img`` (zero outside) warped by the (3, 3) input-to-output pixel ``matrix``
    onto ``out_hw``: each output pixel centre (x, y) samples ``img`` bilinearly at M^-1 (x, y) (with
    the perspective divide), pixel centres at whole coordinates as in OpenCV."""
    h, w = int(out_hw[0]), int(out_hw[1])
    inv = torch.from_numpy(np.linalg.inv(np.asarray(matrix, np.float64))).to(img.device, torch.float32)
    ys = torch.arange(h, device=img.device, dtype=torch.float32).view(h, 1)
    xs = torch.arange(w, device=img.device, dtype=torch.float32).view(1, w)
    sx = inv[0, 0] * xs + inv[0, 1] * ys + inv[0, 2]
    sy = inv[1, 0] * xs + inv[1, 1] * ys + inv[1, 2]
    if not (matrix[2, 0] == 0 and matrix[2, 1] == 0 and matrix[2, 2] == 1):
        sz = inv[2, 0] * xs + inv[2, 1] * ys + inv[2, 2]
        sx, sy = sx / sz, sy / sz
    ih, iw = img.shape[1:]
    # grid_sample's coordinates (align_corners=False): -1 and 1 are the outer edges of the image
    grid = torch.stack([(2 * sx + 1) / iw - 1, (2 * sy + 1) / ih - 1], -1)[None]
    return F.grid_sample(img[None], grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]
