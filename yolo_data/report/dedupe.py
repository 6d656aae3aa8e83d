"""Duplicate images within and across splits: byte-identical files, and the same picture re-encoded
(another JPEG quality, PNG against JPEG) or resized.

Two steps, each a function of plain arrays:

* ``fingerprint_images``: each file is read once; its bytes are hashed (SHA-256, first 16 bytes) and
  decoded from the same buffer to a small grayscale picture, from which two 64-bit perceptual hashes
  are made: a DCT hash (the signs of the 8x8 lowest frequencies of a 32x32 thumbnail against their
  median) and a gradient hash (is each pixel of a 9x8 thumbnail darker than its right neighbour, by a
  margin).  Both survive re-encoding and resizing, and they fail on different pictures, so a near
  match must hold for both.  A flat picture (one colour: a black, white or gray frame) is marked: its
  hashes describe nothing (a black and a white frame differ in one bit), so only its bytes are matched.
* ``find_duplicates``: groups of files that are one picture.  Byte-identical files are grouped by
  digest; near matches (both hashes within their Hamming bounds) are found by multi-index hashing,
  never by comparing all pairs (1,000,000 images: see benchmarks/speed/bench_duplicates.py).

EXIF orientation is applied before hashing, as the dataset applies it when it decodes
(decode.imread_bgr): the hashes describe the picture the model sees.  A photo stored sideways with an
orientation tag and the same photo stored upright are therefore one picture; a copy rotated for real is
another picture to the model (its boxes move), and is not grouped.

``labels_agree`` tells whether two duplicates carry the same boxes, so that a report can name
duplicates whose labels disagree.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from ..images.decode import ImageReadError, read_whole
from ..storage import carried
from .nearpairs import MAX_DHASH_DISTANCE, MAX_DISTANCE, near_pairs

Progress = Callable[[int, int], None]  # (done, total), as scan.Progress
LOGGER = logging.getLogger("yolo_data")

DIGEST_BYTES = 16
_THUMB = 32  # side of the thumbnail the DCT hash is taken of
_MIN_SIDE = 64  # smallest side a reduced decode keeps: twice the DCT thumbnail, so that it is shrunk, never enlarged
_FLAT = 2.0  # gray levels a step must exceed to count as an edge in the gradient hash
# a picture whose DCT thumbnail spreads less than this (standard deviation, gray levels of 255) is flat: its
# gradient hash is all zeros and its DCT bits follow compression noise.  Measured: 1,126 photos of coco128,
# BCCD, tiger-pose and pen-obb spread 10.7 or more; black, gray and white frames with sensor noise 0.3 or less;
# a black frame with a time stamp drawn on it 4.7 (it has a picture, and is compared)
FLAT_STD = 2.0
_CHUNK = 64  # files per thread-pool task: amortises the future's cost over many files


@dataclass
class ImagePrints:
    """Fingerprints of n image files, as flat arrays in the order of the paths.

    digest: (n, 16) uint8, the first 16 bytes of the SHA-256 of the file's bytes.  phash: (n,) uint64 DCT hash.  dhash: (n,) uint64
    gradient hash.  ok: (n,) bool, False where the file could not be read or decoded (its digest and
    hashes are then zeros and mean nothing); ``errors``: index -> message naming the file.  flat: (n,)
    bool, True where the picture is flat (``is_flat``: its hashes carry no information, so only its bytes
    are compared), or None when no picture is."""

    digest: np.ndarray
    phash: np.ndarray
    dhash: np.ndarray
    ok: np.ndarray
    errors: Dict[int, str] = field(default_factory=dict)
    flat: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.ok)

    def take(self, index: np.ndarray) -> "ImagePrints":
        """The fingerprints of rows ``index`` ((k,) int), in that order, errors renumbered."""
        arrays = {f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)
                  if isinstance(getattr(self, f.name), np.ndarray)}
        back = {int(old): new for new, old in enumerate(index.tolist())}
        errors = {back[i]: msg for i, msg in self.errors.items() if i in back}
        return dataclasses.replace(self, **arrays, errors=errors)


@dataclass
class DuplicateGroup:
    """Files that are one picture.  kind: 'identical' when every member has the same bytes, else
    'similar'.  members: (split name, index in that split, path), sorted."""

    kind: str
    members: List[Tuple[str, int, str]]

    @property
    def splits(self) -> List[str]:
        """The splits the members are in, sorted, each once."""
        return sorted({m[0] for m in self.members})

    @property
    def across(self) -> bool:
        """Members in more than one split: the same picture in train and val (or test) leaks."""
        return len(self.splits) > 1


# -- fingerprints -------------------------------------------------------------------------------------
def default_workers() -> int:
    """Threads for fingerprinting: the decode and hashing release the GIL, beyond 8 the disk decides."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return min(8, cores)


