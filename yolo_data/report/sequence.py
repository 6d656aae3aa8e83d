"""Frames of recordings, read from numbered file names: which images are neighbouring frames of one video.

An image's frame number is the last run of digits in its file name, and its recording is everything else:

    clips/clip3_000117.jpg                     recording clips/clip3_#        frame 117
    images/train/frame_0042_left.png           recording images/frame_#_left  frame 42
    images/val/frame_0043_left.png             recording images/frame_#_left  frame 43   (same recording)
    train/images/image_4_png.rf.21970fee...jpg recording images/image_#       frame 4    (a Roboflow export)
    photo.jpg                                  no recording                   frame -1

Folders named after a split (train, val, valid, validation, test, training, testing, eval, with or without a
number: train2017) are left out of the recording, so the frames of one video that a split put in
``images/train`` and ``images/val`` are found to be one recording; the file's extension is left out too.
A Roboflow export's ``_png.rf.<hash>`` tail is the export's, not the picture's, and is dropped first.

Names alone cannot tell a video's frames from photos numbered by an id (COCO's ``000000000139.jpg``, VOC's
``2008_000123.jpg``): :func:`video_recordings` asks the pictures (their DCT hashes, report/dedupe.py) whether
neighbouring frames look alike.  Measured: neighbouring tiger-pose frames (one video) differ by 4 DCT-hash bits
(median, 6 at the 90th percentile); neighbouring coco128 and BCCD ids by 30-32, the same as random pairs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from .nearpairs import hamming

DEFAULT_FRAMES = 10  # neighbours: frame numbers at most this far apart (a third of a second at 30 frames/s)
VIDEO_BITS = 12  # a recording is a video when its neighbouring frames differ by at most this many DCT-hash bits
_SPLIT_FOLDER = re.compile(r"(?i)^(train|training|val|valid|validation|test|testing|eval)([_-]?\d*)$")
_ROBOFLOW = re.compile(r"(?i)^(.*)_(jpe?g|png|bmp|tiff?|webp)\.rf\.[0-9a-f]{16,}$")
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


@dataclass
class Frames:
    """The recording and frame number of n images, in the order of their paths.

    recording: (n,) int64, an index into ``names``, -1 where the file name holds no number.  frame: (n,) int64,
    the frame number, -1 where none.  names: the recordings' keys (folders without split folders, then the
    file name with its frame number replaced by ``#``), sorted."""

    recording: np.ndarray
    frame: np.ndarray
    names: List[str]

    def __len__(self) -> int:
        return len(self.frame)


def folder_of(path: str) -> str:
    """The folder of an image path or URL, with the folders named after a split left out (``d/images/train/x.jpg``
    and ``d/images/val/y.jpg`` are both in ``d/images``): where one recording's frames are, wherever a split put them."""
    folder = str(path).replace("\\", "/").rpartition("/")[0]
    return "/".join(part for part in folder.split("/") if not _SPLIT_FOLDER.match(part))


def recording_of(path: str):
    """(recording key, frame number) of one image path or URL, or (None, -1) when its name holds no number."""
    name = str(path).replace("\\", "/").rpartition("/")[2]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    roboflow = _ROBOFLOW.match(stem)
    if roboflow:
        stem = roboflow.group(1)
    m = _NUMBERED.match(stem)
    if m is None:
        return None, -1
    return f"{folder_of(path)}/{m.group(1)}#{m.group(3)}", int(m.group(2))


def parse_frames(paths: Sequence[str]) -> Frames:
    """The recording and frame of each of ``paths`` (local paths or URLs), by :func:`recording_of`.

    Args:
        paths: n image paths.

    Returns:
        Frames: recording (n,) int64 (-1: no number in the name), frame (n,) int64, names of the recordings.
    """
    keys, frame = [], np.full(len(paths), -1, np.int64)
    for i, p in enumerate(paths):
        key, number = recording_of(p)
        keys.append(key)
        frame[i] = number
    names = sorted({k for k in keys if k is not None})
    where = {k: r for r, k in enumerate(names)}
    recording = np.fromiter((where[k] if k is not None else -1 for k in keys), np.int64, len(keys))
    return Frames(recording, frame, names)


