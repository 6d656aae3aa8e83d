"""Image files to pixels of any number of channels: grayscale, colour, multi-page TIFF bands, 16 bits.

A dataset of C channels reads every image to (h, w, C), following how Ultralytics 8.4 reads a dataset
whose yaml says ``channels: C``:

- C = 3: ``decode.imread_bgr``, exactly as every dataset is read without a ``channels`` key;
- C = 1: OpenCV's grayscale decode (IMREAD_GRAYSCALE; EXIF orientation applied): a colour JPEG or PNG
  becomes luma as OpenCV makes it (libjpeg's Y plane, libpng's RGB to gray), as Ultralytics converts it;
- any other C: the file's own bands, unconverted (IMREAD_UNCHANGED, which applies no EXIF orientation,
  as in Ultralytics): a TIFF whose first page has several channels gives that page; a TIFF of two or
  more pages of one size, one band a page, gives its pages stacked in page order; anything else gives
  what OpenCV decodes (a BGRA or gray+alpha PNG: 4 channels, BGRA; a gray image: 1).

16-bit samples become 8-bit by their high byte (v >> 8), the rule of Ultralytics and of OpenCV's own
colour and grayscale decodes, unless ``keep16`` asks for uint16.  Nothing is converted beyond that: an
image whose bands are not C (a 10-page TIFF in a 1-channel dataset, a JPEG in a 4-channel one), or that
is not 16-bit where ``keep16`` asks for it, raises ImageBandsError naming the file, what it holds and
the C asked for.  It is an ImageDecodeError (a fact about the file while it is unchanged), so a scan
leaves such an image out and a training run takes another in its place, as for a damaged file.  At
C = 1 a colour image of one page (gray, colour, colour and alpha) is converted, as Ultralytics converts
it; a multi-page TIFF of bands is not.  OpenCV decodes at most 4 channels in one TIFF page: bands stored
in one page (more than 4 samples a pixel) are named too, never read in part; store one band a page.

``image_bands`` tells from a file's header (PNG, JPEG, TIFF) how many bands the decode above gives,
without decoding, for a scan to check a dataset's images cheaply (``decoded_bands`` tells it from a
decode, for the other formats).  ``fits`` is the one rule of which images a dataset of C channels
reads: ``imread_bands`` refuses what it refuses, and the scan leaves those images out before training
(labels.split.fit_channels).  At C = 1 and C = 3 a TIFF whose pages are bands (or one page of more
than 4 samples) is refused: reading its first page as gray or colour would drop its other bands.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional, Tuple, Union

import cv2
import numpy as np

from ..storage import is_url
from .decode import REDUCED_FLAGS, ImageDecodeError, ImageReadError, imread_bgr, read_whole

# libjpeg's scaled grayscale decodes (as decode.REDUCED_FLAGS for colour)
REDUCED_GRAY_FLAGS = {2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
                      8: cv2.IMREAD_REDUCED_GRAYSCALE_8}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TIFF_SIGNATURES = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic and BigTIFF
MAX_TIFF_PAGES = 4096  # a chain of IFDs longer than this (or one that loops) is not a band stack we read
_PNG_BANDS = {0: 1, 2: 3, 3: 3, 4: 4, 6: 4}  # colour type -> channels OpenCV gives unchanged (LA -> BGRA)


@dataclass(frozen=True)
class ImageBands:
    """What an image file holds, from its header.  ``bands``: the channels a decode for a dataset of
    that many channels gives (see the module docstring); ``bits``: bits a sample as stored (8 or 16;
    1, 2 or 4 for low-depth PNG and TIFF, which decode to 8; 12 for a 12-bit JPEG; 32 or 64 for float
    TIFFs); ``pages``: True when the bands are the pages of a multi-page TIFF; ``fmt``: 'png', 'jpeg' or
    'tiff'; ``samples``: samples a pixel of the first page as stored."""
    bands: int
    bits: int
    pages: bool
    fmt: str
    samples: int = 1


class ImageBandsError(ImageDecodeError):
    """An image whose bands or bit depth do not fit the dataset: ``bands`` it holds, ``bits`` a sample,
    ``channels`` the dataset's (``path``, ``size``, ``mtime_ns`` as ImageDecodeError's)."""

    def __init__(self, path: str, size: int, mtime_ns: int, bands: int, bits: int, channels: int, why: str):
        ImageReadError.__init__(self, f"{path}: {misfit_message(bands, bits, channels, why)}")
        self.path, self.size, self.mtime_ns = path, size, mtime_ns
        self.bands, self.bits, self.channels = bands, bits, channels


def misfit_message(bands: int, bits: int, channels: int, why: str) -> str:
    """What is said of an image that does not fit a dataset (``why``: as :func:`fits` says it), by a
    decode (ImageBandsError) and by a scan alike: 'image has 10 bands of 8 bits, the dataset 3
    channels: ...'."""
    return (f"image has {bands} band{'s' * (bands != 1)} of {bits} bits, "
            f"the dataset {channels} channel{'s' * (channels != 1)}: {why}")