def _bits_to_uint64(bits: np.ndarray) -> np.uint64:
    """64 booleans (first = most significant bit) -> one uint64."""
    return np.packbits(bits.reshape(64)).view(">u8")[0].astype(np.uint64)


def _thumbnail(gray: np.ndarray) -> np.ndarray:
    return cv2.resize(gray.astype(np.float32), (_THUMB, _THUMB), interpolation=cv2.INTER_AREA)


def is_flat(gray: np.ndarray) -> bool:
    """Whether (h, w) uint8 grayscale picture ``gray`` is flat: the 32x32 thumbnail the DCT hash is
    taken of has a standard deviation below FLAT_STD gray levels (a black, white or gray frame, with or
    without sensor noise).  Its hashes are then the same for every flat picture of a shade, or noise, so
    they cannot tell a copy from another frame."""
    return bool(_thumbnail(gray).std() < FLAT_STD)


def dct_hash(gray: np.ndarray) -> np.uint64:
    """64-bit DCT hash of a (h, w) uint8 grayscale picture.

    The 8x8 lowest frequencies of a 32x32 thumbnail carry the layout of the picture and little of what
    re-encoding and resizing change.  Each AC coefficient gives a bit: above the median of the 63 AC
    coefficients (a median, so a change of contrast keeps the bits).  The DC term is nearly always above
    that median, so its bit says something else: is the picture brighter than mid-gray."""
    thumb = _thumbnail(gray)
    low = cv2.dct(thumb)[:8, :8].reshape(64)
    bits = low > np.median(low[1:])
    bits[0] = thumb.mean() > 127.5
    return _bits_to_uint64(bits)


def gradient_hash(gray: np.ndarray) -> np.uint64:
    """64-bit gradient hash of a (h, w) uint8 grayscale picture: each of the 8x8 bits is set where a
    pixel of a 9x8 (w x h) thumbnail is darker than its right neighbour by more than _FLAT gray levels.
    It sees local edges where the DCT hash sees the global layout, so a pair of different pictures
    rarely fools both.  Without the margin, flat areas (a plain background) gave bits that re-encoding
    flips at will: 31 of 64 bits moved on one synthetic picture saved as PNG."""
    thumb = cv2.resize(gray.astype(np.float32), (9, 8), interpolation=cv2.INTER_AREA)
    return _bits_to_uint64(thumb[:, 1:] - thumb[:, :-1] > _FLAT)


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_REDUCED_GRAY = {8: cv2.IMREAD_REDUCED_GRAYSCALE_8, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
                 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 1: cv2.IMREAD_GRAYSCALE}


def jpeg_size(data: bytes) -> Optional[Tuple[int, int]]:
    """(height, width) from the frame header of JPEG ``data``, or None when it is not a JPEG or the markers before the
    frame header do not parse.  Reads the header only: the size picks the decode scale before anything is decoded."""
    if not data.startswith(b"\xff\xd8"):
        return None
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            pos += 2
            continue
        if marker in _SOF:
            return int.from_bytes(data[pos + 5:pos + 7], "big"), int.from_bytes(data[pos + 7:pos + 9], "big")
        if marker in (0xDA, 0xD9):  # scan data or the end before any frame header
            return None
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return None


