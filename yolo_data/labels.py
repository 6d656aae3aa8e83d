"""Read and verify one image and its labels -> a :class:`PairRecord` (or a named problem).  YOLO label
files are read here; other formats bring their own :class:`LabelReader` (:mod:`~yolo_data.voc`,
:mod:`~yolo_data.coco`).

Nothing here modifies a file: a JPEG that lacks its end marker is reported, not "restored".
Only regular files are opened (a FIFO blocks its reader, /dev/zero never ends), and a label file is read
up to :data:`MAX_LABEL_BYTES`.  JPEG and PNG are checked from their headers and marker or chunk
structure, never decoded.  The rarer formats (TIFF, WebP, BMP, ...) are decoded once with the decoder
used for training, so the scan keeps only what training can read.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, List, Optional, Protocol, Tuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from .boxes import polygon_to_xyxy, xyxy_to_xywh
from .images import ImageReadError, imread_bgr
from .problems import Problem
from .sources import IMG_FORMATS

MIN_IMAGE_SIDE = 10  # YOLOv5 leaves out images below 10 px a side
COORD_TOLERANCE = 1e-4  # label writers round; 1.00001 is still "inside the image"
MAX_LABEL_BYTES = 16 * 2**20  # about 500,000 box rows; a larger "label file" is the wrong file
MAX_CLASS_ID = 2**24  # class ids are stored as float32, which holds every integer below 2**24 exactly
_MAX_EXIF_BYTES = 16 * 2**20
_EXIF_ORIENTATION = 0x0112
_JPEG_EOI = b"\xff\xd9"
_HEADER_ONLY = ("jpeg", "mpo", "png")  # checked without decoding (an MPO is a JPEG to OpenCV)
_PNG_TRUNCATED = "truncated PNG (ends before its IEND chunk)"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))

# Numbers in label files: what float() reads minus underscores ('1_0' is 10 to float()), 'nan', 'inf',
# 'infinity' and non-ASCII digits.  A text made only of the characters below holds nothing else that
# float() accepts, so the common case needs one search per file and float() per token.
_PLAIN_CHARS = re.compile(r"[^0-9.eE+\-\s]")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_CLASS_ID = re.compile(r"[0-9]+(?:\.0*)?")  # '3' or '3.0' (some exporters write floats)


@dataclass
class PairRecord:
    """What the scan learns about one image/label pair.

    ``shape``: (h, w) in pixels after EXIF orientation (NumPy's order, the decoded image's
    ``shape[:2]``).  ``labels``: (n, 5) float32
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


