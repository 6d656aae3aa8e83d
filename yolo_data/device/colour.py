"""YOLOv5's HSV colour step on a batch of RGB images, in torch ops on the images' device, with the
pixels of the CPU path (``augment.photometric.apply_hsv`` with ``to=cv2.COLOR_HSV2RGB``); and the
per-band gains and offsets of images of other than 3 channels (``apply_band_gains``), looked up in the
CPU path's own tables (``augment.photometric.band_tables``), so its bytes are the CPU path's.

The CPU path is OpenCV's 8-bit BGR->HSV, three lookup tables (``photometric.hsv_tables``), then
OpenCV's 8-bit HSV->RGB; each part is reproduced here as OpenCV computes it:

- BGR->HSV is integer arithmetic with fixed-point reciprocals (12 fractional bits), so it is exact in
  int32 on any device.
- HSV->RGB goes through float32: ``channel = trunc(v * factor * 255)``, where ``v = val * (1/255)`` and
  ``factor`` (1, 1 - s, 1 - s*f or 1 - s*(1 - f), by hue sector) depends only on hue and saturation.
  OpenCV's vector code computes ``1 - s*f`` as one fused multiply-add on CPUs that have one (x86 with
  AVX2, ARM64), so the factors are tabled once per (hue, saturation) with that single rounding, and
  picked per pixel by a gather; the two float32 products that follow are the same operations OpenCV
  does.  The last ``width % block`` pixels of each row do not fill a vector block and go through
  OpenCV's scalar code, which rounds instead of truncating; ``opencv_block`` finds the block size of
  the OpenCV in use, so those columns round here too.

Measured against cv2 5.0 (x86, AVX2 dispatch, block 32): identical on all 2^24 RGB colours for
BGR->HSV and on all 180 x 256 x 256 HSV triples for HSV->RGB, at any width.  On a CPU without fused
multiply-add OpenCV itself gives other pixels (1 level, on about 0.005% of values).
"""
from __future__ import annotations

import functools
from typing import Sequence

import cv2
import numpy as np
import torch

from ..augment.photometric import BandGains, band_tables, hsv_tables

_SHIFT = 12  # OpenCV's hsv_shift: the fixed-point reciprocals carry 12 fractional bits
_HUE_RANGE = 180  # 8-bit hue: degrees / 2


def _division_tables() -> np.ndarray:
    """(2, 256) int32: OpenCV's reciprocal tables for 8-bit RGB->HSV, each entry rounded half to even
    (its saturate_cast), entry 0 being 0: row 0, (255 << 12) / v for saturation; row 1,
    (180 << 12) / (6 d) for hue, d being max - min."""
    level = np.arange(1, 256, dtype=np.float64)
    out = np.zeros((2, 256), np.int32)
    out[0, 1:] = np.rint((255 << _SHIFT) / level)
    out[1, 1:] = np.rint((_HUE_RANGE << _SHIFT) / (6.0 * level))
    return out


def _rgb_factors() -> np.ndarray:
    """(3, 180 * 256) float32: for hue h and saturation s at index h * 256 + s, the factor by which
    OpenCV's 8-bit HSV->RGB multiplies v = val / 255 for R, G and B (before * 255 and truncation).

    In float32 as OpenCV: x = h * (6/180), sector = trunc(x), f = x - sector, s = sat * (1/255);
    factors 1, 1 - s, 1 - s*f and 1 - s*(1 - f), the last two rounded once (a fused multiply-add: the
    float32 product s*f is exact in float64, so one rounding of 1 - s*f from float64 to float32 gives
    it; checked against cv2 on every hue and saturation)."""
    f32 = np.float32
    hue, sat = np.meshgrid(np.arange(_HUE_RANGE), np.arange(256), indexing="ij")
    x = hue.astype(f32) * (f32(6) / f32(_HUE_RANGE))
    sector = np.trunc(x)
    frac = x - sector
    s = sat.astype(f32) * (f32(1) / f32(255))
    one_minus = (f32(1) - frac).astype(np.float64)
    factors = np.stack([np.ones_like(s), f32(1) - s, (1.0 - s.astype(np.float64) * frac).astype(f32),
                        (1.0 - s.astype(np.float64) * one_minus).astype(f32)])
    # Which factor each of R, G, B takes in sectors 0..5 (red, yellow, green, cyan, blue, magenta).
    pick = np.array([[0, 3, 1], [2, 0, 1], [1, 0, 3], [1, 2, 0], [3, 1, 0], [0, 1, 2]])
    chosen = np.take_along_axis(factors, pick[sector.astype(np.intp)].transpose(2, 0, 1), axis=0)
    return np.ascontiguousarray(chosen.reshape(3, -1), dtype=f32)


