"""Sequence leakage for the report: validation and test frames of a video within k frames of a training frame.

The same picture in two splits is found by the duplicate search (dedupe.py).  Neighbouring frames of a video are
not copies, yet a model that trained on frame 117 has all but seen frame 118: validation scores then measure
memory.  This module counts, from the file names (sequence.py) and the DCT hashes the duplicate search already
made (no image is read again):

* ``near_training``: per split other than ``train``, its images within ``k`` frames of a training frame of the
  same recording (the ``sequence-leakage`` finding is their sum);
* ``runs_across``: runs of neighbouring frames (``sequence.frame_runs`` at ``k``) with members in two or more
  splits: the groups a leak-free split would have kept whole;

both over the recordings that their pictures show to be videos (``sequence.video_recordings``).  Photos numbered
by an id (COCO's ``000000000139.jpg``) share a name pattern but not a picture, and are never counted.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from ..labels.summary import plural
from .dedupe import ImagePrints
from .sequence import DEFAULT_FRAMES, Frames, frame_runs, near_training, parse_frames, video_recordings

TRAIN = "train"  # the split the others are compared with
MAX_RECORDINGS = 100  # recordings listed in the figures (videos first, then those that straddle splits most)
EXAMPLES = 5  # near frames shown with their nearest training frame, one per recording first


def not_checked(why: str) -> dict:
    """The figures of a sequence check that was not made, and why."""
    return {"checked": False, "why": why}


def sequence_figures(per_split: Dict[str, Sequence[str]], unique: Sequence[str], prints: ImagePrints,
                     k: int = DEFAULT_FRAMES) -> dict:
    """Frames of videos near training frames, and runs of neighbouring frames that straddle splits.

    Args:
        per_split: split name -> its n_s image paths (a path listed by two splits is in both).
        unique: every distinct path of ``per_split``, in the order of ``prints``' rows.
        prints: the fingerprints of ``unique`` (dedupe.fingerprint_images); only ``phash`` (uint64) and ``ok``
            (bool) are used.
        k: frames at most this far apart are neighbours.

    Returns:
        ``{"checked": True, "frames": k, "near_training": {split: images}, "runs_across": runs,
        "recordings_total", "videos", "recordings": [{"name", "video", "images": {split: n}, "runs",
        "runs_across"}] (at most MAX_RECORDINGS, of those with 2 or more images), "examples": [{"split", "file",
        "train_file", "frames_apart"}]}``; :func:`not_checked` when there is no split named ``train``.
    """
    if TRAIN not in per_split:
        return not_checked(f"no readable split named {TRAIN}, so no frame can be near a training frame")
    frames = parse_frames(unique)
    # a video sampled every few frames is still told by its nearest neighbours when a small k is asked
    videos = video_recordings(frames, prints.phash, prints.ok, k=max(k, DEFAULT_FRAMES))
    order = [TRAIN] + [s for s in per_split if s != TRAIN]
    where = {p: i for i, p in enumerate(unique)}
    files = [p for s in order for p in per_split[s]]
    rows = np.fromiter((where[p] for p in files), np.int64, len(files))
    split = np.repeat(np.arange(len(order)), [len(per_split[s]) for s in order])
    entries = Frames(frames.recording[rows], frames.frame[rows], frames.names)
    near = near_training(entries, split, k, recordings=videos)
    out = {"checked": True, "frames": int(k),
           "near_training": {s: int(near[split == i].sum()) for i, s in enumerate(order) if i}}
    out.update(_recordings(entries, split, order, frame_runs(entries, k), videos))
    out["examples"] = _examples(entries, split, order, files, near)
    return out


def _recordings(entries: Frames, split: np.ndarray, order: List[str], runs: np.ndarray, videos: np.ndarray) -> dict:
    """Per recording: its images per split, its runs and those with members in two splits (the listed ones), and
    the totals over the videos."""
    numbered = np.flatnonzero(entries.recording >= 0)
    run, rec, sp = runs[numbered], entries.recording[numbered], split[numbered]
    n_rec, n_runs = len(entries.names), (int(run.max()) + 1 if len(run) else 0)
    run_rec = np.full(n_runs, -1, np.int64)
    run_rec[run] = rec
    pairs = np.unique(np.stack([run, sp], 1), axis=0) if len(run) else np.zeros((0, 2), np.int64)
    across = np.bincount(pairs[:, 0], minlength=n_runs) > 1
    has = run_rec >= 0
    runs_of = np.bincount(run_rec[has], minlength=n_rec)
    across_of = np.bincount(run_rec[has & across], minlength=n_rec)
    images = np.zeros((len(order), n_rec), np.int64)
    np.add.at(images, (sp, rec), 1)
    many = np.flatnonzero(images.sum(0) >= 2)
    # videos first, then the most runs across splits, the most images, the name
    ranked = many[np.lexsort((many, -images.sum(0)[many], -across_of[many], ~videos[many]))][:MAX_RECORDINGS]
    listed = [{"name": entries.names[r], "video": bool(videos[r]),
               "images": {s: int(images[i, r]) for i, s in enumerate(order) if images[i, r]},
               "runs": int(runs_of[r]), "runs_across": int(across_of[r])} for r in ranked.tolist()]
    return {"runs_across": int(across_of[videos].sum()), "recordings_total": int(len(many)),
            "videos": int(videos.sum()), "recordings": listed}


def _examples(entries: Frames, split: np.ndarray, order: List[str], files: List[str], near: np.ndarray) -> List[dict]:
    """Up to EXAMPLES near frames, each with its nearest training frame: one per recording first."""
    candidates = np.flatnonzero(near)
    candidates = candidates[np.lexsort((entries.frame[candidates], entries.recording[candidates]))]
    _, first = np.unique(entries.recording[candidates], return_index=True)
    picked = list(dict.fromkeys(candidates[first].tolist() + candidates.tolist()))[:EXAMPLES]
    out = []
    for i in picked:
        train = np.flatnonzero((split == 0) & (entries.recording == entries.recording[i]))
        apart = np.abs(entries.frame[train] - entries.frame[i])
        j = int(train[np.argmin(apart)])
        out.append({"split": order[split[i]], "file": files[i], "train_file": files[j],
                    "frames_apart": int(apart.min())})
    return out


def sequences_text(figures: dict) -> str:
    """The report's line on sequences: recordings, videos, frames near a training frame per split, and the
    groups that straddle splits (runs of neighbouring frames, and duplicate groups, which ``leakage`` counts)."""
    s = figures.get("sequences", {})
    if not s.get("checked"):
        return f"sequences: not checked ({s.get('why', 'the images were not read')})"
    near = ", ".join(f"{name} {n:,}" for name, n in s["near_training"].items()) or "no other split"
    dups = sum(1 for g in figures.get("duplicates", {}).get("groups", []) if g["across"])
    return (f"sequences: {plural(s['recordings_total'], 'recording')} of numbered frames, "
            f"{plural(s['videos'], 'video')} among them; within {s['frames']} frames of a training frame: {near}; "
            f"groups that straddle splits: {plural(s['runs_across'], 'run')} of neighbouring frames, "
            f"{plural(dups, 'duplicate group')}")
