"""The figures of one split, computed from its label store alone (no label file or image is read
again): counts, classes, boxes per image, box sizes after the letterbox, aspect ratios, image sizes.

Every function is vectorised over the store's flat arrays, so a million-image split takes seconds,
not minutes.  Results are plain dicts of ints, floats and lists (what the report's JSON holds).

Boxes are the store's [class, x, y, w, h] rows, normalised to the image; image sizes its (n, 2)
[h, w] as decoded (EXIF orientation applied).
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..formats.problems import Problem
from ..labels.store import LabelStore
from ..sampling import balance

# What the training loader's candidate filter (perspective.box_candidates) drops: a side of 2 pixels
# or less, an aspect ratio of 100 or more.
CANDIDATE_MIN_SIDE = 2.0
CANDIDATE_MAX_RATIO = 100.0
FINEST_STRIDE = 8  # YOLO's finest output (P3): a box below one of its cells is hard to learn

BOXES_PER_IMAGE_EDGES = [0, 1, 2, 3, 6, 11, 21, 51, 101]  # bins [a, b): 0, 1, 2, 3-5, ..., 101+
SIZE_EDGES = [0, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # sqrt(w * h) in letterboxed pixels, last bin open
RATIO_EDGES = [1 / 100, 1 / 8, 1 / 4, 1 / 2, 1 / 1.25, 1.25, 2, 4, 8, 100]  # w / h, first and last bins open
SIDE_EDGES = [0, 128, 256, 512, 640, 1024, 1280, 2048, 4096]  # pixels, last bin open


def histogram(values: np.ndarray, edges: Sequence[float]) -> Dict[str, list]:
    """{'edges', 'counts'}: counts[i] of values in [edges[i], edges[i+1]), the last bin open above
    (and, when edges[0] > 0, the first open below), so every value is counted once."""
    idx = np.searchsorted(np.asarray(edges, np.float64), values, side="right") - 1
    counts = np.bincount(np.clip(idx, 0, len(edges) - 1), minlength=len(edges))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def reason_group(reason: str) -> str:
    """A problem's reason with its particulars (line numbers, values, quoted text) taken out, so that
    the same problem in many files is one group: "line 3: class 7 but the dataset has 3 names" and
    "line 9: class 4 but ..." are both "class N but the dataset has N names"."""
    text = re.sub(r"^line \d+: ", "", reason)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text


def group_problems(problems: Sequence[Problem]) -> Dict[str, Dict[str, List[Dict[str, str]]]]:
    """{'left out': {group: [{'file', 'reason'}]}, 'warning': {...}}: every problem, grouped by its
    reason (see reason_group), each naming its file; groups with most files first."""
    out: Dict[str, Dict[str, list]] = {"left out": defaultdict(list), "warning": defaultdict(list)}
    for p in problems:
        out["left out" if p.dropped else "warning"][reason_group(p.reason)].append(
            {"file": p.file, "reason": p.reason})
    return {kind: dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))
            for kind, groups in out.items()}


def class_counts(store: LabelStore, nc: int) -> Dict[str, List[int]]:
    """{'instances', 'images'}: (nc,) label rows of each class, and images holding at least one.
    Class ids at or above ``nc`` are counted in the last places of longer lists (nc grows to fit)."""
    classes = store.labels[:, 0].astype(np.int64)
    nc = max(nc, int(classes.max()) + 1 if len(classes) else 0)
    instances = np.bincount(classes, minlength=nc)
    images = balance.class_image_counts(classes, store.label_offsets, nc) if nc else np.zeros(0, np.int64)
    return {"instances": instances.tolist(), "images": images.tolist()}


def letterboxed_box_sides(store: LabelStore, img_size: int) -> np.ndarray:
    """(L, 2) float64 width and height of every box in pixels once its image is letterboxed to
    ``img_size`` (its long side scaled to img_size, as training does before augmentation)."""
    h0w0 = store.shapes_hw.astype(np.float64)
    scale = img_size / np.maximum(h0w0.max(axis=1), 1)
    per_row = np.repeat(np.arange(len(store)), np.diff(store.label_offsets))
    w = store.labels[:, 3].astype(np.float64) * h0w0[per_row, 1] * scale[per_row]
    h = store.labels[:, 4].astype(np.float64) * h0w0[per_row, 0] * scale[per_row]
    return np.stack([w, h], axis=1)


def split_figures(store: LabelStore, nc: int, img_size: int) -> dict:
    """The figures of one split's ``store`` at training size ``img_size`` (see the module docstring);
    ``nc`` the dataset's number of classes."""
    n = len(store)
    per_image = np.diff(store.label_offsets)
    sides = letterboxed_box_sides(store, img_size)
    w, h = sides[:, 0], sides[:, 1]
    size = np.sqrt(w * h)
    ratio = w / np.maximum(h, 1e-9)
    shapes = store.shapes_hw.astype(np.int64)
    hh, ww = shapes[:, 0], shapes[:, 1]
    sizes, counts = np.unique(ww * 2**32 + hh, return_counts=True)
    top = np.argsort(-counts, kind="stable")[:10]
    polygons = int(np.count_nonzero(np.diff(store.seg_offsets)))
    return {
        "images": n,
        "objects": int(len(store.labels)),
        "polygons": polygons,
        "keypoints_per_object": int(store.kpt_count),
        "backgrounds": int(np.count_nonzero(per_image == 0)),
        "classes": class_counts(store, nc),
        "boxes_per_image": {**histogram(per_image, BOXES_PER_IMAGE_EDGES),
                            "mean": float(per_image.mean()) if n else 0.0, "max": int(per_image.max(initial=0))},
        "box_size": {
            **histogram(size, SIZE_EDGES), "img_size": int(img_size),
            "median": float(np.median(size)) if len(size) else 0.0,
            # the candidate filter drops these after any augmentation; a mosaic's 0.5 scale halves sides
            "dropped_by_filter": int(np.count_nonzero(np.minimum(w, h) <= CANDIDATE_MIN_SIDE)),
            "below_finest_stride": int(np.count_nonzero(np.maximum(w, h) < FINEST_STRIDE)),
            "finest_stride": FINEST_STRIDE,
        },
        "aspect_ratio": {**histogram(ratio, RATIO_EDGES),
                         "beyond_filter": int(np.count_nonzero((ratio >= CANDIDATE_MAX_RATIO)
                                                               | (ratio <= 1 / CANDIDATE_MAX_RATIO)))},
        "image_sizes": {
            "common": [[int(s // 2**32), int(s % 2**32), int(c)] for s, c in zip(sizes[top], counts[top])],  # [w, h, n]
            "distinct": int(len(sizes)),
            "width": histogram(ww, SIDE_EDGES), "height": histogram(hh, SIDE_EDGES),
            "orientation": {"landscape": int(np.count_nonzero(ww > hh)), "portrait": int(np.count_nonzero(ww < hh)),
                            "square": int(np.count_nonzero(ww == hh))},
        },
    }


def band_counts(store: LabelStore) -> List[Dict[str, int]]:
    """[{'bands', 'bits', 'images'}]: how many images of the split have each band count and bit depth
    (the scan's record: labels.store.LabelStore.bands; 0 and 0 where it could not tell), most images
    first."""
    rows = store.bands[:, :2]
    if not len(rows):
        return []
    kinds, counts = np.unique(rows, axis=0, return_counts=True)
    order = np.lexsort((kinds[:, 1], kinds[:, 0], -counts))
    return [{"bands": int(kinds[i, 0]), "bits": int(kinds[i, 1]), "images": int(counts[i])} for i in order]


def bands_text(rows: Sequence[Dict[str, int]]) -> str:
    """band_counts as one line: '3 bands, 8-bit: 126; 1 band, 8-bit: 2'."""
    return "; ".join((f"{r['bands']} band{'s' * (r['bands'] != 1)}, {r['bits']}-bit" if r["bands"] else "unknown")
                     + f": {r['images']:,}" for r in rows)


def imbalance(instances: Sequence[int], names: Sequence[str]) -> Optional[dict]:
    """The commonest and rarest class present (by instances) and their ratio; None without labels."""
    counts = np.asarray(instances, np.int64)
    present = np.flatnonzero(counts)
    if not len(present):
        return None
    common = int(present[np.argmax(counts[present])])
    rare = int(present[np.argmin(counts[present])])

    def named(c):
        return {"id": c, "name": names[c] if c < len(names) else str(c), "instances": int(counts[c])}
    return {"commonest": named(common), "rarest": named(rare), "ratio": float(counts[common] / counts[rare])}