def _order(frames: Frames) -> np.ndarray:
    """The images with a frame number, sorted by (recording, frame)."""
    numbered = np.flatnonzero(frames.recording >= 0)
    return numbered[np.lexsort((frames.frame[numbered], frames.recording[numbered]))]


def frame_runs(frames: Frames, k: int = DEFAULT_FRAMES) -> np.ndarray:
    """Runs of neighbouring frames: within a recording, frames sorted by number are one run while each is at most
    ``k`` after the one before.  Two images of one recording within ``k`` frames of each other are always in one
    run, so a split that keeps runs whole has no val frame within ``k`` frames of a training frame.

    Args:
        frames: from :func:`parse_frames`.
        k: the largest step between neighbouring frames of a run.

    Returns:
        (n,) int64 run id of each image, 0..runs-1; an image without a frame number is a run of its own.
    """
    n = len(frames)
    order = _order(frames)
    starts = np.ones(len(order), bool)
    if len(order) > 1:
        same = frames.recording[order[1:]] == frames.recording[order[:-1]]
        starts[1:] = ~same | (frames.frame[order[1:]] - frames.frame[order[:-1]] > k)
    run = np.empty(n, np.int64)
    run[order] = np.cumsum(starts) - 1
    alone = np.flatnonzero(frames.recording < 0)
    run[alone] = int(starts.sum()) + np.arange(len(alone))
    return run


def near_training(frames: Frames, split: np.ndarray, k: int = DEFAULT_FRAMES,
                  recordings: Optional[np.ndarray] = None) -> np.ndarray:
    """Which images outside the training split are within ``k`` frames of a training frame of their recording.

    Args:
        frames: from :func:`parse_frames`, n images.
        split: (n,) int, 0 for the training split, another value for any other split.
        k: how many frames apart counts as neighbouring.
        recordings: (r,) bool over ``frames.names``: the recordings taken into account (None: all).

    Returns:
        (n,) bool, True for each image of another split that has a training frame at most ``k`` frames away.
    """
    split = np.asarray(split)
    order = _order(frames)
    if recordings is not None:
        order = order[np.asarray(recordings, bool)[frames.recording[order]]]
    rec, num, train = frames.recording[order], frames.frame[order], split[order] == 0
    pos = np.arange(len(order))
    before = np.maximum.accumulate(np.where(train, pos, -1)) if len(order) else pos
    after = np.minimum.accumulate(np.where(train, pos, len(order))[::-1])[::-1] if len(order) else pos
    near = np.zeros(len(order), bool)
    for other in (before, after):
        ok = (other >= 0) & (other < len(order))
        o = np.where(ok, other, 0)
        near |= ok & (rec[o] == rec) & (np.abs(num[o] - num) <= k)
    out = np.zeros(len(frames), bool)
    out[order] = near & ~train
    return out


def video_recordings(frames: Frames, phash: np.ndarray, ok: np.ndarray, k: int = DEFAULT_FRAMES,
                     max_bits: int = VIDEO_BITS) -> np.ndarray:
    """Which recordings are videos: the median DCT-hash distance between neighbouring frames (at most ``k`` apart,
    both pictures read) is at most ``max_bits``.  A recording without such a pair is not a video.

    Args:
        frames: from :func:`parse_frames`, n images.
        phash: (n,) uint64 DCT hashes (dedupe.fingerprint_images).
        ok: (n,) bool, the hashes that were read.
        k: how many frames apart neighbours may be.
        max_bits: the largest median distance of a video's neighbouring frames.

    Returns:
        (r,) bool over ``frames.names``.
    """
    order = _order(frames)
    order = order[np.asarray(ok, bool)[order]]
    a, b = order[:-1], order[1:]
    pair = (frames.recording[a] == frames.recording[b]) & (frames.frame[b] - frames.frame[a] <= k)
    a, b = a[pair], b[pair]
    dist = hamming(phash[a], phash[b]).astype(np.float64)
    out = np.zeros(len(frames.names), bool)
    rec = frames.recording[a]
    for r in np.unique(rec):
        out[r] = np.median(dist[rec == r]) <= max_bits
    return out
