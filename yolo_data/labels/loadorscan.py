"""One split's labels in this process: a fresh label cache where one is kept, else a scan of the files
that is written to the first place that takes it.

Where a fresh cache is looked for, in order: found without listing the split (a format's warm start:
a COCO JSON is not read), then beside the labels and in the per-user cache folder (only in the folder
``cache_dir`` names, when given), then the copy published in the bucket beside a remote split's labels
(``yolo-data-cache --publish``).  Fresh: the file loads and is checked (cache.load), holds the
fingerprint of the split's files and settings, and lists the split's images.

Nothing here knows about ranks: :mod:`~yolo_data.labels.split` calls :func:`load_or_scan` in the one
process of a node (or of a job) that reads the files, and hands the cache file it names to the others.
"""
from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from .. import formats
from ..formats.base import LabelFormat, SourceOptions
from ..formats.problems import Problem
from ..formats.sources import LABEL_CACHE_SUFFIX, img2label_path, remote_cache_url
from ..storage import backend_for, current_storage, ensure_listed, is_url
from . import cache
from .scan import scan_pairs
from .store import LabelStore

LOGGER = logging.getLogger("yolo_data")


@dataclass
class SplitLabels:
    """The verified labels of one split and how they were obtained.

    ``counts`` keys: found (images listed), ok, missing (no label file), empty (label file without
    rows), corrupt (left out), boxes, backgrounds (kept images without boxes), warnings.
    ``built``: True when this call scanned the files (False: read from ``cache_file``).
    """
    store: LabelStore
    cache_file: Optional[Path]
    built: bool
    seconds: float
    counts: Dict[str, int]
    problems: List[Problem] = field(default_factory=list)
    fingerprint: str = ""  # of the inputs (see cache.fingerprint)
    default_file: Optional[Path] = None  # where the cache goes by default (beside the labels)
    names: List[str] = field(default_factory=list)  # class names (the yaml's, or the annotations' own)
    kind: str = "yolo"  # the label format's name (formats/__init__.py)
    label_file_of: Callable[[str], str] = img2label_path  # an image's annotation file
    on_disk: bool = True  # False: nothing of the split may be written to disk (SplitSource.kept_on_disk)


def _counts(records, store: LabelStore) -> Dict[str, int]:
    status = [r.status for r in records]
    return {
        "found": len(records),
        "ok": status.count("ok"),
        "missing": status.count("missing"),
        "empty": status.count("empty"),
        "corrupt": status.count("corrupt"),
        "boxes": store.num_boxes(),
        "backgrounds": store.num_backgrounds(),
        "warnings": sum(not p.dropped for r in records for p in r.problems),
    }


def cache_candidates(default: Path, cache_dir: Optional[Union[str, Path]]) -> List[Path]:
    """Where a split's label cache is looked for and written, in order.

    Args:
        default: where the split's format puts its cache (beside the labels; for a split in a bucket,
            already in the per-user cache folder).
        cache_dir: the folder the caller named, or None.

    Returns:
        ``cache_dir``'s file alone when given; else ``default`` and then the same name in the per-user
        cache folder (used when the dataset folder is read-only).
    """
    if cache_dir is not None:
        return [cache.folder_cache_file(default, Path(cache_dir))]
    if _in_cache_folder(default):  # a split in a bucket: its default is in the cache folder already
        return [default]
    return [default, cache.folder_cache_file(default, cache.user_cache_dir())]


def _in_cache_folder(file: Path) -> bool:
    """Whether ``file`` is in the per-user cache folder (where we may make folders)."""
    try:
        Path(file).relative_to(cache.user_cache_dir())
        return True
    except ValueError:
        return False


def cache_of_bytes(data: bytes, folder: Path) -> cache.CacheContents:
    """A label cache file that came as bytes (from rank 0, or from the bucket), checked as any cache
    file is (cache.load), through an unnamed file in ``folder``: gone however this process ends.

    Args:
        data: the cache file's bytes.
        folder: a folder on the filesystem the cache will be kept on.

    Returns:
        Its checked contents.

    Raises:
        CacheError: the bytes are not a whole, intact label cache.
        OSError: ``folder`` refuses the unnamed file.
    """
    with tempfile.TemporaryFile(dir=folder) as f:
        f.write(data)
        f.flush()
        return cache.load(f.fileno())


