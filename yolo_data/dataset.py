"""The dataset: YOLOv5's ``LoadImagesAndLabels`` names over a split's labels, an index and a mapper.

    labels (the split: cache or scan) -> index (filters, rect order and shapes; built once)
    -> images (image cache or file) -> mapper (evaluation, or training with explicit settings)

``YoloDataset(path, settings)`` takes one :class:`~yolo_data.settings.Settings`;
``LoadImagesAndLabels`` keeps YOLOv5's signature over it.  Both keep YOLOv5's attribute names
(``im_files``, ``label_files``, ``labels``, ``shapes``, ``segments``, ``batch``, ``batch_shapes``,
``indices``, ``n``) so training scripts that read them keep working.  Per-image sequences are views
over one :class:`~yolo_data.labels.store.LabelStore`.
"""
from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from . import distributed
from .images import failures
from .storage import using
from .labels import summary
from .augment.augstate import AugmentControl, TrainSettings
from .labels.cache import user_cache_dir
from .loading.collate import collate_fn
from .formats.datayaml import is_dataset_yaml, load_dataset_yaml
from .formats import split_format
from .items.imagecache import ImageCacheSpec, disk_candidates, normalise_mode, open_or_build
from .images.load import ImageDecodeError, ImageSource
from .items.index import SplitIndex, build_index
from .items.mapping import DrawKey, make_mapper
from .sampling.runstate import RunState
from .sampling.sampler import ItemKey
from .settings import Settings, as_settings, fraction_count
from .formats.sources import fraction_cache_file, img2label_path, list_image_files, storage_for
from .labels.split import SplitLabels, load_split
from .labels.store import ImageFiles, Keypoints, LabelFiles, Labels, Segments
from .items.task import LabelTask, resolve_task
from .loading.tensors import BatchImages, Scratch
from .runtime.workers import guard_opencv_pool

LOGGER = logging.getLogger("yolo_data")


def resolve_split(path, split: Optional[str], augment: bool):
    """(paths, names, spec) for what ``path`` names.  A dataset yaml gives its ``split`` ('train' when
    augmenting, else 'val', when not given), its class names and its DatasetSpec (kpt_shape, ...);
    anything else has no names and no spec (None)."""
    if not is_dataset_yaml(path):
        return path, [], None
    spec = load_dataset_yaml(path)
    split = split or ("train" if augment else "val")
    if split not in spec.splits:
        raise ValueError(f"{path}: no '{split}' split (it has {', '.join(spec.splits) or 'none'})")
    return spec.splits[split], spec.names, spec


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


def read_labels(path, settings: Settings, prefix: str = "") -> Tuple[SplitLabels, List[str], LabelTask]:
    """The split's verified labels (cache or scan), its class names and the task it was read for, with
    the split's summary line.  ``path``: image folder, .txt list, list of them, dataset yaml
    (``settings.split_name`` picks), or a split of another label format (formats.py: COCO .json, Pascal
    VOC folder/list, LabelMe folder); ``settings.source.fraction`` < 1 keeps the first images in file
    order."""
    part = settings.source
    paths, names, spec = resolve_split(path, settings.split_name, settings.augment)
    task = resolve_task(settings.targets, spec and spec.kpt_shape, spec and spec.flip_idx, str(path))
    default_cache = None  # where the format puts the split's cache
    if part.fraction != 1.0:
        fmt = split_format(paths)
        if not fmt.cuts_by_files:
            raise ValueError(f"fraction={part.fraction}: a part of a split is taken from YOLO image folders "
                             f"or lists; {path} names {fmt.name} annotations (use fraction=1.0)")
        files = list_image_files(paths)
        default_cache = fraction_cache_file(paths, img2label_path(files[0]) if files else None, part.fraction)
        paths = files[:fraction_count(len(files), part.fraction)]
    names = list(part.names) if part.names else names
    labels = load_split(paths, cache_dir=part.cache_dir, workers=part.scan_workers, names=names or None,
                        progress=_progress_bar(prefix, summary.printing_rank()), keep_difficult=part.keep_difficult,
                        task=task.name, kpt_shape=task.kpt_shape, default_cache=default_cache)
    summary.log_split_summary(labels, prefix, path)  # every run, cache or scan (rank 0 only)
    if not len(labels.store):
        raise RuntimeError(f"{prefix}no usable images in {path}: " + "; ".join(str(p) for p in labels.problems[:5]))
    return labels, labels.names or names, task  # a COCO JSON's categories, VOC's object names


