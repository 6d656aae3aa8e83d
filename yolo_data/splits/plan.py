"""``split_dataset``: every image of a dataset (all its splits pooled, any label format, local or in a bucket) into
new train/val/test splits, each group of images whole on one side, each class's share as asked where the groups
allow.  Nothing is written here (write.py writes the lists) and the dataset is never touched.

    read every split's labels (label caches) -> pool the images, each once -> groups (groups.py) ->
    assignment (assign.py) -> figures: shares per split and per class against the asked fractions
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..formats import entries
from ..labels.summary import progress_bar
from ..report.compose import ReportOptions, channels_of, read_splits
from .assign import assign_groups, shares
from .groups import GroupBy, group_images


@dataclass
class SplitOptions:
    """``val`` and ``test``: the shares of the images the new val and test splits get (train gets the rest).
    ``group_by``: how images are grouped (groups.GroupBy).  ``seed``: the order of equal-sized groups.
    ``tolerance``: how far (a share, 0.02 = 2 points) a split's share of the images or of a class's objects may miss
    the asked one before the summary names it.  ``task``: how label rows are read (None: as the report decides).
    ``workers``, ``cache_dir``, ``progress``: as the report's (ReportOptions)."""
    val: float = 0.1
    test: float = 0.0
    group_by: GroupBy = field(default_factory=lambda: GroupBy(("sequence",)))
    seed: int = 0
    tolerance: float = 0.02
    task: Optional[str] = None
    workers: Optional[int] = None
    cache_dir: Optional[str] = None
    progress: bool = True

    def fractions(self) -> Dict[str, float]:
        """{split: share}, 'train' first, 'test' only when asked.  Raises ValueError for shares out of range."""
        for name, v in (("val", self.val), ("test", self.test)):
            if not 0 <= v < 1:
                raise ValueError(f"--{name} must be a share of the images in [0, 1), got {v}")
        if self.val <= 0:
            raise ValueError(f"--val must be above 0, got {self.val}")
        if self.val + self.test >= 1:
            raise ValueError(f"--val {self.val} and --test {self.test} leave nothing to train on")
        out = {"train": 1.0 - self.val - self.test, "val": self.val}
        if self.test > 0:
            out["test"] = self.test
        return out


@dataclass
class Pool:
    """Every image of the dataset, once.  files: n paths or URLs.  label_image, label_class: (L,) int64, the image
    and class of each object.  names: the class names.  kind: the label format.  source: the split entries the
    labels were read from.  spec: the dataset yaml's DatasetSpec, or None."""
    files: List[str]
    label_image: np.ndarray
    label_class: np.ndarray
    names: List[str]
    kind: str
    source: List[str]
    spec: object = None


@dataclass
class SplitPlan:
    """What ``split_dataset`` decided.  pool: the images.  split: (n,) int8 index into ``names`` (-1: left out).
    figures: the summary (summary_figures)."""
    pool: Pool
    split: np.ndarray
    names: List[str]
    figures: dict


def pool_images(data, options: SplitOptions) -> Pool:
    """Every image of ``data`` (a dataset yaml: all its splits; else the one split it names), each once, with its
    objects' classes, read from the label caches (built when missing, as the report builds them)."""
    report_options = ReportOptions(task=options.task, workers=options.workers, cache_dir=options.cache_dir,
                                   progress=options.progress, duplicates=False, pictures=False)
    splits, names, _, spec = read_splits(data, report_options)
    bad = [f"{s.name}: {s.error}" for s in splits if s.labels is None]
    if bad:
        raise ValueError(f"{data}: cannot read " + "; ".join(bad))
    kinds = sorted({s.labels.kind for s in splits})
    if len(kinds) > 1:
        raise ValueError(f"{data}: its splits are of different label formats ({', '.join(kinds)}); split each apart")
    if kinds == ["memory"]:
        raise ValueError("an in-memory source lives in this process only: its images cannot be listed in files")
    seen: Dict[str, int] = {}
    images, classes = [], []
    for s in splits:
        store = s.labels.store
        rows = np.repeat(np.arange(len(store)), np.diff(store.label_offsets))
        new = np.full(len(store), -1, np.int64)
        for i in range(len(store)):
            f = store.im_file(i)
            if f not in seen:  # a file listed by two splits (train and val naming one folder) counts once
                seen[f] = new[i] = len(seen)
        keep = new[rows] >= 0
        images.append(new[rows[keep]])
        classes.append(store.labels[keep, 0].astype(np.int64))
    source = list(dict.fromkeys(str(e) for s in splits for e in entries(s.entry)))
    return Pool(list(seen), np.concatenate(images), np.concatenate(classes), list(names), kinds[0], source, spec)


