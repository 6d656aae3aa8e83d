"""``yolo-data report DATA``: what a dataset holds and what is wrong with it, before training on it.

    splits (label caches) -> figures per split (datastats) -> classes across splits -> duplicates and
    leakage (dedupe, reads every image once) -> video frames near training frames (leakage, from the
    same hashes) -> class frequencies as sampled (balance) -> pictures (training batches, the rarest
    classes) -> findings -> report.json + report.html (html.py)

The JSON file holds every figure the HTML page shows (the page is made from it, plus the pictures).
Statistics come from each split's label cache; only the duplicate search and the pictures read images.
Nothing is written into the dataset: the report keeps its label caches in ``cache_dir``, else in the
per-user cache folder (where a loader looks too when there is none beside the labels, so a training
run after the report reuses them), and says which file each split used.

``findings`` names what a dataset check may fail on (``--fail-on``):

    corrupt         images left out (unreadable image, broken label file, ...)
    warnings        problems that did not leave an image out (duplicate rows, fixed coordinates, ...)
    empty-split     a split without one usable image (a split that cannot be read at all fails
                    every category: nothing in it was checked)
    leakage         the same picture in two splits (identical files or re-encoded/resized copies; a
                    flat picture, one colour, only when its bytes are identical)
    sequence-leakage
                    val or test frames of a video within k frames of a training frame (leakage.py)
    duplicates      the same picture twice within a split
    label-conflict  duplicates whose labels disagree
    missing-class   a class with objects in one split and none in another (or in no split at all)
    tiny-boxes      boxes the training loader's candidate filter drops at this image size
    data-changed    splits a ``checkpoint``'s model was trained on that changed since (checkpoint.py)
"""
from __future__ import annotations

import base64
import datetime
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import formats
from ..formats.datayaml import is_dataset_yaml, load_dataset_yaml
from ..formats.memory import entry_of
from ..formats.ndjson import export_dataset, is_ndjson, split_entry
from ..items.task import resolve_task
from ..labels.cache import user_cache_dir
from ..labels.split import SplitLabels, fit_channels, load_split
from ..labels.summary import progress_bar
from ..sampling import balance
from ..settings import Settings, TargetSettings
from ..storage import is_url, write_whole
from . import datastats, dedupe, leakage, sequence
from .checkpoint import compare_record, read_record

LOGGER = logging.getLogger("yolo_data")
REPORT_VERSION = 1
FINDINGS = ("corrupt", "warnings", "empty-split", "leakage", "sequence-leakage", "duplicates", "label-conflict",
            "missing-class", "tiny-boxes", "data-changed")
DEFAULT_BALANCE = 0.1  # the threshold class_balance=True uses; the sampled frequencies are shown at it
IDENTICAL_IOU, SIMILAR_IOU = 0.9, 0.5  # boxes of duplicates agree at this IoU (see _duplicates)


@dataclass
class ReportOptions:
    """``img_size``: the training size box sizes are measured at.  ``task``: how label rows are read
    (None: 'pose' where the yaml has kpt_shape, else 'detect').  ``duplicates``: search them (reads
    every image once).  ``pictures``: draw training batches and the rarest classes' objects.
    ``class_balance``: the repeat-factor threshold the sampled class frequencies are shown at.
    ``workers``: threads reading images and processes scanning labels (None: all cores).
    ``cache_dir``: where label caches are read and written (None: the per-user cache folder, never the
    dataset; a split in a bucket: where a loader keeps its cache).  ``progress``: bars on a terminal.
    ``sequence_frames``: frames at most this far apart are neighbours (the sequence-leakage finding).
    ``checkpoint``: a training checkpoint whose record of its data is compared with the splits."""
    img_size: int = 640
    task: Optional[str] = None
    duplicates: bool = True
    pictures: bool = True
    class_balance: float = DEFAULT_BALANCE
    workers: Optional[int] = None
    cache_dir: Optional[str] = None
    progress: bool = True
    seed: int = 0
    sequence_frames: int = sequence.DEFAULT_FRAMES
    checkpoint: Optional[str] = None


