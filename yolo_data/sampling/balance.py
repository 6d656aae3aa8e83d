"""Class-balanced sampling by repeat factors: images holding rare classes are drawn more than once per
epoch (the repeat-factor rule of LVIS, Gupta et al. 2019).

    f(c) = the fraction of the split's images that contain class c
    r(c) = max(1, sqrt(t / f(c)))           t: the threshold, a frequency in (0, 1]
    r_i  = max of r(c) over the classes of image i (1 for an image without boxes)

An epoch then holds ``floor(sum r_i)`` draws, image i about ``r_i`` times of them (:func:`repeat_draws`).
Pure NumPy, vectorised over label rows: no Python loop per image or per class, so a split of a million
images is a few array passes.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

DEFAULT_THRESHOLD = 0.1  # class_balance=True: classes in under 10% of the images are repeated


def threshold_of(value) -> Optional[float]:
    """The threshold ``t`` that a ``class_balance`` setting asks for, or None for off.

    False, None and 0 are off; True is ``DEFAULT_THRESHOLD``; a number in (0, 1] is ``t`` itself.
    Anything else (a negative or larger number, NaN, text) is a ValueError."""
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_THRESHOLD
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        t = float(value)
        if t == 0:
            return None
        if 0 < t <= 1:
            return t
    raise ValueError(f"class_balance must be False, True (threshold {DEFAULT_THRESHOLD}) or a threshold in "
                     f"(0, 1], the class frequency (share of images) below which images are repeated; "
                     f"got {value!r}")


def _check(classes: np.ndarray, label_offsets: np.ndarray, nc: Optional[int]) -> Tuple[np.ndarray, np.ndarray, int]:
    """(classes as (L,) int64, offsets as (n+1,) int64, nc), or a ValueError saying what does not fit."""
    offsets = np.asarray(label_offsets, dtype=np.int64)
    classes = np.asarray(classes)
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
        raise ValueError("label_offsets must be (n+1,) non-decreasing row offsets starting at 0")
    if classes.shape != (int(offsets[-1]),):
        raise ValueError(f"classes must be ({int(offsets[-1])},): one class id per label row, got {classes.shape}")
    ids = classes.astype(np.int64)
    if len(ids) and ((ids != classes).any() or ids.min() < 0):
        raise ValueError("class ids must be non-negative whole numbers")
    top = int(ids.max()) + 1 if len(ids) else 1
    nc = top if nc is None else int(nc)
    if top > nc:
        raise ValueError(f"class id {top - 1} is not below nc={nc}")
    return ids, offsets, nc


def _image_of_rows(offsets: np.ndarray) -> np.ndarray:
    """(L,) int64: the image each label row belongs to."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def _pairs(ids: np.ndarray, offsets: np.ndarray, nc: int) -> Tuple[np.ndarray, np.ndarray]:
    """(images, classes), (P,) int64 each: every (image, class) pair present, once.

    Keys image * nc + class are already grouped by image (rows are stored image by image), so a stable
    sort only orders the few rows inside each image: near linear (timsort's runs), unlike a full sort."""
    keys = np.sort(_image_of_rows(offsets) * nc + ids, kind="stable")
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]
    return keys // nc, keys % nc


def class_image_counts(classes, label_offsets, nc: int) -> np.ndarray:
    """(nc,) int64: how many images contain each class.

    ``classes``: (L,) class ids (any int or float dtype holding whole numbers) of every label row;
    ``label_offsets``: (n+1,) int64, image i owning rows ``label_offsets[i]:label_offsets[i+1]`` (as in
    LabelStore)."""
    ids, offsets, nc = _check(classes, label_offsets, nc)
    return np.bincount(_pairs(ids, offsets, nc)[1], minlength=nc).astype(np.int64)


def class_factors(image_counts: np.ndarray, n: int, threshold: float) -> np.ndarray:
    """(nc,) float64 r(c) = max(1, sqrt(t / f(c))) with f(c) = image_counts / n; 1 for a class in no image."""
    t = threshold_of(threshold)
    if t is None:
        raise ValueError(f"the threshold must be in (0, 1], got {threshold!r}")
    f = np.asarray(image_counts, dtype=np.float64) / max(int(n), 1)
    with np.errstate(divide="ignore"):
        r = np.sqrt(t / f)
    r[f == 0] = 1.0
    return np.maximum(r, 1.0)