def fits(info: Optional[ImageBands], channels: int, keep16: bool = False) -> Optional[str]:
    """Whether a dataset of ``channels`` channels reads the image ``info`` describes (see the module
    docstring): None when it does, else why not.  ``keep16``: 16-bit samples are kept, so only 16-bit
    images fit.  An image whose bands are unknown (``info`` None, or 0 bands) fits: its decode tells.

    The one rule: imread_bands refuses exactly what this refuses (and names the rare file whose header
    says one thing and its decode another), and the scan leaves those images out before training.

    Args:
        info: the image's ImageBands (image_bands from its header, or decoded_bands), or None.
        channels: the dataset's channels (1, 3, or any other count of bands).
        keep16: whether 16-bit samples are kept (else they become 8-bit by their high byte).

    Returns:
        None, or the reason as text (the end of :func:`misfit_message`).
    """
    if info is None or info.bands < 1:
        return None
    if info.samples > 4:
        return f"{info.samples} samples a pixel in one page (OpenCV reads up to 4): store one band a page"
    if channels in (1, 3) and info.pages:
        return ("its bands are TIFF pages, and a multi-band image is not converted to "
                + ("gray" if channels == 1 else "colour"))
    if keep16 and info.bits != 16:
        return "16-bit samples asked (keep16)"
    if channels in (1, 3):  # OpenCV's gray and colour decodes convert every other depth to 8 bits
        return None
    if info.bits > 16:
        return f"{info.bits}-bit samples are not read (8 or 16-bit only)"
    if info.bands != channels:
        return "not converted, the bands of a dataset are its own"
    return None


def image_bands(source: Union[bytes, str, BinaryIO]) -> Optional[ImageBands]:
    """ImageBands of a PNG, JPEG or TIFF from its header (``source``: the file's bytes, a path, or a
    binary file open for reading), reading only the header (a TIFF: each page's directory, wherever it
    is in the file); None for another format or a header that does not parse (a decode tells then).
    Raises OSError when a path cannot be read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _bands(lambda pos, n: data[pos:pos + n])
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return image_bands(f)
    f = source

    def read(pos: int, n: int) -> bytes:
        f.seek(pos)
        return f.read(n)
    return _bands(read)


def _bands(read: Callable[[int, int], bytes]) -> Optional[ImageBands]:
    head = read(0, 64)
    try:
        if head.startswith(PNG_SIGNATURE):
            return _png_bands(read, head)
        if head.startswith(b"\xff\xd8\xff"):
            return _jpeg_bands(read)
        if head[:4] in TIFF_SIGNATURES:
            return _tiff_bands(read, head)
    except (struct.error, KeyError, ValueError, IndexError):
        return None
    return None


def _png_bands(read, head: bytes) -> Optional[ImageBands]:
    """IHDR's bit depth and colour type, and a tRNS chunk before the pixel data (OpenCV adds alpha for it
    to a colour or palette image)."""
    if head[12:16] != b"IHDR":
        return None
    bits, colour = head[24], head[25]
    bands = _PNG_BANDS[colour]
    pos = 8
    while colour in (2, 3) and pos < 2**31:
        length, kind = struct.unpack(">I4s", read(pos, 8))
        if kind == b"tRNS":
            bands = 4
        if kind in (b"IDAT", b"IEND"):
            break
        pos += 12 + length
    return ImageBands(bands, bits, False, "png", bands)


def _jpeg_bands(read) -> Optional[ImageBands]:
    """The frame header's precision and components (OpenCV decodes 1 component to gray, 3 or 4 to BGR)."""
    pos = 2
    while True:
        marker = read(pos, 4)
        if len(marker) < 4 or marker[0] != 0xFF:
            return None
        if marker[1] == 0xFF:
            pos += 1
            continue
        kind = marker[1]
        if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):  # a start of frame
            frame = read(pos + 4, 6)
            samples = frame[5]
            return ImageBands(1 if samples == 1 else 3, frame[0], False, "jpeg", samples)
        if kind in (0xD8, 0x01) or 0xD0 <= kind <= 0xD7:
            pos += 2
            continue
        if kind in (0xDA, 0xD9):
            return None
        pos += 2 + struct.unpack(">H", marker[2:])[0]