def decode_small_gray(data: bytes) -> Optional[np.ndarray]:
    """(h, w) uint8 grayscale of encoded image ``data``, EXIF orientation applied, or None when OpenCV cannot decode
    it.  A JPEG is decoded at 1/8, 1/4 or 1/2 of each side, the smallest scale that keeps _MIN_SIDE pixels: libjpeg
    then averages whole blocks in its IDCT instead of making every pixel.  Anything else is decoded whole.  The hashes
    shrink the picture by area averaging after this, so the scale chosen (which differs between a photo and its
    resized copy) hardly moves them; a reduced decode of a PNG is not used, as OpenCV shrinks it another way
    (measured: up to 10 DCT-hash bits from the JPEG it was saved from, against 0 here)."""
    buf = np.frombuffer(data, np.uint8)
    size = jpeg_size(data)
    factor = 1
    if size is not None and min(size) > 0:
        factor = max(f for f in (8, 4, 2, 1) if f == 1 or min(size) // f >= _MIN_SIDE)
    try:
        im = cv2.imdecode(buf, _REDUCED_GRAY[factor])
        if im is None and factor > 1:  # a header that lied, or a damaged file: the plain decode decides
            im = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    except cv2.error:
        return None
    return im


def _print_one(path: str):
    """(digest bytes, phash, dhash, flat) of one file, or the message naming why it has none."""
    try:
        data, _ = read_whole(path)
    except ImageReadError as e:
        return str(e)
    gray = decode_small_gray(data)
    if gray is None or gray.size == 0:
        return f"{path}: image cannot be decoded ({len(data)} bytes read)"
    # SHA-256 rather than BLAKE2b: CPUs with SHA extensions hash it 2.5x faster (0.18 against 0.43 ms for
    # a 162 KB photo here); 16 of its bytes keep chance collisions out of reach (about 2^-65 at 2^32 files)
    digest = hashlib.sha256(data).digest()[:DIGEST_BYTES]
    return digest, dct_hash(gray), gradient_hash(gray), is_flat(gray)


def _print_chunk(paths: Sequence[str]) -> list:
    return [_print_one(p) for p in paths]


def fingerprint_images(paths: Sequence[str], workers: Optional[int] = None,
                       progress: Optional[Progress] = None) -> ImagePrints:
    """Fingerprints of ``paths``, each file read once.  A file that cannot be read or decoded is marked in ``ok`` and
    named in ``errors``; the others go on.

    Args:
        paths: image files (local paths or ``s3://`` URLs).
        workers: threads reading and hashing (default ``default_workers()``).
        progress: ``progress(done, total)``, called as files complete.

    Returns:
        ImagePrints, row i for ``paths[i]``: digest (n, 16) uint8, phash, dhash (n,) uint64, ok, flat (n,) bool.
    """
    n = len(paths)
    digest = np.zeros((n, DIGEST_BYTES), np.uint8)
    phash = np.zeros(n, np.uint64)
    dhash = np.zeros(n, np.uint64)
    ok = np.zeros(n, bool)
    flat = np.zeros(n, bool)
    errors: Dict[int, str] = {}
    workers = max(1, workers or default_workers())
    starts = range(0, n, _CHUNK)
    done = 0
    with ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(carried(_print_chunk), paths[s:s + _CHUNK]): s for s in starts}
        for fut in as_completed(futures):
            s = futures[fut]
            for i, res in enumerate(fut.result(), s):
                if isinstance(res, str):
                    errors[i] = res
                else:
                    digest[i] = np.frombuffer(res[0], np.uint8)
                    phash[i], dhash[i], flat[i], ok[i] = res[1], res[2], res[3], True
            done += min(_CHUNK, n - s)
            if progress is not None:
                progress(done, n)
    return ImagePrints(digest, phash, dhash, ok, dict(sorted(errors.items())), flat)


# -- groups -----------------------------------------------------------------------------------------
def _components(pairs: np.ndarray) -> List[List[int]]:
    """The connected sets (each sorted, two items or more) of the links ``pairs`` ((p, 2) ints).  Union-find
    over the linked items only: duplicates are few, so this never walks all n images."""
    parent: Dict[int, int] = {}

    def find(x: int) -> int:
        root = parent.setdefault(x, x)
        while parent[root] != root:
            parent[root] = parent[parent[root]]  # path halving keeps later finds short
            root = parent[root]
        return root

    for x, y in pairs.tolist():
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    sets: Dict[int, List[int]] = {}
    for x in parent:
        sets.setdefault(find(x), []).append(x)
    return [sorted(m) for m in sets.values()]


