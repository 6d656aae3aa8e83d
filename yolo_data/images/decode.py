"""Image files to BGR pixels: JPEGs by simplejpeg where it gives OpenCV's pixels, the rest by OpenCV.

simplejpeg (a dependency; an install without it decodes everything by OpenCV) and OpenCV both decode with
libjpeg-turbo's default (accurate) IDCT and upsampling, so their pixels are the same; simplejpeg gets
there with less around the decode (measured on 640-px photos: 1.43 against 1.79 ms for cv2.imread).
It is used only where that sameness is certain:

- the data is a JPEG (FF D8 FF) whose EXIF orientation (1 to 8) is read for certain from the one
  EXIF block before the image data: OpenCV turns such photos upright, and so does this module
  afterwards, with the same exact flips and transposes; any doubt sends the file to OpenCV;
- simplejpeg decodes it without a warning (``strict``): a damaged file goes to OpenCV, which decodes
  what it can, as it always did;
- a scaled decode (1/2, 1/4, 1/8) has libjpeg's ceil(side / f) size.

Everything else is decoded by cv2.imread, a TIFF by cv2.imdecode of its bytes (OpenCV 5.0's imread
fails on TIFFs it must turn upright, which imdecode decodes).  ``imread_bgr`` is the one way the
package reads an image file.

cv2.imread says None alike for a file it could not read (missing, not permitted, an I/O error) and
for one it read and could not decode.  Only the second is a fact about the file that stays true while
the file is unchanged (failures.py remembers it), so after a None this module reads the bytes itself
and tells the two apart: ImageReadError for a read that failed, ImageDecodeError for bytes read whole
that no decoder takes.
"""
from __future__ import annotations

import logging
import os
import stat
import struct
from typing import Optional, Tuple

import cv2
import numpy as np

from ..storage import backend_for, is_url

JPEG_SIGNATURE = b"\xff\xd8\xff"
JPEG_SUFFIXES = ("jpg", "jpeg")
TIFF_SUFFIXES = ("tif", "tiff")
# libjpeg's scaled decodes: 1/f of each side, rounded up, EXIF orientation applied as in a full decode
REDUCED_FLAGS = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
_FACTORS = {cv2.IMREAD_COLOR: 1, **{flag: f for f, flag in REDUCED_FLAGS.items()}}
_ORIENTATION_TAG = 0x0112
_UNKNOWN = -1  # an orientation this module could not read for certain
_MISSING = object()
LOGGER = logging.getLogger("yolo_data")
_simplejpeg = _MISSING  # the module, None when it is not installed; imported on first use


class ImageReadError(OSError):
    """An image that passed the scan cannot be loaded now: its file could not be read (deleted, not
    permitted, an I/O error, changed while read), or it could not be decoded (ImageDecodeError)."""


class ImageDecodeError(ImageReadError):
    """The whole file was read and no decoder makes an image of it: damaged past its header.  ``size``
    and ``mtime_ns``: the version of the file that was read."""

    def __init__(self, path: str, size: int, mtime_ns: int):
        super().__init__(f"{path}: image cannot be decoded (all {size} bytes read: damaged, or not an image "
                         "OpenCV decodes)")
        self.path, self.size, self.mtime_ns = path, size, mtime_ns


def simplejpeg_module():
    """The simplejpeg module, or None when it is not installed or will not import (imported once per
    process).  A broken install (say, a wheel built for another NumPy) is an optional speed-up lost,
    never a stopped run: one warning names the error, and OpenCV decodes everything."""
    global _simplejpeg
    if _simplejpeg is _MISSING:
        try:
            import simplejpeg
        except Exception as e:  # noqa: BLE001  (an extension module can fail to load in many ways)
            if not (isinstance(e, ImportError) and e.name == "simplejpeg"):  # installed, but will not load
                LOGGER.warning(f"simplejpeg is installed but does not import ({type(e).__name__}: {e}); "
                               "JPEGs are decoded by OpenCV")
            simplejpeg = None
        _simplejpeg = simplejpeg
    return _simplejpeg


