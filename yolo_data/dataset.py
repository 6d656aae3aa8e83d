"""The dataset: YOLOv5's ``LoadImagesAndLabels`` names over a split's labels, an index and a mapper.

The dataset receives its parts (items/parts.py: labels, index, images, mapper), as build.py assembles
them, and serves items from them; ``YoloDataset(path, settings)`` on its own assembles them through the
same function.  ``YoloDataset(path, settings)`` takes one :class:`~yolo_data.settings.Settings`;
``LoadImagesAndLabels`` keeps YOLOv5's signature over it.  Both keep YOLOv5's attribute names
(``im_files``, ``label_files``, ``labels``, ``shapes``, ``segments``, ``batch``, ``batch_shapes``,
``indices``, ``n``) so training scripts that read them keep working.  Per-image sequences are views
over one :class:`~yolo_data.labels.store.LabelStore`.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from .augment.augstate import TrainSettings
from .device.plan import BatchPlan, ItemPlan
from .device.stage import DeviceStage
from .formats import entry_of
from .items.mapping import DrawKey
from .items.parts import DatasetParts, assemble
from .labels.store import ImageFiles, Keypoints, LabelFiles, Labels, Segments
from .loading.collate import collate_fn
from .loading.tensors import BatchImages
from .sampling.runstate import RunState
from .sampling.sampler import ItemKey
from .settings import Settings, as_settings


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
                 *, parts: Optional[DatasetParts] = None, **fields):
        """The dataset of ``path``, serving items from ``parts``.

        Args:
            path: image folder, .txt list, list of them, dataset yaml (``split`` picks the split), a
                split of another label format (COCO .json, Pascal VOC folder or list, LabelMe folder), or
                an in-memory source (formats.memory.ItemSource).
            settings: a :class:`~yolo_data.settings.Settings`; default the evaluation preset.
            prefix: put before every line logged.
            run: what the composition root decided for this run (sampling.runstate.RunState: rect batch,
                shared-memory room, partner groups, the epoch); default: a dataset on its own, one rank.
            parts: the dataset's parts (items.parts.DatasetParts), assembled from these ``path``,
                ``settings`` and ``run`` by ``items.parts.assemble`` as build.py does; None: assembled here.
            **fields: Settings fields by name (``augment=True``, ``cache='ram'``), applied to ``settings``;
                not with ``parts``, which are already made.

        Raises:
            TypeError: ``settings`` is not a Settings, or ``fields`` come with ``parts``.
        """
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"YoloDataset(path, settings): settings must be a yolo_data Settings, got "
                            f"{type(settings).__name__} {settings!r}; for YOLOv5's signature (path, img_size, "
                            "batch_size, augment, ...) use LoadImagesAndLabels")
        if parts is not None and fields:
            raise TypeError("YoloDataset(..., parts=...): the parts were made with their settings; "
                            f"{', '.join(sorted(fields))} cannot change them (give them to the settings instead)")
        self.settings = settings = as_settings(settings, **fields)
        self.run = run or RunState(rect_batch=settings.batch_size)
        self.path, self.prefix = entry_of(path), prefix
        if parts is None:
            parts = assemble(path, settings, prefix, self.run)
        self.augment, self.img_size, self.stride = settings.augment, settings.img_size, settings.stride
        self.rect, self.image_weights = settings.rect, settings.index.image_weights
        self.control, self.split_labels, self.task = parts.control, parts.labels, parts.task
        self.index, self.images, self.mapper, self._scratch = parts.index, parts.images, parts.mapper, parts.scratch
        self.storage = parts.storage  # the backends its images are read through (its endpoint, its object cache)
        self.image_cache = self.images.cache
        self.n = len(self.index)
        # shared memory: YOLOv5's train.py sets dataset.indices each epoch (--image-weights) in the main
        # process, and persistent DataLoader workers must see the new ones
        self._indices = torch.arange(self.n, dtype=torch.int64).share_memory_()
        self.indices_version = 0  # counts assignments (the loader's early start compares it)

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
        item = self.mapper(int(self.indices[position]), DrawKey(self.epoch, draw), BatchImages(1, self._scratch), 0)
        if isinstance(item[0], ItemPlan):  # a loader with a device stage: one item on its own gets its pixels here
            item = (DeviceStage("cpu", self.image_cache).images(BatchPlan.join([item[0]]))[0],) + tuple(item[1:])
        return item

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
        """YOLOv5's dataset of ``path``.

        Args:
            path: as YoloDataset's.
            img_size: the long side images are resized to, and the letterbox size.
            batch_size: the batch rect shapes are made of (YOLOv5's per-process batch).
            augment: training augmentation (the training preset of every decision not given).
            hyp: YOLOv5's hyp dict or yaml path (default: YOLOv5's scratch-low hyps).
            rect: rectangular batches (images of one batch letterboxed to one shape).
            image_weights: the training script weights the draws (YOLOv5's ``--image-weights``).
            cache_images: False, True or 'ram' (one copy per node), or 'disk'.
            single_cls: every class becomes class 0.
            stride: rect shapes are multiples of it.
            pad: rect shapes are widened by ``pad * stride``.
            min_items: images with fewer labels are left out.
            prefix: put before every line logged.
            settings: a Settings for what the parameters above do not cover (they win over it).
            **fields: Settings fields by name (``split='val'``, ``cache_dir=...``).
        """
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

