"""COCO JSON read in place: one annotation file -> each image's path and its boxes, ready for the scan.

Class ids: the categories in ascending ``id`` order become 0, 1, 2, ... (gaps and a first id of 0 or 1
alike), named by their ``name``; with the dataset yaml's ``names`` given, categories map onto those
names instead.  A Roboflow export's placeholder category (no annotations, and its name is the
supercategory of the others) is not a class, as in Roboflow's own YOLO export.

Boxes: ``bbox`` is [x, y, w, h] in pixels from the top-left corner; it becomes [class, x, y, w, h]
normalised by the image's ``width`` and ``height`` as converters do (Ultralytics' ``convert_coco``).
``iscrowd`` annotations are left out, as the common converters do.  Polygon ``segmentation`` becomes the
row's segment (an object drawn as several polygons gets their points joined in order); RLE masks stay
boxes, with one message.  Images without annotations are backgrounds.  Problems are named (the JSON, the
image id and file, the annotation id): annotations of images not in ``images``, boxes of no size,
boxes reaching outside the image (clipped), unknown categories, and a ``file_name`` that is absolute or
climbs out of the image folder with ``..`` (left out: nothing outside the dataset's image folder is
read).  Missing image files are reported by the scan.  Nothing is written.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import math
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..storage import backend_for, ensure_listed, is_url, join_url, parent_url
from .base import LabelFormat, SourceOptions, SplitSource, WarmStart
from .labelfile import first_unique, normalising_size, without_duplicates
from .problems import Problem
from .sources import default_cache_file, nul_problem

LOGGER = logging.getLogger("yolo_data")
IMAGE_ROOT_PROBES = 32  # images whose files decide which folder file_name is relative to


@dataclass
class CocoImage:
    """One image's annotations as the JSON gives them, for the scan's worker (see CocoReader): the
    main process only groups and filters them (a warm start reads the JSON but scans nothing, so
    everything per box is done by the worker, in parallel, only when the split is scanned).

    ``size``: (width, height) from the JSON, or None when it gives none.  ``anns``: per kept
    annotation (annotation id, class id, ``bbox`` as given: [x, y, w, h] pixels from the top-left
    corner, ``segmentation`` and ``keypoints`` as given).  ``warnings``: found while grouping.
    """
    json_file: str
    image_id: object
    file_name: str
    size: Optional[Tuple[float, float]]
    anns: List[tuple] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)


@dataclass
class CocoSplit:
    """What one COCO JSON lists: ``im_files[i]`` and its ``images[i]``, sorted by path; the class
    ``names``; ``problems`` that belong to no listed image (orphan annotations, RLE masks, ...)."""
    json_file: Path
    im_files: List[str]
    images: List[CocoImage]
    names: List[str]
    problems: List[Problem]


@contextlib.contextmanager
def _no_gc():
    """The cyclic garbage collector paused (and restored as it was): json.load and the grouping make
    millions of objects and no cycles, and the collections those allocations trigger would cost about
    half of the time (COCO train2017's size: 6.4 s -> 3.2 s for json.load)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load(json_file) -> dict:
    try:
        if is_url(json_file):
            raw = backend_for(json_file).read(json_file)
            with _no_gc():
                data = json.loads(raw)
        else:
            with open(json_file, "rb") as f, _no_gc():
                data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{json_file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{json_file}: not UTF-8 text") from None
    except RecursionError:  # the decoder recurses once per level; a COCO file nests about 5 deep
        raise ValueError(f"{json_file}: not a COCO annotation file (JSON nested too deeply to read: past "
                         f"Python's recursion limit of {sys.getrecursionlimit()} levels)") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{json_file}: not a COCO annotation file (expected an object with an 'images' list)")
    for key in ("annotations", "categories"):
        if not isinstance(data.get(key, []), list):
            raise ValueError(f"{json_file}: '{key}' must be a list")
    return data


def _classes(data: dict, json_file: Path, names: Optional[Sequence[str]], used: Counter):
    """category id -> class id (None: not a class), and the class names."""
    cats = {}
    for c in data.get("categories", []):
        if not isinstance(c, dict) or isinstance(c.get("id"), bool) or not isinstance(c.get("id"), int):
            raise ValueError(f"{json_file}: a category without an integer 'id': {str(c)[:80]}")
        if c["id"] in cats:
            raise ValueError(f"{json_file}: category id {c['id']} appears twice")
        cats[c["id"]] = c
    supers = {str(c.get("supercategory")) for c in cats.values()}
    placeholder = {i for i, c in cats.items()
                   if not used[i] and str(c.get("name")) in supers and c.get("supercategory") != c.get("name")}
    kept = [i for i in sorted(cats) if i not in placeholder]
    for i in sorted(placeholder):
        LOGGER.info(f"{json_file}: category {i} ({cats[i].get('name')!r}) has no annotations and is the "
                    "supercategory of others (an export's placeholder); not a class")
    if not names:
        return {i: k for k, i in enumerate(kept)}, [str(cats[i].get("name", i)) for i in kept]
    by_name = {n: k for k, n in enumerate(names)}
    return {i: by_name.get(str(cats[i].get("name"))) for i in kept}, list(names)


def _image_root(json_file: Path, file_names: List[str]) -> Path:
    """The folder ``file_name`` is relative to: the JSON's own folder, an ``images/`` folder beside it
    or beside its folder, or (COCO's own layout, ``annotations/instances_val2017.json``) ``val2017/``
    or ``images/val2017/`` beside the annotations folder.  The candidate holding most of the first
    IMAGE_ROOT_PROBES images wins (the first one listed on a tie).  In a bucket the same folders are
    tried, each listed once (ensure_listed), not asked for image by image."""
    probes = file_names[:IMAGE_ROOT_PROBES]
    if is_url(json_file):
        here = parent_url(json_file)
        up = parent_url(here)
        split = json_file.rpartition("/")[2].rpartition(".")[0].rsplit("_", 1)[-1]
        roots = [here, f"{here}/images", f"{up}/images", f"{up}/{split}", f"{up}/images/{split}"]
        candidates = [join_url(r + "/", f) for r in roots for f in probes]
        ensure_listed(candidates)
        backend = backend_for(json_file)
        found = [sum(backend.exists(join_url(r + "/", f)) for f in probes) for r in roots]
        return roots[found.index(max(found))]
    here, up = json_file.parent, json_file.parent.parent
    split = json_file.stem.rsplit("_", 1)[-1]
    roots = [here, here / "images", up / "images", up / split, up / "images" / split]
    found = [sum(os.path.exists(r / f) for f in probes) for r in roots]
    return roots[found.index(max(found))]


def _outside(file_name: str) -> bool:
    """Whether ``file_name`` leaves the image folder it is relative to: absolute (or with a drive),
    or climbing out with ``..``.  Judged on the text alone, so it holds for whichever folder is chosen;
    a symlink inside the folder is the dataset's own and is followed as YOLO image folders' are."""
    if os.path.isabs(file_name) or os.path.splitdrive(file_name)[0]:
        return True
    if ".." not in file_name:  # nearly every name: no normpath (pure Python) per image
        return False
    norm = os.path.normpath(file_name)
    return norm == os.pardir or norm.startswith(os.pardir + os.sep)


def _polygon(seg, where: str, warnings: List[str]) -> Optional[np.ndarray]:
    """A polygon segmentation -> one (k, 2) float64 pixel polygon (several joined in order), or None
    (no polygon, an RLE mask, or numbers that are not numbers: then a warning and the box alone)."""
    if not isinstance(seg, list) or not seg:
        return None
    parts = [p for p in seg if isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0]
    if not parts:
        return None
    try:
        pts = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in parts])
    except (TypeError, ValueError):
        warnings.append(f"{where}: segmentation holds something that is not a number; its box is used")
        return None
    return pts if np.isfinite(pts).all() else None


