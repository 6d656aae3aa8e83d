"""One settings object for a dataset and its loader, with a training and an evaluation preset.

    Settings
      augment, img_size, batch_size (per rank), stride, seed
      source:       SourceSettings   which images and labels (split, fraction, names, keep_difficult, cache_dir)
      index:        IndexSettings    which items, in which shapes (rect, pad, min_items, single_cls, image_weights,
                                     class_balance, classes, remap_classes)
      images:       ImageSettings    how pixels are read (cache, ram_dir, linear_resize, reduced_decode, scale_up,
                                     capped_resize, channels, keep16)
      augmentation: AugmentSettings  training augmentation (hyp, batch_partners, partner_group)
      loader:       LoaderOptions    the DataLoader (workers, shuffle, quad, early_start, each_image_once, device)
      targets:      TargetSettings   what a label row holds and the batch carries besides boxes (task,
                                     kpt_shape, flip_idx, mask_ratio, overlap_mask,
                                     mask_rule)

Every field has one name across the parts, so a setting is given by its name alone:
``Settings.training(cache="ram", split="train")``, ``settings.replace(rect=True)``.

``augment`` (YOLOv5's name) picks the preset of every decision that follows from training or
evaluation and was not given explicitly; each is one property below, decided here and nowhere else:

    ==================  ==========================  ===========================================
    decision            training (augment=True)     evaluation (augment=False)
    ==================  ==========================  ===========================================
    mapper              random augmentation, an     letterbox only, an unreadable image is an
                        unreadable image replaced   error
    split               'train'                     'val'
    linear_resize       True (YOLOv5, Ultralytics)  False: area when shrinking (YOLOv5's val)
    scale_up            True: letterbox may enlarge False
    reduced_decode      True                        False (YOLOv5's exact pixels)
    shuffle             True                        False
    mosaic_possible     unless rect                 never
    partner groups      partner_group (batch_       1 (no mosaic partners)
                        partners), else 1
    ==================  ==========================  ===========================================

Nothing here reads files, the environment or the process group: the composition root
(:mod:`~yolo_data.build`) combines these settings with what it finds at run time (world size, workers,
/dev/shm).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Union

import torch

from .formats.sources import checked_fraction
from .sampling.balance import threshold_of
from .sampling.seeds import check_seed

PARTNER_GROUP = 8  # default partner-group size (see AugmentSettings)


@dataclass(frozen=True)
class SourceSettings:
    """Which images and labels.  ``split``: the dataset yaml's split to read (None: the preset's).
    ``fraction``: the first images of the split in file order (a float ratio in (0, 1], or an int
    count >= 1, 1 being the whole split; YOLO image folders and lists only; its label cache goes where
    the split's does, named with the fraction).  ``names``: class names (None: the dataset yaml's, or
    the label format's own).  ``keep_difficult``: keep Pascal VOC objects marked difficult.  ``cache_dir``: where
    label and disk image caches go (None: beside the labels, or the per-user cache folder when that is
    read-only; for a dataset in a bucket, the per-user cache folder).  ``scan_workers``: threads scanning
    labels and filling an image cache (None: 8).  ``endpoint_url``: the S3-compatible server of
    ``s3://`` paths (``http://host:port``; None: ``$AWS_ENDPOINT_URL_S3``, ``$AWS_ENDPOINT_URL``, else
    AWS; see storage/s3.py).  ``object_cache_gb``: for a dataset in a bucket, keep up to this many GB of
    fetched images' bytes on local disk (in ``cache_dir``, else the per-user cache folder), read from
    there in later epochs (a finite number >= 0; 0: none; objectcache.py).  Both are held by the
    dataset's own storage backends (``dataset.storage``), never set for the whole process."""
    split: Optional[str] = None
    fraction: Union[float, int] = 1.0
    names: Optional[Sequence[str]] = None
    keep_difficult: bool = False
    cache_dir: Optional[str] = None
    scan_workers: Optional[int] = None
    endpoint_url: Optional[str] = None
    object_cache_gb: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "fraction", checked_fraction(self.fraction))
        object.__setattr__(self, "object_cache_gb", _checked_size_gb("object_cache_gb", self.object_cache_gb))


