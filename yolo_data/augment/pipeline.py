"""The training pipeline for one item (augment=True), as YOLOv5 runs it, with explicit randomness.

    mosaic (4 or 9 images) -> copy-paste ('flip') -> random perspective [-> copy-paste from a second
        mosaic ('mixup' mode)] [-> mixup with another such mosaic] [-> cutmix with another]
    or: one image -> letterbox [-> copy-paste ('flip', Ultralytics' rule)] -> random perspective
    then: Albumentations (optional) -> HSV (drawn always, applied to 3-channel images only) -> flips
        [-> per-band gains and offsets (images of other than 3 channels)]

Images may have any number of channels C >= 1 ((H, W, C) uint8; C = 3 is BGR): every geometric step
moves each band as it moves a band alone.

The steps in brackets draw nothing unless their probability is above 0, so YOLOv5's hyps draw exactly
YOLOv5's sequence.  Copy-paste follows ``cfg.copy_paste_rule`` (mosaic.copy_paste for YOLOv5's,
mosaic.paste_objects for Ultralytics').

Every random choice is drawn from one generator made from (seed, epoch, index) (sampling.seeds.item_rng):
the item is the same whichever worker makes it, and whatever the number of workers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import cv2
import numpy as np

from ..sampling.seeds import item_rng  # noqa: F401  (a seeding rule; still importable from here)
from .hyp import AugmentConfig
from .layout import Layout
from .mosaic import (copy_paste, cutmix, mixup, mosaic4, mosaic4_resized, mosaic9, mosaic_border, mosaic_centre,
                     paste_objects)
from .perspective import (draw_perspective, flip_lr, flip_ud, perspective_matrix, random_perspective,
                          warp_sample)
from .photometric import BandGains, draw_band_gains, draw_hsv_gains
from .sample import Sample

LoadFn = Callable[[int], Sample]  # image i resized to img_size long side, pixel boxes on it


def mosaic_sample(load: LoadFn, pool: Sequence[int], index: int, img_size: int, cfg: AugmentConfig,
                  rng: np.random.Generator) -> Sample:
    """Item ``index`` with 3 (or 8) others drawn uniformly from ``pool`` (image indices: the whole
    dataset, or the batch) on a 2x canvas, copy-paste, then the random perspective that crops the
    canvas back to img_size x img_size."""
    if cfg.mosaic9 and rng.random() < cfg.mosaic9:
        ids = np.array([index] + [pool[k] for k in rng.integers(0, len(pool), 8)])
        rng.shuffle(ids)
        parts = [load(int(i)) for i in ids]
        sample = mosaic9(parts, img_size, rng)
    else:
        ids = np.array([index] + [pool[k] for k in rng.integers(0, len(pool), 3)])
        rng.shuffle(ids)
        parts = [load(int(i)) for i in ids]
        centre = mosaic_centre(rng, img_size)
        if not (cfg.degrees or cfg.shear or cfg.perspective or (_flip_paste(cfg) and any(p.segments for p in parts))):
            # Scale and translation only (YOLOv5's scratch hyps): the same draws as below, but each
            # tile is resized straight into the output (no 2s x 2s canvas; see mosaic4_resized).
            s2, out_hw = 2 * img_size, (img_size, img_size)
            params = draw_perspective(rng, cfg.degrees, cfg.translate, cfg.scale, cfg.shear, cfg.perspective)
            M = perspective_matrix(params, (s2, s2), out_hw)
            on_canvas, blocks = mosaic4_resized(parts, img_size, centre, M)
            return warp_sample(on_canvas, M, out_hw, scale=params.scale, warped_img=on_canvas.img,
                               row_blocks=blocks)
        sample = mosaic4(parts, img_size, centre)
    if _flip_paste(cfg):
        sample = copy_paste(sample, cfg.copy_paste, rng) if cfg.copy_paste_rule == "yolov5" else \
            paste_objects(sample, cfg.copy_paste)
    sample = random_perspective(sample, rng, cfg.degrees, cfg.translate, cfg.scale, cfg.shear, cfg.perspective,
                                border=mosaic_border(img_size))
    # The canvas of BGR tiles is BGRA only for the warp's speed (see mosaic.canvas_bands): every mosaic
    # leaves here with its tiles' channels, whichever path made it, so the steps after it (mixup,
    # Albumentations) see one format.
    img = sample.img
    if not isinstance(img, Layout) and img.shape[2] != parts[0].img.shape[2]:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    return Sample(img, sample.cls, sample.boxes, sample.segments, sample.extras)


def _flip_paste(cfg: AugmentConfig) -> bool:
    """Whether objects are pasted mirrored from the image itself (before its perspective)."""
    return bool(cfg.copy_paste) and cfg.copy_paste_mode == "flip"


def _partner(load: LoadFn, pool: Sequence[int], img_size: int, cfg: AugmentConfig, rng: np.random.Generator,
             paste: bool) -> Sample:
    """Another mosaic for a multi-image step, its image drawn uniformly from ``pool`` (the item's partner
    group: the same partners whichever worker makes the item).  ``paste``: with its own 'mixup'-mode
    copy-paste, as Ultralytics' MixUp and CutMix partners go through its whole first stage."""
    other = pool[int(rng.integers(0, len(pool)))]
    return (mosaic_and_paste if paste else mosaic_sample)(load, pool, other, img_size, cfg, rng)


