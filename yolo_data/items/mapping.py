"""Per-item mapping: an item of the index -> ``(img, targets, path, shapes)``, for evaluation and for
training, each with explicit settings.

    evaluation:  image -> letterbox to its shape -> tensor (no randomness; an unreadable image is an error)
    training:    image(s) -> mosaic or letterbox -> perspective -> [Albumentations] -> HSV, flips -> tensor
                 (every random choice from one generator keyed by (seed, epoch, image, draw); an
                 unreadable image is replaced by the next one, with a warning)

A caller's own mapper takes the place of both (``ItemMapper``: an IndexItem and its DrawKey to the
item).  Items are written straight into slot ``k`` of a batch's image tensor (tensors.BatchImages).
``img``: uint8 (C, H, W) (uint16 for a dataset whose 16 bits are kept: Settings.images.keep16), RGB for
3-channel (BGR) images, else the C bands in their stored order;
``targets``: float32 (n, 6) [0, class, x, y, w, h] normalised to the image (column 0 is set by the
collate function); ``shapes``: YOLOv5's ``((h0, w0), ((h / h0, w / w0), (padw, padh)))``,
None for mosaics.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..augment.albument import AlbumentationsStep
from ..augment.augstate import SharedSettings, TrainSettings
from ..augment.layout import Layout
from ..augment.pipeline import draw_finish, flip_boxes, mosaic_with_mixup, single_image_geometry
from ..augment.sample import Sample
from ..geometry.boxes import xywhn_to_xyxy
from ..geometry.masks import MaskSpec, with_masks
from ..device.plan import ItemPlan
from ..geometry.shapes import LetterboxPlan, letterbox_image, letterbox_plan, pad_value
from ..images.load import ImageReadError, ImageSource
from ..loading.tensors import BatchImages, Scratch, targets_of, write_letterboxed, write_rgb
from ..sampling.seeds import item_rng
from .index import SplitIndex
from .task import LabelTask, batch_extras, object_extras, polygons_of, warn_unflipped

LOGGER = logging.getLogger("yolo_data")
MAX_SUBSTITUTES = 8  # unreadable images in a row before a training item gives up


def _letterbox(index: SplitIndex, images: ImageSource, i: int, scaleup: bool):
    """(img (h, w, 3) BGR resized, its LetterboxPlan, (h0, w0), (h, w)) for item ``i``."""
    li = images(i)
    return li.img, letterbox_plan(li.hw, index.shape_of(i), auto=False, scaleup=scaleup), li.hw0, li.hw


def _boxes_on(index: SplitIndex, i: int, plan: LetterboxPlan, hw: Tuple[int, int]) -> np.ndarray:
    """(n, 4) float32 pixel xyxy boxes of item ``i`` on its letterbox."""
    h, w = hw
    return xywhn_to_xyxy(index.store.labels_of(i)[:, 1:], plan.ratio[0] * w, plan.ratio[1] * h,
                         padw=plan.pad[0], padh=plan.pad[1])


def _letterboxed_objects(index: SplitIndex, task: LabelTask, i: int, plan: LetterboxPlan, hw: Tuple[int, int]):
    """(polygons, extras) of item ``i`` on its letterbox: pixel polygons where the task needs them
    (else []), and the task's per-object extras (task.object_extras)."""
    h, w = hw
    scaled = (plan.ratio[1] * h, plan.ratio[0] * w)
    segments = _segments_on(index, task, i, plan, hw) if task.polygons else []
    return segments, object_extras(task, index.store.keypoints_of(i), scaled, plan.pad)


def _segments_on(index: SplitIndex, task: LabelTask, i: int, plan: LetterboxPlan, hw: Tuple[int, int]) -> List[np.ndarray]:
    """Item ``i``'s (k, 2) float32 pixel polygons on its letterbox ([] when it has none and the task
    needs none: task.polygons_of)."""
    h, w = hw
    scale = np.array([plan.ratio[0] * w, plan.ratio[1] * h], np.float32)
    return [seg * scale + np.array(plan.pad, np.float32) for seg in polygons_of(task, index.store, i)]


def _with_extras(item: tuple, task: LabelTask, sample: Sample, hw: Tuple[int, int]) -> tuple:
    """The item, with the task's per-object extras as a fifth part (collate.collate_fn joins them):
    name -> tensor, row i beside target row i; detection items stay 4 parts."""
    extras = batch_extras(task, sample, hw)
    return item + ({k: torch.from_numpy(v) for k, v in extras.items()},) if extras else item


