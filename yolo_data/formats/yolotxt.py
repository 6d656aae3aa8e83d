"""The YOLO label format: image folders, ``.txt`` image lists or images, each image's objects in
``labels/<stem>.txt`` (YOLOv5's ``/images/`` -> ``/labels/`` rule, sources.img2label_path), one row per
object, all coordinates normalised to the image.  What a row holds depends on the task:

    detect    class x y w h, or class x1 y1 x2 y2 ... (a polygon: its box is its envelope)
    segment   class x1 y1 x2 y2 ... (3 or more points; a plain box row gets its rectangle, with a warning)
    pose      class x y w h, then K keypoints: px py (kpt_shape [K, 2]) or px py v ([K, 3])
    obb       class x1 y1 x2 y2 x3 y3 x4 y4 (the 4 corners of a rotated box; its box is their envelope)

A row that does not fit the task leaves its image out, naming the line.  A pose dataset (a
``kpt_shape`` known) read for 'detect' or 'segment' keeps each pose row's box (5 + K x 2 or 3 numbers:
the first 5), as Ultralytics does, and box rows; a row of another width is refused, not read as a
polygon.  task.resolve_task refuses 'obb' for a pose dataset.

Coordinates may lie up to COORD_TOLERANCE (1% of the image) past [0, 1], as Ultralytics accepts them:
a box's x y w h (w and h not negative), each keypoint's x and y, each point of a polygon; a row of 4
points (an oriented box, in any task) only needs the centre and size of its envelope within it, as its
corners may lie further past the edge.  What lies past is cut back: a box reaching past the image is
clipped to it (rows inside [0, 1] are kept bit for bit), polygon points are clipped, a keypoint is
clipped (invisible first where a coordinate was negative and there is no visibility column); oriented
boxes keep their corners as written.  The format every split entry no other format claims is in.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..geometry.boxes import polygon_to_xyxy, xywhn_to_xyxy, xyxy_to_xywh
from ..storage import backend_for, ensure_listed, is_url, parent_url
from .base import LabelFormat, SourceOptions, SplitSource
from .labelfile import COORD_TOLERANCE, MAX_CLASS_ID, first_unique, NotRegular, open_regular, read_limited, without_duplicates
from .problems import LabelError
from .sources import default_cache_file, img2label_path, split_images

# Numbers in label files: what float() reads minus underscores ('1_0' is 10 to float()), 'nan', 'inf',
# 'infinity' and non-ASCII digits.  A text made only of the characters below holds nothing else that
# float() accepts, so the common case needs one search per file and float() per token.
_PLAIN_CHARS = re.compile(r"[^0-9.eE+\-\s]")
# The same test without the regular expression for ASCII text (str.translate deletes these, all in
# _PLAIN_CHARS' set; nothing left: plain), about 4x faster than the search over a whole file.
_PLAIN_ASCII = dict.fromkeys(map(ord, "0123456789.eE+- \t\n\r\x0b\x0c"))
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_CLASS_ID = re.compile(r"[0-9]+(?:\.0*)?")  # '3' or '3.0' (some exporters write floats)


def _columns_problem(n: int, task: str, kpt_shape: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why a row of ``n`` numbers does not fit ``task``, or None.  With a ``kpt_shape`` the rows are pose
    rows (those read for another task have been cut to their box before) or boxes: a row of another
    width in a pose dataset is refused rather than read as a polygon."""
    if task == "obb":
        if n != 9:
            return (f"{n} columns (an oriented box row is a class and its 4 corners x1 y1 x2 y2 x3 y3 x4 y4: "
                    "9 columns)")
    elif kpt_shape:
        want = 5 + kpt_shape[0] * kpt_shape[1]
        point = "x y" if kpt_shape[1] == 2 else "x y visibility"
        rows = (f"pose rows with kpt_shape {list(kpt_shape)} are class x y w h and {kpt_shape[0]} keypoints "
                f"{point}: {want} columns")
        if task == "pose" and n != want:
            return f"{n} columns ({rows})"
        if task != "pose" and n != 5:  # the yaml says pose rows: another width is not read as a polygon
            return f"{n} columns ({rows}; a box row has 5)"
    elif n != 5 and (n < 7 or n % 2 == 0):
        return f"{n} columns (expected 5: class x y w h, or a class and 3 or more x y points)"
    return None


_NORMALISED = f"coordinates must be normalised to [0, 1] (at most {COORD_TOLERANCE:g} past it)"