def _published(default: Path, local: Path, fp: str, im_files: List[str]):
    """(contents, local file) of the label cache published in the bucket beside a remote split's
    labels (``yolo-data-cache --publish``), when it holds this split's fingerprint and listing: it is
    checked as any cache file, then kept as ``local``.  None for a local split, or when there is none
    or it is stale (then the split is scanned as usual)."""
    url = remote_cache_url(default)
    if url is None:
        return None
    try:
        data = backend_for(url).read(url)
    except FileNotFoundError:
        return None
    except OSError as e:
        LOGGER.warning(f"cannot read the published label cache {url} ({e}); scanning instead")
        return None
    local.parent.mkdir(parents=True, exist_ok=True)
    try:
        contents = cache_of_bytes(data, local.parent)
        if contents.fingerprint != fp:
            LOGGER.info(f"label cache {url} is stale (files or settings changed since it was published); rescanning")
            return None
        cache.check_listing(contents, im_files)
        cache.save(local, contents)
        return cache.load(local), local
    except (OSError, cache.CacheError) as e:
        LOGGER.warning(f"label cache {url}: {e}; scanning instead")
        return None


def _warm_start(fmt: LabelFormat, entries: List, options: SourceOptions, cache_dir,
                t0: float) -> Optional[SplitLabels]:
    """A fresh cache found without listing the split, for formats that can (LabelFormat.warm_start: a
    COCO JSON is not read): the format's settings equal the cache's, and the fingerprint of the images
    the cache says the split listed equals the cache's.  None otherwise (then the split is listed and
    checked as usual)."""
    warm = fmt.warm_start(entries, options)
    if warm is None:
        return None
    # as the cache holds them (lists, not tuples)
    settings = json.loads(json.dumps({**warm.settings, **options.task_settings()}))
    default = _for_task(warm.default_cache, options)
    for cfile in cache_candidates(default, cache_dir):
        try:
            contents = cache.load(cfile)
        except (OSError, cache.CacheError):
            continue  # the usual path below reports it
        if contents.settings != settings or contents.listed is None:  # (the fingerprint covers the
            continue  # settings too; comparing them first spares the images' stats when the files changed)
        if is_url(contents.listed[0] if contents.listed else None):
            ensure_listed(contents.listed)  # the images' folders listed, not one request per image
        fp = cache.fingerprint(contents.listed, None, None, settings=settings)
        if fp == contents.fingerprint:
            try:
                cache.check_listing(contents, contents.listed)
            except cache.CacheError:
                continue  # the usual path below reports it
            cache.remove_stale_temps(cfile)
            return SplitLabels(contents.store, cfile, False, time.perf_counter() - t0, contents.counts,
                               contents.problems, fp, default, contents.names, fmt.name, warm.label_file_of)
    return None


def _for_task(default: Path, options: SourceOptions) -> Path:
    """The default cache file of a split read for ``options.task``: detection's keeps its name, another
    task's gets the task in it (``train2017.pose.yolo_data.cache``), so reading one dataset for two
    tasks does not rebuild one file back and forth."""
    if not options.task_settings() or not default.name.endswith(LABEL_CACHE_SUFFIX):
        return default
    return default.with_name(default.name[:-len(LABEL_CACHE_SUFFIX)] + f".{options.task}{LABEL_CACHE_SUFFIX}")


def _first_fresh(candidates: List[Path], fp: str, im_files) -> Optional[Tuple[cache.CacheContents, Path]]:
    """(contents, file) of the first of ``candidates`` that loads, has fingerprint ``fp`` and lists
    ``im_files``; None when none does (each one passed over says why in the log)."""
    for cfile in candidates:
        try:
            contents = cache.load(cfile)
        except FileNotFoundError:
            continue
        except (cache.CacheError, OSError) as e:
            LOGGER.warning(f"label cache {cfile}: {e}; rebuilding it")
            continue
        if contents.fingerprint != fp:
            LOGGER.info(f"label cache {cfile} is stale (files or settings changed); rescanning")
            continue
        try:
            cache.check_listing(contents, im_files)
        except cache.CacheError as e:
            LOGGER.warning(f"label cache {cfile}: {e}; rebuilding it")
            continue
        cache.remove_stale_temps(cfile)  # leftovers of killed writers go even when nobody rewrites
        return contents, cfile
    return None