def mosaic_and_paste(load: LoadFn, pool: Sequence[int], index: int, img_size: int, cfg: AugmentConfig,
                     rng: np.random.Generator) -> Sample:
    """``mosaic_sample``, then in 'mixup' copy-paste mode, with probability ``cfg.copy_paste`` and when
    it has polygons, objects of another mosaic pasted into it (mosaic.paste_objects)."""
    sample = mosaic_sample(load, pool, index, img_size, cfg, rng)
    if cfg.copy_paste and cfg.copy_paste_mode == "mixup" and sample.segments and rng.random() < cfg.copy_paste:
        sample = paste_objects(sample, cfg.copy_paste, _partner(load, pool, img_size, cfg, rng, paste=False))
    return sample


def mosaic_with_mixup(load: LoadFn, pool: Sequence[int], index: int, img_size: int, cfg: AugmentConfig,
                      rng: np.random.Generator) -> Sample:
    """Item ``index`` as a mosaic (``mosaic_and_paste``), then mixup with another with probability
    ``cfg.mixup``, then cutmix with another with probability ``cfg.cutmix`` (Ultralytics' order); every
    partner drawn from ``pool``.  Returns an (img_size, img_size) Sample of the loaded images' channels
    (C = 3: BGR)."""
    sample = mosaic_and_paste(load, pool, index, img_size, cfg, rng)
    if cfg.mixup and rng.random() < cfg.mixup:
        sample = mixup(sample, _partner(load, pool, img_size, cfg, rng, paste=True), rng)
    if cfg.cutmix and rng.random() < cfg.cutmix:
        sample = cutmix(sample, _partner(load, pool, img_size, cfg, rng, paste=True), rng)
    return sample


def single_image_geometry(sample: Sample, cfg: AugmentConfig, rng: np.random.Generator) -> Sample:
    """The non-mosaic branch (rect training, or when the mosaic probability says no).  By Ultralytics'
    copy-paste rule the letterboxed image gets its 'flip' copy-paste too (Ultralytics pastes into
    every training image; YOLOv5 only into mosaics)."""
    if _flip_paste(cfg) and cfg.copy_paste_rule == "ultralytics":
        sample = paste_objects(sample, cfg.copy_paste)
    return random_perspective(sample, rng, cfg.degrees, cfg.translate, cfg.scale, cfg.shear, cfg.perspective)


@dataclass
class FinishDraws:
    """The last random decisions of an item, drawn in YOLOv5's order: HSV gains ((3,) float64, or None
    when all HSV gains are 0), then flip up-down, then flip left-right; then, for images of other than
    3 channels, their per-band gains and offsets (``band_gains``; None when the hyp's band_gain and
    band_offset are 0, or at 3 channels).  The HSV gains are drawn for images of any number of
    channels, so every later draw is the same whatever the channels, but applied only to 3-channel
    (BGR) images (as Ultralytics does; see tensors.write_rgb)."""
    hsv_gains: Optional[np.ndarray]
    flip_ud: bool
    flip_lr: bool
    band_gains: Optional[BandGains] = None


def draw_finish(cfg: AugmentConfig, rng: np.random.Generator, channels: int = 3) -> FinishDraws:
    """The item's last draws (FinishDraws) for images of ``channels`` bands, applied where its pixels
    are written into the batch tensor (tensors.write_rgb) and to its boxes (``flip_boxes``)."""
    gains = draw_hsv_gains(rng, cfg.hsv_h, cfg.hsv_s, cfg.hsv_v)
    ud = bool(cfg.flipud and rng.random() < cfg.flipud)
    lr = bool(cfg.fliplr and rng.random() < cfg.fliplr)
    # Drawn last, after the flips: switching band_gain or band_offset on changes no other draw of the
    # item (its geometry, flips and boxes stay those of the same seed without them).
    bands = draw_band_gains(rng, channels, cfg.band_gain, cfg.band_offset) if channels != 3 else None
    return FinishDraws(gains, ud, lr, bands)


def flip_boxes(sample: Sample, draws: FinishDraws) -> Sample:
    """``sample`` with boxes and polygons flipped as ``draws`` says (the image becomes a flipped view)."""
    if draws.flip_ud:
        sample = flip_ud(sample)
    if draws.flip_lr:
        sample = flip_lr(sample)
    return sample

