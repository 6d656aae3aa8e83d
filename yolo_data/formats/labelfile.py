"""Reading one annotation file safely, for every label format: open only regular files, read at most
:data:`MAX_LABEL_BYTES`, decode text, the size pixel boxes are normalised by, and YOLOv5's removal of
repeated rows.

Only regular files are opened: a FIFO blocks its reader, a device may act on open, /dev/zero never ends.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, List, Optional, Tuple

import numpy as np

from ..storage import backend_for, is_url, remotefile
from .problems import LabelError

# How far past [0, 1] a normalised coordinate may lie: 1% of the image, Ultralytics' tolerance (label
# writers round, and an object at the edge is often drawn a little past it).  Beyond it a row is taken
# as not normalised.  Where it applies to each kind of row: yolotxt.py.
COORD_TOLERANCE = 0.01
MAX_LABEL_BYTES = 16 * 2**20  # about 500,000 box rows; a larger "label file" is the wrong file
MAX_CLASS_ID = 2**24  # class ids are stored as float32, which holds every integer below 2**24 exactly
# A size stated in an annotation file and the image's may differ by rounding when a tool resized the
# photo; a larger change of aspect (a rotated photo, another photo) means the boxes cannot be placed.
ASPECT_TOLERANCE = 0.01
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegular(Exception):
    """The path is a folder, FIFO, device or socket; ``kind`` says which ("a FIFO")."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def open_regular(path: str) -> Tuple[BinaryIO, os.stat_result]:
    """Open a regular file for reading -> (binary file, its fstat).  Raises OSError or NotRegular.

    Anything else is refused before it is opened.  O_NONBLOCK and the fstat cover a file swapped in
    between.  A name holding a NUL byte (Python's ValueError) is an OSError here too, so every reader
    reports it as the file it cannot read.  An object at a URL is a regular file (remotefile.RemoteFile):
    FileNotFoundError when its folder's listing does not show it.
    """
    if is_url(path):
        try:
            backend = backend_for(path)
        except ValueError as e:  # a scheme nobody registered: an entry that cannot be read
            raise FileNotFoundError(errno.ENOENT, str(e).partition(": ")[2], path) from None
        return remotefile.open_object(backend, path)
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
    raise NotRegular(next((kind for test, kind in _FILE_KINDS if test(st.st_mode)), "a special file"))


def read_limited(f: BinaryIO, size: int, what: str) -> bytes:
    """The bytes of an open file whose fstat said ``size``, refusing more than MAX_LABEL_BYTES (raises
    LabelError naming ``what``, e.g. 'label file').  Never reads more than the limit + 1 bytes, also when
    the size was wrong (a /proc file says 0) or the file grew since; and no buffer of the limit's size
    for a small file."""
    if size > MAX_LABEL_BYTES:
        raise LabelError(too_large(what, f"{size:,} bytes"))
    raw = f.read(size + 1)
    if len(raw) > size:
        raw += f.read(MAX_LABEL_BYTES + 1 - len(raw))
    if len(raw) > MAX_LABEL_BYTES:
        raise LabelError(too_large(what, f"more than {MAX_LABEL_BYTES:,} bytes"))
    return raw


def too_large(what: str, size: str) -> str:
    return f"{what} is {size}, over the limit of {MAX_LABEL_BYTES:,} bytes (yolo_data.formats.labelfile.MAX_LABEL_BYTES)"


def without_duplicates(labels: np.ndarray, segments: Optional[List[np.ndarray]], warnings: List[str]):
    """(labels, segments) with repeated rows removed as YOLOv5's loader removes them (unique rows in
    sorted order, so targets stay identical to its own), and a warning added when there were any."""
    first = first_unique(labels, warnings)
    if len(first) == len(labels):
        return labels, segments
    return labels[first], None if segments is None else [segments[i] for i in first]


def first_unique(rows: np.ndarray, warnings: List[str]) -> np.ndarray:
    """Indices of (n, m) ``rows`` without repeats: all of them in order when none repeats, else the
    first of each in sorted order (as YOLOv5 and Ultralytics keep them), with a warning added."""
    if len({row.tobytes() for row in rows + 0.0}) == len(rows):  # + 0.0: -0.0 equals 0.0
        return np.arange(len(rows))
    _, first = np.unique(rows, axis=0, return_index=True)
    warnings.append(f"{len(rows) - len(first)} duplicate label rows removed")
    return first


def normalising_size(stated: Optional[Tuple[float, float]], shape: Tuple[int, int], source: str,
                     missing: str) -> Tuple[Tuple[float, float], List[str]]:
    """The (width, height) an annotation file's pixel boxes are normalised by, and warnings: its
    ``stated`` (width, height), as the file states it and converters use it (None when it gives none:
    then the image's, with the warning ``missing``), checked against the image's ``shape`` (h, w).
    ``source`` names the file in messages ('XML', 'JSON').  Raises LabelError when the aspects differ."""
    h, w = shape  # the image's (h, w); annotation files state width x height
    if stated is None:
        return (float(w), float(h)), [f"{missing}; the image's {w}x{h} is used"]
    sw, sh = stated
    if (sw, sh) == (w, h):
        return (sw, sh), []
    if abs((sw / sh) / (w / h) - 1) > ASPECT_TOLERANCE:
        raise LabelError(f"the {source}'s size {sw:g}x{sh:g} disagrees with the image's {w}x{h} "
                         "(another aspect: rotated or another photo), so its boxes cannot be placed")
    return (sw, sh), [f"the {source}'s size {sw:g}x{sh:g} differs from the image's {w}x{h} (same aspect); "
                      f"boxes normalised by the {source}'s size"]
