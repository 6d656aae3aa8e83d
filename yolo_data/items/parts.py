"""A dataset's parts, assembled from a path and a Settings: the one assembly both ``build_loader`` and a
``YoloDataset(path, ...)`` built on its own go through.

    labels (the split: cache or scan) -> index (filters, rect order and shapes; built once)
    -> images (image cache or file) -> mapper (evaluation, training, or the caller's own)

The dataset (dataset.py) receives the result and only serves items from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from .. import distributed
from ..augment.augstate import AugmentControl
from ..formats import admit, entry_of, split_format
from ..formats.datayaml import is_dataset_yaml, load_dataset_yaml
from ..formats.ndjson import dataset_of as ndjson_dataset, is_ndjson, split_entry, with_split
from ..formats.sources import fraction_cache_file, img2label_path, list_image_files, storage_for
from ..images import failures
from ..images.bands import ImageBandsError
from ..images.load import ImageDecodeError, ImageSource
from ..labels import summary
from ..labels.cache import user_cache_dir
from ..labels.split import SplitLabels, fit_channels, load_split
from ..loading.tensors import Scratch
from ..runtime.workers import guard_opencv_pool
from ..sampling.runstate import RunState
from ..formats.sources import fraction_count
from ..settings import Settings
from ..storage import Storage, using
from .imagecache import ImageCacheSpec, disk_candidates, normalise_mode, open_or_build
from .index import SplitIndex, build_index
from .mapping import ItemMapper, make_mapper
from .task import LabelTask, resolve_task


@dataclass
class DatasetParts:
    """What a YoloDataset serves its items from.

    ``labels``: the split's verified labels (labels.split.SplitLabels: the store as read, its cache
    file, counts, problems).  ``task``: what a label row holds and what each item carries.  ``index``:
    the items' store after the filters and the rect order, with each item's letterbox shape.
    ``images``: the index's images as the mapper reads them (from an image cache or their files).
    ``storage``: the dataset's own storage backends (its endpoint, its object cache: storage.Storage);
    its files and objects are read through them while it is built, and its images in the workers.
    ``control``: the hyp and mosaic switches (augstate.AugmentControl).  ``scratch``: arrays the
    mapper and the dataset reuse from item to item.  ``mapper``: item ``i`` of the index with its
    DrawKey into a slot of a batch (mapping.py: ``mapper(i, key, out, k)``, and ``mapper.batch`` for
    partner groups).
    """
    labels: SplitLabels
    task: LabelTask
    index: SplitIndex
    images: ImageSource
    control: AugmentControl
    scratch: Scratch
    mapper: object
    storage: Storage


def assemble(path, settings: Settings, prefix: str = "", run: Optional[RunState] = None,
             mapper: Optional[Callable] = None) -> DatasetParts:
    """The parts of the dataset of ``path`` under ``settings``.

    Args:
        path: image folder, .txt list, list of them, dataset yaml (``settings.split_name`` picks), or a
            split of another label format (COCO .json, Pascal VOC folder or list, LabelMe folder).
        settings: every decision about the dataset (settings.Settings).
        prefix: put before every line logged.
        run: what the composition root decided for this run (its rect batch and the room a RAM image
            cache leaves in shared memory); default: a dataset on its own, one rank.
        mapper: a custom mapper, ``mapper(item, key) -> (img, targets, path, shapes)`` (mapping.ItemMapper
            states the contract), used instead of the built one; None: the evaluation or training
            mapper ``settings`` ask for.

    Returns:
        The DatasetParts.  Raises RuntimeError when the split has no usable image.
    """
    # an in-memory source: its memory:// URL, a string as every other split entry (``source`` holds the
    # object until the storage's backend does: the names of sources are weak references)
    source, path = path, entry_of(path)  # noqa: F841
    run = run or RunState(rect_batch=settings.batch_size)
    control = AugmentControl(settings.augmentation.hyp, settings.img_size, settings.mosaic_possible, settings.seed,
                             settings.augment)
    guard_opencv_pool()  # before any thread of ours uses OpenCV's pool: workers fork from here
    storage = storage_for(settings.source)  # this dataset's own backends: nothing process-wide changes
    with using(storage):
        labels, names, task, channels = read_labels(path, settings, prefix)
        index = build_index(labels.store, names, settings, run.rect_batch, prefix, data=path)
        images = open_images(labels, index.store, settings, run, prefix, channels)
    control.set_channels(channels)
    scratch = Scratch()
    if mapper is None:
        mapper = make_mapper(index, images, settings, task, control, scratch, prefix, path)
    else:
        mapper = ItemMapper(mapper, index, images)
    return DatasetParts(labels, task, index, images, control, scratch, mapper, storage)


def resolve_split(path, split: Optional[str], augment: bool):
    """(paths, names, spec) for what ``path`` names.  A dataset yaml gives its ``split`` ('train' when
    augmenting, else 'val', when not given), its class names and its DatasetSpec (kpt_shape, ...); an
    NDJSON export given as the path is a dataset too (formats.ndjson: its split's records, its class
    names and kpt_shape); anything else has no names and no spec (None)."""
    split = split or ("train" if augment else "val")
    if is_ndjson(path):
        entry, spec = ndjson_dataset(path, split_entry(path)[1] or split)  # a split named in the path wins
        return entry, spec.names, spec
    if not is_dataset_yaml(path):
        return path, [], None
    spec = load_dataset_yaml(path)
    if split not in spec.splits:
        raise ValueError(f"{path}: no '{split}' split (it has {', '.join(spec.splits) or 'none'})")
    return with_split(spec.splits[split], split), spec.names, spec


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


def read_labels(path, settings: Settings, prefix: str = "") -> Tuple[SplitLabels, List[str], LabelTask, int]:
    """The split's verified labels (cache or scan), its class names, the task it was read for and the
    bands of its images (``settings.images.channels``, else the dataset yaml's ``channels``, else 3), with
    the split's summary line; images whose bands do not fit are left out and named there
    (labels.split.fit_channels).  ``path``: image folder, .txt list, list of them, dataset yaml
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
    admit(paths)  # every rank: the URLs an NDJSON lists are fetched by the ranks that read no labels too
    labels = load_split(paths, cache_dir=part.cache_dir, workers=part.scan_workers, names=names or None,
                        progress=_progress_bar(prefix, summary.printing_rank()), keep_difficult=part.keep_difficult,
                        task=task.name, kpt_shape=task.kpt_shape, default_cache=default_cache)
    channels = settings.images.channels or (spec and spec.channels) or 3
    # the cache serves runs of any channels: the images this run cannot read are left out and named here
    labels = fit_channels(labels, channels, settings.images.keep16)
    summary.log_split_summary(labels, prefix, path)  # every run, cache or scan (rank 0 only)
    if not len(labels.store):
        raise RuntimeError(f"{prefix}no usable images in {path}: " + "; ".join(str(p) for p in labels.problems[:5]))
    return labels, labels.names or names, task, channels  # a COCO JSON's categories, VOC's object names


def open_images(labels: SplitLabels, store, settings: Settings, run: RunState, prefix: str = "",
                channels: int = 3) -> ImageSource:
    """The images of ``store`` as the mapper reads them, with ``channels`` bands (uint16 with
    ``settings.images.keep16``): from the image cache
    ``settings.images.cache`` asks for (built or opened here), else from their files."""
    cache, part = None, settings.images
    if part.cache:
        mode = normalise_mode(part.cache)
        if mode == "disk" and not labels.on_disk:
            raise ValueError(f"cache='disk': {labels.store.im_file(0).rpartition('/')[0]} is an in-memory source "
                             "without a fingerprint(), so nothing of it is written to disk; use cache='ram', "
                             "or give the source a fingerprint()")
        spec = ImageCacheSpec(mode, settings.img_size, linear=settings.linear_resize,
                              disk_files=disk_candidates(labels.default_file, settings.img_size,
                                                         settings.linear_resize, settings.rect,
                                                         settings.source.cache_dir, user_cache_dir(),
                                                         settings.reduced_decode, part.capped_resize, channels,
                                                         part.keep16),
                              ram_dir=None if part.ram_dir is None else Path(part.ram_dir),
                              reserve_bytes=int(run.shm_reserve_band_bytes) * channels if mode == "ram" else 0,
                              workers=settings.source.scan_workers or 8, prefix=prefix, reduced=settings.reduced_decode,
                              capped=part.capped_resize, channels=channels, keep16=part.keep16)
        cache = open_or_build(spec, store, labels.fingerprint)
    # a function of the cache file, not a bound method of the dataset: the image source must hold no
    # reference back to the dataset, so that `del loader, dataset` frees it (and its RAM cache) at once
    return ImageSource(store, settings.img_size, linear=settings.linear_resize, cache=cache,
                       on_failure=partial(_remember_failure, labels.cache_file), reduced=settings.reduced_decode,
                       capped=part.capped_resize, channels=channels, keep16=part.keep16)


def _remember_failure(cache_file, error: ImageDecodeError) -> None:
    """An image passed the scan and cannot be decoded now: the next run leaves it out (failures.py).  Not
    one whose bands do not fit: that is a fact about the file and this run's channels, and the record
    serves runs of any channels (each leaves out what does not fit it: labels.split.fit_channels)."""
    if isinstance(error, ImageBandsError):
        return
    failures.remember(cache_file, error.path, str(error), (error.size, error.mtime_ns))