@dataclass
class Report:
    """``figures``: everything the report says (the JSON file's contents).  ``pictures``: name -> JPEG
    bytes.  ``html_file``/``json_file``: where they were written (None before ``write``)."""
    figures: dict
    pictures: Dict[str, bytes] = field(default_factory=dict)
    html_file: Optional[Path] = None
    json_file: Optional[Path] = None

    @property
    def findings(self) -> Dict[str, int]:
        return self.figures["findings"]

    @property
    def unreadable(self) -> Dict[str, str]:
        """{split name: why it could not be read at all}."""
        return {k: v["error"] for k, v in self.figures["splits"].items() if "error" in v}

    def failed(self, fail_on: Sequence[str]) -> List[str]:
        """The categories of ``fail_on`` this report found something in; all of them when a split could
        not be read (nothing in it was checked, so no check passed)."""
        if self.unreadable:
            return list(fail_on)
        return [c for c in fail_on if self.findings.get(c, 0)]


@dataclass
class _Split:
    name: str
    entry: object  # what the split names (folder, list, json, ...)
    labels: Optional[SplitLabels]  # the images that fit the dataset's channels
    error: Optional[str] = None
    bands: List[dict] = field(default_factory=list)  # datastats.band_counts of every image the scan kept


def split_cache_dir(entry, options: ReportOptions):
    """The cache folder the report gives load_split for split ``entry``: ``options.cache_dir``, else the
    per-user cache folder, which a loader searches after the folder beside the labels; None (the
    loader's own place, already in the per-user folder) for a split in a bucket."""
    if options.cache_dir is not None:
        return options.cache_dir
    if is_url(formats.entries(entry)[0]):
        return None
    return user_cache_dir()


def read_splits(data, options: ReportOptions) -> Tuple[List[_Split], List[str], object, Optional[object]]:
    """(splits, class names, the task, the yaml's DatasetSpec or None) of ``data``: every split of a
    dataset yaml or an NDJSON export, or the one split a folder, list, COCO JSON or VOC source names.  A split that cannot
    be read at all is kept with its error (the report names it).  Images whose bands do not fit the
    dataset's channels (the yaml's ``channels``, else 3) are left out and named, as a training run
    leaves them out (labels.split.fit_channels); the band counts are those of every image scanned."""
    spec = (load_dataset_yaml(data) if is_dataset_yaml(data)
            else export_dataset(data) if is_ndjson(data) and split_entry(data)[1] is None else None)
    if spec is not None and not spec.splits:
        raise ValueError(f"{data}: no train/val/test split listed")
    entries = list(spec.splits.items()) if spec else [(Path(str(data)).name or str(data), data)]
    names = list(spec.names) if spec else []
    task = resolve_task(TargetSettings(task=options.task), spec and spec.kpt_shape, spec and spec.flip_idx, str(data))
    tty = options.progress and sys.stderr.isatty()
    out = []
    for name, entry in entries:
        try:
            labels = load_split(entry, cache_dir=split_cache_dir(entry, options), workers=options.workers,
                                names=names or None,
                                progress=progress_bar(f"scanning {name}", tty), task=task.name,
                                kpt_shape=task.kpt_shape)
            found = datastats.band_counts(labels.store)
            out.append(_Split(name, entry, fit_channels(labels, channels_of(spec)), bands=found))
            names = names or labels.names
        except (OSError, ValueError) as e:
            out.append(_Split(name, entry, None, str(e)))
    return out, names, task, spec


def channels_of(spec) -> int:
    """The channels of a dataset: its yaml's ``channels`` (``spec``: its DatasetSpec, or None), else 3."""
    return (spec and spec.channels) or 3


def _split_summary(s: _Split, nc: int, img_size: int) -> dict:
    source = str(s.entry) if not isinstance(s.entry, (list, tuple)) else [str(e) for e in s.entry]
    if s.labels is None:
        return {"source": source, "error": s.error, "images": 0}
    c, store = s.labels.counts, s.labels.store
    return {
        "source": source,
        "format": s.labels.kind,
        "cache_file": str(s.labels.cache_file) if s.labels.cache_file else None,
        "cache_built": bool(s.labels.built),
        "listed": int(c["found"]), "left_out": int(c["corrupt"]) + int(c.get("other_bands", 0)),
        "warnings": int(c["warnings"]), "missing_label_files": int(c["missing"]), "empty_label_files": int(c["empty"]),
        "other_bands": int(c.get("other_bands", 0)), "image_bands": s.bands,
        **datastats.split_figures(store, nc, img_size), "digest": store.names_digest(),
        "problems": datastats.group_problems(s.labels.problems),
    }