class EvalMapper:
    """Letterbox each image to its shape (img_size, or its rect batch's); ``scale_up``: may enlarge
    (Settings.scale_up; YOLOv5's evaluation never does).  ``task``: what the items carry besides
    boxes (task.py); ``masks``: add instance masks of the letterboxed polygons (masks.py), or None."""

    def __init__(self, index: SplitIndex, images: ImageSource, scale_up: bool = False, task: LabelTask = LabelTask(),
                 masks: Optional[MaskSpec] = None):
        self.index, self.images, self.scale_up, self.task, self.masks = index, images, scale_up, task, masks

    def __call__(self, i: int, key: DrawKey, out: BatchImages, k: int):
        """Item ``i`` into slot ``k`` of ``out`` (``key``: unused, evaluation has no randomness)."""
        # Evaluation must see exactly its images: an unreadable one is an error (ImageReadError names
        # the file; in a worker it reaches the main process, nothing hangs).
        img, plan, (h0, w0), (h, w) = _letterbox(self.index, self.images, i, scaleup=self.scale_up)
        t = out.write(k, plan.shape, lambda planes: write_letterboxed(img, plan, planes), img.shape[2],
                      img.dtype)
        cls, boxes = self.index.store.labels_of(i)[:, 0], _boxes_on(self.index, i, plan, (h, w))
        item = t, targets_of(cls, boxes, plan.shape), self.index.store.im_file(i), ((h0, w0), ((h / h0, w / w0), plan.pad))
        if self.task.name == "detect":
            return item
        segments, extras = _letterboxed_objects(self.index, self.task, i, plan, (h, w))
        item = _with_extras(item, self.task, Sample(img, cls, boxes, segments, extras), plan.shape)
        if self.masks is None:
            return item
        if self.masks.rule == "ultralytics":  # its letterbox moves labels by whole pixels of border
            segments = [s + np.array([plan.left - plan.pad[0], plan.top - plan.pad[1]], np.float32) for s in segments]
        return with_masks(item, segments, plan.shape, self.masks)


@dataclass(frozen=True)
class DrawKey:
    """What an item's randomness depends on besides the seed and its image: the epoch, and its place
    in the epoch's global order (``draw``, from the sampler's DrawKey; 0 for a plain ``dataset[i]``)."""
    epoch: int
    draw: int = 0