def read_coco(json_file, names: Optional[Sequence[str]] = None) -> CocoSplit:
    """Read a COCO JSON.  Raises ValueError naming the file for a file that is not COCO at all;
    everything that concerns single images or annotations becomes a named :class:`Problem`."""
    json_file = json_file if is_url(json_file) else Path(json_file)
    data = _load(json_file)
    with _no_gc():
        return _group(json_file, data, names)


def _encodable(file_name: str) -> bool:
    """Whether ``file_name`` has bytes on disk: a JSON escape can make a lone surrogate that no
    encoding turns into bytes (unlike the ones os.fsdecode makes of a name that is not UTF-8)."""
    try:
        os.fsencode(file_name)
    except UnicodeEncodeError:
        return False
    return True


def _is_id(value) -> bool:
    """COCO ids are numbers (or, in some exports, texts); anything else cannot name an image."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _group(json_file: Path, data: dict, names: Optional[Sequence[str]]) -> CocoSplit:
    problems: List[Problem] = []
    images: Dict[object, dict] = {}
    for k, im in enumerate(data["images"]):
        if not isinstance(im, dict) or not _is_id(im.get("id")) or not isinstance(im.get("file_name"), str) \
                or not im["file_name"]:
            problems.append(Problem(str(json_file), f"images[{k}] has no 'id' (a number or text) or 'file_name'; "
                                                    "left out", True))
        elif "\0" in im["file_name"]:
            problems.append(nul_problem(str(json_file),
                                        f"images[{k}] (image id {im['id']}): file_name {im['file_name']!r}"))
        elif not _encodable(im["file_name"]):
            problems.append(Problem(str(json_file), f"images[{k}] (image id {im['id']}): file_name {im['file_name']!r} "
                                                    "holds a lone surrogate, which no file name can; left out", True))
        elif im["id"] in images:
            problems.append(Problem(str(json_file), f"image id {im['id']} is listed twice ({images[im['id']]['file_name']} "
                                                    f"and {im['file_name']}); the second is left out", True))
        else:
            images[im["id"]] = im
    anns = defaultdict(list)
    used = Counter()
    orphans = Counter()
    for k, a in enumerate(data.get("annotations", [])):
        if not isinstance(a, dict):
            problems.append(Problem(str(json_file), f"annotations[{k}] is not an object; left out", False))
        elif not _is_id(a.get("image_id")) or a["image_id"] not in images:
            orphans[str(a.get("image_id"))] += 1
        else:
            anns[a["image_id"]].append(a)
            used[a.get("category_id")] += 1
    for image_id, count in sorted(orphans.items()):
        problems.append(Problem(str(json_file), f"{count} annotation{'s' if count > 1 else ''} of image id {image_id}, "
                                                "which is not in 'images'; left out", False))
    cls_of, class_names = _classes(data, json_file, names, used)
    root = _image_root(json_file, [im["file_name"] for im in images.values() if not _outside(im["file_name"])])
    notes: Counter = Counter()
    out = []
    for image_id, im in images.items():
        if _outside(im["file_name"]):
            problems.append(Problem(str(json_file), f"image id {image_id}: file_name {im['file_name']!r} is outside "
                                                    f"the image folder {root}; left out", True))
            continue
        out.append((os.path.join(root, im["file_name"]),
                    _image(json_file, image_id, im, anns.get(image_id, []), cls_of, notes)))
    if notes["rle"]:
        problems.append(Problem(str(json_file), f"{notes['rle']} RLE masks (segmentation given as counts) are "
                                                "used as their boxes only", False))
    if notes["crowd"]:
        LOGGER.info(f"{json_file}: {notes['crowd']} iscrowd annotations left out (as the common converters do)")
    out.sort(key=lambda p: p[0])
    unique = []
    for f, im in out:
        if unique and unique[-1][0] == f:  # two image ids for one file: training on it twice is not meant
            problems.append(Problem(str(json_file), f"image ids {unique[-1][1].image_id} and {im.image_id} are both "
                                                    f"{im.file_name}; the annotations of id {im.image_id} are left out", False))
        else:
            unique.append((f, im))
    out = unique
    return CocoSplit(json_file, [p[0] for p in out], [p[1] for p in out], class_names, problems)


def _image(json_file: Path, image_id, im: dict, anns: List[dict], cls_of: Dict[int, Optional[int]],
           notes: Counter) -> CocoImage:
    """One image's kept annotations, unconverted, with the warnings that concern it."""
    size = None
    w, h = im.get("width"), im.get("height")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (w, h)):
        size = (float(w), float(h))
    kept, unknown = [], Counter()
    for a in anns:
        if a.get("iscrowd"):
            notes["crowd"] += 1
            continue
        cls = cls_of.get(a.get("category_id"))
        if cls is None:
            unknown[str(a.get("category_id"))] += 1
            continue
        seg = a.get("segmentation")
        if isinstance(seg, dict):
            notes["rle"] += 1
        kept.append((a.get("id", "?"), cls, a.get("bbox"), seg, a.get("keypoints")))
    warnings = [f"{count} annotation{'s' if count > 1 else ''} of category {cat}, which is not a class "
                "(not in 'categories', or not one of the names); left out" for cat, count in sorted(unknown.items())]
    return CocoImage(str(json_file), image_id, im["file_name"], size, kept, warnings)