def _classes_across(splits: Dict[str, dict], names: Sequence[str]) -> Tuple[List[dict], List[dict]]:
    """(per-class rows, missing-class findings): each class's instances and images in every split, and
    the classes with objects in one split and none in another split that has objects."""
    labelled = {k: v for k, v in splits.items() if v.get("objects")}
    nc = max([len(names)] + [len(v["classes"]["instances"]) for v in labelled.values()])
    rows, missing = [], []
    for c in range(nc):
        inst = {k: (v["classes"]["instances"][c] if c < len(v["classes"]["instances"]) else 0)
                for k, v in labelled.items()}
        imgs = {k: (v["classes"]["images"][c] if c < len(v["classes"]["images"]) else 0) for k, v in labelled.items()}
        name = names[c] if c < len(names) else str(c)
        absent = [k for k, n in inst.items() if not n]
        rows.append({"id": c, "name": name, "instances": inst, "images": imgs, "absent_from": absent})
        if absent and (len(absent) < len(inst) or c < len(names)):
            where = [k for k in inst if inst[k]]
            missing.append({"id": c, "name": name, "absent_from": absent, "present_in": where})
    return rows, missing


def _sampled(store, nc: int, threshold: float) -> dict:
    """Class frequencies per epoch as class_balance=``threshold`` samples them, beside the raw ones."""
    classes = store.labels[:, 0].astype(np.int64)
    factors = balance.repeat_factors(classes, store.label_offsets, threshold, nc)
    images, instances = balance.sampled_counts(factors, classes, store.label_offsets, nc)
    return {"threshold": float(threshold), "epoch_length": balance.epoch_length(factors), "images": len(store),
            "largest_factor": float(factors.max(initial=1.0)),
            "class_images": [float(v) for v in images], "class_instances": [float(v) for v in instances]}


def _duplicates(splits: List[_Split], options: ReportOptions) -> Tuple[dict, dict]:
    """(duplicate groups within and across splits, frames of videos near training frames from the same
    hashes); every image file read once (a file listed by two splits too)."""
    t0 = time.perf_counter()
    per_split = {s.name: [s.labels.store.im_file(i) for i in range(len(s.labels.store))]
                 for s in splits if s.labels is not None}
    unique = list(dict.fromkeys(p for paths in per_split.values() for p in paths))
    where = {p: i for i, p in enumerate(unique)}
    prints = dedupe.fingerprint_images(unique, workers=options.workers,
                                       progress=progress_bar("reading images", options.progress and sys.stderr.isatty()))
    by_split = {name: (paths, prints.take(np.array([where[p] for p in paths], np.int64)))
                for name, paths in per_split.items()}
    groups = dedupe.find_duplicates(by_split)
    stores = {s.name: s.labels.store for s in splits if s.labels is not None}
    out = []
    for g in groups:
        members = [{"split": sp, "file": path, "objects": int(len(stores[sp].labels_of(i)))} for sp, i, path in g.members]
        first = stores[g.members[0][0]].labels_of(g.members[0][1])
        # a re-encoded or resized copy keeps its normalised boxes (IoU about 1); near-identical pictures
        # that are not copies (neighbouring frames of a video) move their objects a little: their labels
        # disagree only when a class differs or a box moved by half of itself
        iou = IDENTICAL_IOU if g.kind == "identical" else SIMILAR_IOU
        agree = all(dedupe.labels_agree(first, stores[sp].labels_of(i), iou) for sp, i, _ in g.members[1:])
        out.append({"kind": g.kind, "across": bool(g.across), "splits": sorted(g.splits), "labels_agree": bool(agree),
                    "members": members})
    out.sort(key=lambda g: (not g["across"], g["labels_agree"], g["kind"], g["members"][0]["file"]))
    unreadable = [{"file": unique[i], "reason": msg} for i, msg in sorted(prints.errors.items())]
    # one colour (black, white, gray frames): hashes say nothing, so only byte copies are grouped
    flat = [{"split": sp, "file": paths[i], "objects": int(len(stores[sp].labels_of(int(i))))}
            for sp, (paths, p) in by_split.items() for i in np.flatnonzero(p.flat & p.ok)]
    seconds = time.perf_counter() - t0
    return ({"checked": True, "images_read": len(unique), "seconds": round(seconds, 3),
             "groups": out, "unreadable": unreadable, "flat": flat},
            leakage.sequence_figures(per_split, unique, prints, options.sequence_frames))