def repeat_factors(classes, label_offsets, threshold: float, nc: Optional[int] = None) -> np.ndarray:
    """(n,) float64 r_i, each >= 1: the largest r(c) over the classes of image i, 1 without boxes.

    ``classes``: (L,) class ids of all label rows; ``label_offsets``: (n+1,) int64 rows per image;
    ``threshold``: t in (0, 1]; ``nc``: the number of classes (None: the largest id + 1)."""
    ids, offsets, nc = _check(classes, label_offsets, nc)
    r_class = class_factors(np.bincount(_pairs(ids, offsets, nc)[1], minlength=nc), len(offsets) - 1, threshold)
    return image_factors(r_class, ids, offsets)


def image_factors(r_class: np.ndarray, classes, label_offsets) -> np.ndarray:
    """(n,) float64: the largest of ``r_class`` (class_factors) over the classes of each image, 1
    without boxes; ``classes``, ``label_offsets`` as in :func:`repeat_factors`."""
    ids, offsets, _ = _check(classes, label_offsets, len(r_class))
    out = np.ones(len(offsets) - 1, dtype=np.float64)
    has = np.flatnonzero(np.diff(offsets) > 0)
    if len(has):
        # segments between consecutive starts of images with rows are exactly those images' rows
        out[has] = np.maximum.reduceat(np.asarray(r_class, np.float64)[ids], offsets[has])
    return out


def sampled_counts(factors, classes, label_offsets, nc: int) -> Tuple[np.ndarray, np.ndarray]:
    """(images, instances), (nc,) float64 each: the expected number per epoch of sampled images that
    contain each class, and of sampled instances (label rows) of each class, when image i is drawn
    ``factors[i]`` times: sums over images of r_i (once per image, or once per instance).

    ``factors``: (n,) r_i (all ones gives the raw counts); ``classes``, ``label_offsets``: as in
    :func:`repeat_factors`."""
    ids, offsets, nc = _check(classes, label_offsets, nc)
    r = np.asarray(factors, dtype=np.float64)
    if r.shape != (len(offsets) - 1,):
        raise ValueError(f"factors must be ({len(offsets) - 1},), one per image, got {r.shape}")
    images, cls = _pairs(ids, offsets, nc)
    per_image = np.bincount(cls, weights=r[images], minlength=nc)
    per_instance = np.bincount(ids, weights=r[_image_of_rows(offsets)], minlength=nc)
    return per_image.astype(np.float64), per_instance.astype(np.float64)


def epoch_length(factors: np.ndarray) -> int:
    """The number of draws of every epoch: floor(sum r_i) (at least 1)."""
    return max(1, int(math.floor(float(np.sum(np.asarray(factors, dtype=np.float64))))))


def systematic_counts(factors: np.ndarray, u: float) -> np.ndarray:
    """(n,) int64 draws of each image in the order given, for the offset ``u`` in [0, 1): the whole
    numbers k + u in (C_{i-1}, C_i], C being the cumulative sums of ``factors``.

    Image i's interval has length r_i, so it holds floor(r_i) or ceil(r_i) of them, and over u ~ U[0, 1)
    exactly r_i on average; the total is floor(sum + u), floor(sum) or one more."""
    c = np.concatenate([[0.0], np.cumsum(factors, dtype=np.float64)])
    return np.diff(np.floor(c + u)).astype(np.int64)


def repeat_draws(factors, length: int, rng: np.random.Generator) -> np.ndarray:
    """(length,) int64 image positions of one epoch, each image's draws together (shuffle them after).

    Dependent (systematic) rounding on a random permutation of the images: with one u ~ U[0, 1), image
    i is drawn floor(r_i) or ceil(r_i) times, r_i on average, and the draws of different images are
    rounded together, so the epoch has floor(sum r_i) or one more.  In the latter case one draw,
    chosen uniformly, is dropped (so one image may be drawn once fewer, and each image's mean is
    r_i * (1 - O(1 / sum r_i))); ``length`` = floor(sum r_i) is thus the same every epoch.  Should
    rounding of the float sums ever give fewer, the missing draws are images drawn by weight r_i.

    ``factors``: (n,) float64 r_i >= 0; O(n) plus two permutations."""
    r = np.asarray(factors, dtype=np.float64)
    perm = rng.permutation(len(r))
    counts = systematic_counts(r[perm], rng.random())
    draws = np.repeat(perm, counts)
    extra = len(draws) - int(length)
    if extra > 0:
        draws = np.delete(draws, rng.choice(len(draws), extra, replace=False))
    elif extra < 0:
        cdf = np.cumsum(r)
        more = np.searchsorted(cdf, rng.random(-extra) * cdf[-1], side="right")
        draws = np.concatenate([draws, np.minimum(more, len(r) - 1)])
    return draws.astype(np.int64)