def _past(values) -> bool:
    """Whether any of ``values`` lies more than COORD_TOLERANCE past [0, 1]."""
    return min(values) < -COORD_TOLERANCE or max(values) > 1 + COORD_TOLERANCE


def _coordinates_problem(values: List[float], task: str, kpt_shape: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why a row's numbers (class first, columns checked) are not normalised to the image, or None.

    Ultralytics' 1% rule (the module's docstring): box x y w h, keypoint x y and polygon points each
    within COORD_TOLERANCE of [0, 1]; of a row of 4 points (an oriented box) its envelope's centre and
    size, as Ultralytics checks every polygon row (so a rotated box's corner may lie further out).
    """
    if task == "pose" or len(values) == 5:
        box = values[1:5]
        if min(box[2:]) < 0:
            return f"negative box width or height ({min(box[2:]):g})"
        if _past(box):
            return f"{_NORMALISED}: box x y w h {' '.join(f'{v:g}' for v in box)}"
        if task == "pose":
            points = np.array(values[5:]).reshape(kpt_shape)
            if kpt_shape[1] == 3 and points[:, 2].min() < 0:
                return f"negative keypoint visibility {points[:, 2].min():g}"
            xy = points[:, :2]
            if _past(xy.ravel()):
                return f"{_NORMALISED}: keypoint x y from {xy.min():g} to {xy.max():g}"
        return None
    xy = values[1:]
    if len(xy) == 8:
        x0, x1, y0, y1 = min(xy[0::2]), max(xy[0::2]), min(xy[1::2]), max(xy[1::2])
        if _past(((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0)):
            return (f"{_NORMALISED}: the 4 corners' envelope has centre {(x0 + x1) / 2:g} {(y0 + y1) / 2:g} "
                    f"and size {x1 - x0:g} {y1 - y0:g}")
    elif _past(xy):
        return f"{_NORMALISED}: polygon points from {min(xy):g} to {max(xy):g}"
    return None


def _inside(xywh: np.ndarray) -> np.ndarray:
    """(n, 4) float32 normalised xywh with each box that has a value outside [0, 1] (COORD_TOLERANCE lets
    it) clipped to the image at its edges; boxes whose values all lie in [0, 1] are kept bit for bit, as
    YOLOv5 keeps them (also where an edge reaches past the image)."""
    past = ((xywh < 0) | (xywh > 1)).any(1)
    if not past.any():
        return xywh
    out = xywh.copy()
    out[past] = xyxy_to_xywh(xywhn_to_xyxy(xywh[past].astype(np.float64), 1, 1).clip(0, 1))
    return out


def _parse_rows(text: str, nc: Optional[int], task: str = "detect", kpt_shape: Optional[Tuple[int, int]] = None):
    """Label text -> ((n, 5) float32 rows, per-row polygons or None, (n, K, 3) keypoints or None, warnings)
    for ``task`` (see the module's docstring).  Raises LabelError.

    Numbers are plain decimals (exponents allowed); class ids are digits ('3', or '3.0'), below
    ``nc`` when given and always below MAX_CLASS_ID.  ``kpt_shape`` beside another task than 'pose':
    rows of 5 + K x 2 (or 3) numbers are pose rows, read for their boxes.
    """
    plain = not text.translate(_PLAIN_ASCII) or _PLAIN_CHARS.search(text) is None
    pose_columns = 5 + kpt_shape[0] * kpt_shape[1] if kpt_shape else None
    rows, cut = [], 0
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if not plain:
            _check_numbers(words, lineno)
        try:
            values = [float(x) for x in words]
        except ValueError:
            bad = next(x for x in words if not _NUMBER.fullmatch(x))
            raise LabelError(f"line {lineno}: {bad[:20]!r} is not a number") from None
        if task != "pose" and len(values) == pose_columns:
            values, words = values[:5], words[:5]  # a pose row read for its box, as Ultralytics reads it
            cut += 1
        problem = _columns_problem(len(values), task, kpt_shape)
        if problem:
            raise LabelError(f"line {lineno}: {problem}")
        cls = values[0]
        if not _CLASS_ID.fullmatch(words[0]):
            raise LabelError(f"line {lineno}: class {words[0][:20]!r} is not a non-negative integer "
                           "written in digits (as 3 or 3.0)")
        if cls >= MAX_CLASS_ID:
            raise LabelError(f"line {lineno}: class {words[0][:20]!r} is too large (class ids must be below "
                           f"{MAX_CLASS_ID:,}, the integers float32 holds exactly)")
        if nc is not None and cls >= nc:
            raise LabelError(f"line {lineno}: class {int(cls)} but the dataset has {nc} names (0..{nc - 1})")
        if not all(np.isfinite(values[1:])):  # only an overflowing exponent or digits get here ('1e999')
            bad = next(w for w, v in zip(words[1:], values[1:]) if not np.isfinite(v))
            raise LabelError(f"line {lineno}: non-finite value {bad[:20]!r}")
        coords = values[1:]
        if min(coords) < 0 or max(coords) > 1:  # every kind of row is fine with all its numbers in [0, 1]
            problem = _coordinates_problem(values, task, kpt_shape)
            if problem:
                raise LabelError(f"line {lineno}: {problem}")
        rows.append(values)
    if task == "pose":
        return _pose_rows(rows, kpt_shape)
    if not rows:
        return np.zeros((0, 5), np.float32), None, None, []
    if not any(len(r) > 5 for r in rows):
        labels = np.array(rows, dtype=np.float32)
        labels[:, 1:] = _inside(labels[:, 1:])
        # (a segment task's masks of plain boxes are their rectangles: task.polygons_of)
        return labels, None, None, [_box_rows(len(labels), cut)] if task == "segment" else []
    # Polygon rows: keep the polygon, derive the box from its envelope (float32, as YOLOv5 does).
    classes = np.array([r[0] for r in rows], dtype=np.float32)
    segments, boxes, box_rows = [], [], 0
    for r in rows:
        if len(r) > 5:
            pts = np.array(r[1:], dtype=np.float32).reshape(-1, 2)
            if task != "obb":  # a rotated box's corner may lie past the edge: kept, its box clipped
                pts = pts.clip(0, 1)
            segments.append(pts)
            boxes.append(xyxy_to_xywh(polygon_to_xyxy(pts.clip(0, 1))[None])[0])
        else:
            box_rows += 1
            segments.append(np.zeros((0, 2), np.float32))
            boxes.append(_inside(np.array([r[1:]], dtype=np.float32))[0])
    labels = np.concatenate([classes[:, None], np.stack(boxes)], 1).astype(np.float32)
    return labels, segments, None, [_box_rows(box_rows, cut)] if task == "segment" and box_rows else []


def _box_rows(n: int, cut: int) -> str:
    """The segment task's warning about ``n`` rows without a polygon, ``cut`` of them pose rows."""
    pose = f" ({cut} pose rows read for their boxes)" if cut else ""
    return f"{n} rows are boxes without a polygon{pose}: each one's mask is its box"


def _pose_rows(rows: List[List[float]], kpt_shape: Tuple[int, int]):
    """Pose rows -> (labels (n, 5), None, keypoints (n, K, 3), warnings).  Without a visibility
    column a keypoint is visible unless a coordinate is negative (as Ultralytics makes it); then
    keypoints are clipped to the image."""
    k, ndim = kpt_shape
    if not rows:
        return np.zeros((0, 5), np.float32), None, np.zeros((0, k, 3), np.float32), []
    a = np.array(rows, dtype=np.float32)
    points = a[:, 5:].reshape(-1, k, ndim)
    if ndim == 2:
        visible = ((points[..., 0] >= 0) & (points[..., 1] >= 0)).astype(np.float32)
        points = np.concatenate([points, visible[..., None]], -1)
    points = points.copy()
    points[..., :2] = points[..., :2].clip(0, 1)
    labels = a[:, :5].copy()
    labels[:, 1:] = _inside(labels[:, 1:])
    return labels, None, points, []


def _check_numbers(words: List[str], lineno: int) -> None:
    """Raise LabelError naming the first token that is not a plain decimal number."""
    for w in words:
        if _NUMBER.fullmatch(w):
            continue
        if _NON_FINITE.fullmatch(w):
            raise LabelError(f"line {lineno}: non-finite value {w!r}")
        raise LabelError(f"line {lineno}: {w[:20]!r} is not a number")


def read_labels(lb_file: str, nc: Optional[int], task: str = "detect", kpt_shape: Optional[Tuple[int, int]] = None):
    """Read one label file -> (labels (n, 5) float32, segments or None, status, warnings) and, for
    pose, a fifth: keypoints (n, K, 3) float32.

    status is 'ok', 'missing' or 'empty'.  Raises LabelError for a file that cannot be trusted.
    """
    none = (np.zeros((0, kpt_shape[0], 3), np.float32),) if task == "pose" else ()
    try:
        f, st = open_regular(lb_file)
    except FileNotFoundError:
        return (np.zeros((0, 5), np.float32), None, "missing", []) + none
    except NotRegular as e:
        if e.kind == "a folder":
            return (np.zeros((0, 5), np.float32), None, "missing",
                    ["a folder stands where the label file should be"]) + none
        raise LabelError(f"label file is not a regular file ({e.kind})") from None
    except OSError as e:
        raise LabelError(f"cannot read label file ({e})") from None
    with f:
        raw = read_limited(f, st.st_size, "label file")
    if b"\x00" in raw:
        raise LabelError("label file is binary, not text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LabelError("label file is not UTF-8 text") from None
    return labels_of_text(text, nc, task, kpt_shape)


def labels_of_text(text: str, nc: Optional[int], task: str = "detect", kpt_shape: Optional[Tuple[int, int]] = None):
    """The rows of a label file's ``text`` (YOLO rows, one a line: see the module's docstring), as
    :func:`read_labels` gives a file's: (labels (n, 5) float32 [class, x, y, w, h] normalised, segments
    or None, status 'ok' or 'empty', warnings) and, for pose, keypoints (n, K, 3) float32.  Raises
    LabelError naming the line.  Other formats whose rows are YOLO rows (an NDJSON export's) read
    them here, so they are read exactly as the same rows in a file."""
    none = (np.zeros((0, kpt_shape[0], 3), np.float32),) if task == "pose" else ()
    labels, segments, keypoints, warnings = _parse_rows(text, nc, task, kpt_shape)
    if not len(labels):
        return (labels, None, "empty", warnings) + none
    if task == "pose":  # a duplicate is the same box with the same keypoints
        keep = first_unique(np.concatenate([labels, keypoints.reshape(len(labels), -1)], 1), warnings)
        return labels[keep], None, "ok", warnings, keypoints[keep]
    if task == "obb":  # and the same corners (two boxes may share an envelope)
        keep = first_unique(np.concatenate([labels, np.stack(segments).reshape(len(labels), -1)], 1), warnings)
        return labels[keep], [segments[i] for i in keep], "ok", warnings
    return (*without_duplicates(labels, segments, warnings), "ok", warnings)


@dataclass(frozen=True)
class YoloReader:
    """YOLO ``.txt`` label files (base.LabelReader); ``nc``: number of names, or None when unknown;
    ``task`` and ``kpt_shape``: what a row holds (see the module's docstring)."""
    nc: Optional[int] = None
    task: str = "detect"
    kpt_shape: Optional[Tuple[int, int]] = None

    def read(self, label: str, shape: Tuple[int, int]):
        return read_labels(label, self.nc, self.task, self.kpt_shape)

    def describe(self, label: str) -> str:
        return label


def _listed_with_labels(entries: List[Any]):
    """split_images(entries); for image folders in a bucket, their label folders (images/ -> labels/)
    are listed at the same time: a warm start waits for one round of listings, not two."""
    folders = [e for e in entries if is_url(e) and "." not in e.rstrip("/").rpartition("/")[2]]
    labels = [parent_url(img2label_path(e.rstrip("/") + "/x.jpg")) for e in folders]
    labels = [f for f in dict.fromkeys(labels) if f not in folders]
    if not labels:
        return split_images(entries)
    with ThreadPoolExecutor(min(len(labels), 8)) as pool:
        pending = [pool.submit(backend_for(f).list, f) for f in labels]  # (the backends of this thread's storage)
        listing = split_images(entries)
        for p in pending:
            p.result()
    return listing


class YoloFormat(LabelFormat):
    """YOLO labels (base.LabelFormat).  The fingerprint covers every image and label file's
    stat and ``nc``; a split is listed on every start (its folders are the listing)."""
    name = "yolo"
    cuts_by_files = True
    tasks = ("detect", "segment", "pose", "obb")

    def claims(self, entry: Path) -> bool:
        return True  # the registry asks it last

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        listing = _listed_with_labels(entries)
        im_files = listing.files
        lb_files = [img2label_path(f) for f in im_files]
        if is_url(im_files[0]) or is_url(lb_files[-1]):
            # the labels' folders are listed once, so the fingerprint and the scan know each label
            # object's size and ETag, and which are missing, without a request per object
            ensure_listed(im_files + lb_files)
        names = list(options.names) if options.names else None
        nc = len(names) if names else options.nc
        return SplitSource(self.name, im_files, lb_files, lb_files, YoloReader(nc, options.task, options.kpt_shape),
                           names or [], {},
                           default_cache_file(entries, lb_files[0]), img2label_path, listing.problems, nc=nc)

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return img2label_path


FORMAT = YoloFormat()