def _equal_runs(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(links, first) for the rows of ``values`` ((n,) or (n, k)): links (p, 2) join each item to the next
    one with an equal row (chains that connect every set of equal rows, n - distinct pairs), and first
    holds one item of each distinct row.  One sort gives both."""
    rows = values.reshape(len(values), -1)
    order = np.lexsort(rows.T[::-1])
    same = np.all(rows[order[1:]] == rows[order[:-1]], axis=1)
    return np.stack([order[:-1][same], order[1:][same]], 1), order[np.r_[True, ~same]]


def find_duplicates(splits: Dict[str, Tuple[Sequence[str], ImagePrints]], max_distance: int = MAX_DISTANCE,
                    max_dhash_distance: int = MAX_DHASH_DISTANCE) -> List[DuplicateGroup]:
    """Groups of two or more files that are one picture, over all ``splits``.  Files not ``ok`` take no part.

    Two files are linked when their bytes are equal, or when neither is flat and their DCT hashes differ in at most
    ``max_distance`` bits and their gradient hashes in at most ``max_dhash_distance``; groups are the connected sets
    of links.  The defaults were measured on coco128 (256 photos), BCCD (364) and the bundled sample (24), each saved
    again at JPEG quality 60, as PNG, and resized to 50% and 75%: the copies moved the DCT hash by at most 6 bits (4
    but for one 75% resize) and the gradient hash by at most 5.  Different pictures: the closest two coco128 photos
    are 14 DCT bits apart (and then 18 gradient bits); two synthetic sample pictures are 6 DCT bits apart but 19
    gradient bits, and another two 4 gradient bits apart but 27 DCT bits, which is why a link needs both hashes near.

    Args:
        splits: {split name: (paths, ``fingerprint_images(paths)``)}, as many prints as paths (else ValueError).
        max_distance: DCT-hash bits (of 64) that may differ between two copies.
        max_dhash_distance: gradient-hash bits (of 64) that may differ between two copies.

    Returns:
        DuplicateGroups sorted by their first member, members sorted by (split, index); [] for none.
    """
    names = list(splits)
    where, parts = [], []  # (split number, index in the split) of each file taking part
    for k, (split_paths, prints) in enumerate(splits.values()):
        if len(split_paths) != len(prints):
            raise ValueError(f"split {names[k]!r}: {len(split_paths)} paths but {len(prints)} fingerprints")
        ok = np.flatnonzero(prints.ok)
        where.append(np.stack([np.full(len(ok), k), ok], 1))
        flat = prints.flat[ok] if prints.flat is not None else np.zeros(len(ok), bool)
        parts.append((prints.digest[ok], prints.phash[ok], prints.dhash[ok], flat))
    if not parts or sum(len(w) for w in where) == 0:
        return []
    where = np.concatenate(where)
    digest = np.ascontiguousarray(np.concatenate([p[0] for p in parts]))
    phash = np.concatenate([p[1] for p in parts])
    dhash = np.concatenate([p[2] for p in parts])
    pictured = np.flatnonzero(~np.concatenate([p[3] for p in parts]))  # flat pictures: their bytes only

    same_bytes, _ = _equal_runs(digest.view(np.uint64))  # 16 bytes as two uint64: a 2-key sort
    links = [same_bytes]
    if len(pictured):
        # equal hash pairs always match: linked here, and near matches are sought among distinct values
        # only, so that a thousand re-encoded copies of one frame make one group and no bucket of a thousand
        same_hashes, first = _equal_runs(np.stack([phash[pictured], dhash[pictured]], 1))
        first = pictured[first]
        near = near_pairs(phash[first], dhash[first], max_distance, max_dhash_distance)
        links += [pictured[same_hashes], first[near]]
    out = []
    for members in _components(np.concatenate(links)):
        identical = bool(np.all(digest[members] == digest[members[0]]))
        ms = sorted((names[k], i, splits[names[k]][0][i]) for k, i in where[members].tolist())
        out.append(DuplicateGroup("identical" if identical else "similar", ms))
    return sorted(out, key=lambda g: g.members[0])


# -- labels of duplicates ---------------------------------------------------------------------------
def _iou_xywh(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of boxes in normalised centre xywh, (m, 4) and (k, 4)."""
    a1, a2 = a[:, None, :2] - a[:, None, 2:] / 2, a[:, None, :2] + a[:, None, 2:] / 2
    b1, b2 = b[None, :, :2] - b[None, :, 2:] / 2, b[None, :, :2] + b[None, :, 2:] / 2
    inter = np.clip(np.minimum(a2, b2) - np.maximum(a1, b1), 0, None).prod(-1)
    union = a[:, None, 2:].prod(-1) + b[None, :, 2:].prod(-1) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def labels_agree(a: np.ndarray, b: np.ndarray, iou: float = 0.9) -> bool:
    """Do two images' labels say the same?

    Args:
        a: (m, 5) rows [class, x, y, w, h], xywh normalised (a resized copy keeps them).
        b: (k, 5) rows, the same.
        iou: the IoU a matched pair reaches at least.

    Returns:
        True when the classes are the same multiset and each box of ``a`` is matched, one to one, by a box of ``b``
        of its class with IoU >= ``iou`` (greedy, best pairs first).
    """
    a = np.asarray(a, np.float64).reshape(-1, 5)
    b = np.asarray(b, np.float64).reshape(-1, 5)
    if len(a) != len(b):
        return False
    ca, cb = np.sort(a[:, 0]), np.sort(b[:, 0])
    if not np.array_equal(ca, cb):
        return False
    for c in np.unique(ca):
        ba, bb = a[a[:, 0] == c, 1:], b[b[:, 0] == c, 1:]
        m = _iou_xywh(ba, bb)
        for _ in range(len(ba)):
            i, j = np.unravel_index(np.argmax(m), m.shape)
            if m[i, j] < iou:
                return False
            m[i, :] = -1.0
            m[:, j] = -1.0
    return True