def open_images(labels: SplitLabels, store, settings: Settings, run: RunState, prefix: str = "") -> ImageSource:
    """The images of ``store`` as the mapper reads them: from the image cache ``settings.images.cache``
    asks for (built or opened here), else from their files."""
    cache, part = None, settings.images
    if part.cache:
        mode = normalise_mode(part.cache)
        spec = ImageCacheSpec(mode, settings.img_size, linear=settings.linear_resize,
                              disk_files=disk_candidates(labels.default_file, settings.img_size,
                                                         settings.linear_resize, settings.rect,
                                                         settings.source.cache_dir, user_cache_dir(),
                                                         settings.reduced_decode, part.capped_resize),
                              ram_dir=None if part.ram_dir is None else Path(part.ram_dir),
                              reserve_bytes=int(run.shm_reserve_bytes) if mode == "ram" else 0,
                              workers=settings.source.scan_workers or 8, prefix=prefix, reduced=settings.reduced_decode,
                              capped=part.capped_resize)
        cache = open_or_build(spec, store, labels.fingerprint)
    # a function of the cache file, not a bound method of the dataset: the image source must hold no
    # reference back to the dataset, so that `del loader, dataset` frees it (and its RAM cache) at once
    return ImageSource(store, settings.img_size, linear=settings.linear_resize, cache=cache,
                       on_failure=partial(_remember_failure, labels.cache_file), reduced=settings.reduced_decode,
                       capped=part.capped_resize)


