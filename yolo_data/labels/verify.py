"""Verify one image and its labels -> a :class:`PairRecord` (or a named problem): the image's checks
here, its labels read by the split's format (a :class:`~yolo_data.formats.base.LabelReader`).

Nothing here modifies a file: a JPEG that lacks its end marker is reported, not "restored".  Only
regular files are opened (labelfile.py).  JPEG and PNG are checked from their headers and marker or
chunk structure, never decoded.  The rarer formats (TIFF, WebP, BMP, ...) are decoded once with the
decoder used for training, so the scan keeps only what training can read.

Each record also holds the image's bands and bits a sample (images.bands.ImageBands): from the header
of a JPEG, PNG or TIFF (a few bytes of the file already open), from an unchanged decode of the other
formats.  The record does not depend on a dataset's channels: which images fit them is decided when a
run chooses its images (labels.split.fit_channels), so one scan serves a run of any channels.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, List, Optional, Tuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..formats.base import LabelReader
from ..formats.labelfile import NotRegular, open_regular
from ..formats.problems import LabelError, Problem
from ..formats.sources import IMG_FORMATS
from ..formats.yolotxt import YoloReader
from ..images.bands import ImageBands, decoded_bands, image_bands
from ..images.load import ImageReadError, imread_bgr
# where these were imported from before each format had its module
from ..formats.labelfile import (ASPECT_TOLERANCE, COORD_TOLERANCE, MAX_CLASS_ID, MAX_LABEL_BYTES,  # noqa: F401,E402
                        normalising_size, without_duplicates)
from ..formats.yolotxt import read_labels  # noqa: F401,E402

MIN_IMAGE_SIDE = 10  # YOLOv5 leaves out images below 10 px a side
_MAX_EXIF_BYTES = 16 * 2**20
_EXIF_ORIENTATION = 0x0112
_JPEG_EOI = b"\xff\xd9"
_HEADER_ONLY = ("jpeg", "mpo", "png")  # checked without decoding (an MPO is a JPEG to OpenCV)
_PNG_TRUNCATED = "truncated PNG (ends before its IEND chunk)"


@dataclass
class PairRecord:
    """What the scan learns about one image/label pair.

    ``shape``: (h, w) in pixels after EXIF orientation (NumPy's order, the decoded image's
    ``shape[:2]``).  ``labels``: (n, 5) float32
    [class, x, y, w, h] normalised.  ``segments``: None, or one (k, 2) float32 normalised polygon per
    label row (an empty (0, 2) array for plain box rows).  ``keypoints``: None, or (n, K, 3) float32
    [x, y, visibility] per label row, x and y normalised (pose).  ``status``: 'ok', 'missing' (no label file),
    'empty' (label file without rows) or 'corrupt' (left out).  ``bands``: the image's bands and bits a
    sample (images.bands.ImageBands), None when unknown (a header that does not parse, a corrupt pair).
    """
    im_file: str
    shape: Optional[Tuple[int, int]] = None
    labels: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), np.float32))
    segments: Optional[List[np.ndarray]] = None
    keypoints: Optional[np.ndarray] = None
    status: str = "ok"
    problems: List[Problem] = field(default_factory=list)
    bands: Optional[ImageBands] = None


def _pread(f: BinaryIO, n: int, pos: int) -> bytes:
    """n bytes at pos, without moving or filling f's buffer (one system call on POSIX; an object in a
    bucket reads through its own, which fetches only what it does not hold yet)."""
    if hasattr(f, "pread"):
        return f.pread(n, pos)
    if hasattr(os, "pread"):
        return os.pread(f.fileno(), n, pos)
    f.seek(pos)
    return f.read(n)


def image_size(im_file: str) -> Tuple[Tuple[int, int], List[str]]:
    """(h, w) of an image as OpenCV decodes it (its ``shape[:2]``, EXIF orientation applied), plus
    warnings.  Raises LabelError.

    JPEG and PNG from their headers and structure only; other formats are decoded with the training
    decoder (rare in detection datasets, and Pillow reads TIFFs that OpenCV cannot).
    """
    shape, warnings, _ = image_facts(im_file)
    return shape, warnings


def image_facts(im_file: str) -> Tuple[Tuple[int, int], List[str], Optional[ImageBands]]:
    """(h, w) and warnings as :func:`image_size` gives them, and the image's bands and bits
    (images.bands.ImageBands; None when its header does not say and no decode is made).  Raises
    LabelError."""
    warnings, bands = [], None
    try:
        f, st = open_regular(im_file)
    except NotRegular as e:
        raise LabelError(f"not a regular file ({e.kind})") from None
    except OSError as e:
        raise LabelError(f"cannot read image header ({e})") from None
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
            raise LabelError("not an image PIL can identify (empty, text or damaged file)") from None
        except OSError as e:
            raise LabelError(f"cannot read image header ({e})") from None
        if fmt not in IMG_FORMATS:
            raise LabelError(f"image format {fmt or 'unknown'} is not one of {', '.join(IMG_FORMATS)}")
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
        if fmt in _HEADER_ONLY:
            bands = image_bands(f)
        if orientation in (5, 6, 7, 8):  # transposing orientations: OpenCV decodes it as h x w
            w, h = h, w
        elif orientation not in (None, 1, 2, 3, 4):
            warnings.append(f"invalid EXIF orientation {orientation!r} ignored")
        if fmt not in _HEADER_ONLY:
            # Decode the file already open and checked (through /proc where there is one), not whatever
            # the name may point to by now; the decoded size is the one training sees.
            try:
                # an object in a bucket: its bytes, as training reads them; a TIFF: its bytes too, as
                # training decodes a .tif (decode.imread_bgr: imread fails on some that imdecode takes)
                if hasattr(f, "pread") or fmt == "tiff":
                    data = _pread(f, st.st_size, 0)
                    h, w = imread_bgr(im_file, data=data).shape[:2]
                else:
                    data = None
                    fd_path = f"/proc/self/fd/{f.fileno()}"
                    h, w = imread_bgr(fd_path if os.path.exists(fd_path) else im_file).shape[:2]
            except ImageReadError:
                raise LabelError(f"OpenCV, the decoder used for training, cannot decode this {fmt.upper()} "
                               "image (Pillow reads its header)") from None
            bands = _other_bands(f, st.st_size, fmt, data)
    if w < MIN_IMAGE_SIDE or h < MIN_IMAGE_SIDE:
        raise LabelError(f"image size {w}x{h} is below {MIN_IMAGE_SIDE} pixels a side")
    return (h, w), warnings, bands


def _other_bands(f: BinaryIO, size: int, fmt: str, data: Optional[bytes]) -> Optional[ImageBands]:
    """The bands of an image that is not JPEG or PNG: a TIFF's from its header (its bytes are at hand),
    another format's from an unchanged decode (the training decode of a dataset of other than 1 or 3
    channels: WebP, BMP and the like are rare, and their headers are not read here)."""
    data = _pread(f, size, 0) if data is None else data
    return image_bands(data) or decoded_bands(data, fmt)


def _png_exif(f: BinaryIO, size: int) -> Optional[bytes]:
    """Walk a PNG's chunks (4-byte length, 4-byte type, data, 4-byte CRC) from byte 8 to IEND, reading
    8 bytes a chunk and nothing else -> the data of its first eXIf chunk, or None.  Raises LabelError when
    the file ends before IEND (OpenCV refuses such a file, even when only IEND is missing).

    Wherever the eXIf chunk stands (also after IDAT) OpenCV applies it, and a second one is ignored.
    """
    pos, exif = 8, None
    while True:
        head = _pread(f, 8, pos)
        if len(head) < 8:
            raise LabelError(_PNG_TRUNCATED)
        length, kind = struct.unpack(">I4s", head)
        end = pos + 12 + length
        if end > size:
            raise LabelError(_PNG_TRUNCATED)
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


def _stated_size_warnings(shape: Tuple[int, int]) -> List[str]:
    """A size the labels state, held to the rule a read size is held to.  Raises LabelError."""
    h, w = shape
    if w < MIN_IMAGE_SIDE or h < MIN_IMAGE_SIDE:
        raise LabelError(f"image size {w}x{h} (as stated) is below {MIN_IMAGE_SIDE} pixels a side")
    return []


def verify_pair(im_file: str, lb_file, nc: Optional[int] = None, reader: Optional[LabelReader] = None) -> PairRecord:
    """Check one image and its labels.  Never raises for bad data: problems are recorded on the result.

    ``reader``: how the labels are read (default: a YOLO label file, with ``nc`` the number of class
    names, or None when unknown: then class ids are only checked to be below MAX_CLASS_ID); it is
    given the image's (h, w) as ``shape``.  A reader with ``known_shape(label)`` that gives an (h, w)
    spares reading the image (base.LabelReader); its bands are then unknown until it is decoded.
    """
    reader = YoloReader(nc) if reader is None else reader
    rec = PairRecord(im_file=im_file)
    current = im_file
    try:
        # a format that states the image's size where reading it costs a request (an NDJSON's https
        # images) gives it: the image is not fetched here, and training verifies its decode
        known = getattr(reader, "known_shape", None)
        rec.shape = None if known is None else known(lb_file)
        if rec.shape is None:
            rec.shape, warnings, rec.bands = image_facts(im_file)
        else:
            warnings = _stated_size_warnings(rec.shape)
        rec.problems += [Problem(im_file, w, dropped=False) for w in warnings]
        current = reader.describe(lb_file)
        rec.labels, rec.segments, rec.status, warnings, *points = reader.read(lb_file, rec.shape)
        rec.keypoints = points[0] if points else None
        rec.problems += [Problem(current, w, dropped=False) for w in warnings]
    except LabelError as e:
        rec.status = "corrupt"
        rec.labels, rec.segments, rec.keypoints = np.zeros((0, 5), np.float32), None, None
        rec.problems.append(Problem(current, str(e), dropped=True))
    except OSError as e:  # a read that failed midway (an object whose requests kept failing)
        rec.status = "corrupt"
        rec.labels, rec.segments, rec.keypoints = np.zeros((0, 5), np.float32), None, None
        rec.problems.append(Problem(current, f"cannot be read ({e})", dropped=True))
    except Exception as e:  # one bad file must never stop a scan of a million
        rec.status = "corrupt"
        rec.labels, rec.segments, rec.keypoints = np.zeros((0, 5), np.float32), None, None
        rec.problems.append(Problem(current, f"unexpected {type(e).__name__}: {e}", dropped=True))
    return rec