def _keypoints(kp, k: int, where: str, warnings: List[str]) -> Optional[np.ndarray]:
    """COCO ``keypoints`` [x1, y1, v1, ...] (pixels) -> (k, 3) float64, or None (with a warning) when
    they are not 3k finite numbers."""
    try:
        a = np.asarray(kp, dtype=np.float64)
    except (TypeError, ValueError):
        a = None
    if a is None or a.ndim != 1 or a.shape != (3 * k,) or not np.isfinite(a).all():
        shown = "none" if kp is None else str(kp)[:60]
        warnings.append(f"{where}: keypoints {shown} are not {k} keypoints x y visibility ({3 * k} numbers); left out")
        return None
    return a.reshape(k, 3)


@dataclass(frozen=True)
class CocoReader:
    """Normalises a :class:`CocoImage` in the scan's worker, once the image's size is known (see
    base.LabelReader).  A size in the JSON that disagrees with the image is a problem as in VOC.
    ``kpt_count``: K keypoints per annotation for pose (each annotation's ``keypoints``; one without
    them is left out with a warning), else None."""
    kpt_count: Optional[int] = None

    def describe(self, label: CocoImage) -> str:
        return f"{label.json_file} (image id {label.image_id}, {label.file_name})"

    def read(self, label: CocoImage, shape: Tuple[int, int]):
        (sw, sh), warnings = normalising_size(label.size, shape, "JSON", "no width/height in the JSON")
        warnings = label.warnings + warnings
        classes, boxes, polygons, points = [], [], [], []
        k = self.kpt_count
        for ann_id, cls, bbox, seg, kp in label.anns:
            where = f"annotation {ann_id}"
            try:
                box = np.asarray(bbox, dtype=np.float64).reshape(4)
            except (TypeError, ValueError):
                warnings.append(f"{where}: bbox {str(bbox)[:60]} is not 4 numbers; left out")
                continue
            if not np.isfinite(box).all() or box[2] <= 0 or box[3] <= 0:
                warnings.append(f"{where}: bbox {box.tolist()} has no area; left out")
                continue
            if k is not None:
                xyv = _keypoints(kp, k, where, warnings)
                if xyv is None:
                    continue
                points.append(xyv)
            classes.append(cls)
            boxes.append(box)
            polygons.append(_polygon(seg, where, warnings))
        none = () if k is None else (np.zeros((0, k, 3), np.float32),)
        if not classes:
            return (np.zeros((0, 5), np.float32), None, "empty", warnings) + none
        b = np.array(boxes)
        cls = np.array(classes, dtype=np.float64)
        # Ultralytics' convert_coco arithmetic (centre = corner + size / 2, then / size), so the rows are
        # the ones its conversion writes; only boxes reaching outside the image are recomputed, clipped.
        labels = np.concatenate([cls[:, None], (b[:, :2] + b[:, 2:] / 2) / (sw, sh), b[:, 2:] / (sw, sh)], 1)
        xyxy = np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1) / (sw, sh, sw, sh)
        outside = (xyxy.min(1) < 0) | (xyxy.max(1) > 1)
        keep = np.ones(len(b), bool)
        if outside.any():
            clipped = xyxy[outside].clip(0, 1)
            labels[outside, 1:3] = (clipped[:, :2] + clipped[:, 2:]) / 2
            labels[outside, 3:5] = clipped[:, 2:] - clipped[:, :2]
            keep[outside] = (labels[outside, 3] > 0) & (labels[outside, 4] > 0)
            n_out, n_gone = int(outside.sum()), int((~keep).sum())
            warnings.append(f"{n_out} box{'es' if n_out > 1 else ''} reaching outside the image clipped to it"
                            + (f" ({n_gone} wholly outside: left out)" if n_gone else ""))
        segments = None
        if any(p is not None for p in polygons):  # a box without a polygon gets an empty one (verify.PairRecord)
            segments = [(p / (sw, sh)).clip(0, 1).astype(np.float32) if p is not None else np.zeros((0, 2), np.float32)
                        for p, k in zip(polygons, keep) if k]
        labels = labels[keep].astype(np.float32)
        if not len(labels):
            return (labels, None, "empty", warnings) + none
        if k is not None:  # pose: pixel keypoints normalised like the boxes, visibility as given
            xyv = np.stack(points)[keep]
            xyv[..., :2] = (xyv[..., :2] / (sw, sh)).clip(0, 1)
            rows = first_unique(np.concatenate([labels, xyv.reshape(len(labels), -1).astype(np.float32)], 1), warnings)
            return labels[rows], None, "ok", warnings, xyv[rows].astype(np.float32)
        labels, segments = without_duplicates(labels, segments, warnings)
        return labels, segments, "ok", warnings