class TrainMapper:
    """The training pipeline of one item (pipeline.py), drawing from ``item_rng(seed, epoch, image,
    attempt, draw)``.  ``settings``: fixed TrainSettings, or SharedSettings that the main process may
    change while workers run (dataset.hyp, dataset.mosaic, close_mosaic).  ``extra``: the optional
    Albumentations step, (sample, rng) -> sample, applied while ``cfg.albumentations`` is on (made
    here, in the process that needs it, when not given).  ``masks``: add instance masks of the final
    polygons (masks.py), or None.  ``plans``: items carry a device.plan.ItemPlan in place of their
    image tensor, for a device stage to make the pixels (a layout of the images' bytes; the item made
    here, as without ``plans``, while copy-paste, CutMix or Albumentations are on)."""

    def __init__(self, index: SplitIndex, images: ImageSource, settings, extra: Optional[Callable] = None,
                 scratch: Optional[Scratch] = None, prefix: str = "", scale_up: bool = True,
                 task: LabelTask = LabelTask(), masks: Optional[MaskSpec] = None, plans: bool = False):
        self.index, self.images, self.extra, self.scale_up = index, images, extra, scale_up
        self.task, self.masks, self.plans = task, masks, plans
        self._deferring = False  # whether the item being made leaves its pixels to the device stage
        self.shared = settings if isinstance(settings, SharedSettings) else SharedSettings(settings)
        self.scratch = scratch or Scratch()
        self.prefix = prefix
        self._reported = set()  # unreadable-image warnings already given (per process)

    @property
    def settings(self) -> TrainSettings:
        """What the next item follows."""
        return self.shared.get()

    def _image(self, i: int):
        """(image, (h0, w0), (h, w)) of item ``i`` resized to long side img_size: (h, w, 3) uint8 BGR, or
        the Layout of its bytes while the item's pixels are left to the device stage."""
        if not self._deferring:
            li = self.images(i)
            return li.img, li.hw0, li.hw
        src = self.images.encoded(i)
        return Layout.image(i, src.hw, src, self.images.channels), src.hw0, src.hw

    def resized(self, i: int) -> Sample:
        """Item ``i`` with its long side at img_size and pixel boxes (a mosaic tile)."""
        img, _, (h, w) = self._image(i)
        labels = self.index.store.labels_of(i)
        segments = [seg * np.array([w, h], np.float32) for seg in polygons_of(self.task, self.index.store, i)]
        return Sample(img, labels[:, 0].copy(), xywhn_to_xyxy(labels[:, 1:], w, h), segments,
                      object_extras(self.task, self.index.store.keypoints_of(i), (h, w)))

    def letterboxed(self, i: int):
        """Item ``i`` letterboxed to its shape: (Sample with pixel boxes, YOLOv5 shapes)."""
        img, (h0, w0), (h, w) = self._image(i)
        plan = letterbox_plan((h, w), self.index.shape_of(i), auto=False, scaleup=self.scale_up)
        segments = _segments_on(self.index, self.task, i, plan, (h, w))
        shapes = (h0, w0), ((h / h0, w / w0), plan.pad)
        extras = object_extras(self.task, self.index.store.keypoints_of(i), (plan.ratio[1] * h, plan.ratio[0] * w),
                               plan.pad)
        img = (img.letterboxed(plan) if isinstance(img, Layout)
               else letterbox_image(img, plan, (pad_value(img.dtype),) * 3))
        return Sample(img, self.index.store.labels_of(i)[:, 0].copy(),
                      _boxes_on(self.index, i, plan, (h, w)), segments, extras), shapes

    def attempt(self, i: int, rng: np.random.Generator, out: BatchImages, k: int,
                load: Optional[Callable[[int], Sample]] = None, pool: Optional[Sequence[int]] = None):
        """Item ``i`` drawn from ``rng``, mosaic partners from ``pool`` (default: every image) loaded
        by ``load`` (default: ``resized``).  Raises ImageReadError when an image cannot be read."""
        settings = self.shared.get()
        cfg = settings.cfg
        # steps that need the pixels themselves are made here, on the CPU (augment.layout)
        self._deferring = self.plans and not (cfg.albumentations or cfg.cutmix or cfg.copy_paste)
        if settings.mosaic and rng.random() < cfg.mosaic:
            sample = mosaic_with_mixup(load or self.resized, range(len(self.index)) if pool is None else pool, i,
                                       settings.img_size, cfg, rng)
            shapes = None
        else:
            sample, shapes = self.letterboxed(i)
            sample = single_image_geometry(sample, cfg, rng)
        if cfg.albumentations:
            if self.extra is None:
                self.extra = AlbumentationsStep()
            sample = self.extra(sample, rng)
        draws = draw_finish(cfg, rng, self.images.channels)
        if draws.flip_lr and not self.task.flips_lr:  # keypoints without flip_idx: drawn, not applied
            draws = dataclasses.replace(draws, flip_lr=False)
        unflipped = sample.segments  # masks are drawn from these and flipped with the pixels, as YOLOv5 does
        img, sample = sample.img, flip_boxes(sample, draws)  # pixels are flipped on their way out
        hw = img.shape[:2]
        if self._deferring:  # the layout, flipped with the boxes
            t = ItemPlan(sample.img, draws.hsv_gains, band_gains=draws.band_gains)
        else:
            t = out.write(k, hw, lambda planes: write_rgb(img, planes, draws.hsv_gains, draws.flip_ud, draws.flip_lr,
                                                          self.scratch, draws.band_gains), img.shape[2], img.dtype)
            t = ItemPlan(made=t) if self.plans else t
        item = (t, targets_of(sample.cls, sample.boxes, hw), self.index.store.im_file(i), shapes)
        item = _with_extras(item, self.task, sample, hw)
        if self.masks is not None:
            item = with_masks(item, unflipped, hw, self.masks, draws.flip_ud, draws.flip_lr)
        return item

    def __call__(self, i: int, key: DrawKey, out: BatchImages, k: int):
        """Item ``i`` on its own (partners from the whole split).  Training goes on when an image vanished
        or broke after the scan: the item is rebuilt around the next image, with a warning naming the
        file, so one bad file never ends a long run."""
        n = len(self.index)
        for attempt in range(MAX_SUBSTITUTES + 1):
            try:
                return self.attempt((i + attempt) % n, item_rng(self.shared.seed, key.epoch, i, attempt, key.draw),
                                    out, k)
            except ImageReadError as e:
                if str(e) not in self._reported:
                    self._reported.add(str(e))
                    LOGGER.warning(f"{self.prefix}{e}; using another image instead")
                error = e
        raise ImageReadError(f"{MAX_SUBSTITUTES + 1} images in a row could not be read (last: {error}); "
                             "has the dataset moved? Rebuild the cache with tools/build_cache.py")

    def batch(self, ids: List[int], keys: List[DrawKey], groups: List[int], out: BatchImages):
        """Items ``ids`` of one batch, mosaic and mixup partners drawn from the images of the item's
        group (``groups[k]``: equal for items of one partner group), each image decoded once for the
        batch: about one decode per item instead of four.  A group of fewer than 4 images borrows from
        the whole split."""
        pools: Dict[int, List[int]] = {}
        for g, i in zip(groups, ids):
            pools.setdefault(g, []).append(i)
        loaded: Dict[Tuple[int, bool], Sample] = {}

        def load(i: int) -> Sample:
            key = i, self._deferring  # a layout or pixels, as the item being made needs
            if key not in loaded:
                loaded[key] = self.resized(i)
            return loaded[key]

        items = []
        for k, (i, key) in enumerate(zip(ids, keys)):
            pool = pools[groups[k]]
            pool = pool if len(pool) >= 4 else range(len(self.index))
            try:
                items.append(self.attempt(i, item_rng(self.shared.seed, key.epoch, i, draw=key.draw), out, k,
                                          load, pool))
            except ImageReadError:  # an image went missing: this item takes the single-item path
                items.append(self(i, key, out, k))
        return items


