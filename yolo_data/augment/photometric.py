"""Colour augmentation: random HSV gains (YOLOv5's ``augment_hsv``) and random per-band gains and
offsets, with an explicit generator.

Split in the draw / apply way: ``draw_hsv_gains`` and ``draw_band_gains`` decide; ``hsv_tables``,
``apply_hsv``, ``band_tables`` and ``apply_band_gains`` are deterministic, so the tensor edge
(tensors.py) applies the same draws on its way to the batch's planes, and a device the same tables.

HSV exists for 3-channel BGR images only.  Images of any other number of channels (grayscale,
multispectral) keep their pixels under HSV, as in Ultralytics; their HSV gains are still drawn, so the
generator advances the same way and every later draw of the item is the same whatever the channels.
Their colour step is the opt-in per-band gain and offset (hyp band_gain, band_offset).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import cv2
import numpy as np


def draw_hsv_gains(rng: np.random.Generator, hgain: float = 0.5, sgain: float = 0.5,
                   vgain: float = 0.5) -> Optional[np.ndarray]:
    """(3,) float64 multipliers for hue, saturation and value, each U(-1, 1) * gain + 1 (one draw of
    three numbers), or None when all gains are 0 (then nothing is drawn: the generator does not
    advance)."""
    if not (hgain or sgain or vgain):
        return None
    return rng.uniform(-1, 1, 3) * np.array([hgain, sgain, vgain]) + 1


def hsv_tables(gains: np.ndarray) -> List[np.ndarray]:
    """Three uint8 lookup tables for OpenCV's 8-bit H, S and V planes: hue runs 0..179, so the scaled
    hue wraps modulo 180; saturation and value saturate at 255 (level * gain, truncated).

    ``gains``: (3,) hue, saturation and value multipliers, giving three (256,) tables; or (B, 3), one
    row per image, giving three (B, 256) tables (row i equal to the tables of ``gains[i]``).
    """
    g = np.asarray(gains, dtype=np.float64)[..., None]  # (3, 1) or (B, 3, 1)
    x = np.arange(256, dtype=np.float64)
    return [((x * g[..., 0, :]) % 180).astype(np.uint8), np.clip(x * g[..., 1, :], 0, 255).astype(np.uint8),
            np.clip(x * g[..., 2, :], 0, 255).astype(np.uint8)]


def apply_hsv(img: np.ndarray, gains: np.ndarray, to: int = cv2.COLOR_HSV2BGR, hsv: np.ndarray = None,
              planes: Sequence[np.ndarray] = None) -> np.ndarray:
    """``img`` (H, W, 3) BGR or (H, W, 4) BGRA uint8 (alpha ignored; not modified) with its hue,
    saturation and value scaled by ``gains``: an (H, W, 3) uint8 array, BGR, or RGB when ``to`` is
    ``cv2.COLOR_HSV2RGB`` (the same pixels, channels in the other order).

    ``hsv`` ((H, W, 3) uint8) and ``planes`` (three (H, W) uint8): optional scratch arrays to work in
    (the result is then ``hsv``); reusing them spares the page faults of fresh large arrays.
    """
    hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV, dst=hsv)  # takes BGRA too
    if planes is None:
        planes = [np.empty(hsv.shape[:2], np.uint8) for _ in range(3)]
    # Three single-channel lookups on split planes are ~30% cheaper than one 3-channel cv2.LUT.
    cv2.split(hsv, planes)
    hue, sat, val = hsv_tables(gains)
    cv2.LUT(planes[0], hue, dst=planes[0])
    for plane, table, gain in ((planes[1], sat, gains[1]), (planes[2], val, gains[2])):
        _scale_plane(plane, table, gain)
    cv2.merge(planes, dst=hsv)
    return cv2.cvtColor(hsv, to, dst=hsv)  # same size and depth: in place


_ALL_LEVELS = np.arange(256, dtype=np.uint8).reshape(1, 256)


def _scale_plane(plane: np.ndarray, table: np.ndarray, gain: float) -> None:
    """``plane`` ((H, W) uint8) replaced by ``table[plane]``, in place, where ``table`` is a saturation
    or value table of ``hsv_tables`` (level * gain, clipped, truncated).  cv2.convertScaleAbs (SIMD,
    ~2.5x cheaper than cv2.LUT here) computes round(level * gain - 0.5 + 2^-16) in float32, which is
    the table's truncation for 99.8% of gains; it is used only when it gives exactly ``table`` on all 256
    levels (checked each time, a few microseconds), so the pixels are those of the lookup either way."""
    alpha, beta = float(gain), -0.5 + 2.0 ** -16
    if np.array_equal(cv2.convertScaleAbs(_ALL_LEVELS, alpha=alpha, beta=beta)[0], table):
        cv2.convertScaleAbs(plane, dst=plane, alpha=alpha, beta=beta)
    else:
        cv2.LUT(plane, table, dst=plane)


def augment_hsv(img: np.ndarray, rng: np.random.Generator, hgain: float = 0.5, sgain: float = 0.5,
                vgain: float = 0.5, channels: int = 3) -> np.ndarray:
    """``img`` with hue, saturation and value scaled by random gains: a new (H, W, 3) uint8 BGR array.

    ``img``: (H, W, 3) BGR or (H, W, 4) BGRA uint8, any strides (alpha is ignored); it is not
    modified.  Gains as ``draw_hsv_gains``; with all gains 0 nothing is drawn and ``img`` itself is
    returned.  ``channels``: the bands of the dataset's images; for any number but 3 the gains are
    drawn all the same (the generator advances as for BGR) and ``img`` itself is returned.
    """
    gains = draw_hsv_gains(rng, hgain, sgain, vgain)
    return img if gains is None or channels != 3 else apply_hsv(img, gains)


@dataclass(frozen=True)
class BandGains:
    """One image's per-band colour draws: band b becomes ``round(x * gains[b] + offsets[b] * top)``,
    clipped to [0, top], where ``top`` is the full scale of the pixels' dtype (255 for uint8, 65535 for
    uint16).  ``gains``, ``offsets``: (C,) float64, offsets in units of the full scale."""
    gains: np.ndarray
    offsets: np.ndarray


def draw_band_gains(rng: np.random.Generator, channels: int, gain: float = 0.0,
                    offset: float = 0.0) -> Optional[BandGains]:
    """Independent draws for each of ``channels`` bands: gains U(1 - gain, 1 + gain) (one draw of
    ``channels`` numbers, none when ``gain`` is 0), then offsets U(-offset, offset) (likewise).  None
    when both are 0: nothing is drawn, the generator does not advance."""
    if not (gain or offset):
        return None
    gains = rng.uniform(1 - gain, 1 + gain, channels) if gain else np.ones(channels)
    offsets = rng.uniform(-offset, offset, channels) if offset else np.zeros(channels)
    return BandGains(gains, offsets)


def band_tables(bands: BandGains, dtype=np.uint8) -> np.ndarray:
    """(C, top + 1) lookup tables of ``dtype`` (uint8 or uint16; ``top`` its largest value): row b,
    level x -> ``round(x * gains[b] + offsets[b] * top)`` (half to even, in float64), clipped to
    [0, top].  Tables make every pixel's value in one place, so any device that looks them up gives
    the CPU's bytes."""
    top = np.iinfo(dtype).max
    levels = np.arange(top + 1, dtype=np.float64)
    values = levels * bands.gains[:, None] + (bands.offsets * top)[:, None]
    return np.clip(np.rint(values), 0, top).astype(dtype)


def apply_band_gains(planes: np.ndarray, bands: BandGains) -> np.ndarray:
    """``planes`` ((C, H, W) uint8 or uint16, any C) with band c looked up in ``band_tables(bands)[c]``,
    in place; returns ``planes``."""
    tables = band_tables(bands, planes.dtype)
    if len(tables) != len(planes):
        raise ValueError(f"draws for {len(tables)} bands do not fit {len(planes)} planes")
    for plane, table in zip(planes, tables):
        if plane.dtype == np.uint8 and plane.flags.c_contiguous:
            cv2.LUT(plane, table, dst=plane)  # ~10x numpy's indexing on 8-bit planes
        else:
            plane[...] = table[plane]
    return planes