@dataclass(frozen=True)
class IndexSettings:
    """Which items, in which shapes.  ``rect``: sort by aspect ratio and give each batch the smallest
    letterbox shape that holds it (stride multiples, plus ``pad`` strides); off with
    ``image_weights``, as in YOLOv5.  ``min_items``: leave out images with fewer boxes.
    ``single_cls``: every class id becomes 0.  ``image_weights``: the training script weights the draws
    (YOLOv5's train.py sets ``dataset.indices``; or ``loader.sampler.set_weights``).
    ``class_balance``: the training loader repeats images of rare classes (balance.py: LVIS's repeat
    factors); a threshold t in (0, 1], True for 0.1, False/None/0 off.  Each epoch then has
    floor(sum of the factors) draws.  Not with ``image_weights`` (two weightings of the same draws);
    rect is off with it, as with image_weights (repeated images would break the rect batches); an
    evaluation loader (augment False) refuses it, since each image must count once there.
    ``classes``: keep the label rows of these class ids only (an int or a list of ints, each within the
    dataset's names; checked when the labels are read); an image left without rows stays, as a
    background, as in Ultralytics.  Its polygons and keypoints go with each row.  ``remap_classes``:
    with ``classes``, class ids become 0..k-1 in the order of ``classes``, and the dataset's names are
    the kept names in that order (a model made from them has k classes).  Both change the items
    only: the label cache stays the split's own."""
    rect: bool = False
    pad: float = 0.0
    min_items: int = 0
    single_cls: bool = False
    image_weights: bool = False
    class_balance: Union[bool, float] = False
    classes: Optional[Sequence[int]] = None
    remap_classes: bool = False

    def __post_init__(self):
        object.__setattr__(self, "classes", checked_classes(self.classes))
        if not isinstance(self.remap_classes, bool):
            raise ValueError(f"settings: remap_classes must be True or False, got {self.remap_classes!r}")
        if self.remap_classes and self.classes is None:
            raise ValueError("settings: remap_classes=True needs classes (the class ids to keep, in their new "
                             "order)")
        t = threshold_of(self.class_balance)  # a ValueError naming what it takes
        if t is not None and self.image_weights:
            raise ValueError("settings: class_balance and image_weights both weight the draws of an epoch; "
                             "use one of them")

    @property
    def balance_threshold(self) -> Optional[float]:
        """The repeat-factor threshold ``class_balance`` asks for, or None when it is off."""
        return threshold_of(self.class_balance)


@dataclass(frozen=True)
class ImageSettings:
    """How pixels are read.  ``cache``: False, True/'ram' (one copy per node in shared memory) or 'disk'
    (see imagecache.py).  ``ram_dir``: the folder of a RAM cache (None: $YOLO_DATA_SHM_DIR or /dev/shm).
    ``linear_resize``: resize with linear interpolation (else area when shrinking, as YOLOv5's
    evaluation; Ultralytics' validator resizes linearly).  ``reduced_decode``: JPEGs that shrink 2x or
    more are decoded by libjpeg at 1/2, 1/4 or 1/8 scale (images/load.py).  ``scale_up``: a letterbox may
    enlarge an image.  None: the preset's (see the module's table).  ``capped_resize``: the first
    resize (long side to img_size, sides rounded up) gives no side above img_size, as Ultralytics'
    ``load_image``; False keeps YOLOv5's rounding, whose long side is img_size + 1 where the scaled
    size is not whole in floating point (a 1050-pixel side at img_size 640), for training and
    evaluation alike (images.load.target_size).  The Ultralytics plug-in sets it; YOLOv5's entry points
    leave it off, so their batches stay YOLOv5's.  ``channels``: bands an image has (1: grayscale, 3: colour,
    any other: multi-band, images.bands); None: the dataset yaml's ``channels``, else 3.  ``keep16``: images
    read as 16 bits (else 8 by the high byte, as Ultralytics), an 8-bit one named and left out; batches
    uint16 (B, C, H, W) for a loop of one's own (YOLOv5's, Ultralytics' trainers divide by 255), no HSV
    (an 8-bit table), items made on the CPU with ``device`` (docs/datasets.md)."""
    cache: Union[bool, str] = False
    ram_dir: Optional[str] = None
    linear_resize: Optional[bool] = None
    reduced_decode: Optional[bool] = None
    scale_up: Optional[bool] = None
    capped_resize: bool = False
    channels: Optional[int] = None
    keep16: bool = False

    def __post_init__(self):
        c = self.channels
        if c is not None and (isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1):
            raise ValueError(f"settings: channels must be a whole number of bands >= 1 (or None), got {c!r}")
        if not isinstance(self.keep16, bool):
            raise ValueError(f"settings: keep16 must be True or False, got {self.keep16!r}")