class YoloDataset(Dataset):
    """Images and YOLO labels as YOLOv5's ``LoadImagesAndLabels`` serves them, built from ``settings``
    (default: the evaluation preset; ``fields`` change settings by name, e.g. ``augment=True``).

    Each item is ``(img, targets, path, shapes)``: img uint8 (3, H, W) RGB tensor; targets float32
    (n, 6) [0, class, x, y, w, h] normalised to the final image (column 0 is filled by the collate
    function with the image's index in the batch); shapes ``((h0, w0), ((h / h0, w / w0), (padw, padh)))``
    (None for a mosaic).  ``dataset[i]`` for 0 <= i < n (negative from the end); a loader's YoloSampler
    hands ``ItemKey(position, draw)`` keys instead.  ``run``: what the composition root decided for this
    run (build.py); default: a dataset on its own, one rank.

    ``close_mosaic()`` or ``dataset.mosaic = False`` ends mosaic, mixup and copy-paste; ``dataset.mosaic
    = True`` brings them back (only where Settings.mosaic_possible).  Assigning ``dataset.hyp`` re-derives
    the augmentation from the next item on; a hyp dict changed in place is taken in when a YoloDataLoader
    pass starts (or at ``refresh_settings()``).  Both reach persistent workers (augstate.py).
    """

    def __init__(self, path, settings: Optional[Settings] = None, prefix: str = "", run: Optional[RunState] = None,
                 **fields):
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"YoloDataset(path, settings): settings must be a yolo_data Settings, got "
                            f"{type(settings).__name__} {settings!r}; for YOLOv5's signature (path, img_size, "
                            "batch_size, augment, ...) use LoadImagesAndLabels")
        self.settings = settings = as_settings(settings, **fields)
        self.run = run or RunState(rect_batch=settings.batch_size)
        self.path, self.prefix = path, prefix
        self.augment, self.img_size, self.stride = settings.augment, settings.img_size, settings.stride
        self.rect, self.image_weights = settings.rect, settings.index.image_weights
        self.control = AugmentControl(settings.augmentation.hyp, self.img_size, settings.mosaic_possible,
                                      settings.seed, self.augment)
        guard_opencv_pool()  # before any thread of ours uses OpenCV's pool: workers fork from here
        # this dataset's own backends (its endpoint, its object cache): its files and objects are read
        # through them while it is built, and its images by them in the workers; nothing process-wide
        self.storage = storage_for(settings.source)
        with using(self.storage):
            self.split_labels, names, self.task = read_labels(path, settings, prefix)
            self.index: SplitIndex = build_index(self.split_labels.store, names, settings, self.run.rect_batch,
                                                 prefix, data=path)
            self.n = len(self.index)
            # shared memory: YOLOv5's train.py sets dataset.indices each epoch (--image-weights) in the main
            # process, and persistent DataLoader workers must see the new ones
            self._indices = torch.arange(self.n, dtype=torch.int64).share_memory_()
            self.indices_version = 0  # counts assignments (the loader's early start compares it)
            self.images = open_images(self.split_labels, self.store, settings, self.run, prefix)
        self.image_cache = self.images.cache
        self._scratch = Scratch()
        self.mapper = make_mapper(self.index, self.images, settings, self.task, self.control, self._scratch, prefix,
                                  path)

    # -- YOLOv5's attributes, as views over the index -----------------------------------------------
    store = property(lambda self: self.index.store)
    names = property(lambda self: self.index.names, doc="The class names (index = class id).")
    batch = property(lambda self: self.index.batch, doc="(n,) int64 batch of each image (rect: its rect batch).")
    batch_shapes = property(lambda self: self.index.batch_shapes,
                            doc="(nb, 2) int64 [h, w] letterbox shape of each rect batch, or None without rect.")
    im_files = property(lambda self: ImageFiles(self.store))
    label_files = property(lambda self: LabelFiles(self.store, self.split_labels.label_file_of),
                           doc="Per image its annotation file (YOLO .txt, VOC .xml, LabelMe .json, the COCO JSON).")
    labels = property(lambda self: Labels(self.store),
                      doc="Per image an (n, 5) float32 read-only array [class, x, y, w, h] normalised.")
    segments = property(lambda self: Segments(self.store),
                        doc="Per image a list of (k, 2) float32 normalised polygons (empty when it has none).")
    keypoints = property(lambda self: Keypoints(self.store),
                         doc="Per image an (n, K, 3) float32 read-only array [x, y, visibility], x and y "
                             "normalised (K = 0 unless the task is pose).")
    # YOLOv5's name, so YOLOv5's order: the one place sizes are [w, h] (inside, they are [h, w])
    shapes = property(lambda self: np.ascontiguousarray(self.store.shapes_hw[:, ::-1], dtype=np.int64),
                      doc="(n, 2) int64 [w, h] of each image as decoded (EXIF orientation applied): YOLOv5's "
                          "name and order (``store.shapes_hw`` holds [h, w]).")

    @property
    def indices(self) -> np.ndarray:
        """(n,) int64: item position -> image index (YOLOv5's ``dataset.indices``; identity by default)."""
        return self._indices.numpy()

    @indices.setter
    def indices(self, value) -> None:
        """Set all n entries at once, as YOLOv5's train.py does with ``random.choices(range(n),
        weights=iw, k=n)``; DataLoader workers (persistent or not) read the new ones from then on."""
        self._indices.copy_(torch.from_numpy(_image_indices(value, self.n)))
        self.indices_version += 1

    def __len__(self) -> int:
        return self.n

    def num_classes(self) -> int:
        """The number of names, or (without names) the largest class id + 1."""
        return self.index.num_classes()

    @property
    def reads_ahead(self) -> bool:
        """Whether the images come from a bucket, where a batch's keys telling the next batch
        (loader.BatchKeys) let their bytes be fetched while this batch is decoded."""
        return self.images.in_bucket

    @property
    def epoch(self) -> int:
        return self.run.epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """The epoch of a dataset used without a YoloSampler (items depend on (seed, epoch, image, draw))."""
        if self.run.sampled:
            raise RuntimeError("this dataset's epoch is set by its loader's sampler (one writer): call "
                               "loader.sampler.set_epoch(epoch)")
        self.run.epoch.set(epoch)

    # -- the augmentation, changeable during the run (augstate.py) -----------------------------------
    def close_mosaic(self, hyp=None) -> None:
        """No more mosaic, mixup or copy-paste from the next item on, also in persistent workers, as
        Ultralytics does for its last ``close_mosaic`` epochs (``hyp``: ignored, Ultralytics passes it)."""
        self.mosaic = False

    mosaic_closed = property(lambda self: self.control.shared.closed)
    mosaic = property(lambda self: self.control.mosaic, lambda self, on: self.control.set_mosaic(on),
                      doc="Whether items may be mosaics now (YOLOv5's and Ultralytics' attribute).")
    hyp = property(lambda self: self.control.hyp, lambda self, hyp: self.control.set_hyp(hyp),
                   doc="The hyperparameters as given; assigning re-derives the augmentation (hyp.load_hyp).")
    cfg = property(lambda self: self.control.shared.given().cfg, doc="The current hyp's AugmentConfig.")
    batch_partners = property(lambda self: self.settings.augmentation.batch_partners)
    # attributes of the dataset before Settings, read from where they live now
    seed, reduced_decode = property(lambda self: self.settings.seed), property(lambda self: self.settings.reduced_decode)
    partner_group, shared_epoch = property(lambda self: self.run.partner_group), property(lambda self: self.run.epoch)

    def refresh_settings(self) -> None:
        """Take in a hyp dict changed in place (``dataset.hyp['mosaic'] = 0``); a YoloDataLoader calls
        this when each pass starts."""
        self.control.refresh()

    def item_settings(self) -> TrainSettings:
        """Everything besides the epoch, ``indices`` and each item's key that decides the items (after
        ``refresh_settings``); a YoloDataLoader compares it to drop a pass begun with other settings."""
        self.control.refresh()
        return self.control.shared.get()

    def load_image(self, i: int) -> Tuple[np.ndarray, Tuple[int, int], Tuple[int, int]]:
        """YOLOv5's form: (img (h, w, 3) uint8 BGR resized, (h0, w0), (h, w))."""
        li = self.images(i)
        return li.img, li.hw0, li.hw

    # -- items ----------------------------------------------------------------------------------------
    def _key(self, key) -> ItemKey:
        if isinstance(key, ItemKey):
            return key
        i = int(key)
        if not -self.n <= i < self.n:
            raise IndexError(f"dataset index {i} out of range for {self.n} items")
        return ItemKey(i % self.n, 0)

    def __getitem__(self, key):
        position, draw = self._key(key)
        return self.mapper(int(self.indices[position]), DrawKey(self.epoch, draw), BatchImages(1, self._scratch), 0)

    def __getitems__(self, keys_in: List):
        """A whole batch at once (torch's DataLoader calls this with the sampler's ItemKeys, or ints).  The
        items' images are slots of one (B, 3, H, W) tensor, which collate_fn hands on without stacking.
        With ``batch_partners`` (training) mosaic and mixup partners come from the images of the item's
        partner group (RunState.partner_group consecutive draws; 0: the batch), each decoded once for the
        batch: about one decode per item instead of four, a pure function of (seed, epoch, group)."""
        keys = [self._key(k) for k in keys_in]
        out, epoch, indices = BatchImages(len(keys), self._scratch), self.epoch, self.indices
        ids = [int(indices[k.position]) for k in keys]
        draws = [DrawKey(epoch, k.draw) for k in keys]
        # a batch in a bucket: its images' bytes at once (partners are among them), and the next batch's
        # in the background when the loader says which it is (loader.BatchKeys)
        ahead = getattr(keys_in, "ahead", None) or ()
        self.images.fetch(ids, [int(indices[self._key(k).position]) for k in ahead])
        try:
            if not (self.augment and self.batch_partners):
                return [self.mapper(i, d, out, k) for k, (i, d) in enumerate(zip(ids, draws))]
            g = self.run.partner_group
            return self.mapper.batch(ids, draws, [k.draw // g if g else 0 for k in keys], out)
        finally:
            self.images.forget()

    collate_fn = staticmethod(collate_fn)  # YOLOv5 scripts use LoadImagesAndLabels.collate_fn


class LoadImagesAndLabels(YoloDataset):
    """YOLOv5's ``LoadImagesAndLabels(path, img_size, batch_size, augment, hyp, rect, image_weights,
    cache_images, single_cls, stride, pad, min_items, prefix)`` over YoloDataset; ``settings`` gives
    everything YOLOv5's signature has no parameter for (the named parameters win)."""

    def __init__(self, path, img_size=640, batch_size=16, augment=False, hyp=None, rect=False, image_weights=False,
                 cache_images=False, single_cls=False, stride=32, pad=0.0, min_items=0, prefix="", *, settings=None,
                 **fields):
        super().__init__(path, as_settings(settings, **fields).replace(
            img_size=img_size, batch_size=batch_size, augment=augment, hyp=hyp, rect=rect,
            image_weights=image_weights, cache=cache_images, single_cls=single_cls, stride=stride, pad=pad,
            min_items=min_items), prefix)


def _image_indices(value, n: int) -> np.ndarray:
    """``value`` as (n,) int64 image indices in 0..n-1; ValueError naming what is wrong."""
    raw = np.asarray(value)
    if raw.dtype.kind not in "iub" and not (raw.dtype.kind == "f" and np.array_equal(raw, np.round(raw))):
        raise ValueError(f"dataset.indices must be {n} image indices (whole numbers), got {raw.dtype} "
                         "values" + (" with fractions" if raw.dtype.kind == "f" else ""))
    out = raw.astype(np.int64)
    if out.shape != (n,) or (n and (out.min() < 0 or out.max() >= n)):
        raise ValueError(f"dataset.indices must be {n} image indices in 0..{n - 1}, got shape {out.shape}")
    return out


def _remember_failure(cache_file, error: ImageDecodeError) -> None:
    """An image passed the scan and cannot be decoded now: the next run leaves it out (failures.py)."""
    failures.remember(cache_file, error.path, str(error), (error.size, error.mtime_ns))