def split_dataset(data, options: SplitOptions = SplitOptions()) -> SplitPlan:
    """New train/val(/test) splits of ``data``'s images, each group whole on one side.

    Args:
        data: a dataset yaml (all its splits pooled) or one split: image folder, .txt list, COCO JSON, VOC, LabelMe,
            Parquet, NDJSON; local or in a bucket.
        options: the shares, how images are grouped, the seed, the tolerance.

    Returns:
        SplitPlan: the images, where each went, and the summary figures.

    Raises:
        ValueError: shares out of range, a split that cannot be read, mixed label formats, or too few groups to
            give every split an image (nothing is split then).
    """
    t0 = time.perf_counter()
    fractions = options.fractions()
    pool = pool_images(data, options)
    bar = progress_bar("reading images", options.progress and sys.stderr.isatty())
    grouping = group_images(pool.files, options.group_by, options.workers, bar)
    kept_groups = len(np.unique(grouping.group[~grouping.left_out]))
    if kept_groups < len(fractions):
        raise ValueError(f"{data}: {len(pool.files):,} images make {kept_groups} group(s) by "
                         f"{','.join(options.group_by.ways)}: too few to fill {len(fractions)} splits "
                         "(a finer grouping, or --chunk for long runs of frames, gives more)")
    t1 = time.perf_counter()
    done = assign_groups(grouping.group, pool.label_image, pool.label_class, fractions, options.seed,
                         grouping.left_out)
    empty = [k for i, k in enumerate(done.names) if not (done.split == i).any()]
    if empty:
        raise ValueError(f"{data}: no group went to {', '.join(empty)}: {kept_groups:,} groups of "
                         f"{len(pool.files):,} images cannot give it the share asked (ask a larger one)")
    figures = summary_figures(pool, grouping, done.split, done.names, done.fractions, options)
    figures["data"] = str(data)
    figures["seconds"] = {"read_and_group": round(t1 - t0, 3), "assign": round(time.perf_counter() - t1, 3)}
    return SplitPlan(pool, done.split, done.names, figures)


def summary_figures(pool: Pool, grouping, split: np.ndarray, names: List[str], fractions: np.ndarray,
                    options: SplitOptions) -> dict:
    """The summary: per split its images and share against the asked one; per class its objects, the groups that
    hold them and each split's share; the classes that cannot be on every side (fewer groups than splits) and those
    whose share misses by more than the tolerance; groups that straddle splits (0 by construction, counted)."""
    nc = max(len(pool.names), int(pool.label_class.max()) + 1 if len(pool.label_class) else 0)
    images, objects = shares(split, names, pool.label_image, pool.label_class, nc)
    kept = max(int(images.sum()), 1)
    sizes = np.unique(grouping.group[~grouping.left_out], return_counts=True)[1]  # the groups that were split
    class_groups = np.zeros(nc, np.int64)
    if len(pool.label_class):
        counted = ~grouping.left_out[pool.label_image]  # the objects of images left out count in no group
        pairs = np.unique(grouping.group[pool.label_image[counted]] * nc + pool.label_class[counted])
        class_groups = np.bincount(pairs % nc, minlength=nc)
    total = objects.sum(0)
    rows, cannot, off = [], [], []
    for c in range(nc):
        name = pool.names[c] if c < len(pool.names) else str(c)
        got = objects[:, c] / max(int(total[c]), 1)
        miss = float(np.abs(got - fractions).max()) if total[c] else 0.0
        rows.append({"id": c, "name": name, "objects": int(total[c]), "groups": int(class_groups[c]),
                     "shares": {k: round(float(v), 4) for k, v in zip(names, got)}, "miss": round(miss, 4)})
        if total[c] and class_groups[c] < len(names):
            cannot.append(name)
        elif miss > options.tolerance:
            off.append(name)
    straddle = len(np.unique(grouping.group[split >= 0] * len(names) + split[split >= 0])) - len(
        np.unique(grouping.group[split >= 0]))
    return {
        "images": len(pool.files), "left_out": int(grouping.left_out.sum()), "groups": int(len(sizes)),
        "largest_group": int(sizes.max(initial=0)), "group_by": list(options.group_by.ways),
        "frames": options.group_by.frames, "chunk": options.group_by.chunk, "seed": options.seed,
        "tolerance": options.tolerance, "notes": grouping.notes, "straddling_groups": int(straddle),
        "splits": {k: {"asked": round(float(f), 4), "images": int(n), "share": round(int(n) / kept, 4)}
                   for k, f, n in zip(names, fractions, images)},
        "classes": rows, "cannot_split": cannot, "off_target": off,
        "channels": channels_of(pool.spec), "format": pool.kind,
    }