class _NotRegular(Exception):
    """The path is a folder, FIFO, device or socket; ``kind`` says which ("a FIFO")."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _open_regular(path: str) -> Tuple[BinaryIO, os.stat_result]:
    """Open a regular file for reading -> (binary file, its fstat).  Raises OSError or _NotRegular.

    Anything else is refused before it is opened: opening a FIFO blocks until a writer comes, a device
    may act on open, /dev/zero never ends.  O_NONBLOCK and the fstat cover a file swapped in between.
    A name holding a NUL byte (Python's ValueError) is an OSError here too, so every reader reports it
    as the file it cannot read.
    """
    if "\0" in path:
        raise OSError(errno.EINVAL, "the name contains a NUL byte", path)
    st = os.stat(path)  # follows symlinks: a link to /dev/zero is a character device
    if stat.S_ISREG(st.st_mode):
        fd = os.open(path, _OPEN_FLAGS)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return os.fdopen(fd, "rb"), st
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise _NotRegular(next((kind for test, kind in _FILE_KINDS if test(st.st_mode)), "a special file"))


def _pread(f: BinaryIO, n: int, pos: int) -> bytes:
    """n bytes at pos, without moving or filling f's buffer (one system call on POSIX)."""
    if hasattr(os, "pread"):
        return os.pread(f.fileno(), n, pos)
    f.seek(pos)
    return f.read(n)


def image_size(im_file: str) -> Tuple[Tuple[int, int], List[str]]:
    """(h, w) of an image as OpenCV decodes it (its ``shape[:2]``, EXIF orientation applied), plus
    warnings.  Raises _Corrupt.

    JPEG and PNG from their headers and structure only; other formats are decoded with the training
    decoder (rare in detection datasets, and Pillow reads TIFFs that OpenCV cannot).
    """
    warnings = []
    try:
        f, st = _open_regular(im_file)
    except _NotRegular as e:
        raise _Corrupt(f"not a regular file ({e.kind})") from None
    except OSError as e:
        raise _Corrupt(f"cannot read image header ({e})") from None
    with f:
        orientation = None
        try:
            with Image.open(f) as im:
                fmt = (im.format or "").lower()
                w, h = im.size  # Pillow's size is (width, height)
                if fmt != "png":  # Pillow's PNG getexif() decodes the whole image to look past IDAT
                    try:
                        orientation = im.getexif().get(_EXIF_ORIENTATION)
                    except Exception:  # a broken EXIF block is the file's problem, not a reason to drop it
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
        if fmt == "png":
            exif = _png_exif(f, st.st_size)
            if exif is not None:
                try:
                    if not exif:
                        raise ValueError("empty or oversized eXIf chunk")
                    parsed = Image.Exif()
                    parsed.load(exif)
                    orientation = parsed.get(_EXIF_ORIENTATION)
                except Exception:
                    warnings.append("unreadable EXIF data ignored")
        elif fmt in ("jpeg", "mpo"):
            warnings.extend(_jpeg_tail_warnings(f, st.st_size))
        if orientation in (5, 6, 7, 8):  # transposing orientations: OpenCV decodes it as h x w
            w, h = h, w
        elif orientation not in (None, 1, 2, 3, 4):
            warnings.append(f"invalid EXIF orientation {orientation!r} ignored")
        if fmt not in _HEADER_ONLY:
            # Decode the file already open and checked (through /proc where there is one), not whatever
            # the name may point to by now; the decoded size is the one training sees.
            fd_path = f"/proc/self/fd/{f.fileno()}"
            try:
                h, w = imread_bgr(fd_path if os.path.exists(fd_path) else im_file).shape[:2]
            except ImageReadError:
                raise _Corrupt(f"OpenCV, the decoder used for training, cannot decode this {fmt.upper()} "
                               "image (Pillow reads its header)") from None
    if w < MIN_IMAGE_SIDE or h < MIN_IMAGE_SIDE:
        raise _Corrupt(f"image size {w}x{h} is below {MIN_IMAGE_SIDE} pixels a side")
    return (h, w), warnings


def _png_exif(f: BinaryIO, size: int) -> Optional[bytes]:
    """Walk a PNG's chunks (4-byte length, 4-byte type, data, 4-byte CRC) from byte 8 to IEND, reading
    8 bytes a chunk and nothing else -> the data of its first eXIf chunk, or None.  Raises _Corrupt when
    the file ends before IEND (OpenCV refuses such a file, even when only IEND is missing).

    Wherever the eXIf chunk stands (also after IDAT) OpenCV applies it, and a second one is ignored.
    """
    pos, exif = 8, None
    while True:
        head = _pread(f, 8, pos)
        if len(head) < 8:
            raise _Corrupt(_PNG_TRUNCATED)
        length, kind = struct.unpack(">I4s", head)
        end = pos + 12 + length
        if end > size:
            raise _Corrupt(_PNG_TRUNCATED)
        if kind == b"IEND":
            return exif
        if kind == b"eXIf" and exif is None:
            exif = _pread(f, length, pos + 8) if length <= _MAX_EXIF_BYTES else b""
        pos = end


def _jpeg_tail_warnings(f: BinaryIO, size: int) -> List[str]:
    """A JPEG should end with FF D9.  Bytes after it are harmless; no marker at all means truncation."""
    if _pread(f, 2, max(0, size - 2)) == _JPEG_EOI:  # the common case reads 2 bytes, not a whole tail
        return []
    tail = _pread(f, min(size, 65536), max(0, size - 65536))
    eoi = tail.rfind(_JPEG_EOI)
    if eoi < 0:
        return ["truncated JPEG (no end marker): the missing bottom decodes as gray; file left unchanged"]
    return [f"{len(tail) - eoi - 2} bytes after the JPEG end marker ignored; file left unchanged"]


def _parse_rows(text: str, nc: Optional[int]) -> Tuple[np.ndarray, Optional[List[np.ndarray]]]:
    """Label text -> (n, 5) float32 rows and optional per-row polygons.  Raises _Corrupt.

    Numbers are plain decimals (exponents allowed); class ids are digits ('3', or '3.0'), below
    ``nc`` when given and always below MAX_CLASS_ID.
    """
    plain = _PLAIN_CHARS.search(text) is None
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
            raise _Corrupt(f"line {lineno}: {bad[:20]!r} is not a number") from None
        n = len(values)
        if n != 5 and (n < 7 or n % 2 == 0):
            raise _Corrupt(f"line {lineno}: {n} columns (expected 5: class x y w h, "
                           "or a class and 3 or more x y points)")
        cls = values[0]
        if not _CLASS_ID.fullmatch(words[0]):
            raise _Corrupt(f"line {lineno}: class {words[0][:20]!r} is not a non-negative integer "
                           "written in digits (as 3 or 3.0)")
        if cls >= MAX_CLASS_ID:
            raise _Corrupt(f"line {lineno}: class {words[0][:20]!r} is too large (class ids must be below "
                           f"{MAX_CLASS_ID:,}, the integers float32 holds exactly)")
        if nc is not None and cls >= nc:
            raise _Corrupt(f"line {lineno}: class {int(cls)} but the dataset has {nc} names (0..{nc - 1})")
        coords = values[1:]
        if not all(np.isfinite(coords)):  # only an overflowing exponent or digits get here ('1e999')
            bad = next(w for w, v in zip(words[1:], coords) if not np.isfinite(v))
            raise _Corrupt(f"line {lineno}: non-finite value {bad[:20]!r}")
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


def _check_numbers(words: List[str], lineno: int) -> None:
    """Raise _Corrupt naming the first token that is not a plain decimal number."""
    for w in words:
        if _NUMBER.fullmatch(w):
            continue
        if _NON_FINITE.fullmatch(w):
            raise _Corrupt(f"line {lineno}: non-finite value {w!r}")
        raise _Corrupt(f"line {lineno}: {w[:20]!r} is not a number")


def read_labels(lb_file: str, nc: Optional[int]):
    """Read one label file -> (labels (n, 5) float32, segments or None, status, warnings).

    status is 'ok', 'missing' or 'empty'.  Raises _Corrupt for a file that cannot be trusted.
    """
    warnings = []
    try:
        f, st = _open_regular(lb_file)
    except FileNotFoundError:
        return np.zeros((0, 5), np.float32), None, "missing", []
    except _NotRegular as e:
        if e.kind == "a folder":
            return np.zeros((0, 5), np.float32), None, "missing", ["a folder stands where the label file should be"]
        raise _Corrupt(f"label file is not a regular file ({e.kind})") from None
    except OSError as e:
        raise _Corrupt(f"cannot read label file ({e})") from None
    with f:
        if st.st_size > MAX_LABEL_BYTES:
            raise _Corrupt(_too_large(f"{st.st_size:,} bytes"))
        # Never more than the limit + 1 bytes, also when the size was wrong (a /proc file says 0) or the
        # file grew since fstat; and no buffer of the limit's size for a small file.
        raw = f.read(st.st_size + 1)
        if len(raw) > st.st_size:
            raw += f.read(MAX_LABEL_BYTES + 1 - len(raw))
    if len(raw) > MAX_LABEL_BYTES:
        raise _Corrupt(_too_large(f"more than {MAX_LABEL_BYTES:,} bytes"))
    if b"\x00" in raw:
        raise _Corrupt("label file is binary, not text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt("label file is not UTF-8 text") from None
    labels, segments = _parse_rows(text, nc)
    if not len(labels):
        return labels, None, "empty", warnings
    return (*without_duplicates(labels, segments, warnings), "ok", warnings)


def without_duplicates(labels: np.ndarray, segments: Optional[List[np.ndarray]], warnings: List[str]):
    """(labels, segments) with repeated rows removed as YOLOv5's loader removes them (unique rows in
    sorted order, so targets stay identical to its own), and a warning added when there were any."""
    if len({row.tobytes() for row in labels + 0.0}) == len(labels):  # + 0.0: -0.0 equals 0.0
        return labels, segments
    _, first = np.unique(labels, axis=0, return_index=True)
    if len(first) < len(labels):
        warnings.append(f"{len(labels) - len(first)} duplicate label rows removed")
        labels = labels[first]
        if segments is not None:
            segments = [segments[i] for i in first]
    return labels, segments


def _too_large(size: str) -> str:
    return (f"label file is {size}, over the limit of {MAX_LABEL_BYTES:,} bytes "
            "(yolo_data.labels.MAX_LABEL_BYTES)")


# A size stated in an annotation file and the image's may differ by rounding when a tool resized the
# photo; a larger change of aspect (a rotated photo, another photo) means the boxes cannot be placed.
ASPECT_TOLERANCE = 0.01


def normalising_size(stated: Optional[Tuple[float, float]], shape: Tuple[int, int], source: str,
                     missing: str) -> Tuple[Tuple[float, float], List[str]]:
    """The (width, height) an annotation file's pixel boxes are normalised by (x by the width, y by the
    height), and warnings.  ``stated``: the (width, height) the file states, in its own order (as
    converters use it; None when it gives none: then the image's, with the warning ``missing``),
    checked against the image's ``shape`` (h, w) from :func:`image_size`.  ``source`` names the file in
    messages ('XML', 'JSON').  Raises _Corrupt when the aspects differ."""
    h, w = shape  # the image's (h, w); annotation files state width x height
    if stated is None:
        return (float(w), float(h)), [f"{missing}; the image's {w}x{h} is used"]
    sw, sh = stated
    if (sw, sh) == (w, h):
        return (sw, sh), []
    if abs((sw / sh) / (w / h) - 1) > ASPECT_TOLERANCE:
        raise _Corrupt(f"the {source}'s size {sw:g}x{sh:g} disagrees with the image's {w}x{h} "
                       "(another aspect: rotated or another photo), so its boxes cannot be placed")
    return (sw, sh), [f"the {source}'s size {sw:g}x{sh:g} differs from the image's {w}x{h} (same aspect); "
                      f"boxes normalised by the {source}'s size"]


class LabelReader(Protocol):
    """Reads one image's labels in a scan worker (picklable: it travels with each chunk of pairs).

    ``read(label, shape)``: ``label`` is what the source lists beside the image (a label file's path, or
    the annotations a COCO JSON gives for it); ``shape`` the image's (w, h) from :func:`image_size`.
    Returns (labels (n, 5) float32 [class, x, y, w, h] normalised, segments or None, status 'ok' /
    'missing' / 'empty', warnings).  Raises _Corrupt when the image must be left out.
    ``describe(label)``: the file named in messages about ``label``.
    """

    def read(self, label, shape: Tuple[int, int]): ...

    def describe(self, label) -> str: ...


@dataclass(frozen=True)
class YoloReader:
    """YOLO ``.txt`` label files; ``nc``: number of names, or None when unknown."""
    nc: Optional[int] = None

    def read(self, label: str, shape: Tuple[int, int]):
        return read_labels(label, self.nc)

    def describe(self, label: str) -> str:
        return label


def verify_pair(im_file: str, lb_file, nc: Optional[int] = None, reader: Optional[LabelReader] = None) -> PairRecord:
    """Check one image and its labels.  Never raises for bad data: problems are recorded on the result.

    ``reader``: how the labels are read (default: a YOLO label file, with ``nc`` the number of class
    names, or None when unknown: then class ids are only checked to be below MAX_CLASS_ID); it is
    given the image's (h, w) as ``shape``.
    """
    reader = YoloReader(nc) if reader is None else reader
    rec = PairRecord(im_file=im_file)
    current = im_file
    try:
        rec.shape, warnings = image_size(im_file)
        rec.problems += [Problem(im_file, w, dropped=False) for w in warnings]
        current = reader.describe(lb_file)
        rec.labels, rec.segments, rec.status, warnings = reader.read(lb_file, rec.shape)
        rec.problems += [Problem(current, w, dropped=False) for w in warnings]
    except _Corrupt as e:
        rec.status = "corrupt"
        rec.labels, rec.segments = np.zeros((0, 5), np.float32), None
        rec.problems.append(Problem(current, str(e), dropped=True))
    except Exception as e:  # one bad file must never stop a scan of a million
        rec.status = "corrupt"
        rec.labels, rec.segments = np.zeros((0, 5), np.float32), None
        rec.problems.append(Problem(current, f"unexpected {type(e).__name__}: {e}", dropped=True))
    return rec