@dataclass(frozen=True, eq=False)
class IndexItem:
    """Item ``i`` of the index as a custom mapper reads it (build_loader's ``mapper``): ``i`` is the
    image's place in the index's store (0..n-1, after the filters and the rect order)."""
    index: SplitIndex
    images: ImageSource
    i: int

    @property
    def im_file(self) -> str:
        """The image's path (or bucket URL)."""
        return self.index.store.im_file(self.i)

    @property
    def labels(self) -> np.ndarray:
        """(n, 5) float32 read-only [class, x, y, w, h], boxes normalised to the image as decoded."""
        return self.index.store.labels_of(self.i)

    @property
    def segments(self) -> List[np.ndarray]:
        """One (k, 2) float32 normalised polygon per object, or [] when the image has none."""
        return self.index.store.segments_of(self.i)

    @property
    def keypoints(self) -> np.ndarray:
        """(n, K, 3) float32 read-only [x, y, visibility], x and y normalised (K = 0 unless pose)."""
        return self.index.store.keypoints_of(self.i)

    @property
    def shape(self):
        """The letterbox target the built mappers use: the rect batch's (2,) int64 [h, w], or img_size."""
        return self.index.shape_of(self.i)

    def image(self):
        """The image as the built mappers read it (images.load.LoadedImage): ``img`` (h, w, 3) uint8 BGR
        with its long side at img_size, ``hw0`` (h0, w0) as decoded, ``hw`` (h, w) after the resize;
        from the image cache when the dataset has one."""
        return self.images(self.i)


