"""The YOLO label format: image folders, ``.txt`` image lists or images, each image's boxes in
``labels/<stem>.txt`` (YOLOv5's ``/images/`` -> ``/labels/`` rule, sources.img2label_path), one row per
object: ``class x y w h`` normalised to the image, or ``class x1 y1 x2 y2 ...`` a normalised polygon
(its box is the polygon's envelope).  The format every split entry no other format claims is in.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .boxes import polygon_to_xyxy, xyxy_to_xywh
from .labelfile import COORD_TOLERANCE, MAX_CLASS_ID, NotRegular, open_regular, read_limited, without_duplicates
from .labelformat import LabelFormat, SourceOptions, SplitSource
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


def _parse_rows(text: str, nc: Optional[int]) -> Tuple[np.ndarray, Optional[List[np.ndarray]]]:
    """Label text -> (n, 5) float32 rows and optional per-row polygons.  Raises LabelError.

    Numbers are plain decimals (exponents allowed); class ids are digits ('3', or '3.0'), below
    ``nc`` when given and always below MAX_CLASS_ID.
    """
    plain = not text.translate(_PLAIN_ASCII) or _PLAIN_CHARS.search(text) is None
    rows = []
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
        n = len(values)
        if n != 5 and (n < 7 or n % 2 == 0):
            raise LabelError(f"line {lineno}: {n} columns (expected 5: class x y w h, "
                           "or a class and 3 or more x y points)")
        cls = values[0]
        if not _CLASS_ID.fullmatch(words[0]):
            raise LabelError(f"line {lineno}: class {words[0][:20]!r} is not a non-negative integer "
                           "written in digits (as 3 or 3.0)")
        if cls >= MAX_CLASS_ID:
            raise LabelError(f"line {lineno}: class {words[0][:20]!r} is too large (class ids must be below "
                           f"{MAX_CLASS_ID:,}, the integers float32 holds exactly)")
        if nc is not None and cls >= nc:
            raise LabelError(f"line {lineno}: class {int(cls)} but the dataset has {nc} names (0..{nc - 1})")
        coords = values[1:]
        if not all(np.isfinite(coords)):  # only an overflowing exponent or digits get here ('1e999')
            bad = next(w for w, v in zip(words[1:], coords) if not np.isfinite(v))
            raise LabelError(f"line {lineno}: non-finite value {bad[:20]!r}")
        if min(coords) < -COORD_TOLERANCE or max(coords) > 1 + COORD_TOLERANCE:
            raise LabelError(f"line {lineno}: coordinates must be normalised to [0, 1], "
                           f"got min {min(coords):g} max {max(coords):g}")
        rows.append(values)
    if not rows:
        return np.zeros((0, 5), np.float32), None
    if not any(len(r) > 5 for r in rows):
        labels = np.array(rows, dtype=np.float32)
        labels[:, 1:] = labels[:, 1:].clip(0, 1)  # only moves values within COORD_TOLERANCE
        return labels, None
    # Polygon rows: keep the polygon, derive the box from its envelope (float32, as YOLOv5 does).
    classes = np.array([r[0] for r in rows], dtype=np.float32)
    segments, boxes = [], []
    for r in rows:
        if len(r) > 5:
            pts = np.clip(np.array(r[1:], dtype=np.float32).reshape(-1, 2), 0, 1)
            segments.append(pts)
            boxes.append(xyxy_to_xywh(polygon_to_xyxy(pts)[None])[0])
        else:
            segments.append(np.zeros((0, 2), np.float32))
            boxes.append(np.clip(np.array(r[1:], dtype=np.float32), 0, 1))
    return np.concatenate([classes[:, None], np.stack(boxes)], 1).astype(np.float32), segments


def _check_numbers(words: List[str], lineno: int) -> None:
    """Raise LabelError naming the first token that is not a plain decimal number."""
    for w in words:
        if _NUMBER.fullmatch(w):
            continue
        if _NON_FINITE.fullmatch(w):
            raise LabelError(f"line {lineno}: non-finite value {w!r}")
        raise LabelError(f"line {lineno}: {w[:20]!r} is not a number")


def read_labels(lb_file: str, nc: Optional[int]):
    """Read one label file -> (labels (n, 5) float32, segments or None, status, warnings).

    status is 'ok', 'missing' or 'empty'.  Raises LabelError for a file that cannot be trusted.
    """
    warnings = []
    try:
        f, st = open_regular(lb_file)
    except FileNotFoundError:
        return np.zeros((0, 5), np.float32), None, "missing", []
    except NotRegular as e:
        if e.kind == "a folder":
            return np.zeros((0, 5), np.float32), None, "missing", ["a folder stands where the label file should be"]
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
    labels, segments = _parse_rows(text, nc)
    if not len(labels):
        return labels, None, "empty", warnings
    return (*without_duplicates(labels, segments, warnings), "ok", warnings)


@dataclass(frozen=True)
class YoloReader:
    """YOLO ``.txt`` label files (formats.LabelReader); ``nc``: number of names, or None when unknown."""
    nc: Optional[int] = None

    def read(self, label: str, shape: Tuple[int, int]):
        return read_labels(label, self.nc)

    def describe(self, label: str) -> str:
        return label


class YoloFormat(LabelFormat):
    """YOLO labels (labelformat.LabelFormat).  The fingerprint covers every image and label file's
    stat and ``nc``; a split is listed on every start (its folders are the listing)."""
    name = "yolo"
    cuts_by_files = True

    def claims(self, entry: Path) -> bool:
        return True  # the registry asks it last

    def open(self, entries: List[Any], options: SourceOptions) -> SplitSource:
        listing = split_images(entries)
        im_files = listing.files
        lb_files = [img2label_path(f) for f in im_files]
        names = list(options.names) if options.names else None
        nc = len(names) if names else options.nc
        return SplitSource(self.name, im_files, lb_files, lb_files, YoloReader(nc), names or [], {},
                           default_cache_file(entries, lb_files[0]), img2label_path, listing.problems, nc=nc)

    def annotation_file_of(self, first_label_file: Optional[str]) -> Callable[[str], str]:
        return img2label_path


FORMAT = YoloFormat()
