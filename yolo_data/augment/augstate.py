"""The training augmentation a dataset follows now, changeable while the run goes on: its hyp and
whether mosaics are on.  One owner (``AugmentControl``, held by the dataset), written in the main
process (``dataset.hyp = ...``, ``dataset.mosaic = False``, ``close_mosaic()``), read through shared
memory by every process from its next item on, persistent DataLoader workers included.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Optional, Tuple

import torch

from .albument import AlbumentationsStep
from .hyp import AugmentConfig, load_hyp, unused_band_keys

LOGGER = logging.getLogger("yolo_data")


@dataclass(frozen=True)
class TrainSettings:
    """``cfg``: the hyp's augmentation numbers.  ``mosaic``: whether mosaics may be made at all (False
    for rect training); each item then draws one with probability ``cfg.mosaic``.  ``seed``: of every
    item's generator."""
    cfg: AugmentConfig
    img_size: int
    mosaic: bool
    seed: int = 0


_CFG_FIELDS = tuple(f.name for f in fields(AugmentConfig))


class SharedSettings:
    """The TrainSettings items follow, in shared memory: changed in the main process (a new hyp, the
    mosaic closed or reopened), followed by every process from its next item on, including persistent
    DataLoader workers forked before the change (they keep their own copy of everything else).

    One float64 tensor: [sequence, mosaic, closed, *AugmentConfig.as_numbers()].  The sequence is odd while
    the main process writes; a reader that sees it odd or changed under it reads again, so no item
    mixes an old and a new hyp.  Readers rebuild their TrainSettings only when the sequence moved: one
    element read per item.  ``img_size`` and ``seed`` are fixed for the dataset's life."""

    def __init__(self, settings: TrainSettings):
        self.img_size, self.seed = settings.img_size, settings.seed
        self._data = torch.zeros(3 + len(_CFG_FIELDS), dtype=torch.float64).share_memory_()
        self._seen: Optional[Tuple[float, TrainSettings, TrainSettings]] = None
        self.set(settings.cfg, settings.mosaic, False)

    def set(self, cfg: AugmentConfig, mosaic: bool, closed: bool) -> None:
        """(main process only) What the next items follow.  ``closed``: mosaic, mixup and copy-paste off."""
        values = [float(mosaic), float(closed)] + list(cfg.as_numbers())
        self._data[0] += 1
        self._data[1:] = torch.tensor(values, dtype=torch.float64)
        self._data[0] += 1

    def _read(self) -> Tuple[float, TrainSettings, TrainSettings]:
        while True:
            values = self._data.tolist()
            if values[0] % 2 == 0 and float(self._data[0]) == values[0]:
                break
            time.sleep(0)
        seq, mosaic, closed, *raw = values
        cfg = AugmentConfig.from_numbers(raw)
        given = TrainSettings(cfg, self.img_size, bool(mosaic), self.seed)
        used = replace(given, cfg=cfg.without_mosaic(), mosaic=False) if closed else given
        return seq, given, used

    def _current(self) -> Tuple[float, TrainSettings, TrainSettings]:
        if self._seen is None or self._seen[0] != float(self._data[0]):
            self._seen = self._read()
        return self._seen

    def given(self) -> TrainSettings:
        """The settings as set, mosaic closed or not (the hyp's config, whether mosaic is possible)."""
        return self._current()[1]

    def get(self) -> TrainSettings:
        """The settings items follow now (after a close: no mosaic, mixup or copy-paste)."""
        return self._current()[2]

    @property
    def closed(self) -> bool:
        return bool(self._data[2])

    def __getstate__(self):
        return {**self.__dict__, "_seen": None}  # a spawned worker reads the shared values anew


class AugmentControl:
    """The dataset's switches over its training augmentation (see the module's docstring).

    ``possible``: whether mosaics may be made at all (Settings.mosaic_possible).  ``augment``: a training
    dataset (only then does the hyp's Albumentations step matter).  ``channels``: the bands of the
    dataset's images, once known (``set_channels``)."""

    def __init__(self, hyp, img_size: int, possible: bool, seed: int, augment: bool):
        self.possible, self.augment = possible, augment
        self.shared = SharedSettings(TrainSettings(load_hyp(hyp), img_size, possible, seed))
        self.albumentations: Optional[AlbumentationsStep] = None  # made when a hyp asks for it
        self.channels: Optional[int] = None
        self._band_warning = False  # given once per dataset
        self.set_hyp(hyp)

    def set_channels(self, channels: int) -> None:
        """The bands of the dataset's images: a hyp whose per-band keys do nothing to them is warned of."""
        self.channels = int(channels)
        self._check_band_keys(self.shared.given().cfg)

    def _check_band_keys(self, cfg: AugmentConfig) -> None:
        message = unused_band_keys(cfg, self.channels) if self.augment and self.channels is not None else None
        if message and not self._band_warning:
            self._band_warning = True
            LOGGER.warning(message)

    def set_hyp(self, hyp) -> None:
        """Re-derive the augmentation from ``hyp`` for the next items; a missing albumentations package
        is an ImportError here, in the main process, not in a worker."""
        cfg = load_hyp(hyp)
        if self.augment and cfg.albumentations and self.albumentations is None:
            self.albumentations = AlbumentationsStep()
        self._check_band_keys(cfg)
        self.hyp, self._seen = hyp, _snapshot(hyp)
        if cfg != self.shared.given().cfg:
            self.shared.set(cfg, self.possible, self.shared.closed)

    def refresh(self) -> None:
        """Take in a hyp dict changed in place since it was given."""
        if self._seen is not None and _snapshot(self.hyp) != self._seen:
            self.set_hyp(self.hyp)

    @property
    def mosaic(self) -> bool:
        return self.possible and not self.shared.closed

    def set_mosaic(self, on: bool) -> None:
        if on and not self.possible:
            raise ValueError("dataset.mosaic = True: this dataset was built without mosaic (augment=False or "
                             "rect=True); build it with augment=True, rect=False for mosaic training")
        if self.shared.closed == bool(on):
            self.shared.set(self.shared.given().cfg, self.possible, closed=not on)


def _snapshot(hyp):
    """What an in-place change of a hyp dict is detected by (None for hyps that are not dicts)."""
    return dict(hyp) if isinstance(hyp, Mapping) else None