def _findings(figures: dict) -> Dict[str, int]:
    splits = figures["splits"].values()
    groups = figures["duplicates"].get("groups", [])
    return {
        "corrupt": sum(s.get("left_out", 0) for s in splits),
        "warnings": sum(s.get("warnings", 0) for s in splits),
        "empty-split": sum(1 for s in splits if not s.get("images")),
        "leakage": sum(1 for g in groups if g["across"]),
        "sequence-leakage": sum(figures["sequences"].get("near_training", {}).values()),
        "duplicates": sum(1 for g in groups if not g["across"]),
        "label-conflict": sum(1 for g in groups if not g["labels_agree"]),
        "missing-class": len(figures["missing_classes"]),
        "tiny-boxes": sum(s["box_size"]["dropped_by_filter"] for s in splits if "box_size" in s),
        "data-changed": figures.get("checkpoint", {}).get("changed", 0),
    }


def _jpeg(bgr: np.ndarray, quality: int = 85) -> bytes:
    import cv2
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("cannot encode a picture as JPEG")
    return buf.tobytes()


def _batch_pictures(data, split: _Split, spec, names, task, options: ReportOptions, batches: int = 2) -> Dict[str, bytes]:
    """``batches`` training batches of ``split`` as the loader makes them (mosaics, flips, colours),
    drawn with their boxes and class names."""
    from ..build import build_loader
    from .plots import draw_batch
    entry = data if spec is not None else split.entry
    settings = Settings.training(img_size=min(options.img_size, 640), batch_size=min(8, len(split.labels.store)),
                                 workers=0, early_start=False, seed=options.seed, split=split.name if spec else None,
                                 names=names or None, cache_dir=split_cache_dir(split.entry, options),
                                 task=task.name, kpt_shape=task.kpt_shape)
    loader = build_loader(entry, settings, prefix=f"{split.name}: ")
    out = {}
    for k, batch in enumerate(loader):
        if k == batches:
            break
        imgs, targets, paths = batch[0], batch[1], batch[2]
        out[f"batch{k}"] = _jpeg(draw_batch(imgs, targets, paths, names, max_side=1024))
    return out


def _rare_pictures(splits: List[_Split], class_rows: List[dict], names, per_class: int = 8,
                   classes: int = 6) -> Dict[str, bytes]:
    """A strip of the objects of each of the ``classes`` rarest classes (fewest objects over all
    splits), up to ``per_class`` each, cropped from their images with a margin."""
    from .plots import instance_strip
    totals = [(sum(r["instances"].values()), r["id"]) for r in class_rows if sum(r["instances"].values())]
    out = {}
    for _, c in sorted(totals)[:classes]:
        found = []
        for s in splits:
            if s.labels is None:
                continue
            store = s.labels.store
            rows = np.flatnonzero(store.labels[:, 0].astype(np.int64) == c)[:per_class - len(found)]
            images = np.searchsorted(store.label_offsets, rows, side="right") - 1
            found += [(store.im_file(int(i)), store.labels[r, 1:]) for r, i in zip(rows, images)]
            if len(found) >= per_class:
                break
        strip = instance_strip(found, c)
        if strip is not None:
            out[f"class{c}"] = _jpeg(strip)
    return out