def use_simplejpeg(enabled: bool = True) -> None:
    """Decode JPEGs with simplejpeg where it is installed (True, the default) or leave every file to
    OpenCV (False), in this process and in DataLoader workers started after the call.  The pixels are
    the same either way: for measuring the difference, or ruling simplejpeg out."""
    global _simplejpeg
    _simplejpeg = _MISSING if enabled else None


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1..8 as stored) of JPEG ``data``, 1 when it has no EXIF block or the block
    has no orientation, or -1 when it cannot be told for certain: more than one EXIF block, a block or
    marker sequence that does not parse, or an orientation not stored as one SHORT."""
    pos, found = 2, None
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return _UNKNOWN
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: no metadata after this
            break
        (length,) = struct.unpack_from(">H", data, pos + 2)
        segment = data[pos + 4:pos + 2 + length]
        if length < 2 or len(segment) != length - 2:
            return _UNKNOWN
        if marker == 0xE1 and segment.startswith(b"Exif"):
            if found is not None:
                return _UNKNOWN
            found = _tiff_orientation(segment[6:]) if segment.startswith(b"Exif\x00\x00") else _UNKNOWN
        pos += 2 + length
    return 1 if found is None else found


def _tiff_orientation(tiff: bytes) -> int:
    """Orientation in IFD0 of an EXIF TIFF structure: 1 when absent, -1 when unreadable."""
    try:
        order = {b"II": "<", b"MM": ">"}[tiff[:2]]
        magic, ifd = struct.unpack_from(order + "HI", tiff, 2)
        if magic != 42:
            return _UNKNOWN
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for k in range(count):
            tag, kind, n = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * k)
            if tag == _ORIENTATION_TAG:
                if kind != 3 or n != 1:
                    return _UNKNOWN
                return struct.unpack_from(order + "H", tiff, ifd + 2 + 12 * k + 8)[0]
    except (KeyError, struct.error):
        return _UNKNOWN
    return 1


def decode_jpeg(data: bytes, factor: int = 1) -> Optional[np.ndarray]:
    """(h, w, 3) uint8 BGR of JPEG ``data`` decoded by simplejpeg at 1/``factor`` scale (1, 2, 4 or 8:
    libjpeg's ceil(side / factor)) and turned upright by its EXIF orientation, or None where
    simplejpeg is not installed or might not give OpenCV's pixels (see the module docstring): the
    caller then decodes with OpenCV."""
    sj = simplejpeg_module()
    if sj is None or not data.startswith(JPEG_SIGNATURE):
        return None
    upright = _UPRIGHT.get(exif_orientation(data))
    if upright is None:
        return None
    try:
        if factor == 1:
            return upright(sj.decode_jpeg(data, "BGR"))
        h, w = sj.decode_jpeg_header(data)[:2]
        size = (-(-h // factor), -(-w // factor))
        im = sj.decode_jpeg(data, "BGR", min_height=size[0], min_width=size[1])
    except Exception:  # noqa: BLE001
        # libjpeg warned or failed (damaged, truncated, ...), or anything else went wrong in the
        # optional decoder: OpenCV's turn, as without simplejpeg
        return None
    return upright(im) if im.shape[:2] == size else None


# EXIF orientation -> what turns the stored pixels upright, as OpenCV does after its decode (each an
# exact permutation of pixels; tests compare all eight with cv2.imread)
_UPRIGHT = {
    1: lambda im: im,
    2: lambda im: cv2.flip(im, 1),
    3: lambda im: cv2.flip(im, -1),
    4: lambda im: cv2.flip(im, 0),
    5: cv2.transpose,
    6: lambda im: cv2.rotate(im, cv2.ROTATE_90_CLOCKWISE),
    7: lambda im: cv2.flip(cv2.transpose(im), -1),
    8: lambda im: cv2.rotate(im, cv2.ROTATE_90_COUNTERCLOCKWISE),
}


def imread_bgr(path: str, flags: int = cv2.IMREAD_COLOR, data: Optional[bytes] = None) -> np.ndarray:
    """(h, w, 3) uint8 BGR with EXIF orientation applied, as cv2.imread(path, ``flags``) decodes it (as
    YOLOv5: gray, RGBA and 16-bit images come out as 8-bit BGR).  ``flags``: IMREAD_COLOR, or one of
    REDUCED_FLAGS (any other IMREAD_* flag is OpenCV's decode alone: bands.py reads grayscale through
    it, an (h, w) array then).  Raises ImageReadError naming the file when it cannot be read, ImageDecodeError when
    it was read whole and cannot be decoded.

    A .jpg/.jpeg file goes to simplejpeg first when it is installed (see ``decode_jpeg``); whatever it
    leaves is cv2.imread's, which also decodes what it can of a truncated JPEG (imdecode of the same
    bytes refuses it).  cv2.imread takes the path as UTF-8 and crashes the process on a name with lone
    surrogates (bytes that are not UTF-8): such files are read here and given to cv2.imdecode.

    ``data``: the file's bytes, already read (an object in a bucket, fetched with its batch); then the
    file is not read again.  A URL (``s3://``, any registered scheme) is always decoded from its bytes
    (cv2.imdecode, whose pixels are cv2.imread's for every complete image)."""
    path = os.fspath(path)
    try:  # (bytes at hand, or in a bucket: cv2.imread has no file to read)
        utf8 = os.fsencode(path) == path.encode("utf-8") and data is None and not is_url(path)
    except UnicodeEncodeError:
        utf8 = False
    im = read = None
    if data is not None:
        read = data, _BytesStat(len(data))
    elif is_url(path):
        read = read_whole(path)
    suffix = path.rpartition(".")[2].lower()
    if flags in _FACTORS and suffix in JPEG_SUFFIXES and simplejpeg_module():
        read = read or read_whole(path)
        im = decode_jpeg(read[0], _FACTORS[flags]) if read[0] else None
    # A TIFF goes to imdecode first: OpenCV 5.0's imread fails on a TIFF it must turn upright (EXIF
    # orientation 5 to 8), with 4 lines of error on stderr on every read, where imdecode of the same
    # bytes decodes it; for every TIFF imread decodes, imdecode gives its pixels (tests/labels/test_bad_inputs.py).
    if im is None and utf8 and suffix not in TIFF_SUFFIXES:
        im = cv2.imread(path, flags)
    if im is None:
        data, st = read or read_whole(path)  # a file that cannot be read raises ImageReadError here
        im = _imdecode(data, flags)
        if im is None and utf8:
            # imread's None may have been a read that failed for a moment, of a file that imdecode
            # refuses and imread takes (a truncated JPEG): its word decides once the bytes are there
            im = cv2.imread(path, flags)
        if im is None:
            raise ImageDecodeError(path, st.st_size, st.st_mtime_ns)
    return im


class _BytesStat:
    """What read_whole's callers ask of a stat_result, for bytes that came from a bucket."""

    def __init__(self, size: int):
        self.st_size, self.st_mtime_ns = size, 0


def _imdecode(data: bytes, flags: int) -> Optional[np.ndarray]:
    try:
        return cv2.imdecode(np.frombuffer(data, np.uint8), flags) if data else None
    except cv2.error:  # as cv2.imread: undecodable is None
        return None


def read_whole(path: str) -> Tuple[bytes, os.stat_result]:
    """(all bytes of the file, its stat).  Raises ImageReadError naming the file and the reason when it
    cannot be read whole: missing, not permitted, not a regular file, an I/O error, or changed (size or
    modification time) while it was read.  An object at a URL is fetched through the backend of the
    storage in use (``backend_for``), with its retries."""
    if is_url(path):
        try:
            data = backend_for(path).read(path, cached=True)
        except (OSError, ValueError) as e:  # (ValueError: a scheme nobody registered)
            raise ImageReadError(f"{path}: image cannot be read ({getattr(e, 'strerror', None) or e})") from None
        return data, _BytesStat(len(data))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ImageReadError(f"{path}: image cannot be read ({e.strerror or e})") from None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise ImageReadError(f"{path}: image cannot be read (not a regular file)")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            data = f.readall()
        after = os.fstat(fd)
    except ImageReadError:
        raise
    except OSError as e:
        raise ImageReadError(f"{path}: image cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        raise ImageReadError(f"{path}: image cannot be read (it changed while it was read)")
    return data, after