_DIVISIONS = _division_tables()
_FACTORS = _rgb_factors()


@functools.lru_cache(maxsize=None)
def opencv_block() -> int:
    """The number of pixels OpenCV's 8-bit HSV->RGB converts per vector block on this machine (32 on
    x86 with AVX2, 16 with SSE or NEON), found once by converting one row of 127 equal pixels: the
    pixels after the last whole block are rounded (OpenCV's scalar code), the others truncated.
    Assumes a block that divides 128 (vector widths are powers of two)."""
    probe = np.tile(np.array([1, 18, 255], np.uint8), (1, 127, 1))  # green is 237.6: 237 cut, 238 rounded
    green = cv2.cvtColor(probe, cv2.COLOR_HSV2RGB)[0, :, 1]
    rounded = np.flatnonzero(green == 238)
    return 128 - int(rounded[0]) if rounded.size else 128


def _gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[..., index]``: the last axis of ``table`` looked up at ``index`` (int32, any shape), shaped
    ``table.shape[:-1] + index.shape``.  index_select is 3-6x faster than advanced indexing on the CPU
    (measured on (480, 640) planes) and takes int32 indices on any device."""
    flat = table.index_select(table.dim() - 1, index.reshape(-1))
    return flat.view(*table.shape[:-1], *index.shape)


def _rgb_to_hsv(images: torch.Tensor, divisions: torch.Tensor):
    """OpenCV's 8-bit RGB->HSV of ``images`` ((B, 3, H, W) uint8 RGB): hue 0..179, saturation and
    value 0..255, three (B, H, W) int32 planes."""
    r, g, b = (plane.to(torch.int32) for plane in images.unbind(1))
    v = torch.maximum(torch.maximum(r, g), b)
    diff = v - torch.minimum(torch.minimum(r, g), b)
    half = 1 << (_SHIFT - 1)
    s = (diff * _gather(divisions[0], v) + half) >> _SHIFT
    # Hue before scaling, by the max channel (on ties any order gives the same value).
    h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * _gather(divisions[1], diff) + half) >> _SHIFT  # arithmetic shift: floors negative values, as C
    h = torch.where(h < 0, h + _HUE_RANGE, h)
    return h, s, v


def _look_up(planes, gains: torch.Tensor, device: torch.device):
    """The three planes ((B, H, W) int32 each) through ``hsv_tables(gains)``: three (B, H, W) int32."""
    tables = hsv_tables(gains.detach().to("cpu", torch.float64).numpy())  # three (B, 256) uint8
    flat = torch.from_numpy(np.stack(tables, axis=1).reshape(-1)).to(device)  # item, plane, level
    n = planes[0].shape[0]
    out = []
    for c, plane in enumerate(planes):  # three planes, each a batch-wide gather
        offset = ((torch.arange(n, device=device, dtype=torch.int32) * 3 + c) * 256).view(n, 1, 1)
        out.append(_gather(flat, plane + offset).to(torch.int32))
    return out


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """OpenCV's 8-bit HSV->RGB of three (B, H, W) int32 planes: (B, 3, H, W) uint8 RGB."""
    # torch multiplies a float32 tensor by a Python float in float32, and float32(1/255) is OpenCV's
    # 1.0f/255.0f, so these are OpenCV's two float32 products: (factor * v) * 255.
    value = v.to(torch.float32).mul_(1 / 255)
    rgb = _gather(factors, h * 256 + s).mul_(value).mul_(255.0)  # (3, B, H, W)
    width = rgb.shape[-1]
    cut = width - width % opencv_block()
    rgb[..., cut:] = rgb[..., cut:].round()  # OpenCV's scalar tail of each row rounds (half to even)
    return rgb.clamp_(0, 255).to(torch.uint8).permute(1, 0, 2, 3).contiguous()  # trunc toward zero


