"""Read and verify one image/label pair -> a :class:`PairRecord` (or a named problem).

Nothing here modifies a file: a JPEG that lacks its end marker is reported, not "restored".
The image is checked from its header (format, size, EXIF orientation), never decoded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from .boxes import polygon_to_xyxy, xyxy_to_xywh
from .sources import IMG_FORMATS

MIN_IMAGE_SIDE = 10  # YOLOv5 leaves out images below 10 px a side
COORD_TOLERANCE = 1e-4  # label writers round; 1.00001 is still "inside the image"
_EXIF_ORIENTATION = 0x0112
_JPEG_EOI = b"\xff\xd9"


@dataclass
class Problem:
    """Something wrong with one file.  ``dropped``: the pair was left out of the dataset."""
    file: str
    reason: str
    dropped: bool

    def __str__(self) -> str:
        return f"{'left out' if self.dropped else 'warning'}: {self.file}: {self.reason}"


@dataclass
class PairRecord:
    """What the scan learns about one image/label pair.

    ``shape``: (w, h) in pixels after EXIF orientation.  ``labels``: (n, 5) float32
    [class, x, y, w, h] normalised.  ``segments``: None, or one (k, 2) float32 normalised polygon per
    label row (an empty (0, 2) array for plain box rows).  ``status``: 'ok', 'missing' (no label file),
    'empty' (label file without rows) or 'corrupt' (left out).
    """
    im_file: str
    shape: Optional[Tuple[int, int]] = None
    labels: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), np.float32))
    segments: Optional[List[np.ndarray]] = None
    status: str = "ok"
    problems: List[Problem] = field(default_factory=list)


class _Corrupt(Exception):
    """Raised inside the checks; becomes a dropped :class:`Problem`."""


def image_size(im_file: str) -> Tuple[Tuple[int, int], List[str]]:
    """(w, h) of an image from its header, EXIF orientation applied, plus warnings.  Raises _Corrupt."""
    warnings = []
    try:
        with Image.open(im_file) as im:
            fmt = (im.format or "").lower()
            w, h = im.size
            try:
                orientation = im.getexif().get(_EXIF_ORIENTATION)
            except Exception:  # a broken EXIF block is the file's problem, not a reason to drop it
                orientation = None
                warnings.append("unreadable EXIF data ignored")
    except UnidentifiedImageError:
        raise _Corrupt("not an image PIL can identify (empty, text or damaged file)") from None
    except OSError as e:
        raise _Corrupt(f"cannot read image header ({e})") from None
    if fmt not in IMG_FORMATS:
        raise _Corrupt(f"image format {fmt or 'unknown'} is not one of {', '.join(IMG_FORMATS)}")
    suffix = im_file.rsplit(".", 1)[-1].lower()
    if fmt == "jpeg" and suffix not in ("jpg", "jpeg") or fmt != "jpeg" and suffix in ("jpg", "jpeg"):
        warnings.append(f"{fmt.upper()} data in a .{suffix} file")
    if orientation in (5, 6, 7, 8):  # transposing orientations: OpenCV decodes it as h x w
        w, h = h, w
    elif orientation not in (None, 1, 2, 3, 4):
        warnings.append(f"invalid EXIF orientation {orientation!r} ignored")
    if w < MIN_IMAGE_SIDE or h < MIN_IMAGE_SIDE:
        raise _Corrupt(f"image size {w}x{h} is below {MIN_IMAGE_SIDE} pixels a side")
    if fmt in ("jpeg", "mpo"):
        warnings.extend(_jpeg_tail_warnings(im_file))
    return (w, h), warnings


def _jpeg_tail_warnings(im_file: str) -> List[str]:
    """A JPEG should end with FF D9.  Bytes after it are harmless; no marker at all means truncation."""
    with open(im_file, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 2))
        if f.read() == _JPEG_EOI:  # the common case reads 2 bytes, not a whole tail of the file
            return []
        f.seek(max(0, size - 65536))
        tail = f.read()
    eoi = tail.rfind(_JPEG_EOI)
    if eoi < 0:
        return ["truncated JPEG (no end marker): the missing bottom decodes as gray; file left unchanged"]
    return [f"{len(tail) - eoi - 2} bytes after the JPEG end marker ignored; file left unchanged"]


def _parse_rows(text: str, nc: Optional[int]) -> Tuple[np.ndarray, Optional[List[np.ndarray]]]:
    """Label text -> (n, 5) float32 rows and optional per-row polygons.  Raises _Corrupt."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        try:
            values = [float(x) for x in words]
        except ValueError:
            bad = next(x for x in words if not _is_float(x))
            raise _Corrupt(f"line {lineno}: {bad[:20]!r} is not a number") from None
        n = len(values)
        if n != 5 and (n < 7 or n % 2 == 0):
            raise _Corrupt(f"line {lineno}: {n} columns (expected 5: class x y w h, "
                           "or a class and 3 or more x y points)")
        if not all(np.isfinite(values)):
            raise _Corrupt(f"line {lineno}: non-finite value")
        cls = values[0]
        if cls != int(cls) or cls < 0:
            raise _Corrupt(f"line {lineno}: class {words[0]!r} is not a non-negative integer")
        if nc is not None and cls >= nc:
            raise _Corrupt(f"line {lineno}: class {int(cls)} but the dataset has {nc} names (0..{nc - 1})")
        coords = values[1:]
        if min(coords) < -COORD_TOLERANCE or max(coords) > 1 + COORD_TOLERANCE:
            raise _Corrupt(f"line {lineno}: coordinates must be normalised to [0, 1], "
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


def _is_float(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def read_labels(lb_file: str, nc: Optional[int]):
    """Read one label file -> (labels (n, 5) float32, segments or None, status, warnings).

    status is 'ok', 'missing' or 'empty'.  Raises _Corrupt for a file that cannot be trusted.
    """
    warnings = []
    if os.path.isdir(lb_file):
        return np.zeros((0, 5), np.float32), None, "missing", ["a folder stands where the label file should be"]
    try:
        with open(lb_file, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return np.zeros((0, 5), np.float32), None, "missing", []
    except OSError as e:
        raise _Corrupt(f"cannot read label file ({e})") from None
    if b"\x00" in raw:
        raise _Corrupt("label file is binary, not text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt("label file is not UTF-8 text") from None
    labels, segments = _parse_rows(text, nc)
    if not len(labels):
        return labels, None, "empty", warnings
    if len({row.tobytes() for row in labels + 0.0}) == len(labels):  # + 0.0: -0.0 equals 0.0
        return labels, segments, "ok", warnings
    _, first = np.unique(labels, axis=0, return_index=True)
    if len(first) < len(labels):
        # Same selection and order as YOLOv5 (unique rows in sorted order), so targets stay identical.
        warnings.append(f"{len(labels) - len(first)} duplicate label rows removed")
        labels = labels[first]
        if segments is not None:
            segments = [segments[i] for i in first]
    return labels, segments, "ok", warnings


def verify_pair(im_file: str, lb_file: str, nc: Optional[int] = None) -> PairRecord:
    """Check one image/label pair.  Never raises for bad data: problems are recorded on the result.

    ``nc``: number of class names, or None when unknown (then class ids are only checked to be >= 0).
    """
    rec = PairRecord(im_file=im_file)
    current = im_file
    try:
        rec.shape, warnings = image_size(im_file)
        rec.problems += [Problem(im_file, w, dropped=False) for w in warnings]
        current = lb_file
        rec.labels, rec.segments, rec.status, warnings = read_labels(lb_file, nc)
        rec.problems += [Problem(lb_file, w, dropped=False) for w in warnings]
    except _Corrupt as e:
        rec.status = "corrupt"
        rec.labels, rec.segments = np.zeros((0, 5), np.float32), None
        rec.problems.append(Problem(current, str(e), dropped=True))
    except Exception as e:  # one bad file must never stop a scan of a million
        rec.status = "corrupt"
        rec.labels, rec.segments = np.zeros((0, 5), np.float32), None
        rec.problems.append(Problem(current, f"unexpected {type(e).__name__}: {e}", dropped=True))
    return rec