@dataclass(frozen=True)
class AugmentSettings:
    """Training augmentation.  ``hyp``: YOLOv5's hyperparameters (dict, yaml path, AugmentConfig or None
    for hyp.scratch-low's).  ``batch_partners``: mosaic and mixup partners come from the item's partner
    group of ``partner_group`` consecutive places of the epoch's global order (each image decoded once
    per batch); False draws them from the whole dataset, as YOLOv5 does."""
    hyp: Any = None
    batch_partners: bool = True
    partner_group: int = PARTNER_GROUP


@dataclass(frozen=True)
class LoaderOptions:
    """The DataLoader.  ``workers``: at most this many (fewer with few CPUs or a small /dev/shm).
    ``shuffle``: a new order every epoch (None: the preset's).  ``quad``: YOLOv5's collate_fn4.
    ``early_start``: persistent workers start when the loader is built.  ``each_image_once``:
    evaluation under DDP gives each rank whole batches, each image exactly once (no padding; the
    ranks' step counts may differ).  ``device``: where batches are handed over ('cuda', 'cuda:1', 'cpu'; None:
    CPU tensors); a training loader decodes and augments its JPEGs there (docs/device.md)."""
    workers: int = 8
    shuffle: Optional[bool] = None
    quad: bool = False
    early_start: bool = True
    each_image_once: bool = False
    device: Optional[str] = None

    def __post_init__(self):  # torch reads the device: 'cuda', 'cuda:1', 'cpu', a torch.device
        try:
            object.__setattr__(self, "device", None if self.device is None else str(torch.device(self.device)))
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"settings: device must be None, 'cpu', 'cuda' or 'cuda:N', got {self.device!r} "
                             f"({e})") from None


TASKS = ("detect", "segment", "pose", "obb")


@dataclass(frozen=True)
class TargetSettings:
    """What each label row holds, and what the batch carries besides boxes.  ``task``: 'detect' (a row
    is a box, or a polygon whose envelope is the box), 'segment' (polygons, and instance masks in the
    batch), 'pose' (a box and ``kpt_shape`` keypoints) or 'obb' (four corners of a rotated box); None:
    'pose' where ``kpt_shape`` is known (given, or in the dataset yaml), else 'detect'.  ``kpt_shape``:
    (K, 2) or (K, 3) keypoints per row, with a visibility column in the second form (None: the dataset
    yaml's).  ``flip_idx``: the keypoint that takes each one's place in a left-right flip (None: the
    dataset yaml's; without one, pose data is not flipped left-right).  ``mask_ratio``: segment masks are
    1/mask_ratio of the image's height and width.  ``overlap_mask``: one mask per image, each pixel
    holding the 1-based index of its instance (the smaller instance on top), as YOLOv5's and
    Ultralytics' default; else one 0/1 mask per instance.  ``mask_rule``: how evaluation masks are
    drawn, 'yolov5' (each polygon as given, at YOLOv5's half-pixel letterbox offset: YOLOv5-seg's exact
    masks) or 'ultralytics' (resampled to 1000 points, at the letterbox's whole-pixel border:
    Ultralytics' exact masks; its plug-in sets it)."""
    task: Optional[str] = None
    kpt_shape: Optional[Sequence[int]] = None
    flip_idx: Optional[Sequence[int]] = None
    mask_ratio: int = 4
    overlap_mask: bool = True
    mask_rule: str = "yolov5"

    def __post_init__(self):
        if self.task is not None and self.task not in TASKS:
            raise ValueError(f"settings: task must be one of {', '.join(TASKS)} (or None), got {self.task!r}")
        if self.kpt_shape is not None:
            shape = tuple(int(v) for v in self.kpt_shape)
            if len(shape) != 2 or shape[0] < 1 or shape[1] not in (2, 3):
                raise ValueError(f"settings: kpt_shape must be [keypoints, 2 or 3], got {self.kpt_shape!r}")
            object.__setattr__(self, "kpt_shape", shape)
        if self.flip_idx is not None:
            object.__setattr__(self, "flip_idx", tuple(int(v) for v in self.flip_idx))
        if self.mask_rule not in ("yolov5", "ultralytics"):
            raise ValueError(f"settings: mask_rule must be 'yolov5' or 'ultralytics', got {self.mask_rule!r}")
        if isinstance(self.mask_ratio, bool) or int(self.mask_ratio) != self.mask_ratio or self.mask_ratio < 1:
            raise ValueError(f"settings: mask_ratio must be a positive whole number, got {self.mask_ratio!r}")


