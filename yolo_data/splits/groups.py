"""Groups of images that must stay on one side of a split: pictures that are one picture, a recording's folder,
runs of neighbouring frames, or what a user's pattern finds in the paths.

Each way of grouping is a pure function of the image paths (and, for ``similar``, of their fingerprints) that
returns a partition: (n,) int64 group ids, 0..groups-1.  Several ways together (``similar,sequence``) give the
finest partition that keeps every group of each whole: two images are in one group when any way puts them
together (:func:`join`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..report import dedupe, sequence

WAYS = ("similar", "folder", "sequence", "regex:PATTERN")


@dataclass(frozen=True)
class GroupBy:
    """How images are grouped.  ``ways``: each one of 'similar', 'folder', 'sequence' or 'regex:PATTERN'.
    ``frames``: neighbouring frames are at most this many apart ('sequence').  ``chunk``: a run of neighbouring
    frames longer than this many frames is cut into pieces of ``chunk`` frames ('sequence'; None: never cut)."""
    ways: Tuple[str, ...]
    frames: int = sequence.DEFAULT_FRAMES
    chunk: Optional[int] = None

    @classmethod
    def parse(cls, text: str, frames: int = sequence.DEFAULT_FRAMES, chunk: Optional[int] = None) -> "GroupBy":
        """``text``: ways joined by commas, e.g. 'similar,sequence' or 'regex:^(.*)/cam\\d/'.  Raises ValueError
        naming a way that is not one of WAYS, a pattern that does not compile, or a ``frames``/``chunk`` below 0/1."""
        ways, rest = [], text.strip()
        while rest:  # a pattern runs to the end: it may hold commas itself
            if rest.startswith("regex:"):
                ways.append(rest)
                break
            way, _, rest = rest.partition(",")
            ways.append(way.strip())
            rest = rest.strip()
        for way in ways:
            if way.startswith("regex:"):
                try:
                    re.compile(way[len("regex:"):])
                except re.error as e:
                    raise ValueError(f"--group-by {way!r}: the pattern does not compile ({e})") from None
            elif way not in WAYS[:3]:
                raise ValueError(f"--group-by: unknown way {way!r}; choose from {', '.join(WAYS)} (joined by commas)")
        if not ways:
            raise ValueError(f"--group-by: say how images are grouped: {', '.join(WAYS)}")
        if frames < 0:
            raise ValueError(f"--frames must be 0 or more, got {frames}")
        if chunk is not None and chunk < 1:
            raise ValueError(f"--chunk must be 1 or more frames, got {chunk}")
        return cls(tuple(ways), frames, chunk)


@dataclass
class Grouping:
    """The groups of n images.  group: (n,) int64, 0..groups-1.  left_out: (n,) bool, images kept out of every
    split (frames at the borders of cut runs, within ``frames`` of the next piece).  notes: one line per way on
    what it found."""
    group: np.ndarray
    left_out: np.ndarray
    notes: List[str] = field(default_factory=list)


def compact(keys: Sequence) -> np.ndarray:
    """(n,) int64 ids 0..k-1 of hashable ``keys``, equal keys one id (numbered in order of first sight)."""
    ids: dict = {}
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, len(keys))


def join(*partitions: np.ndarray) -> np.ndarray:
    """The finest partition that keeps each group of every partition whole: (n,) int64 ids, 0..k-1, numbered in
    order of each group's first image.  Each image takes the smallest image index of its group in every partition,
    again and again, until nothing moves (a chain of k links settles in about log k rounds)."""
    n = len(partitions[0])
    label = np.arange(n, dtype=np.int64)
    while True:
        before = label
        for part in partitions:
            low = np.full(int(part.max()) + 1 if n else 0, n, np.int64)
            np.minimum.at(low, part, label)
            label = np.minimum(label, low[part])
        label = label[label]  # pointer jumping: follow each label to its own label
        if np.array_equal(label, before):
            break
    return compact(label.tolist())


def by_folder(paths: Sequence[str]) -> np.ndarray:
    """One group per folder, split folders left out of it (sequence.folder_of): the recordings a camera or a
    session wrote to a folder of their own."""
    return compact([sequence.folder_of(p) for p in paths])


def by_regex(paths: Sequence[str], pattern: str) -> Tuple[np.ndarray, int]:
    """(groups, images matched): images whose paths the pattern finds the same text in (its first group when it has
    groups, else the whole match) are one group; an image the pattern does not find in its path is a group of its
    own."""
    rx = re.compile(pattern)
    keys, found = [], 0
    for i, p in enumerate(paths):
        m = rx.search(str(p))
        if m is None:
            keys.append(("alone", i))
        else:
            found += 1
            keys.append(("key", m.group(1) if rx.groups else m.group(0)))
    return compact(keys), found


def by_sequence(paths: Sequence[str], frames: int, chunk: Optional[int]) -> Tuple[np.ndarray, np.ndarray, int]:
    """(groups, left out, images with a frame number): runs of neighbouring frames (sequence.frame_runs, at most ``frames`` apart).  With
    ``chunk``, a run is cut every ``chunk`` frame numbers from its first frame, and the frames less than ``frames``
    after a cut are left out, so that no two pieces hold frames ``frames`` or fewer apart."""
    parsed = sequence.parse_frames(paths)
    run = sequence.frame_runs(parsed, frames)
    left_out = np.zeros(len(paths), bool)
    numbered = parsed.recording >= 0
    if chunk is None:
        return run, left_out, int(numbered.sum())
    start = np.full(int(run.max()) + 1 if len(run) else 0, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(start, run[numbered], parsed.frame[numbered])
    offset = np.where(numbered, parsed.frame - start[run], 0)
    piece = offset // chunk
    left_out = numbered & (piece > 0) & (offset - piece * chunk < frames)
    return compact(list(zip(run.tolist(), piece.tolist()))), left_out, int(numbered.sum())


def by_similar(paths: Sequence[str], workers: Optional[int] = None, progress=None) -> Tuple[np.ndarray, int]:
    """(groups, images in a group of two or more): the report's groups of one picture (identical files, re-encoded
    or resized copies, near-identical frames: dedupe.find_duplicates), every image read once.  An image that cannot
    be read is a group of its own."""
    prints = dedupe.fingerprint_images(list(paths), workers=workers, progress=progress)
    label = np.arange(len(paths), dtype=np.int64)
    grouped = 0
    for g in dedupe.find_duplicates({"all": (list(paths), prints)}):
        members = [i for _, i, _ in g.members]
        label[members] = members[0]
        grouped += len(members)
    return compact(label.tolist()), grouped


def group_images(paths: Sequence[str], by: GroupBy, workers: Optional[int] = None, progress=None) -> Grouping:
    """The groups of ``paths`` (local paths or URLs) that ``by`` asks for, joined.

    Args:
        paths: n image paths.
        by: the ways of grouping, ``frames`` and ``chunk``.
        workers: threads reading images ('similar').
        progress: ``progress(done, total)`` while images are read ('similar').

    Returns:
        Grouping: group (n,) int64, left_out (n,) bool, a note per way.
    """
    n = len(paths)
    parts, left_out, notes = [], np.zeros(n, bool), []
    for way in by.ways:
        if way == "folder":
            part = by_folder(paths)
            notes.append(f"folder: {int(part.max()) + 1 if n else 0:,} folders")
        elif way == "sequence":
            part, cut, numbered = by_sequence(paths, by.frames, by.chunk)
            notes.append(f"sequence: {numbered:,} of {n:,} names numbered; "
                         f"{int(part.max()) + 1 if n else 0:,} runs of frames at most {by.frames} apart"
                         + (f", cut every {by.chunk} frames, {int(cut.sum()):,} frames at the cuts left out"
                            if by.chunk else ""))
            left_out |= cut
        elif way == "similar":
            part, grouped = by_similar(paths, workers, progress)
            notes.append(f"similar: {grouped:,} images are one picture with another")
        else:
            part, found = by_regex(paths, way[len("regex:"):])
            notes.append(f"{way}: found in {found:,} of {n:,} paths")
        parts.append(part)
    if left_out.any():  # a frame kept out of every split links nothing: two pieces it resembles stay apart
        alone = np.flatnonzero(left_out)
        for part in parts:
            part[alone] = int(part.max()) + 1 + np.arange(len(alone))
    return Grouping(join(*parts) if n else np.zeros(0, np.int64), left_out, notes)
