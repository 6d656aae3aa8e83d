"""NDJSON, the Ultralytics Platform's export format, read in place: no conversion, no download step.

The file is one JSON object a line.  The first describes the dataset::

    {"type": "dataset", "task": "detect", "class_names": {"0": "person", "1": "car"}, "kpt_shape": [17, 3], ...}

(``task``: detect, segment, pose or obb; ``kpt_shape`` for pose, else found from the first pose rows as
Ultralytics finds it; ``path``: where the images of a local export are).  Each other line is one image::

    {"type": "image", "file": "a.jpg", "url": "https://...", "width": 640, "height": 480, "split": "train",
     "annotations": {"boxes": [[0, 0.5, 0.5, 0.2, 0.3]]}}

Annotation rows are YOLO label rows as numbers, read exactly as the same rows in a label file
(yolotxt.labels_of_text): ``boxes`` [class, x, y, w, h], ``segments`` [class, x1, y1, ...], ``pose``
[class, x, y, w, h, then K keypoints x y (v)], ``obb`` [class, x1, y1, ..., x4, y4], all normalised to
the image; a row holding anything but JSON numbers leaves its image out, named.  An image is read for
the key of the export's ``task`` (segment -> segments, ...), else for its first key, as Ultralytics'
conversion writes it.  Class names: ``class_names`` by id, gaps and ids beyond it named ``class<i>`` as
Ultralytics names them (the names a dataset yaml or the settings give win).

The image: ``url`` when given (``https://`` and ``http://`` through storage/http.py, which fetches only
the URLs this file admits; ``s3://`` from the bucket; ``file://``), else ``file``: under
``<path>/images/<split>/`` when the first line gives ``path`` (Ultralytics' local export, relative to
this file), else beside this file; a ``file`` that is absolute or climbs out with ``..`` is left out.
An image at an http(s) URL whose record gives ``width`` and ``height`` is not fetched by the scan (one
request per image saved): that size is its (h, w), and training verifies its decode as it does any
image's.  Signed URLs: the dataset names such an image by its public URL (http.public_url: no query),
the full URL is kept in memory only and taken from the file on every run; so the label cache, the
problems and every message hold no signature, and the cache is keyed on the public URLs.

Splits: an entry ``data.ndjson#val`` is the records of split ``val`` (a dataset yaml naming the file,
or the file given as a dataset's path, picks the split by the Settings' split name: see
:func:`split_entry`); ``data.ndjson`` alone is every record.  A file without ``val`` records gives a
tenth of its ``train`` records to ``val``, chosen as Ultralytics chooses them.  The label cache's
fingerprint covers the file's bytes (a hash) and the split.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from ..storage import backend_for, is_url, join_url, parent_url, scheme_of
from .base import LabelFormat, SourceOptions, SplitSource
from .datayaml import DatasetSpec
from .labelfile import MAX_CLASS_ID
from .problems import LabelError, Problem
from .sources import LABEL_CACHE_SUFFIX, cache_stem, default_cache_file
from .yolotxt import labels_of_text

SUFFIX = ".ndjson"
TASK_KEYS = {"detect": "boxes", "segment": "segments", "pose": "pose", "obb": "obb"}
ADMITTED_SCHEMES = ("http", "https")  # URLs only this file names may fetch: admitted to their backend
KPT_PROBE_ROWS = 50  # pose rows that decide a kpt_shape the first line does not give


def split_entry(entry) -> Tuple[str, Optional[str]]:
    """(the NDJSON file, the split named after ``#``, or None for every record) of a split entry."""
    text = os.fspath(entry) if not isinstance(entry, str) else entry
    file, hash_, split = text.rpartition("#") if "#" in text else (text, "", "")
    return (file, split or None) if hash_ and file.lower().endswith(SUFFIX) else (text, None)


def is_ndjson(path) -> bool:
    """Whether ``path`` (a str or path; not a list) names an NDJSON file, by its name alone."""
    return isinstance(path, (str, os.PathLike)) and split_entry(path)[0].lower().endswith(SUFFIX)


@dataclass
class NdjsonRecord:
    """One image of the file, for the scan's worker.  ``rows``: its annotation rows as the file gives
    them (lists of numbers); ``size``: (width, height) as stated, or None; ``fetched``: the image is
    at an http(s) URL (its stated size spares the scan a request)."""
    ndjson: str
    line: int
    image: str
    size: Optional[Tuple[int, int]]
    rows: list
    fetched: bool


@dataclass
class NdjsonFile:
    """What one file holds: the dataset line, every image record (split, image string, full URL or
    None, record), the names, the task, kpt_shape, the hash of its bytes, and problems."""
    file: str
    head: Dict[str, Any]
    images: List[Tuple[str, str, Optional[str], NdjsonRecord]]
    names: List[str]
    task: str
    kpt_shape: Optional[Tuple[int, int]]
    digest: str
    problems: List[Problem]

    def split(self, name: Optional[str]) -> List[Tuple[str, str, Optional[str], NdjsonRecord]]:
        """The images of split ``name`` (None: all), in file order."""
        return [im for im in self.images if name is None or im[0] == name]


def _read_bytes(file: str) -> bytes:
    if is_url(file):
        return backend_for(file).read(file)
    with open(file, "rb") as f:
        return f.read()


_last: Dict[str, NdjsonFile] = {}  # file -> its last parse: every rank reads the file, rank 0 twice


def read_ndjson(file: str) -> NdjsonFile:
    """Read and parse an NDJSON export (the module's docstring).  Raises FileNotFoundError, or
    ValueError naming the file and line for a file that is not one."""
    raw = _read_bytes(file)
    digest = hashlib.sha256(raw).hexdigest()
    known = _last.get(file)
    if known is not None and known.digest == digest:
        return known
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{file}: not UTF-8 text") from None
    records = []
    for k, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append((k, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{file}: line {k} is not JSON ({e.msg})") from None
    if not records or not isinstance(records[0][1], dict) or "file" in records[0][1] or "url" in records[0][1]:
        raise ValueError(f"{file}: not an NDJSON export (its first line must describe the dataset)")
    head = records[0][1]
    task = str(head.get("task", "detect"))
    if task not in TASK_KEYS:
        raise ValueError(f"{file}: task {task!r}: yolo_data reads {', '.join(TASK_KEYS)} NDJSON exports")
    images, names, kpt_shape, problems = _parse_file(file, head, records[1:], task)
    _last.clear()
    _last[file] = NdjsonFile(file, head, images, names, task, kpt_shape, digest, problems)
    return _last[file]


def _parse_file(file: str, head: dict, records: list, task: str):
    """(images, names, kpt_shape, problems) of the image lines ``records`` [(line, object)]."""
    problems: List[Problem] = []
    here = parent_url(file) if is_url(file) else str(Path(file).absolute().parent)
    root = head.get("path")
    images, used = [], -1
    for k, r in records:
        if not isinstance(r, dict):
            problems.append(Problem(file, f"line {k} is not an object; left out", True))
            continue
        rows = _rows(r.get("annotations"), task)
        used = max([used] + [int(row[0]) for row in rows if isinstance(row, list) and row
                             and isinstance(row[0], (int, float)) and not isinstance(row[0], bool)
                             and 0 <= row[0] < MAX_CLASS_ID])
        split = str(r.get("split", ""))
        image, full, why = _image_of(r, here, root, split)
        if why:
            problems.append(Problem(file, f"line {k}: {why}; left out", True))
            continue
        size = _size(r)
        images.append([split, image, full, NdjsonRecord(file, k, image, size, rows,
                                                        full is not None and size is not None)])
    _auto_val(images)
    names = _names(head.get("class_names"), used)
    kpt = head.get("kpt_shape")
    kpt_shape = tuple(int(v) for v in kpt) if isinstance(kpt, list) and len(kpt) == 2 else None
    if task == "pose" and kpt_shape is None:
        kpt_shape = _infer_kpt_shape(file, [im[3] for im in images])
    return images, names, kpt_shape, problems


def _rows(annotations, task: str) -> list:
    """The rows an image is read for: the task's own key, else the first key (as Ultralytics writes)."""
    if not isinstance(annotations, dict) or not annotations:
        return []
    rows = annotations.get(TASK_KEYS[task], next(iter(annotations.values())))
    return rows if isinstance(rows, list) else [rows]


def _size(r: dict) -> Optional[Tuple[int, int]]:
    w, h = r.get("width"), r.get("height")
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (w, h)):
        return w, h
    return None


def _image_of(r: dict, here: str, root, split: str) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(the image's name in the dataset, its full URL where it is admitted to an http(s) backend, why it
    is left out)."""
    url, name = r.get("url"), r.get("file")
    if isinstance(url, str) and url:
        scheme = scheme_of(url)
        if not scheme or not _parses(url):
            return None, None, "its url is not a URL (scheme://host/...)"
        return url, (url if scheme in ADMITTED_SCHEMES else None), None  # s3://, file://: read as they are
    if not isinstance(name, str) or not name or "\0" in name:
        return None, None, "no 'url' and no 'file'"
    norm = posixpath.normpath(name)
    if os.path.isabs(name) or norm == ".." or norm.startswith("../") or "\\" in name:
        return None, None, f"file {name!r} is outside the dataset's folder"
    folder = here
    if isinstance(root, str) and root:
        sub = f"{root}/images/{split}"
        folder = join_url(here + "/", sub) if is_url(here) else os.path.normpath(os.path.join(here, sub))
    return (join_url(folder + "/", name) if is_url(folder) else os.path.join(folder, name)), None, None


def _parses(url: str) -> bool:
    try:
        urlsplit(url)
    except ValueError:  # an unclosed [ of an IPv6 host, a port that is not a number
        return False
    return True


def _auto_val(images: list) -> None:
    """No ``val`` records: a tenth of the ``train`` records (at least one) become ``val``, chosen by a
    generator seeded 0 over them in file order, as Ultralytics' conversion chooses them."""
    if any(im[0] == "val" for im in images):
        return
    train = [im for im in images if im[0] == "train"]
    if len(train) < 2:
        return
    random.Random(0).shuffle(train)
    for im in train[:max(1, len(train) // 10)]:
        im[0] = "val"


def _names(class_names, used: int) -> List[str]:
    """Names by class id: ``class_names`` ({"0": "person"}), gaps and ids up to ``used`` as ``class<i>``."""
    given = {}
    if isinstance(class_names, dict):
        for k, v in class_names.items():
            try:
                given[int(k)] = str(v)
            except (TypeError, ValueError):
                continue
    elif isinstance(class_names, list):
        given = {i: str(v) for i, v in enumerate(class_names)}
    top = max([used] + [k for k in given if 0 <= k < MAX_CLASS_ID])
    return [given.get(i, f"class{i}") for i in range(top + 1)]


def _infer_kpt_shape(file: str, records: List[NdjsonRecord]) -> Tuple[int, int]:
    """kpt_shape from the first KPT_PROBE_ROWS pose rows: K x 3 where the count divides by 3 and every
    third number is a visibility (0, 1 or 2), else K x 2 where it divides by 2 only."""
    rows = [row[5:] for rec in records for row in rec.rows if isinstance(row, list) and len(row) > 5][:KPT_PROBE_ROWS]
    counts = {len(row) for row in rows}
    if len(counts) == 1:
        n = counts.pop()
        if n % 3 == 0 and all(v in (0, 1, 2) for row in rows for v in row[2::3]):
            return n // 3, 3
        if n % 2 == 0 and n % 3:
            return n // 2, 2
    raise ValueError(f"{file}: a pose export without 'kpt_shape' whose rows do not tell it; add kpt_shape "
                     "[K, 2 or 3] to its first line")


@dataclass(frozen=True)
class NdjsonReader:
    """An image's rows (NdjsonRecord) read as YOLO rows (base.LabelReader); ``nc``, ``task`` and
    ``kpt_shape`` as yolotxt.YoloReader's."""
    nc: Optional[int] = None
    task: str = "detect"
    kpt_shape: Optional[Tuple[int, int]] = None

    def describe(self, label: NdjsonRecord) -> str:
        return f"{label.ndjson} line {label.line} ({label.image})"

    def known_shape(self, label: NdjsonRecord) -> Optional[Tuple[int, int]]:
        """(h, w) as the record states it, for an image at an http(s) URL (see the module's docstring)."""
        return (label.size[1], label.size[0]) if label.fetched else None

    def read(self, label: NdjsonRecord, shape: Tuple[int, int]):
        lines = []
        for k, row in enumerate(label.rows):
            if not isinstance(row, list) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in row):
                raise LabelError(f"annotation row {k + 1} is not a list of numbers: {str(row)[:60]}")
            lines.append(" ".join(map(str, row)))  # the text Ultralytics' conversion writes for the row
        return labels_of_text("\n".join(lines), self.nc, self.task, self.kpt_shape)


def _same_file(ndjson: str, im_file: str) -> str:
    return ndjson


def _whole(file: str) -> str:
    return file if is_url(file) else str(Path(file).absolute())


def _admit(images) -> List[str]:
    """The images' names, each http(s) URL admitted to its backend (of the storage in use), which
    names it by its public URL from then on."""
    names = [im[1] for im in images]
    by_scheme: Dict[str, List[int]] = {}
    for i, im in enumerate(images):
        if im[2] is not None:
            by_scheme.setdefault(scheme_of(im[2]), []).append(i)
    for scheme, rows in by_scheme.items():
        backend = backend_for(images[rows[0]][2])
        for sized in (True, False):
            part = [i for i in rows if (images[i][3].size is not None) == sized]
            for i, public in zip(part, backend.admit([images[i][2] for i in part], sized=sized)):
                names[i] = public
                images[i][3].image = public
    return names


class NdjsonFormat(LabelFormat):
    """NDJSON exports (base.LabelFormat; the module's docstring).  The fingerprint covers the file's
    bytes (their sha256), the split and the names, and each image's stat (an http(s) image's: a hash
    of its full URL, no request).  No warm start: the file is read on every start, for the URLs."""
    name = "ndjson"
    cuts_by_files = False
    tasks = ("detect", "segment", "pose", "obb")

    def claims(self, entry: Path) -> bool:
        return is_ndjson(entry if isinstance(entry, str) else os.fspath(entry))

    def admit(self, entries: List[Any]) -> None:
        """Let the storage in use fetch the http(s) images these entries list (every process that
        reads the split's images calls this: the other ranks read no labels but fetch images)."""
        for e in entries:
            file, split = split_entry(e)
            _admit(read_ndjson(file).split(split))

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        pairs, problems, parsed = [], [], []
        for e in entries:
            file, split = split_entry(e)
            if not (backend_for(file).exists(file) if is_url(file) else Path(file).is_file()):
                raise FileNotFoundError(f"NDJSON file {file} does not exist")
            f = read_ndjson(file)
            parsed.append((f, split))
            problems += f.problems
            images = f.split(split)
            pairs += zip(_admit(images), [im[3] for im in images])
        pairs, repeats = _unique(sorted(pairs, key=lambda p: p[0]))
        problems += repeats
        if not pairs:
            raise FileNotFoundError(f"no images listed in {entries[0] if len(entries) == 1 else entries}")
        first = parsed[0][0]
        names = list(options.names) if options.names else first.names
        kpt = options.kpt_shape or first.kpt_shape
        settings = {"format": "ndjson", "ndjson": [[_whole(f.file), f.digest, s] for f, s in parsed],
                    "names": names, "ndjson_format": 1}
        return SplitSource(self.name, [p[0] for p in pairs], [p[1] for p in pairs], None,
                           NdjsonReader(len(names), options.task, kpt),
                           names, settings, _default_cache(entries), self.annotation_file_of(_whole(first.file)),
                           problems, nc=len(names))

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return functools.partial(_same_file, str(first_label_file))


def _unique(pairs: List[Tuple[str, NdjsonRecord]]):
    """The pairs without a second record of one image (a named problem each)."""
    out, problems = [], []
    for p in pairs:
        if out and out[-1][0] == p[0]:
            problems.append(Problem(p[1].ndjson, f"line {p[1].line}: {p[0]} is also on line {out[-1][1].line}; "
                                                 "left out", True))
        else:
            out.append(p)
    return out, problems


def _default_cache(entries: Sequence[Any]) -> Path:
    """Beside the file (in the user's cache folder for one in a bucket), the split in its name:
    ``data.val.yolo_data.cache``."""
    file, split = split_entry(entries[0])
    whole = default_cache_file([file] + [str(e) for e in entries[1:]], None)
    stem = cache_stem(whole)
    stem = stem[:-len(SUFFIX)] if stem.lower().endswith(SUFFIX) else stem
    return whole.with_name(f"{stem}.{split or 'all'}{LABEL_CACHE_SUFFIX}")


def export_dataset(path) -> DatasetSpec:
    """The dataset of an NDJSON file given as a dataset's path: each split its records name (``val``
    made from ``train`` where it has none), as the entry ``"<file>#<split>"``.

    Args:
        path: the NDJSON file (a path or URL; a ``#split`` after it is ignored).

    Returns:
        A DatasetSpec with the file's splits and class names, and its first line's ``kpt_shape`` (or the
        one its pose rows give), ``flip_idx`` and ``channels`` where it has them.
    """
    file = split_entry(path)[0]
    f = read_ndjson(file)
    found = sorted({im[0] for im in f.images})
    flip, channels = f.head.get("flip_idx"), f.head.get("channels")
    flip = tuple(int(v) for v in flip) if isinstance(flip, list) and all(isinstance(v, int) for v in flip) else None
    channels = channels if isinstance(channels, int) and not isinstance(channels, bool) and channels > 0 else None
    return DatasetSpec(file, parent_url(file) if is_url(file) else Path(file).parent,
                       {split: [f"{file}#{split}"] for split in found}, f.names, f.kpt_shape, flip, channels)


def dataset_of(path, split: str) -> Tuple[str, DatasetSpec]:
    """The split entry and the dataset of an NDJSON file given as a dataset's path, for one split.

    Args:
        path: the NDJSON file (a path or URL).
        split: the split to read ('train', 'val', 'test').

    Returns:
        (``"<file>#<split>"``, :func:`export_dataset`'s DatasetSpec with that split only).

    Raises:
        ValueError: the file has no record of ``split``.
    """
    spec = export_dataset(path)
    if split not in spec.splits:
        raise ValueError(f"{spec.yaml_file}: no '{split}' split (it has {', '.join(spec.splits) or 'none'})")
    entry = spec.splits[split][0]
    return entry, replace(spec, splits={split: [entry]})


def with_split(entries, split: str):
    """``entries`` (one split entry or a list, as a dataset yaml names a split) with each NDJSON file
    that names no split given ``split``: a yaml's ``val: data.ndjson`` is that file's ``val`` records."""
    def one(e):
        return f"{e}#{split}" if is_ndjson(e) and split_entry(e)[1] is None else e
    return [one(e) for e in entries] if isinstance(entries, (list, tuple)) else one(entries)


FORMAT = NdjsonFormat()