class ItemMapper:
    """A caller's mapper in the dataset's place (``build_loader(..., mapper=fn)``).

    ``fn(item, key)`` gets the index's item (IndexItem: its file, labels, polygons, keypoints, letterbox
    shape and ``image()``) and its DrawKey (``key.epoch``, ``key.draw``), and returns the item as the
    built mappers do, ``(img, targets, path, shapes)`` or with a fifth part:

    - ``img``: uint8 (C, H, W) CPU tensor, C the dataset's channels (``images.channels``; RGB when 3;
      uint16 where the dataset keeps 16 bits, ``images.keep16``);
      the items of one batch have one shape (they are stacked);
    - ``targets``: float32 (n, 6) tensor [0, class, x, y, w, h], boxes normalised xywh to ``img``
      (column 0 is set to the image's place in the batch by the collate function, in place);
    - ``path``: the image's path (``item.im_file``);
    - ``shapes``: YOLOv5's ``((h0, w0), ((h / h0, w / w0), (padw, padh)))``, or None;
    - optional fifth part: per-object extras, name -> (n, ...) tensor, row j beside target row j.

    Random choices drawn from ``item_rng(seed, key.epoch, item.i, draw=key.draw)`` (augment.pipeline)
    give the same items whichever worker makes them.  The image is copied into its slot of the batch
    tensor, as the built mappers write theirs; a TypeError names a part of the wrong kind.
    """

    def __init__(self, fn: Callable, index: SplitIndex, images: ImageSource):
        self.fn, self.index, self.images = fn, index, images

    def __call__(self, i: int, key: DrawKey, out: BatchImages, k: int):
        item = self.fn(IndexItem(self.index, self.images, i), key)
        img = _checked_item(item, self.images.channels, torch.uint16 if self.images.keep16 else torch.uint8)
        t = out.write(k, img.shape[1:], lambda planes: np.copyto(planes, img.numpy()), img.shape[0],
                      img.numpy().dtype)
        return (t,) + tuple(item[1:])

    def batch(self, ids: List[int], keys: List[DrawKey], groups: List[int], out: BatchImages):
        """Items ``ids`` of one batch, one by one (a caller's mapper has no partner groups)."""
        return [self(i, key, out, k) for k, (i, key) in enumerate(zip(ids, keys))]


def _checked_item(item, channels: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """The item's image, once the item is of the kinds ItemMapper states (an image of ``channels``
    bands, of ``dtype``: uint16 for a dataset whose 16 bits are kept); else a TypeError."""
    if not isinstance(item, tuple) or len(item) not in (4, 5):
        raise TypeError(f"mapper: an item is a tuple (img, targets, path, shapes[, extras]), got "
                        f"{type(item).__name__} of {len(item) if isinstance(item, (tuple, list)) else '?'} parts")
    img, targets = item[0], item[1]
    if not (isinstance(img, torch.Tensor) and img.dtype == dtype and img.dim() == 3
            and img.shape[0] == channels and img.device.type == "cpu"):
        raise TypeError(f"mapper: img must be a {str(dtype).split('.')[-1]} ({channels}, H, W) CPU tensor (the "
                        f"dataset has {channels} channels), got "
                        f"{getattr(img, 'dtype', type(img).__name__)} {tuple(getattr(img, 'shape', ()))}")
    if not (isinstance(targets, torch.Tensor) and targets.dtype == torch.float32 and targets.dim() == 2
            and targets.shape[1] == 6):
        raise TypeError(f"mapper: targets must be a float32 (n, 6) tensor [0, class, x, y, w, h], got "
                        f"{getattr(targets, 'dtype', type(targets).__name__)} {tuple(getattr(targets, 'shape', ()))}")
    return img


def make_mapper(index: SplitIndex, images: ImageSource, settings, task: LabelTask, control, scratch: Scratch,
                prefix: str = "", where: str = ""):
    """The mapper ``settings`` (a Settings) ask for: a TrainMapper following ``control``
    (augstate.AugmentControl: the hyp, changeable during the run) when augmenting, else an EvalMapper;
    either carrying the ``task``'s extras and, for 'segment', masks.  ``where`` names the dataset in
    the warning that pose data without flip_idx is not flipped left-right."""
    masks = MaskSpec.of(settings.targets)  # None unless the task is 'segment'
    if not settings.augment:
        return EvalMapper(index, images, scale_up=settings.scale_up, task=task, masks=masks)
    cfg = control.shared.given().cfg
    warn_unflipped(task, cfg.fliplr, f"{prefix}{where}")
    keep16 = getattr(images, "keep16", False)
    if keep16 and images.channels == 3 and (cfg.hsv_h or cfg.hsv_s or cfg.hsv_v):
        LOGGER.warning(f"{prefix}hsv_h, hsv_s, hsv_v are not applied to 16-bit images (keep16=True): HSV is an "
                       "8-bit table; set them to 0 to silence this")
    # 16-bit items are made in the workers, on the CPU: the device stage decodes and renders 8-bit images
    # only, and moves these batches to the device unchanged
    return TrainMapper(index, images, control.shared, control.albumentations, scratch, prefix,
                       scale_up=settings.scale_up, task=task, masks=masks,
                       plans=settings.loader.device is not None and not keep16)
