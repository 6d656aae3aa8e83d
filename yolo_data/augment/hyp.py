"""Augmentation hyperparameters: YOLOv5's hyp keys, from a dict or a yaml file."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import yaml

LOGGER = logging.getLogger("yolo_data")


@dataclass(frozen=True)
class AugmentConfig:
    """The augmentation part of a YOLOv5 hyp; defaults are hyp.scratch-low's.

    Probabilities: mosaic, mosaic9 (of a mosaic being 3x3 instead of 2x2), mixup, cutmix (of pasting a
    rectangle of another mosaic, Ultralytics' CutMix), flipud, fliplr.  Ranges: degrees, translate,
    scale, shear, perspective.  Gains: hsv_h, hsv_s, hsv_v (3-channel images only).  albumentations: apply
    the optional Albumentations step (needs that package).

    band_gain, band_offset: the colour step of images of other than 3 channels (grayscale,
    multispectral), where HSV does not apply: each band of an image is multiplied by a factor drawn
    from U(1 - band_gain, 1 + band_gain), then a value drawn from U(-band_offset, band_offset) times
    the full scale (255 for 8-bit bands) is added, each band drawing its own (photometric.BandGains).
    0 (the default): off, nothing drawn.  They do nothing to 3-channel images.

    copy_paste: a share of objects pasted, read by ``copy_paste_rule`` (decided by the entry point):
    'yolov5' (YOLOv5's copy_paste, inside mosaics): round(p * n) of the n objects drawn at random, each
    pasted mirrored when its mirror covers < 30% of every box so far; 'ultralytics' (Ultralytics'
    CopyPaste, every training image): of the k copies covering < 30% of every box present, the
    round(p * k) least overlapping, no randomness.  ``copy_paste_mode``: 'flip' pastes mirrored copies
    of the image's own objects; 'mixup' (Ultralytics' only, always by its rule) pastes, with
    probability copy_paste, objects of another mosaic of the item's partner pool.
    """
    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    perspective: float = 0.0
    flipud: float = 0.0
    fliplr: float = 0.5
    mosaic: float = 1.0
    mosaic9: float = 0.0
    mixup: float = 0.0
    copy_paste: float = 0.0
    albumentations: bool = False
    cutmix: float = 0.0
    copy_paste_mode: str = "flip"
    copy_paste_rule: str = "yolov5"
    band_gain: float = 0.0
    band_offset: float = 0.0

    def __post_init__(self):
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"hyp: {name} must be one of {', '.join(map(repr, allowed))}, "
                                 f"got {getattr(self, name)!r}")
        for name in BAND_KEYS:
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"hyp: {name} must be in [0, 1], got {getattr(self, name)!r}")

    def without_mosaic(self) -> "AugmentConfig":
        """This config after a close-mosaic (Ultralytics' last epochs): no mosaic, mixup, cutmix or
        copy-paste."""
        return replace(self, mosaic=0.0, mosaic9=0.0, mixup=0.0, copy_paste=0.0, cutmix=0.0)

    def as_numbers(self) -> Tuple[float, ...]:
        """Every field as a float, in field order (a choice: its place in CHOICES), for shared memory."""
        return tuple(float(CHOICES[f.name].index(getattr(self, f.name))) if f.name in CHOICES
                     else float(getattr(self, f.name)) for f in fields(self))

    @classmethod
    def from_numbers(cls, values: Sequence[float]) -> "AugmentConfig":
        """The inverse of ``as_numbers``."""
        out = {}
        for f, v in zip(fields(cls), values):
            out[f.name] = CHOICES[f.name][int(v)] if f.name in CHOICES else bool(v) if f.name == "albumentations" else v
        return cls(**out)


# the fields that name a choice, and their values (the first is the default)
CHOICES: Dict[str, Tuple[str, ...]] = {"copy_paste_mode": ("flip", "mixup"),
                                       "copy_paste_rule": ("yolov5", "ultralytics")}

# the keys of the per-band colour step, for images of other than 3 channels
BAND_KEYS: Tuple[str, ...] = ("band_gain", "band_offset")


def unused_band_keys(cfg: AugmentConfig, channels: int) -> Optional[str]:
    """A warning when ``cfg`` sets band_gain or band_offset for images of 3 ``channels`` (where HSV is
    the colour step and those keys do nothing), else None."""
    given = [k for k in BAND_KEYS if getattr(cfg, k)]
    if channels != 3 or not given:
        return None
    return (f"hyp: {' and '.join(given)} apply to datasets of other than 3 channels; this dataset has 3 "
            "(its colour step is HSV: hsv_h, hsv_s, hsv_v), so they are not used")


def load_hyp(hyp: Union[None, str, os.PathLike, Dict[str, Any], AugmentConfig]) -> AugmentConfig:
    """An AugmentConfig from None (scratch-low), a dict or a yaml path (safe_load).  Keys that are not
    about augmentation (lr0, box, ...) are ignored; missing augmentation keys take scratch-low's value."""
    if isinstance(hyp, AugmentConfig):
        return hyp
    if hyp is None:
        return AugmentConfig()
    if isinstance(hyp, (str, os.PathLike)):
        with open(hyp, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{hyp}: a hyp yaml must be a mapping of key: value")
        source = str(Path(hyp))
    else:
        data, source = dict(hyp), "hyp"
    known = {f.name: f.type for f in fields(AugmentConfig)}
    values = {}
    for k, v in data.items():
        if k not in known:
            continue
        if k in CHOICES:
            values[k] = str(v)  # checked by AugmentConfig
            continue
        try:
            values[k] = bool(v) if k == "albumentations" else float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: {k} must be a number, got {v!r}") from None
    # YOLOv5's hyp files have none of these
    missing = sorted(set(known) - set(values) - {"mosaic9", "albumentations", "cutmix", *CHOICES, *BAND_KEYS})
    if missing and data:
        LOGGER.info(f"{source}: no {', '.join(missing)}; using hyp.scratch-low values")
    return AugmentConfig(**values)
