"""The dataset facade: YOLOv5's ``LoadImagesAndLabels`` names over an index and a mapper.

    split (labels: cache or scan) -> index (filters, rect order and shapes; built once)
    -> image source (image cache or file) -> mapper (evaluation, or training with explicit settings)

``YoloDataset`` keeps YOLOv5's attribute names (``im_files``, ``label_files``, ``labels``, ``shapes``,
``segments``, ``batch``, ``batch_shapes``, ``indices``, ``n``) so training scripts that read them keep
working.  Per-image sequences are views over one :class:`~yolo_data.store.LabelStore`.  It owns what
changes during training (the epoch, ``indices``) and hands the epoch and each item's draw key to the
mapper as inputs.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from . import distributed, failures, summary
from .albument import AlbumentationsStep
from .collate import collate_fn
from .hyp import AugmentConfig, load_hyp
from .cache import user_cache_dir
from .imagecache import ImageCache, ImageCacheSpec, disk_candidates, normalise_mode, open_or_build
from .images import ImageDecodeError, ImageSource
from .index import IndexSettings, SplitIndex, build_index
from .mapping import EvalMapper, ItemKey, SharedSettings, TrainMapper, TrainSettings
from .sampling import SharedEpoch, check_seed
from .datayaml import is_dataset_yaml, load_dataset_yaml
from .split import SplitLabels, load_split
from .workers import guard_opencv_pool
from .store import ImageFiles, LabelFiles, Labels, Segments
from .tensors import BatchImages, Scratch

LOGGER = logging.getLogger("yolo_data")


def resolve_split(path, split: Optional[str], augment: bool):
    """(paths, names) for what ``path`` names.  A dataset yaml gives its ``split`` ('train' when
    augmenting, else 'val', when not given) and its class names; anything else has no names."""
    if not is_dataset_yaml(path):
        return path, []
    spec = load_dataset_yaml(path)
    split = split or ("train" if augment else "val")
    if split not in spec.splits:
        raise ValueError(f"{path}: no '{split}' split (it has {', '.join(spec.splits) or 'none'})")
    return spec.splits[split], spec.names


def _progress_bar(prefix: str, enabled: bool):
    """A callback (done, total) drawing a tqdm bar and telling waiting ranks how far the scan is."""
    from tqdm import tqdm
    bar = None

    def update(done, total):
        nonlocal bar
        if enabled and bar is None:
            bar = tqdm(total=total, desc=f"{prefix}Scanning labels", unit="img", leave=False, disable=None)
        if bar is not None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()
        distributed.report_progress(f"scanning {done:,}/{total:,}")
    return update


class YoloDataset(Dataset):
    """Images and YOLO labels as YOLOv5's ``LoadImagesAndLabels`` serves them.

    Each item is ``(img, targets, path, shapes)``: img uint8 (3, H, W) RGB tensor; targets float32
    (n, 6) [0, class, x, y, w, h] normalised to the final image (column 0 is filled by the collate
    function with the image's index in the batch); shapes ``((h0, w0), ((h / h0, w / w0), (padw, padh)))``.

    ``augment`` picks the mapper: training (mosaic unless ``rect``, perspective, HSV, flips; linear
    resizing, letterboxes may enlarge) or evaluation (letterbox only, never enlarged).  ``batch_size``:
    the global batch, of which rect batches are made (``create_dataloader`` passes per-rank batch x
    world size).  ``cache_images``: False, True/'ram' or 'disk' (see :mod:`~yolo_data.imagecache`);
    ``ram_dir``: the folder of a RAM cache (default $YOLO_DATA_SHM_DIR or /dev/shm);
    ``shm_reserve_bytes``: room a RAM cache leaves free there for the DataLoader's batches.
    ``batch_partners``/``partner_group``: see ``__getitems__``.  ``path`` may also name a COCO .json or
    a Pascal VOC folder or ImageSets list (formats.py), read in place; ``keep_difficult``: keep VOC
    objects marked difficult.  ``linear_eval``: evaluation resizes with linear interpolation, as
    Ultralytics' validator does (default: YOLOv5's area interpolation when shrinking).
    ``reduced_decode``: JPEGs that shrink 2x or more are decoded by libjpeg at 1/2, 1/4 or 1/8 scale,
    then resized to the same size (images.py); default: when augmenting (evaluation keeps YOLOv5's
    pixels unless True).
    ``close_mosaic()`` or ``dataset.mosaic = False`` ends mosaic, mixup and copy-paste; ``dataset.mosaic
    = True`` brings them back (only where the dataset was built with mosaic: augment and not rect).
    Assigning ``dataset.hyp`` (a dict, yaml path or AugmentConfig) re-derives the augmentation from the
    next item on; a dict changed in place is taken in when a YoloDataLoader pass starts (or at
    ``refresh_settings()``).  All of these reach persistent DataLoader workers through shared memory
    (mapping.SharedSettings), and a YoloDataLoader drops its early-started pass when they changed
    before the first ``iter`` (see ``item_settings``).  ``seed``: any integer, negative too (see
    sampling.seed_entropy).
    """

    def __init__(self, path, img_size: int = 640, batch_size: int = 16, augment: bool = False, hyp=None,
                 rect: bool = False, image_weights: bool = False, cache_images=False, single_cls: bool = False,
                 stride: int = 32, pad: float = 0.0, min_items: int = 0, prefix: str = "",
                 workers: Optional[int] = None, split: Optional[str] = None, cache_dir=None, seed: int = 0,
                 batch_partners: bool = True, ram_dir=None, shm_reserve_bytes: int = 0, partner_group: int = 0,
                 keep_difficult: bool = False, linear_eval: bool = False, reduced_decode: Optional[bool] = None):
        self.img_size = int(img_size)
        self.augment = augment
        self.seed = check_seed(seed)
        self.batch_partners = batch_partners
        # mosaic/mixup partners come from the item's group of places in the epoch (sampling.py); 0: its batch
        self.partner_group = int(partner_group)
        # Set by the sampler in the main process, read by persistent workers: new augmentation each epoch.
        self.shared_epoch = SharedEpoch()
        self.image_weights = image_weights
        self.rect = False if image_weights else rect
        self._mosaic_possible = bool(self.augment and not self.rect)
        # what items follow, read by persistent workers too: hyp, mosaic (see mosaic, hyp, close_mosaic)
        self._settings = SharedSettings(TrainSettings(load_hyp(hyp), self.img_size, self._mosaic_possible, self.seed))
        self._albumentations: Optional[AlbumentationsStep] = None  # made by the hyp setter when asked for
        self.hyp = hyp
        self.stride = int(stride)
        self.path = path
        self.prefix = prefix

        guard_opencv_pool()  # before any thread of ours uses OpenCV's pool: workers fork from here
        paths, names = resolve_split(path, split, augment)
        show = summary.printing_rank()
        self.split_labels: SplitLabels = load_split(paths, cache_dir=cache_dir, workers=workers,
                                                    progress=_progress_bar(prefix, show), names=names or None,
                                                    keep_difficult=keep_difficult)
        names = self.split_labels.names or names  # a COCO JSON's categories, VOC's object names
        summary.log_split_summary(self.split_labels, prefix, path)  # every run, cache or scan (rank 0 only)
        if not len(self.split_labels.store):
            raise RuntimeError(f"{prefix}no usable images in {path}: "
                               + "; ".join(str(p) for p in self.split_labels.problems[:5]))
        self.index: SplitIndex = build_index(
            self.split_labels.store, names,
            IndexSettings(self.img_size, int(batch_size), self.rect, self.stride, pad, min_items, single_cls), prefix)
        self.n = len(self.index)
        # shared memory: YOLOv5's train.py sets dataset.indices each epoch (--image-weights) in the main
        # process, and persistent DataLoader workers must see the new ones
        self._indices = torch.arange(self.n, dtype=torch.int64).share_memory_()
        self.indices_version = 0  # counts assignments (the loader's early start compares it)

        self.image_cache: Optional[ImageCache] = None
        linear = augment or linear_eval  # training resizes linearly, as YOLOv5 and Ultralytics do
        self.reduced_decode = augment if reduced_decode is None else bool(reduced_decode)
        if cache_images:
            mode = normalise_mode(cache_images)
            spec = ImageCacheSpec(mode, self.img_size, linear,
                                  disk_candidates(self.split_labels.default_file, self.img_size, linear, self.rect,
                                                  cache_dir, user_cache_dir(), self.reduced_decode),
                                  ram_dir=None if ram_dir is None else Path(ram_dir),
                                  reserve_bytes=int(shm_reserve_bytes) if mode == "ram" else 0,
                                  workers=workers or 8, prefix=prefix, reduced=self.reduced_decode)
            self.image_cache = open_or_build(spec, self.store, self.split_labels.fingerprint)
        # a function of the cache file, not a bound method of the dataset: the image source must hold
        # no reference back to the dataset, so that `del loader, dataset` frees it (and its RAM cache)
        # at once, without waiting for the cyclic garbage collector
        self.images = ImageSource(self.store, self.img_size, linear=linear, cache=self.image_cache,
                                  on_failure=partial(_remember_failure, self.split_labels.cache_file),
                                  reduced=self.reduced_decode)
        self._scratch = Scratch()
        if augment:
            self.mapper = TrainMapper(self.index, self.images, self._settings, self._albumentations, self._scratch,
                                      prefix)
        else:
            self.mapper = EvalMapper(self.index, self.images)

    # -- YOLOv5's attributes, as views over the index -----------------------------------------------
    @property
    def store(self):
        return self.index.store

    @property
    def names(self) -> List[str]:
        return self.index.names

    @property
    def batch(self) -> np.ndarray:
        """(n,) int64 batch of each image (rect: the rect batch whose shape it takes)."""
        return self.index.batch

    @property
    def batch_shapes(self) -> Optional[np.ndarray]:
        """(nb, 2) int64 [h, w] letterbox shape of each rect batch, or None without rect."""
        return self.index.batch_shapes

    @property
    def indices(self) -> np.ndarray:
        """(n,) int64: item position -> image index (YOLOv5's ``dataset.indices``; identity by default)."""
        return self._indices.numpy()

    @indices.setter
    def indices(self, value) -> None:
        """Set all n entries at once, as YOLOv5's train.py does with ``random.choices(range(n),
        weights=iw, k=n)``; DataLoader workers (persistent or not) read the new ones from then on."""
        raw = np.asarray(value)
        if raw.dtype.kind not in "iub" and not (raw.dtype.kind == "f" and np.array_equal(raw, np.round(raw))):
            raise ValueError(f"dataset.indices must be {self.n} image indices (whole numbers), got {raw.dtype} "
                             "values" + (" with fractions" if raw.dtype.kind == "f" else ""))
        value = raw.astype(np.int64)
        if value.shape != (self.n,) or (self.n and (value.min() < 0 or value.max() >= self.n)):
            raise ValueError(f"dataset.indices must be {self.n} image indices in 0..{self.n - 1}, "
                             f"got shape {value.shape}")
        self._indices.copy_(torch.from_numpy(value))
        self.indices_version += 1

    @property
    def im_files(self) -> Sequence[str]:
        return ImageFiles(self.store)

    @property
    def label_files(self) -> Sequence[str]:
        """Per image its annotation file: YOLO's labels/*.txt, VOC's Annotations/*.xml, or the COCO JSON."""
        return LabelFiles(self.store, self.split_labels.label_file_of)

    @property
    def labels(self) -> Sequence[np.ndarray]:
        """Per image an (n, 5) float32 read-only array [class, x, y, w, h] normalised."""
        return Labels(self.store)

    @property
    def segments(self) -> Sequence[List[np.ndarray]]:
        """Per image a list of (k, 2) float32 normalised polygons (empty when it has none)."""
        return Segments(self.store)

    @property
    def shapes(self) -> np.ndarray:
        """(n, 2) int64 [w, h] of each image as stored (EXIF orientation applied)."""
        return self.store.shapes.astype(np.int64)

    def __len__(self) -> int:
        return self.n

    def num_classes(self) -> int:
        """The number of names, or (without names) the largest class id + 1."""
        return self.index.num_classes()

    @property
    def epoch(self) -> int:
        return self.shared_epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Augmentation of every item depends on (seed, epoch, index); the sampler calls this."""
        self.shared_epoch.set(epoch)

    def close_mosaic(self, hyp=None) -> None:
        """No more mosaic, mixup or copy-paste from the next item on, in this process and in persistent
        workers (shared memory), as Ultralytics does for its last ``close_mosaic`` epochs.  Items keep
        perspective, HSV and flips.  ``hyp``: ignored (Ultralytics passes its arguments)."""
        self.mosaic = False

    @property
    def mosaic_closed(self) -> bool:
        return self._settings.closed

    @property
    def mosaic(self) -> bool:
        """Whether items may be mosaics now (YOLOv5's and Ultralytics' attribute).  False: as
        close_mosaic().  True: mosaic, mixup and copy-paste back, as the hyp has them; a ValueError on a
        dataset built without mosaic (augment=False or rect=True: its rect shapes and the sampler's
        partner groups were made for single images)."""
        return self._mosaic_possible and not self._settings.closed

    @mosaic.setter
    def mosaic(self, on) -> None:
        if on and not self._mosaic_possible:
            raise ValueError("dataset.mosaic = True: this dataset was built without mosaic (augment=False or "
                             "rect=True); build it with augment=True, rect=False for mosaic training")
        if self._settings.closed == bool(on):
            self._settings.set(self.cfg, self._mosaic_possible, closed=not on)

    @property
    def hyp(self):
        """The hyperparameters as given (dict, yaml path, AugmentConfig or None).  Assigning one re-derives
        the augmentation (hyp.load_hyp) for the next items, in persistent workers too; a missing
        albumentations package is an ImportError here, not in a worker."""
        return self._hyp

    @hyp.setter
    def hyp(self, hyp) -> None:
        cfg = load_hyp(hyp)
        if self.augment and cfg.albumentations and self._albumentations is None:
            self._albumentations = AlbumentationsStep()
            if hasattr(self, "mapper"):
                self.mapper.extra = self._albumentations  # workers forked before make their own
        self._hyp, self._hyp_seen = hyp, _snapshot(hyp)
        if cfg != self._settings.given().cfg:
            self._settings.set(cfg, self._mosaic_possible, self._settings.closed)

    @property
    def cfg(self) -> AugmentConfig:
        """The augmentation numbers of the current hyp (a closed mosaic is not applied to them)."""
        return self._settings.given().cfg

    def refresh_settings(self) -> None:
        """Take in a hyp dict changed in place (``dataset.hyp['mosaic'] = 0``) since it was given: its
        numbers are compared with the ones in use, and the augmentation re-derived when they differ.
        A YoloDataLoader calls this when each pass starts; assigning ``dataset.hyp`` needs no call."""
        if self._hyp_seen is not None and _snapshot(self._hyp) != self._hyp_seen:
            self.hyp = self._hyp

    def item_settings(self) -> TrainSettings:
        """Everything besides the epoch, ``indices`` and each item's key that decides the items: the
        augmentation numbers, whether mosaic is possible and closed (after ``refresh_settings``).
        Comparable: a YoloDataLoader compares it to drop a pass its workers began with other settings."""
        self.refresh_settings()
        return self._settings.get()

    def load_image(self, i: int) -> Tuple[np.ndarray, Tuple[int, int], Tuple[int, int]]:
        """YOLOv5's form: (img (h, w, 3) uint8 BGR resized, (h0, w0), (h, w))."""
        li = self.images(i)
        return li.img, li.hw0, li.hw

    # -- items ----------------------------------------------------------------------------------------
    def __getitem__(self, token: int):
        draw, position = divmod(token, self.n) if token >= self.n else (0, token)  # a draw token (sampling.py)
        return self.mapper(int(self.indices[position]), ItemKey(self.epoch, draw), BatchImages(1, self._scratch), 0)

    def __getitems__(self, tokens: List[int]):
        """A whole batch at once (torch's DataLoader calls this with the batch's indices, here the
        sampler's draw tokens ``place * n + position``; plain positions are place 0).  The items' images
        are slots of one (B, 3, H, W) tensor, which collate_fn hands on without stacking.

        With ``batch_partners`` (the default when augmenting) mosaic and mixup partners are drawn from
        the images of the item's partner group (``partner_group`` consecutive places of the epoch's
        global order, see sampling.py; 0: the whole batch), each decoded once for the batch: about one
        decode per item instead of four, and still a pure function of (seed, epoch, group), whatever
        the number of workers, and of ranks when every rank takes whole groups.
        """
        out = BatchImages(len(tokens), self._scratch)
        draws = [t // self.n for t in tokens]
        indices = self.indices  # one view of the shared tensor for the batch
        ids = [int(indices[t % self.n]) for t in tokens]
        epoch = self.epoch
        keys = [ItemKey(epoch, d) for d in draws]
        if not (self.augment and self.batch_partners):
            return [self.mapper(i, key, out, k) for k, (i, key) in enumerate(zip(ids, keys))]
        groups = [d // self.partner_group for d in draws] if self.partner_group else [0] * len(ids)
        return self.mapper.batch(ids, keys, groups, out)

    collate_fn = staticmethod(collate_fn)  # YOLOv5 scripts use LoadImagesAndLabels.collate_fn


def _snapshot(hyp):
    """What an in-place change of a hyp dict is detected by (None for hyps that are not dicts)."""
    return dict(hyp) if isinstance(hyp, Mapping) else None


def _remember_failure(cache_file, error: ImageDecodeError) -> None:
    """An image passed the scan and cannot be decoded now: the next run leaves it out (failures.py)."""
    failures.remember(cache_file, error.path, str(error), (error.size, error.mtime_ns))


LoadImagesAndLabels = YoloDataset  # YOLOv5's name