_PARTS = {"source": SourceSettings, "index": IndexSettings, "images": ImageSettings,
          "augmentation": AugmentSettings, "loader": LoaderOptions, "targets": TargetSettings}
_TOP = ("augment", "img_size", "batch_size", "stride", "seed")
# names the entry points used before the settings object existed
ALIASES = {"imgsz": "img_size", "cache_images": "cache", "ram_cache_dir": "ram_dir", "linear_eval": "linear_resize"}


def _route(fields: Dict[str, Any]):
    """(top-level fields, {part: its fields}) for fields given by name (older names taken too)."""
    top: Dict[str, Any] = {}
    parts: Dict[str, Dict[str, Any]] = {}
    for name, value in fields.items():
        name = ALIASES.get(name, name)
        part = _owner(name)
        if part is None:
            known = sorted(list(_TOP) + [f for c in _PARTS.values() for f in c.__dataclass_fields__])
            raise TypeError(f"settings have no field {name!r}; the fields are: {', '.join(known)}")
        (top if part == "" else parts.setdefault(part, {}))[name] = value
    return top, parts


def _owner(name: str) -> Optional[str]:
    """The part that holds field ``name`` ('' for a top-level field), or None."""
    if name in _TOP:
        return ""
    return next((part for part, cls in _PARTS.items() if name in cls.__dataclass_fields__), None)