def load_or_scan(path, options: SourceOptions, cache_dir, workers, force, progress, save,
                 default_cache: Optional[Path] = None) -> SplitLabels:
    """The split's labels in this process: a fresh cache (see the module's docstring), else a scan
    written to the first of :func:`cache_candidates` that takes it.

    Args:
        path, cache_dir, workers, force, progress, save, default_cache: as
            :func:`~yolo_data.labels.split.load_split` takes them.
        options: what the labels depend on besides files (names, keep_difficult, nc, task, kpt_shape).

    Returns:
        The split's SplitLabels (``built``: the files were scanned; ``cache_file``: None when none was
        written: ``save`` False, no place took it, or requests to the bucket failed).
    """
    t0 = time.perf_counter()
    current_storage().forget()  # a bucket's folders are listed anew: objects may have changed since the last start
    fmt, listed = formats.split_format(path), formats.entries(path)  # asked once: a claim may list a folder
    if options.task not in fmt.tasks:
        raise ValueError(f"{path}: {fmt.name} annotations cannot be read for task '{options.task}' "
                         f"(they hold what task {' or '.join(repr(t) for t in fmt.tasks)} needs)")
    # (a warm start finds the cache where the format puts it: not with a default of the caller's)
    quick = None if force or default_cache else _warm_start(fmt, listed, options, cache_dir, t0)
    if quick is not None:
        return quick
    source = fmt.open(listed, options)
    source.settings = {**source.settings, **options.task_settings()}  # the fingerprint covers the task
    im_files = source.im_files
    default = _for_task(default_cache or source.default_cache, options)
    fp = cache.fingerprint(im_files, source.label_files, source.nc, settings=source.settings)
    candidates = cache_candidates(default, cache_dir)

    def split(store, cfile, built, counts, problems, names):
        return SplitLabels(store, cfile, built, time.perf_counter() - t0, counts, problems, fp, default,
                           names, source.kind, source.label_file_of, source.kept_on_disk)

    save = save and source.kept_on_disk
    if not force and source.kept_on_disk:
        found = _first_fresh(candidates, fp, im_files)
        if found is None and save:
            found = _published(default, candidates[0], fp, im_files)
        if found is not None:
            contents, cfile = found
            return split(contents.store, cfile, False, contents.counts, contents.problems, contents.names)

    names = source.find_names()
    failed_before = current_storage().counts().get("failed", 0)
    records = scan_pairs(im_files, source.labels, source.nc, workers=workers, progress=progress,
                         reader=source.reader)
    store = LabelStore.from_records(records)
    problems = source.problems + [p for r in records for p in r.problems]
    counts = _counts(records, store)
    counts["warnings"] += sum(not p.dropped for p in source.problems)
    dropped = sum(p.dropped for p in source.problems)  # listed images that never reached the scan
    counts["found"] += dropped
    counts["corrupt"] += dropped
    for p in problems:  # the dataset's summary shows them on every run (the first few), yolo-data-cache all
        LOGGER.debug(str(p))
    written = None
    failed = current_storage().counts().get("failed", 0) - failed_before
    if failed and save:  # what the network decided must not be kept as the truth about these files
        LOGGER.warning(f"{failed} requests to the bucket failed after every retry (their images are left "
                       "out of this run); the label cache is not written, so the next start scans again")
        save = False
    if save:
        kept = np.fromiter((r.status != "corrupt" for r in records), bool, len(records))
        contents = cache.CacheContents(store, fp, counts, problems, names, source.settings or None,
                                       im_files if source.keeps_listing else None, kept)
        for i, cfile in enumerate(candidates):
            try:
                if cfile != default or _in_cache_folder(cfile):  # never create folders inside the user's dataset
                    cfile.parent.mkdir(parents=True, exist_ok=True)
                cache.save(cfile, contents)
                written = cfile
                break
            except OSError as e:
                nxt = candidates[i + 1] if i + 1 < len(candidates) else None
                LOGGER.warning(f"cannot write label cache {cfile} ({e.strerror or e})"
                               + (f"; using {nxt} instead" if nxt else "; labels were not cached"))
    return split(store, written, True, counts, problems, names)