def _tiff_bands(read, head: bytes) -> Optional[ImageBands]:
    """Each page's size, samples and bits, walking the chain of directories (classic or BigTIFF)."""
    order = "<" if head[:2] == b"II" else ">"
    big = head[2:4] in (b"+\x00", b"\x00+")
    count_fmt, entry_size, off_fmt = ("Q", 20, "Q") if big else ("H", 12, "I")
    offset = struct.unpack_from(order + off_fmt, head, 8 if big else 4)[0]
    pages, seen = [], set()
    while offset and offset not in seen and len(pages) < MAX_TIFF_PAGES:
        seen.add(offset)
        n_size = 8 if big else 2
        (count,) = struct.unpack(order + count_fmt, read(offset, n_size))
        table = read(offset + n_size, count * entry_size + (8 if big else 4))
        tags = {}
        for k in range(count):
            tag, kind, n = struct.unpack_from(order + ("HHQ" if big else "HHI"), table, k * entry_size)
            value_at = k * entry_size + (12 if big else 8)
            size = {1: 1, 3: 2, 4: 4, 16: 8}.get(kind)
            if size is None or tag not in (256, 257, 258, 262, 277, 339):
                continue
            fmt = order + {1: "B", 3: "H", 4: "I", 16: "Q"}[kind]
            raw = table[value_at:value_at + size] if n * size <= (8 if big else 4) else read(
                struct.unpack_from(order + off_fmt, table, value_at)[0], size)
            tags[tag] = struct.unpack(fmt, raw)[0]  # the first value (bits: the first sample's)
        pages.append((tags[256], tags[257], tags.get(277, 1), tags.get(258, 1), tags.get(262, 1)))
        (offset,) = struct.unpack_from(order + off_fmt, table, count * entry_size)
    if not pages:
        return None
    w, h, samples, bits, photometric = pages[0]
    if samples > 1:
        return ImageBands(samples, bits, False, "tiff", samples)
    if photometric == 3:  # a palette: OpenCV gives its colours
        return ImageBands(3, bits, False, "tiff", samples)
    stacked = len(pages) > 1 and all(p[:4] == pages[0][:4] for p in pages)
    return ImageBands(len(pages) if stacked else 1, bits, stacked, "tiff", samples)


def decoded_bands(data: bytes, fmt: str) -> Optional[ImageBands]:
    """ImageBands of an image in ``data`` as the decode of a dataset of other than 1 or 3 channels
    gives it (its channels and sample size; ``pages`` False: a decode does not say where bands came
    from), for a format whose header image_bands does not read (``fmt``: its name, e.g. 'webp').
    None when OpenCV cannot decode it.  A whole decode: only for the rare formats."""
    im = _unchanged(data)
    if im is None:
        return None
    bands = im.shape[2] if im.ndim == 3 else 1
    return ImageBands(bands, im.dtype.itemsize * 8, False, fmt, bands)


def imread_bands(path: str, channels: int = 3, keep16: bool = False, data: Optional[bytes] = None,
                 factor: int = 1) -> np.ndarray:
    """(h, w, ``channels``) of the image at ``path`` as a dataset of that many channels reads it (see
    the module docstring): uint8, or uint16 with ``keep16``; at channels = 3 (and not keep16) the
    pixels of ``imread_bgr(path)``, BGR, for every image that fits (see :func:`fits`).

    Args:
        path: the image file (or URL: then its bytes are fetched, as imread_bgr's).
        channels: the dataset's channels (1, 3, or any other count of bands).
        keep16: keep 16-bit samples as uint16; an image that is not 16-bit is then an ImageBandsError.
        data: the file's bytes, already read; the file is not read again.
        factor: 2, 4 or 8 for libjpeg's scaled decode of a JPEG (channels 1 or 3 only; see
            load.load_image), 1 for a full decode.

    Returns:
        (h, w, channels) uint8 (uint16 with keep16), C-contiguous.

    Raises:
        ImageReadError: the file cannot be read.  ImageDecodeError: read whole and not decodable.
        ImageBandsError: its bands or bit depth do not fit ``channels`` / ``keep16`` (:func:`fits`).
    """
    path = os.fspath(path)
    if channels in (1, 3):
        return _gray_or_colour(path, channels, keep16, data, factor)
    data, st = (data, None) if data is not None else read_whole(path)
    info = image_bands(data)
    why = fits(info, channels, keep16)
    if why is not None:
        raise _bands_error(path, data, st, info.bands, info.bits, channels, why)
    im = _unchanged(data)
    if im is None:
        raise ImageDecodeError(path, len(data), st.st_mtime_ns if st else 0)
    im = im[..., None] if im.ndim == 2 else im
    im = _depth(path, data, st, im, channels, keep16)
    if im.shape[2] != channels:
        raise _bands_error(path, data, st, im.shape[2], im.dtype.itemsize * 8, channels,
                           "not converted, the bands of a dataset are its own")
    return np.ascontiguousarray(im)


