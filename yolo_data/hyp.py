"""Augmentation hyperparameters: YOLOv5's hyp keys, from a dict or a yaml file."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, Union

import yaml

LOGGER = logging.getLogger("yolo_data")


@dataclass(frozen=True)
class AugmentConfig:
    """The augmentation part of a YOLOv5 hyp; defaults are hyp.scratch-low's.

    Probabilities: mosaic, mosaic9 (of a mosaic being 3x3 instead of 2x2), mixup, copy_paste, flipud,
    fliplr.  Ranges: degrees, translate, scale, shear, perspective.  Gains: hsv_h, hsv_s, hsv_v.
    albumentations: apply the optional Albumentations step (needs that package).
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

    def without_mosaic(self) -> "AugmentConfig":
        """This config after a close-mosaic (Ultralytics' last epochs): no mosaic, mixup or copy-paste."""
        return replace(self, mosaic=0.0, mosaic9=0.0, mixup=0.0, copy_paste=0.0)


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
        try:
            values[k] = bool(v) if k == "albumentations" else float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: {k} must be a number, got {v!r}") from None
    missing = sorted(set(known) - set(values) - {"mosaic9", "albumentations"})
    if missing and data:
        LOGGER.info(f"{source}: no {', '.join(missing)}; using hyp.scratch-low values")
    return AugmentConfig(**values)
