"""The dataset: a verified label store plus the per-item pipeline (load -> letterbox -> tensors).

``YoloDataset`` keeps YOLOv5's attribute names (``im_files``, ``label_files``, ``labels``, ``shapes``,
``segments``, ``batch``, ``batch_shapes``, ``indices``, ``n``) so training scripts that read them keep
working.  Per-image sequences are views over one :class:`~yolo_data.store.LabelStore`.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from . import distributed, failures, summary
from .boxes import xywhn_to_xyxy
from .albument import AlbumentationsStep
from .collate import collate_fn
from .geometry import LetterboxPlan, letterbox_image, letterbox_plan, rect_plan
from .hyp import AugmentConfig, load_hyp
from .cache import user_cache_dir
from .imagecache import ImageCache, ImageCacheSpec, disk_candidates, normalise_mode, open_or_build
from .images import ImageReadError, LoadedImage, load_image
from .pipeline import draw_finish, flip_boxes, item_rng, mosaic_with_mixup, single_image_geometry
from .sample import Sample
from .sampling import SharedEpoch
from .datayaml import is_dataset_yaml, load_dataset_yaml
from .split import SplitLabels, load_split
from .store import ImageFiles, LabelFiles, Labels, Segments
from .tensors import BatchImages, Scratch, targets_of, write_letterboxed, write_rgb

LOGGER = logging.getLogger("yolo_data")
MAX_SUBSTITUTES = 8  # unreadable images in a row before a training item gives up


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

    ``cache_images``: False, True/'ram' or 'disk' (see :mod:`~yolo_data.imagecache`); ``ram_dir``: the
    folder of a RAM cache (default $YOLO_DATA_SHM_DIR or /dev/shm); ``shm_reserve_bytes``: room a RAM
    cache leaves free there for the DataLoader's batches (``create_dataloader`` computes it).
    """

    def __init__(self, path, img_size: int = 640, batch_size: int = 16, augment: bool = False, hyp=None,
                 rect: bool = False, image_weights: bool = False, cache_images=False, single_cls: bool = False,
                 stride: int = 32, pad: float = 0.0, min_items: int = 0, prefix: str = "",
                 workers: Optional[int] = None, split: Optional[str] = None, cache_dir=None, seed: int = 0,
                 batch_partners: bool = True, ram_dir=None, shm_reserve_bytes: int = 0, partner_group: int = 0):
        self.img_size = int(img_size)
        self.augment = augment
        self.hyp = hyp
        self.cfg: AugmentConfig = load_hyp(hyp)
        self.albumentations = AlbumentationsStep() if augment and self.cfg.albumentations else None
        self.seed = int(seed)
        self.batch_partners = batch_partners
        # mosaic/mixup partners come from the item's group of places in the epoch (sampling.py); 0: its batch
        self.partner_group = int(partner_group)
        # Set by the sampler in the main process, read by persistent workers: new augmentation each epoch.
        self.shared_epoch = SharedEpoch()
        self.image_weights = image_weights
        self.rect = False if image_weights else rect
        self.mosaic = self.augment and not self.rect
        self.stride = int(stride)
        self.path = path
        self.prefix = prefix

        paths, self.names = resolve_split(path, split, augment)
        show = summary.printing_rank()
        self.split_labels: SplitLabels = load_split(paths, nc=len(self.names) or None, cache_dir=cache_dir,
                                                    workers=workers, progress=_progress_bar(prefix, show))
        summary.log_split_summary(self.split_labels, prefix, path)  # every run, cache or scan (rank 0 only)
        store = self.split_labels.store
        if not len(store):
            raise RuntimeError(f"{prefix}no usable images in {path}: "
                               + "; ".join(str(p) for p in self.split_labels.problems[:5]))
        if min_items:
            keep = np.flatnonzero(np.diff(store.label_offsets) >= min_items)
            LOGGER.info(f"{prefix}{len(store) - len(keep)}/{len(store)} images with fewer than {min_items} "
                        "labels left out")
            store = store.subset(keep)
        if single_cls:
            labels = store.labels.copy()
            labels[:, 0] = 0
            store = replace(store, labels=labels)

        n = len(store)
        self.batch = np.floor(np.arange(n) / batch_size).astype(int)
        self.batch_shapes = None
        if self.rect:
            plan = rect_plan(store.shapes, batch_size, self.img_size, self.stride, pad)
            store = store.subset(plan.order)
            self.batch, self.batch_shapes = plan.batch_index, plan.batch_shapes
        self.store = store
        self.n = n
        # shared memory: YOLOv5's train.py sets dataset.indices each epoch (--image-weights) in the main
        # process, and persistent DataLoader workers must see the new ones
        self._indices = torch.arange(n, dtype=torch.int64).share_memory_()
        self.indices_version = 0  # counts assignments (the loader's early start compares it)

        self._reported = set()  # unreadable-image warnings already given (per process)
        self._scratch = Scratch()
        self.image_cache: Optional[ImageCache] = None
        if cache_images:
            mode = normalise_mode(cache_images)
            spec = ImageCacheSpec(mode, self.img_size, augment,
                                  disk_candidates(self.split_labels.default_file, self.img_size, augment, self.rect,
                                                  cache_dir, user_cache_dir()),
                                  ram_dir=None if ram_dir is None else Path(ram_dir),
                                  reserve_bytes=int(shm_reserve_bytes) if mode == "ram" else 0,
                                  workers=workers or 8, prefix=prefix)
            self.image_cache = open_or_build(spec, store, self.split_labels.fingerprint)

    # -- YOLOv5's attributes, as views over the store ----------------------------------------------
    @property
    def indices(self) -> np.ndarray:
        """(n,) int64: item position -> image index (YOLOv5's ``dataset.indices``; identity by default)."""
        return self._indices.numpy()

    @indices.setter
    def indices(self, value) -> None:
        """Set all n entries at once, as YOLOv5's train.py does with ``random.choices(range(n),
        weights=iw, k=n)``; DataLoader workers (persistent or not) read the new ones from then on."""
        value = np.asarray(value, dtype=np.int64)
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
        return LabelFiles(self.store)

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
        labels = self.store.labels
        return len(self.names) or (int(labels[:, 0].max()) + 1 if len(labels) else 1)

    @property
    def epoch(self) -> int:
        return self.shared_epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Augmentation of every item depends on (seed, epoch, index); the sampler calls this."""
        self.shared_epoch.set(epoch)

    # -- images ---------------------------------------------------------------------------------------
    def _read_image(self, i: int) -> LoadedImage:
        path = self.store.im_file(i)
        try:
            return load_image(path, self.img_size, self.augment)
        except ImageReadError as e:  # passed the scan, fails now: the next run leaves it out
            failures.remember(self.split_labels.cache_file, path, str(e))
            raise

    def load_image(self, i: int) -> Tuple[np.ndarray, Tuple[int, int], Tuple[int, int]]:
        """YOLOv5's form: (img (h, w, 3) uint8 BGR resized, (h0, w0), (h, w))."""
        if self.image_cache is not None:
            cached = self.image_cache.get(i)
            if cached is not None:
                return cached
        li = self._read_image(i)
        return li.img, li.hw0, li.hw

    # -- one item ---------------------------------------------------------------------------------------
    def _letterbox_of(self, index: int):
        """(img (h, w, 3) BGR resized, its LetterboxPlan, (h0, w0), (h, w)) for image ``index``."""
        img, hw0, (h, w) = self.load_image(index)
        shape = self.batch_shapes[self.batch[index]] if self.rect else self.img_size
        return img, letterbox_plan((h, w), shape, auto=False, scaleup=self.augment), hw0, (h, w)

    def _boxes_on(self, index: int, plan: LetterboxPlan, hw: Tuple[int, int]) -> np.ndarray:
        """(n, 4) float32 pixel xyxy boxes of image ``index`` on its letterbox."""
        h, w = hw
        return xywhn_to_xyxy(self.store.labels_of(index)[:, 1:], plan.ratio[0] * w, plan.ratio[1] * h,
                             padw=plan.pad[0], padh=plan.pad[1])

    def _letterboxed(self, index: int):
        """Image ``index`` letterboxed to its final shape: (Sample with pixel boxes, YOLOv5 shapes)."""
        img, plan, (h0, w0), (h, w) = self._letterbox_of(index)
        scale = np.array([plan.ratio[0] * w, plan.ratio[1] * h], np.float32)
        segments = [seg * scale + np.array(plan.pad, np.float32) for seg in self.store.segments_of(index)]
        shapes = (h0, w0), ((h / h0, w / w0), plan.pad)
        return Sample(letterbox_image(img, plan), self.store.labels_of(index)[:, 0].copy(), self._boxes_on(index, plan, (h, w)),
                      segments), shapes

    def _resized(self, index: int) -> Sample:
        """Image ``index`` with its long side at img_size and pixel boxes (a mosaic tile)."""
        img, _, (h, w) = self.load_image(index)
        labels = self.store.labels_of(index)
        boxes = xywhn_to_xyxy(labels[:, 1:], w, h)
        segments = [seg * np.array([w, h], np.float32) for seg in self.store.segments_of(index)]
        return Sample(img, labels[:, 0].copy(), boxes, segments)

    def __getitem__(self, index: int):
        draw, position = divmod(index, self.n) if index >= self.n else (0, index)  # a draw token (sampling.py)
        return self._item(position, BatchImages(1, self._scratch), 0, draw)

    def __getitems__(self, positions: List[int]):
        """A whole batch at once (torch's DataLoader calls this with the batch's indices).  The items'
        images are slots of one (B, 3, H, W) tensor, which collate_fn hands on without stacking.

        With ``batch_partners`` (the default when augmenting) mosaic and mixup partners are drawn from
        the images of the item's partner group (``partner_group`` consecutive places of the epoch's
        global order, see sampling.py; 0: the whole batch), each decoded once for the batch: about one
        decode per item instead of four, and still a pure function of (seed, epoch, group), whatever
        the number of workers, and of ranks when every rank takes whole groups.
        """
        images = BatchImages(len(positions), self._scratch)
        # YoloSampler hands out draw tokens (place in the epoch * n + position); plain positions are draw 0
        draws = [p // self.n for p in positions]
        positions = [p % self.n for p in positions]
        if not (self.augment and self.batch_partners):
            return [self._item(p, images, k, d) for k, (p, d) in enumerate(zip(positions, draws))]
        indices = self.indices  # one view of the shared tensor for the batch
        ids = [int(indices[p]) for p in positions]
        groups = [d // self.partner_group for d in draws] if self.partner_group else [0] * len(ids)
        pools = {}
        for g, i in zip(groups, ids):
            pools.setdefault(g, []).append(i)
        loaded = {}

        def load(i: int) -> Sample:
            if i not in loaded:
                loaded[i] = self._resized(i)
            return loaded[i]

        items = []
        for k, i in enumerate(ids):
            pool = pools[groups[k]]
            pool = pool if len(pool) >= 4 else range(self.n)  # a tiny last group borrows from the dataset
            try:
                items.append(self._train_item(i, item_rng(self.seed, self.epoch, i, draw=draws[k]), images, k,
                                              load, pool))
            except ImageReadError:  # an image went missing: this item takes the single-item path
                items.append(self._item(positions[k], images, k, draws[k]))
        return items

    def _item(self, position: int, images: BatchImages, k: int, draw: int = 0):
        """Item ``position`` (through ``indices``), its image written into slot ``k`` of ``images``;
        ``draw``: its place in the epoch (see ``pipeline.item_rng``)."""
        index = self.indices[position]
        if not self.augment:
            # Evaluation must see exactly its images: an unreadable one is an error (ImageReadError
            # names the file; in a worker it reaches the main process, nothing hangs).
            return self._eval_item(index, images, k)
        # Training goes on when an image vanished or broke after the scan: the item is rebuilt around
        # the next image, with a warning naming the file, so one bad file never ends a long run.
        for attempt in range(MAX_SUBSTITUTES + 1):
            primary = (index + attempt) % self.n
            try:
                return self._train_item(primary, item_rng(self.seed, self.epoch, index, attempt, draw), images, k)
            except ImageReadError as e:
                if str(e) not in self._reported:
                    self._reported.add(str(e))
                    LOGGER.warning(f"{self.prefix}{e}; using another image instead")
                error = e
        raise ImageReadError(f"{MAX_SUBSTITUTES + 1} images in a row could not be read (last: {error}); "
                             "has the dataset moved? Rebuild the cache with tools/build_cache.py")

    def _eval_item(self, index: int, images: BatchImages, k: int):
        """Letterbox straight into the batch tensor; polygons only matter to augmentation."""
        img, plan, (h0, w0), (h, w) = self._letterbox_of(index)
        out = images.write(k, plan.shape, lambda planes: write_letterboxed(img, plan, planes))
        targets = targets_of(self.store.labels_of(index)[:, 0], self._boxes_on(index, plan, (h, w)), plan.shape)
        return out, targets, self.store.im_file(index), ((h0, w0), ((h / h0, w / w0), plan.pad))

    def _train_item(self, index: int, rng: np.random.Generator, images: BatchImages, k: int, load=None,
                    pool=None):
        if self.mosaic and rng.random() < self.cfg.mosaic:
            sample = mosaic_with_mixup(load or self._resized, range(self.n) if pool is None else pool, index,
                                       self.img_size, self.cfg, rng)
            shapes = None
        else:
            sample, shapes = self._letterboxed(index)
            sample = single_image_geometry(sample, self.cfg, rng)
        if self.albumentations is not None:
            sample = self.albumentations(sample, rng)
        draws = draw_finish(self.cfg, rng)
        img, sample = sample.img, flip_boxes(sample, draws)  # pixels are flipped on their way out
        out = images.write(k, img.shape[:2], lambda planes: write_rgb(img, planes, draws.hsv_gains, draws.flip_ud,
                                                                      draws.flip_lr, self._scratch))
        return out, targets_of(sample.cls, sample.boxes, img.shape[:2]), self.store.im_file(index), shapes

    collate_fn = staticmethod(collate_fn)  # YOLOv5 scripts use LoadImagesAndLabels.collate_fn


LoadImagesAndLabels = YoloDataset  # YOLOv5's name