def _unchanged(data: bytes) -> Optional[np.ndarray]:
    """OpenCV's unchanged decode of ``data`` (a TIFF: see _tiff_unchanged), or None."""
    im = _tiff_unchanged(data) if data[:4] in TIFF_SIGNATURES else None
    if im is None:
        try:
            im = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) if data else None
        except cv2.error:
            im = None
    return im


def _tiff_unchanged(data: bytes) -> Optional[np.ndarray]:
    """A TIFF's first page when it has channels of its own, else its pages stacked in page order when
    there are several of one shape, else None (decoded as one image then)."""
    try:
        ok, frames = cv2.imdecodemulti(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error:
        return None
    if not ok or not frames:
        return None
    if frames[0].ndim == 3:
        return frames[0]
    if len(frames) > 1 and all(f.shape == frames[0].shape and f.dtype == frames[0].dtype for f in frames):
        return np.stack(frames, axis=2)
    return None


def _depth(path, data, st, im: np.ndarray, channels: int, keep16: bool) -> np.ndarray:
    """``im`` as uint8 (16-bit by its high byte), or kept uint16 with keep16; anything else is named."""
    if keep16 and im.dtype == np.uint16 or not keep16 and im.dtype == np.uint8:
        return im
    if not keep16 and im.dtype == np.uint16:
        return (im >> 8).astype(np.uint8)
    bits = im.dtype.itemsize * 8
    why = "16-bit samples asked (keep16)" if keep16 else f"{im.dtype} samples are not read (8 or 16-bit only)"
    raise _bands_error(path, data, st, im.shape[2], bits, channels, why)


def _bands_error(path, data, st, bands, bits, channels, why) -> ImageBandsError:
    return ImageBandsError(path, len(data) if data is not None else 0, st.st_mtime_ns if st else 0,
                           bands, bits, channels, why)


def _header(path: str, data: Optional[bytes]) -> Optional[ImageBands]:
    """image_bands of ``data``, else of the file's header (a few small reads); None when the file
    cannot be opened (the decode then says why)."""
    if data is not None:
        return image_bands(data)
    try:
        return image_bands(path)
    except (OSError, ValueError):  # (ValueError: a name with a NUL byte)
        return None


def _gray_or_colour(path: str, channels: int, keep16: bool, data: Optional[bytes], factor: int) -> np.ndarray:
    """Channels 1 or 3: OpenCV's grayscale or colour decode (imread_bgr's path, simplejpeg and all),
    after the header is checked (see :func:`fits`: a TIFF whose pages are bands is named, not read in
    part; with keep16 only 16-bit images)."""
    if data is None and is_url(path):
        data = read_whole(path)[0]
    info = _header(path, data)
    why = fits(info, channels, keep16)
    if why is not None:
        size, mtime = (len(data), 0) if data is not None else _size_mtime(path)
        raise ImageBandsError(path, size, mtime, info.bands, info.bits, channels, why)
    if channels == 3 and not keep16:
        return imread_bgr(path, REDUCED_FLAGS[factor] if factor > 1 else cv2.IMREAD_COLOR, data)
    if channels == 1:
        flags = REDUCED_GRAY_FLAGS[factor] if factor > 1 else cv2.IMREAD_GRAYSCALE
    else:
        flags = cv2.IMREAD_COLOR
    im = imread_bgr(path, flags | (cv2.IMREAD_ANYDEPTH if keep16 else 0), data)
    im = im[..., None] if im.ndim == 2 else im
    if keep16 and im.dtype != np.uint16:
        raise ImageBandsError(path, *((len(data), 0) if data is not None else _size_mtime(path)), im.shape[2],
                              im.dtype.itemsize * 8, channels, "16-bit samples asked (keep16)")
    return im


def _size_mtime(path: str) -> Tuple[int, int]:
    """(size, mtime_ns) of the file at ``path``, as ImageDecodeError records them; (0, 0) when gone."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return 0, 0
    return st.st_size, st.st_mtime_ns
