"""One split's labels for every process of a job: found or scanned once, then handed to the others.

``load_split`` is the step that runs under ``torch_distributed_zero_first``: local rank 0 loads a fresh
label cache or scans the files and writes one (:mod:`~yolo_data.labels.loadorscan`), the other local
ranks then map exactly the file it names.  For a split in a bucket, where the nodes of a job share no
filesystem, global rank 0 does that once for the job and hands the file's bytes to the other nodes'
local ranks 0 (``_load_or_scan_once_per_job``); ``publish`` puts the file in the bucket beside the
labels, where every later job finds it.  ``fit_channels`` leaves out of a run the images whose bands
do not fit its channels: the cache holds every image's bands, whatever the channels of a run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from .. import distributed, formats
from ..formats.base import SourceOptions
from ..formats.sources import remote_cache_url
from ..formats.problems import Problem
from ..images import failures
from ..images.bands import fits, misfit_message
from ..storage import backend_for, is_url
from . import cache
from .loadorscan import SplitLabels, cache_candidates, cache_of_bytes, load_or_scan
from .scan import Progress

LOGGER = logging.getLogger("yolo_data")

__all__ = ["SplitLabels", "load_split", "publish", "fit_channels"]


def load_split(path, nc: Optional[int] = None, cache_dir=None, workers: Optional[int] = None,
               force: bool = False, progress: Optional[Progress] = None, save: bool = True,
               names: Optional[List[str]] = None, keep_difficult: bool = False, task: str = "detect",
               kpt_shape: Optional[Tuple[int, int]] = None, default_cache: Optional[Path] = None) -> SplitLabels:
    """Labels of the images named by ``path``, read once per node (once per job for a split in a bucket).

    Inside ``torch_distributed_zero_first`` the other local ranks do not look at the files again: they
    map exactly the cache file local rank 0 loaded or wrote (named in the process group's store, and
    checked to hold the fingerprint rank 0 saw), so a file added or changed in between cannot give
    them another label set, and so other numbers of steps per epoch, than rank 0.

    Args:
        path: a split entry of any registered label format (:mod:`~yolo_data.formats`: a folder, .txt
            list or image with YOLO labels, a COCO .json, a Pascal VOC folder or ImageSets list, a
            folder of images with LabelMe JSONs), or a list of entries of one format.
        nc: the number of classes, when only that is known (YOLO class ids must be below it).
        cache_dir: the one folder the label cache is kept in (default: beside the labels, else the
            per-user cache folder).
        workers: scan processes (default: every core this process may use).
        force: rescan even if a fresh cache exists.
        progress: called with (done, total) pairs while scanning.
        save: False scans without writing a cache.
        names: the class names when known (YOLO class ids beyond them are then errors; the other
            formats' class names map onto them by name).
        keep_difficult: keep VOC objects marked difficult.
        task: what a label row holds: 'detect', 'segment', 'pose' or 'obb' (a task other than
            'detect' has its own cache file).
        kpt_shape: (K, 2 or 3) keypoints per row, for pose rows.
        default_cache: where the cache goes by default instead of where the format puts it (a list of
            the first images of a split: see sources.fraction_cache_file); ``cache_dir`` still decides
            over it.

    Returns:
        The split's :class:`SplitLabels`: its label store ((L, 5) float32 rows [class, x, y, w, h],
        normalised), the cache file it came from or was written to (None when none was written), the
        counts and named problems, less the images whose decoding failed before (images.failures).

    Raises:
        FileNotFoundError, ValueError: a split entry that names no images, mixes label formats, or
            cannot be read for ``task``.
    """
    made = {}
    options = SourceOptions(tuple(names) if names else None, bool(keep_difficult), nc, task,
                            tuple(kpt_shape) if kpt_shape else None)

    def on_rank_0() -> str:
        s = _load_or_scan_once_per_job(tag, path, options, cache_dir, workers, force, progress, save, default_cache)
        failed, nbytes = failures.read(s.cache_file)
        made["split"] = failures.leave_out(s, failed)
        return json.dumps({"file": None if s.cache_file is None else str(s.cache_file), "fingerprint": s.fingerprint,
                           "default": str(s.default_file), "failed_bytes": nbytes, "kind": s.kind, "on_disk": s.on_disk,
                           "label_file": s.label_file_of(s.store.im_file(0)) if len(s.store) else None})

    tag = "labels-" + hashlib.sha256(json.dumps([str(p) for p in formats.entries(path)] + [nc, names, keep_difficult, task, kpt_shape]).encode(
        "utf-8", "surrogateescape")).hexdigest()[:16]
    value, here = distributed.share_from_local_rank_0(tag, on_rank_0)
    if here:
        return made["split"]
    t0 = time.perf_counter()
    info = json.loads(value)
    if info["file"] is not None:
        try:
            contents = cache.load(Path(info["file"]))
            if contents.fingerprint != info["fingerprint"]:
                raise cache.CacheError("replaced since local rank 0 used it")
            s = SplitLabels(contents.store, Path(info["file"]), False, time.perf_counter() - t0,
                            contents.counts, contents.problems, info["fingerprint"], Path(info["default"]),
                            contents.names, info["kind"], formats.get(info["kind"]).annotation_file_of(info["label_file"]))
            return failures.leave_out(s, failures.read(s.cache_file, upto=info["failed_bytes"])[0])
        except (OSError, cache.CacheError) as e:
            reason = f"cannot read local rank 0's label cache {info['file']} ({e})"
    elif info.get("on_disk", True):
        reason = "local rank 0 could not write its label cache"
    else:  # nothing of this split is on disk (an in-memory source): every rank reads its own
        reason = None
    if reason is not None:
        LOGGER.warning(f"{reason}; this rank scans the files itself, and the ranks are checked to agree "
                       "before the first batch")
    s = load_or_scan(path, options, cache_dir, workers, force, progress, save, default_cache)
    return failures.leave_out(s, failures.read(s.cache_file)[0])


def _load_or_scan_once_per_job(tag: str, path, options: SourceOptions, cache_dir, workers, force, progress,
                               save, default_cache=None) -> SplitLabels:
    """load_or_scan on a node's local rank 0; for a split in a bucket, once per job: the nodes of a
    job share no filesystem, so global rank 0 lists, scans (or finds its cache fresh) and hands its
    label cache file to the other nodes' local ranks 0 through the process group's store, which keep
    it in their own cache folder and check it as any cache file is checked (cache.load)."""
    entries = formats.entries(path)
    key = distributed.job_share_key(tag) if is_url(entries[0]) else None
    if key is None:
        return load_or_scan(path, options, cache_dir, workers, force, progress, save, default_cache)
    if distributed.get_rank() == 0:
        try:
            s = load_or_scan(path, options, cache_dir, workers, force, progress, save, default_cache)
        except BaseException as e:
            distributed.job_publish_error(key, e)
            raise
        data = None if s.cache_file is None else Path(s.cache_file).read_bytes()
        root = cache.user_cache_dir()
        meta = {"fingerprint": s.fingerprint, "default": Path(s.default_file).relative_to(root).as_posix(),
                "kind": s.kind, "label_file": s.label_file_of(s.store.im_file(0)) if len(s.store) else None}
        distributed.job_publish(key, meta, data)
        return s
    t0 = time.perf_counter()
    meta, data = distributed.job_receive(key)
    if data is None:
        LOGGER.warning("rank 0 could not write its label cache; this node scans the files itself")
        return load_or_scan(path, options, cache_dir, workers, force, progress, save, default_cache)
    default = cache.user_cache_dir() / meta["default"]
    cfile = cache_candidates(default, cache_dir)[0]
    cfile.parent.mkdir(parents=True, exist_ok=True)
    try:
        contents = cache.load(cfile)  # this node's from an earlier run, when still the same
        fresh = contents.fingerprint == meta["fingerprint"]
    except (OSError, cache.CacheError):
        fresh = False
    if not fresh:
        contents = cache_of_bytes(data, cfile.parent)
        if contents.fingerprint != meta["fingerprint"]:
            raise cache.CacheError(f"rank 0's label cache holds fingerprint {contents.fingerprint[:12]}, "
                                   f"it said {meta['fingerprint'][:12]}")
        cache.save(cfile, contents)
        contents = cache.load(cfile)
    return SplitLabels(contents.store, cfile, False, time.perf_counter() - t0, contents.counts, contents.problems,
                       meta["fingerprint"], default, contents.names, meta["kind"],
                       formats.get(meta["kind"]).annotation_file_of(meta["label_file"]))


def publish(split: SplitLabels) -> str:
    """Put the label cache of a split in a bucket beside its labels, where every later job finds it
    (``yolo-data-cache --publish``; loadorscan reads it back when it holds the split's fingerprint).

    Args:
        split: a split in a bucket, as :func:`load_split` returned it.

    Returns:
        The URL the cache file was written to.

    Raises:
        ValueError: a local split, or one whose cache file was not written.
        OSError: the bucket refused the write.
    """
    url = None if split.default_file is None else remote_cache_url(split.default_file)
    if url is None:
        raise ValueError(f"{split.default_file}: not the label cache of a split in a bucket (nothing to publish)")
    if split.cache_file is None:
        raise ValueError(f"{url}: the split's label cache was not written, so there is nothing to publish")
    backend_for(url).write(url, Path(split.cache_file).read_bytes())
    return url


def fit_channels(split: SplitLabels, channels: int, keep16: bool = False) -> SplitLabels:
    """The split without the images a dataset of ``channels`` channels does not read (images.bands.fits
    of each image's bands as the scan recorded them), each named in its problems (first, left out) and
    counted in ``counts['other_bands']``; ``split`` itself when every image fits.

    Args:
        split: a split as :func:`load_split` returns it.
        channels: the dataset's channels.
        keep16: 16-bit samples are kept (then only 16-bit images fit).

    Returns:
        The SplitLabels of the images that fit (its store a subset of ``split.store``, in order).
    """
    store, rows = split.store, split.store.bands
    if not len(rows):
        return split
    if (rows == rows[0]).all():  # one kind of image (the common case): one verdict for all
        first, inverse = np.zeros(1, np.int64), np.zeros(len(rows), np.int64)
    else:  # a few kinds: one verdict each (a sort of one int64 key: np.unique of rows is 10x slower)
        parts = np.clip(rows, 0, 65535).astype(np.int64)  # (the verdict of a value beyond is the same)
        key = ((parts[:, 0] << 16 | parts[:, 1]) << 16 | parts[:, 2]) << 16 | parts[:, 3]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    infos = [store.bands_of(i) for i in first.tolist()]
    whys = [fits(info, channels, keep16) for info in infos]
    if all(why is None for why in whys):
        return split
    reasons = [None if why is None else misfit_message(info.bands, info.bits, channels, why)
               for info, why in zip(infos, whys)]
    drop = np.array([r is not None for r in reasons], bool)[inverse]
    problems = [Problem(store.im_file(i), reasons[k], dropped=True)
                for i, k in zip(np.flatnonzero(drop).tolist(), inverse[drop].tolist())]
    sub = split.store.subset(np.flatnonzero(~drop))
    counts = dict(split.counts, other_bands=len(problems), boxes=sub.num_boxes(), backgrounds=sub.num_backgrounds())
    return replace(split, store=sub, counts=counts, problems=problems + list(split.problems))

