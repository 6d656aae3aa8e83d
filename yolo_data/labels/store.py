"""The labels of a whole split in a handful of flat NumPy arrays.

A list with one Python object per image is copied page by page into every forked DataLoader worker
as reference counts are touched (the detectron2 observation); a dataset of a million images then costs
gigabytes per worker.  :class:`LabelStore` keeps everything in flat arrays with offsets instead, and
the sequences below (``im_files``, ``labels``, ...) build per-image objects only when indexed.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, fields
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..formats.sources import img2label_path
from ..images.bands import ImageBands
from .verify import PairRecord


def _offsets(counts: Iterable[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.fromiter(counts, dtype=np.int64))]).astype(np.int64)


def _band_row(info: Optional[ImageBands]) -> tuple:
    """An image's row of ``LabelStore.bands`` (0s when unknown)."""
    if info is None:
        return 0, 0, 0, 0
    return info.bands, info.bits, int(info.pages), min(info.samples, 2**31 - 1)


def _gather(values: np.ndarray, offsets: np.ndarray, index: np.ndarray):
    """Rows of ``values`` belonging to the items ``index`` (item i owns rows offsets[i]:offsets[i+1]).

    Returns (gathered values, new offsets); vectorised, no per-item Python loop.
    """
    counts = offsets[index + 1] - offsets[index]
    new_offsets = _offsets(counts)
    rows = np.repeat(offsets[index] - new_offsets[:-1], counts) + np.arange(new_offsets[-1], dtype=np.int64)
    return values[rows], new_offsets