def make_report(data, options: ReportOptions = ReportOptions()) -> Report:
    """The report of ``data`` with ``options``; nothing written yet (see :func:`write`,
    :func:`write_report`).

    Args:
        data: a dataset yaml (every split it lists), or one split: image folder, .txt list, COCO JSON,
            Pascal VOC folder or list, LabelMe folder, or an in-memory source (formats.memory.ItemSource).
        options: image size, task, which parts to make (duplicates, pictures), workers, cache folder.

    Returns:
        A Report: ``figures`` (the JSON file's contents: per split, per class, duplicates, sampled
        class frequencies, ``findings`` per category of FINDINGS) and ``pictures`` (name -> JPEG bytes).

    Raises:
        FileNotFoundError: the dataset yaml does not exist.
        ValueError: a dataset yaml that is malformed or lists no split (a split that cannot be read is
            named in the report instead); ``options.checkpoint`` is not a torch checkpoint.
    """
    t0 = time.perf_counter()
    record = read_record(options.checkpoint) if options.checkpoint else None  # before the long part
    source, data = data, entry_of(data)  # noqa: F841 - an in-memory source's URL; ``source`` keeps it alive
    splits, names, task, spec = read_splits(data, options)
    nc = len(names)
    per_split = {s.name: _split_summary(s, nc, options.img_size) for s in splits}
    class_rows, missing = _classes_across(per_split, names)
    names = names or [str(r["id"]) for r in class_rows]
    for s in per_split.values():
        if "classes" in s:
            s["imbalance"] = datastats.imbalance(s["classes"]["instances"], names)
    train = next((s for s in splits if s.name == "train" and s.labels is not None),
                 next((s for s in splits if s.labels is not None), None))
    from ..version import __version__
    duplicates, sequences = (_duplicates(splits, options) if options.duplicates
                             else ({"checked": False}, leakage.not_checked("the images were not read")))
    figures = {
        "yolo_data_report": REPORT_VERSION, "yolo_data": __version__, "data": str(data),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {"img_size": options.img_size, "task": task.name, "class_balance": options.class_balance,
                     "channels": channels_of(spec)},
        "names": list(names), "splits": per_split, "classes": class_rows, "missing_classes": missing,
        "sampled": ({"split": train.name, **_sampled(train.labels.store, len(class_rows), options.class_balance)}
                    if train is not None and len(train.labels.store) else None),
        "duplicates": duplicates, "sequences": sequences,
    }
    if options.checkpoint:
        figures["checkpoint"] = compare_record(record, per_split, options.checkpoint)
    figures["findings"] = _findings(figures)
    pictures: Dict[str, bytes] = {}
    if options.pictures and train is not None and len(train.labels.store):
        pictures.update(_batch_pictures(data, train, spec, names, task, options))
        pictures.update(_rare_pictures(splits, class_rows, names))
    figures["pictures"] = sorted(pictures)
    from .plots import shown_text
    figures["pictures_show"] = shown_text(channels_of(spec))  # what the batches' pictures show of their bands
    figures["seconds"] = round(time.perf_counter() - t0, 3)
    return Report(figures, pictures)


def report_files(out) -> Tuple[Path, Path]:
    """(html file, json file) for ``out``: ``out``.html and ``out``.json, the suffixes appended
    (``run.v1`` -> ``run.v1.html``), except that a given ``.html`` or ``.json`` is replaced; an existing
    folder gets ``dataset_report.html`` and ``.json`` inside it."""
    out = Path(out)
    if out.is_dir() or out.name in ("", ".", ".."):
        out = out / "dataset_report"
    elif out.suffix.lower() in (".html", ".json"):
        out = out.with_suffix("")
    return out.with_name(out.name + ".html"), out.with_name(out.name + ".json")


def write(report: Report, out) -> Report:
    """Write the report's page and figures to :func:`report_files` of ``out`` (their folder created)
    for the user to read: the files get the permissions the user's umask gives new files.

    Args:
        report: from :func:`make_report`.
        out: a path without suffix, with ``.html`` or ``.json``, or an existing folder.

    Returns:
        ``report``, its ``html_file`` and ``json_file`` set.
    """
    from .html import render
    html_file, json_file = report_files(out)
    html_file.parent.mkdir(parents=True, exist_ok=True)
    write_whole(json_file, (json.dumps(report.figures, indent=1) + "\n").encode("utf-8"))
    images = {k: "data:image/jpeg;base64," + base64.b64encode(v).decode("ascii") for k, v in report.pictures.items()}
    write_whole(html_file, render(report.figures, images).encode("utf-8"))
    report.json_file, report.html_file = json_file, html_file
    return report


def write_report(data, out="dataset_report", options: ReportOptions = ReportOptions()) -> Report:
    """:func:`make_report` then :func:`write`: ``out``.html and ``out``.json (see :func:`report_files`).

    Args:
        data: a dataset yaml, or one split (see :func:`make_report`).
        out: where the files go: ``out``.html and ``out``.json (a given ``.html`` or ``.json`` suffix
            replaced), or ``dataset_report.html`` and ``.json`` inside an existing folder.
        options: see :func:`make_report`.

    Returns:
        The Report, with ``html_file`` and ``json_file`` set to the files written.

    Raises:
        ValueError: as :func:`make_report`.
        OSError: a file cannot be written.
    """
    return write(make_report(data, options), out)