def _whole(entry) -> str:
    """An annotation file's name as messages give it: absolute, or its URL."""
    return entry if is_url(entry) else str(Path(entry).absolute())


def _same_file(json_file: str, im_file: str) -> str:
    return json_file


def _file_stat(path) -> List:
    if is_url(path):  # its size and tag (an ETag), as a listing or one HEAD shows them
        info = backend_for(path).stat(path)
        return [path, -1, -1] if info is None else [path, info.size, info.tag]
    path = Path(path)
    st = os.stat(path)
    return [str(path.absolute()), st.st_size, st.st_mtime_ns]


def _settings(entries, options: SourceOptions) -> Dict[str, Any]:
    names = list(options.names) if options.names else None
    return {"format": "coco", "names": names, "json": [_file_stat(e) for e in entries], "coco": 1}


class CocoFormat(LabelFormat):
    """COCO JSON (base.LabelFormat): one or more annotation files, their images joined.  The
    fingerprint covers each JSON's path, size and mtime, the names, and every listed image's stat.
    A warm start needs only the JSONs' stats (a 290 MB JSON takes about 7 s to read; its stat,
    microseconds): the cache keeps the images it listed."""
    name = "coco"
    cuts_by_files = False
    tasks = ("detect", "segment", "pose")

    def claims(self, entry: Path) -> bool:
        return Path(entry).suffix.lower() == ".json"

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        for e in entries:
            if not (backend_for(e).exists(e) if is_url(e) else Path(e).is_file()):
                raise FileNotFoundError(f"COCO annotation file {e} does not exist")
        names = list(options.names) if options.names else None
        splits = [read_coco(e, names) for e in entries]
        found = splits[0].names
        for s in splits[1:]:
            if s.names != found:
                raise ValueError(f"{s.json_file} and {splits[0].json_file} define other classes "
                                 f"({s.names[:5]} vs {found[:5]}); give the dataset yaml 'names' to map both")
        pairs = sorted(((f, im) for s in splits for f, im in zip(s.im_files, s.images)), key=lambda p: p[0])
        if not pairs:
            raise FileNotFoundError(f"no images listed in {entries[0] if len(entries) == 1 else entries}")
        reader = CocoReader(options.kpt_shape[0] if options.task == "pose" else None)
        ensure_listed([p[0] for p in pairs])  # images in a bucket: their folders' listings
        return SplitSource(self.name, [p[0] for p in pairs], [p[1] for p in pairs], None, reader,
                           names or found, _settings(entries, options), default_cache_file(entries, None),
                           self.annotation_file_of(_whole(entries[0])),
                           [p for s in splits for p in s.problems], keeps_listing=True)

    def warm_start(self, entries: List[Any], options: SourceOptions) -> Optional[WarmStart]:
        if not all(backend_for(e).exists(e) if is_url(e) else Path(e).is_file() for e in entries):
            return None
        return WarmStart(_settings(entries, options), default_cache_file(entries, None),
                         self.annotation_file_of(_whole(entries[0])))

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        # a partial, not a lambda: datasets travel to spawned DataLoader workers by pickle
        return functools.partial(_same_file, str(first_label_file))


FORMAT = CocoFormat()