@dataclass(frozen=True, init=False)
class Settings:
    """Everything a dataset and its loader are built with (see the module's docstring), each field given
    by its name alone (``Settings(augment=True, cache='ram')``) or a part whole (``index=IndexSettings(
    rect=True)``).  Frozen: make a changed copy with :meth:`replace`.  ``batch_size``: per rank;
    ``stride``: the model's largest."""
    augment: bool = False
    img_size: int = 640
    batch_size: int = 16
    stride: int = 32
    seed: int = 0
    source: SourceSettings = field(default_factory=SourceSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    images: ImageSettings = field(default_factory=ImageSettings)
    augmentation: AugmentSettings = field(default_factory=AugmentSettings)
    loader: LoaderOptions = field(default_factory=LoaderOptions)
    targets: TargetSettings = field(default_factory=TargetSettings)

    def __init__(self, **fields):
        """Settings from fields given by name.

        Args:
            **fields: any field of any part by its name alone (``rect=True``, ``cache='ram'``; the older
                names ``imgsz``, ``cache_images``, ``ram_cache_dir``, ``linear_eval`` too), or a part
                whole by the part's name (``index=IndexSettings(rect=True)``); the rest keep their
                defaults (the evaluation preset's).

        Raises:
            TypeError: a name that is no field, or a part of the wrong class.
            ValueError: a value a field does not take (each part checks its own).
        """
        parts = {part: fields.pop(part) for part in _PARTS if part in fields}
        for name in _TOP:
            object.__setattr__(self, name, self.__dataclass_fields__[name].default)
        for part, cls in _PARTS.items():
            object.__setattr__(self, part, parts.get(part, cls()))
            if not isinstance(getattr(self, part), cls):
                raise TypeError(f"settings: {part} must be a {cls.__name__}, got {type(getattr(self, part)).__name__}")
        top, changed = _route(fields)
        for name, value in top.items():
            object.__setattr__(self, name, value)
        for part, values in changed.items():
            object.__setattr__(self, part, dataclasses.replace(getattr(self, part), **values))
        object.__setattr__(self, "seed", check_seed(self.seed))
        for name, kind in (("img_size", int), ("batch_size", int), ("stride", int)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
                raise ValueError(f"settings: {name} must be a positive whole number, got {value!r}")
            object.__setattr__(self, name, int(value))

    # -- presets and changes ---------------------------------------------------------------------------
    @classmethod
    def training(cls, **fields) -> "Settings":
        """Training: every preset decision as YOLOv5's and Ultralytics' trainers make it.

        Args:
            **fields: fields by name, as ``Settings(...)`` takes them, over the preset.

        Returns:
            Settings with ``augment=True``.
        """
        return cls().replace(augment=True, **fields)

    @classmethod
    def evaluation(cls, **fields) -> "Settings":
        """Evaluation: YOLOv5's val.py batches.

        Args:
            **fields: fields by name, as ``Settings(...)`` takes them, over the preset.

        Returns:
            Settings with ``augment=False``.
        """
        return cls().replace(augment=False, **fields)

    def replace(self, **fields) -> "Settings":
        """A copy with ``fields`` changed.

        Args:
            **fields: fields by name alone (``rect=True``, ``cache='ram'``), as ``Settings(...)`` takes them.

        Returns:
            A new Settings (this one is frozen); TypeError for a name that is no field.
        """
        _route(fields)  # unknown names are refused before anything else
        return Settings(**{**self.fields(), **{ALIASES.get(k, k): v for k, v in fields.items()}})

    def fields(self) -> Dict[str, Any]:
        """Every field by its name, flat (what ``replace`` takes)."""
        out = {name: getattr(self, name) for name in _TOP}
        for part in _PARTS:
            value = getattr(self, part)
            out.update({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
        return out

    # -- the decisions that follow from training or evaluation -----------------------------------------
    def _preset(self, given: Optional[bool]) -> bool:
        return self.augment if given is None else bool(given)

    @property
    def split_name(self) -> str:
        """The dataset yaml's split to read."""
        return self.source.split or ("train" if self.augment else "val")

    @property
    def linear_resize(self) -> bool:
        return self._preset(self.images.linear_resize)

    @property
    def scale_up(self) -> bool:
        return self._preset(self.images.scale_up)

    @property
    def reduced_decode(self) -> bool:
        return self._preset(self.images.reduced_decode)

    @property
    def shuffle(self) -> bool:
        return self._preset(self.loader.shuffle)

    @property
    def rect(self) -> bool:
        """Rect batches: asked for, and no image weights or class balance (whose draws would break the
        batches' shapes)."""
        return self.index.rect and not self.index.image_weights and self.index.balance_threshold is None

    @property
    def mosaic_possible(self) -> bool:
        """Whether items may be mosaics at all (then each is one with the hyp's probability): training,
        and not rect (a rect batch's shape is made for its single images)."""
        return self.augment and not self.rect

    @property
    def partner_group(self) -> int:
        """The partner-group size asked for: ``partner_group`` where mosaics draw partners from the batch,
        else 1 (groups then only matter for sharing an epoch's last step)."""
        a = self.augmentation
        return a.partner_group if self.mosaic_possible and a.batch_partners else 1

    def sharded(self, world: int) -> bool:
        """Whether each rank of ``world`` takes whole batches of its own, each image once (evaluation
        under DDP with ``each_image_once``), instead of its slice of one global order."""
        return world > 1 and not self.augment and self.loader.each_image_once

    def rect_batch(self, world: int) -> int:
        """The batch rect shapes are made of: the global batch, so every rank's images of a step share
        one shape; the rank's own batch where ranks take whole batches of their own."""
        return self.batch_size if self.sharded(world) else self.batch_size * world


def _checked_size_gb(name: str, value) -> float:
    """``value`` as a size in GB: a finite number >= 0 (0: off).  Raises ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"settings: {name} must be a finite number of GB >= 0 (0: off), got {value!r}")
    return float(value)


def checked_classes(value) -> Optional[tuple]:
    """``value`` as the ``classes`` setting: None, or a tuple of distinct class ids >= 0 (an int is a list of
    one; NumPy integers too).  Raises ValueError naming the field: an empty list, a repeated id, a
    negative id, a bool, a float or a string (Ultralytics' text prompts are for YOLOE and YOLO-World)."""
    if value is None:
        return None
    items = [value] if isinstance(value, numbers.Integral) else value
    if isinstance(value, (str, bytes)) or not isinstance(items, (list, tuple, range)) and not hasattr(items, "tolist"):
        raise ValueError(f"settings: classes must be a class id or a list of class ids, got {value!r}")
    items = list(items.tolist() if hasattr(items, "tolist") else items)
    bad = [c for c in items if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0]
    if bad or not items:
        raise ValueError(f"settings: classes must list class ids (whole numbers >= 0), got {value!r}"
                         + (" (an empty list keeps no label)" if not items else ""))
    repeated = sorted({int(c) for c in items if items.count(c) > 1})
    if repeated:
        raise ValueError(f"settings: classes lists {', '.join(map(str, repeated))} more than once: {value!r}")
    return tuple(int(c) for c in items)


def as_settings(settings: Optional[Settings], **fields) -> Settings:
    """``settings`` (default: the evaluation preset's fields) with ``fields`` given by name."""
    if settings is not None and not isinstance(settings, Settings):
        raise TypeError(f"settings must be a yolo_data Settings, got {type(settings).__name__}")
    return (settings or Settings()).replace(**fields)