@dataclass
class LabelStore:
    """All images of a split that passed the scan.

    path_bytes uint8 (B,) / path_offsets int64 (n+1,): image paths as the filesystem's bytes (``os.fsencode``:
    UTF-8, with the bytes of a name that is not UTF-8 kept as they are), concatenated.
    shapes_hw int32 (n, 2): [h, w] in pixels as decoded (NumPy's order, EXIF orientation applied); the
    dataset's ``shapes`` gives them in YOLOv5's [w, h].
    labels float32 (L, 5): [class, x, y, w, h] normalised; label_offsets int64 (n+1,) per image.
    seg_points float32 (P, 2): normalised polygon points; seg_offsets int64 (L+1,) per label row
    (a row without a polygon owns no points).  An oriented box's four corners are its polygon.
    keypoints float32 (L, K, 3): per label row K keypoints [x, y, visibility], x and y normalised
    (K = 0 for a split without keypoints: no bytes).
    bands int32 (n, 4): per image [bands, bits a sample, 1 when its bands are TIFF pages, samples a
    pixel of its first page] (images.bands.ImageBands: see ``bands_of``); a row of 0s when unknown.
    """
    path_bytes: np.ndarray
    path_offsets: np.ndarray
    shapes_hw: np.ndarray
    labels: np.ndarray
    label_offsets: np.ndarray
    seg_points: np.ndarray
    seg_offsets: np.ndarray
    keypoints: Optional[np.ndarray] = None  # None: no keypoints, (L, 0, 3)
    bands: Optional[np.ndarray] = None  # None: unknown, (n, 4) of 0s

    def __post_init__(self):
        if self.keypoints is None:
            self.keypoints = np.zeros((len(self.labels), 0, 3), np.float32)
        if self.bands is None:
            self.bands = np.zeros((len(self.shapes_hw), 4), np.int32)
        # Views handed to users must not write through into a store shared by workers and ranks.
        for f in fields(self):
            getattr(self, f.name).flags.writeable = False

    @classmethod
    def from_records(cls, records: Sequence[PairRecord]) -> "LabelStore":
        """Build from scan results, in order, leaving out corrupt pairs."""
        good = [r for r in records if r.status != "corrupt"]
        encoded = [os.fsencode(r.im_file) for r in good]  # a Latin-1 name round-trips via surrogateescape
        seg_counts = []
        seg_arrays = []
        k = max((r.keypoints.shape[1] for r in good if r.keypoints is not None), default=0)
        for r in good:
            if r.keypoints is not None and r.keypoints.shape[1] != k:
                raise ValueError(f"{r.im_file}: {r.keypoints.shape[1]} keypoints per object, others have {k}")
        for r in good:
            if r.segments is None:
                seg_counts.extend([0] * len(r.labels))
            else:
                seg_counts.extend(len(s) for s in r.segments)
                seg_arrays.extend(r.segments)
        return cls(
            path_bytes=np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(),
            path_offsets=_offsets(len(e) for e in encoded),
            shapes_hw=np.array([r.shape for r in good], dtype=np.int32).reshape(-1, 2),
            labels=np.concatenate([r.labels for r in good] + [np.zeros((0, 5), np.float32)]).astype(np.float32),
            label_offsets=_offsets(len(r.labels) for r in good),
            seg_points=np.concatenate(seg_arrays + [np.zeros((0, 2), np.float32)]).astype(np.float32),
            seg_offsets=_offsets(seg_counts),
            keypoints=np.concatenate([r.keypoints if r.keypoints is not None else np.zeros((len(r.labels), k, 3))
                                      for r in good] + [np.zeros((0, k, 3))]).astype(np.float32),
            bands=np.array([_band_row(r.bands) for r in good], np.int32).reshape(-1, 4),
        )

    # -- serialisation helpers -------------------------------------------------------------------
    def arrays(self) -> Dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: Dict[str, np.ndarray]) -> "LabelStore":
        store = cls(**{f.name: arrays[f.name] for f in fields(cls)})
        store.validate()
        return store

    def validate(self) -> None:
        """Raise ValueError unless the arrays are consistent with each other.  A cache file that passed
        its checksum may still be crafted or from another writer: every offset array must start at 0,
        never decrease and end at the length of what it indexes, so no item reads outside its rows or
        another item's.  Vectorised; about 10 ms for a million images."""
        n = len(self.shapes_hw)
        shapes_ok = (self.path_offsets.shape == (n + 1,) and self.label_offsets.shape == (n + 1,)
                     and self.labels.ndim == 2 and self.labels.shape[1] == 5
                     and self.seg_offsets.shape == (len(self.labels) + 1,)
                     and self.seg_points.ndim == 2 and self.seg_points.shape[1] == 2
                     and self.shapes_hw.ndim == 2 and self.shapes_hw.shape[1] == 2
                     and self.keypoints.ndim == 3 and self.keypoints.shape[0] == len(self.labels)
                     and self.keypoints.shape[2] == 3 and self.bands.shape == (n, 4))
        if not shapes_ok:
            raise ValueError("label store arrays have inconsistent shapes")
        for name, offsets, total in (("path_offsets", self.path_offsets, len(self.path_bytes)),
                                     ("label_offsets", self.label_offsets, len(self.labels)),
                                     ("seg_offsets", self.seg_offsets, len(self.seg_points))):
            # a bool per entry, not an int64 difference: 8x less temporary memory at a million images
            if offsets[0] != 0 or offsets[-1] != total or not np.all(offsets[1:] >= offsets[:-1]):
                raise ValueError(f"{name} do not run from 0 to {total} without decreasing")
        if n and self.shapes_hw.min() < 1:
            raise ValueError("image sizes must be positive")
        if n and self.bands.min() < 0:
            raise ValueError("band counts and bit depths must not be negative")
        # one float64 sum is finite exactly when every value is (no temporary array of flags)
        if len(self.labels) and not (np.isfinite(self.labels.sum(dtype=np.float64))
                                     and self.labels[:, 0].min() >= 0):
            raise ValueError("labels hold non-finite numbers or negative classes")
        if self.keypoints.size and not np.isfinite(self.keypoints.sum(dtype=np.float64)):
            raise ValueError("keypoints hold non-finite numbers")

    # -- access ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.shapes_hw)

    def im_file(self, i: int) -> str:
        return os.fsdecode(self.path_bytes[self.path_offsets[i]:self.path_offsets[i + 1]].tobytes())

    def names_digest(self) -> str:
        """A short sha256 of the images' file names (without their folders) in order, and of their
        labels: what tells this split from another of the same size, and survives the dataset being
        moved or mounted elsewhere.  O(total path bytes) in NumPy, no per-image Python."""
        pb, po = self.path_bytes, self.path_offsets
        slashes = np.flatnonzero(pb == ord("/"))
        last = np.searchsorted(slashes, po[1:]) - 1  # each path's last slash, if inside the path
        starts = np.where(last >= 0, slashes[np.maximum(last, 0)] + 1, po[:-1]) if len(slashes) else po[:-1]
        starts = np.maximum(starts, po[:-1])
        inside = np.zeros(len(pb) + 1, np.int8)  # +1 from a name's first byte to its path's end
        np.add.at(inside, starts, 1)
        np.add.at(inside, po[1:], -1)
        keep = np.cumsum(inside[:-1], dtype=np.int8).astype(bool)
        h = hashlib.sha256(pb[keep].tobytes())
        h.update((po[1:] - starts).astype("<i8").tobytes())
        h.update(np.ascontiguousarray(self.labels).tobytes())
        return h.hexdigest()[:32]

    def labels_of(self, i: int) -> np.ndarray:
        """(n, 5) float32 read-only view [class, x, y, w, h] normalised."""
        return self.labels[self.label_offsets[i]:self.label_offsets[i + 1]]

    @property
    def kpt_count(self) -> int:
        """Keypoints per object (0: the split has none)."""
        return self.keypoints.shape[1]

    def keypoints_of(self, i: int) -> np.ndarray:
        """(n, K, 3) float32 read-only view [x, y, visibility], x and y normalised."""
        return self.keypoints[self.label_offsets[i]:self.label_offsets[i + 1]]

    def segments_of(self, i: int) -> List[np.ndarray]:
        """Per label row a (k, 2) float32 normalised polygon, or [] when the image has no polygons.

        Rows that are plain boxes in an image that also has polygons get their rectangle's corners,
        so every row of such an image has a polygon to warp.
        """
        a, b = self.label_offsets[i], self.label_offsets[i + 1]
        so = self.seg_offsets
        if so[b] == so[a]:
            return []
        out = []
        for row in range(a, b):
            pts = self.seg_points[so[row]:so[row + 1]]
            if not len(pts):
                x, y, w, h = self.labels[row, 1:]
                pts = np.array([[x - w / 2, y - h / 2], [x + w / 2, y - h / 2],
                                [x + w / 2, y + h / 2], [x - w / 2, y + h / 2]], dtype=np.float32)
            out.append(pts)
        return out

    def subset(self, index: np.ndarray) -> "LabelStore":
        """A new store holding images ``index`` (any order, repeats allowed), all vectorised."""
        index = np.asarray(index, dtype=np.int64)
        path_bytes, path_offsets = _gather(self.path_bytes, self.path_offsets, index)
        labels, label_offsets = _gather(self.labels, self.label_offsets, index)
        rows, _ = _gather(np.arange(len(self.labels)), self.label_offsets, index)
        seg_points, seg_offsets = _gather(self.seg_points, self.seg_offsets, rows)
        return LabelStore(path_bytes, path_offsets, self.shapes_hw[index], labels, label_offsets,
                          seg_points, seg_offsets, self.keypoints[rows], self.bands[index])

    def keep_rows(self, keep: np.ndarray, classes: Optional[np.ndarray] = None) -> "LabelStore":
        """A new store with the same images, each keeping only its label rows where ``keep`` (L,) bool is
        True, with their polygons and keypoints; an image left without rows stays (a background).
        ``classes``: (L,) new class ids of every row (the kept ones are used), else the rows' own.
        Vectorised."""
        keep = np.asarray(keep, dtype=bool)
        rows = np.flatnonzero(keep)
        kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])  # kept rows before each row
        counts = kept_before[self.label_offsets[1:]] - kept_before[self.label_offsets[:-1]]
        labels = self.labels[rows].copy()
        if classes is not None:
            labels[:, 0] = np.asarray(classes, dtype=np.float32)[rows]
        seg_points, seg_offsets = _gather(self.seg_points, self.seg_offsets, rows)
        return LabelStore(self.path_bytes, self.path_offsets, self.shapes_hw, labels, _offsets(counts),
                          seg_points, seg_offsets, self.keypoints[rows], self.bands)

    def bands_of(self, i: int) -> Optional[ImageBands]:
        """Image ``i``'s bands and bits (images.bands.ImageBands, ``fmt`` empty), None when unknown."""
        bands, bits, pages, samples = (int(v) for v in self.bands[i])
        return ImageBands(bands, bits, bool(pages), "", samples) if bands else None

    def num_boxes(self) -> int:
        return len(self.labels)

    def num_backgrounds(self) -> int:
        return int(np.count_nonzero(np.diff(self.label_offsets) == 0))


class LazySequence(Sequence):
    """A read-only sequence whose items are made on access from a LabelStore."""

    def __init__(self, store: LabelStore):
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} images")
        return self._item(i % n)

    def _item(self, i: int):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} images>"


class ImageFiles(LazySequence):
    def _item(self, i):
        return self._store.im_file(i)


class LabelFiles(LazySequence):
    def __init__(self, store: LabelStore, label_file_of=img2label_path):
        super().__init__(store)
        self._label_file_of = label_file_of

    def _item(self, i):
        return self._label_file_of(self._store.im_file(i))


class Labels(LazySequence):
    def _item(self, i):
        return self._store.labels_of(i)


class Segments(LazySequence):
    def _item(self, i):
        return self._store.segments_of(i)


class Keypoints(LazySequence):
    def _item(self, i):
        return self._store.keypoints_of(i)