def apply_hsv(images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """``images`` with hue, saturation and value scaled by ``gains``, image by image: a new
    (B, 3, H, W) uint8 RGB tensor on ``images``' device.

    Equal to ``augment.photometric.apply_hsv(bgr, gains[i], cv2.COLOR_HSV2RGB)`` for each image (OpenCV's
    HSV round trip, so gains of exactly 1 still give OpenCV's round trip, not ``images`` itself).

    Args:
        images: (B, 3, H, W) uint8 RGB, on any device (CUDA or CPU); not modified.
        gains: (B, 3) float64 hue, saturation and value multipliers, one row per image as
            ``photometric.draw_hsv_gains`` draws them; on the CPU spares a device synchronisation.

    Returns:
        (B, 3, H, W) uint8 RGB on ``images.device``.
    """
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be (B, 3, H, W) uint8, got {tuple(images.shape)} {images.dtype}")
    if tuple(gains.shape) != (images.shape[0], 3):
        raise ValueError(f"gains must be ({images.shape[0]}, 3), got {tuple(gains.shape)}")
    device = images.device
    divisions = torch.from_numpy(_DIVISIONS).to(device)
    h, s, v = _look_up(_rgb_to_hsv(images, divisions), gains, device)
    return _hsv_to_rgb(h, s, v, torch.from_numpy(_FACTORS).to(device))


def apply_band_gains(images: torch.Tensor, draws: Sequence[BandGains]) -> torch.Tensor:
    """``images`` with each band looked up in its image's ``band_tables``: a new tensor like ``images``.

    Equal, byte for byte, to ``augment.photometric.apply_band_gains(images[i].numpy(), draws[i])`` for
    each image: the tables are made on the CPU by that same function and only gathered here.

    Args:
        images: (B, C, H, W) uint8 (or uint16), any C, on any device (CUDA or CPU); not modified.
        draws: B per-band draws (photometric.BandGains of C bands each), in image order.

    Returns:
        (B, C, H, W) tensor of ``images``' dtype on ``images.device``.
    """
    n, bands = images.shape[:2]
    if images.dim() != 4 or len(draws) != n:
        raise ValueError(f"images must be (B, C, H, W) with B = {len(draws)} draws, got {tuple(images.shape)}")
    dtype = {torch.uint8: np.uint8, torch.uint16: np.uint16}.get(images.dtype)
    if dtype is None:
        raise ValueError(f"images must be uint8 or uint16, got {images.dtype}")
    tables = np.stack([band_tables(d, dtype) for d in draws])  # (B, C, levels): item, band, level
    if tables.shape[1] != bands:
        raise ValueError(f"draws for {tables.shape[1]} bands do not fit images of {bands}")
    levels = tables.shape[2]
    device = images.device
    # uint16 tables are gathered as int32 (which holds every level): torch's uint16 kernels vary by device
    flat = torch.from_numpy(tables.reshape(-1).astype(np.int32 if dtype == np.uint16 else dtype)).to(device)
    offset = (torch.arange(n * bands, device=device, dtype=torch.int32) * levels).view(n, bands, 1, 1)
    return _gather(flat, images.to(torch.int32) + offset).to(images.dtype)
