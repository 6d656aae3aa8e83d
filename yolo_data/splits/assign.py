"""Whole groups to splits: each split's share of the images, and of each class's objects, as close to the asked
fraction as the groups allow.

A greedy pass over the groups, largest first (ties in an order drawn from the seed): each goes to the split where
it brings the shares nearest their targets, measured as the sum of squared misses, of the image share and of every
class's share of objects, with the image share weighed four times all classes together (at equal weight, eight
equal groups of two-class images went 20/8/4 instead of the 16/8/8 asked).  A split that holds its share of the
images takes no more group while another has room, so a split passes its share by less than the last group it
took (coco128 split 0.75/0.15/0.1 image by image: within one image of each share).  Large groups are placed while
every split still has room for them; the many small ones then fill each split to its fraction.  Only the
classes a group holds change the sum, so one placement costs the group's classes, not all classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np

from ..sampling import split_rng


@dataclass
class Assignment:
    """Where each image went.  split: (n,) int8, an index into ``names``, -1 for an image left out of every split.
    names: the splits, 'train' first.  fractions: (S,) float64, the asked share of each."""
    split: np.ndarray
    names: List[str]
    fractions: np.ndarray


def group_class_counts(group: np.ndarray, label_image: np.ndarray, label_class: np.ndarray):
    """Each group's objects per class, sparse: (offsets (G + 1,), classes, counts), the classes of group g in
    ``classes[offsets[g]:offsets[g + 1]]``, sorted.

    Args:
        group: (n,) int64 group of each image, 0..G-1.
        label_image: (L,) int64 image of each label row.
        label_class: (L,) int64 class of each label row.
    """
    groups = int(group.max()) + 1 if len(group) else 0
    if not len(label_image):
        return np.zeros(groups + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    width = int(label_class.max()) + 1
    keys, counts = np.unique(group[label_image] * width + label_class, return_counts=True)
    g, c = np.divmod(keys, width)
    offsets = np.searchsorted(g, np.arange(groups + 1))
    return offsets, c, counts.astype(np.int64)


def assign_groups(group: np.ndarray, label_image: np.ndarray, label_class: np.ndarray,
                  fractions: Dict[str, float], seed: int = 0, left_out: np.ndarray = None) -> Assignment:
    """Put every group whole into one split.

    Args:
        group: (n,) int64 group of each image, 0..G-1 (groups.Grouping.group).
        label_image: (L,) int64 image of each object (label row).
        label_class: (L,) int64 class of each object.
        fractions: {split name: share of the images}, 'train' first; the shares sum to 1.
        seed: the order of groups of one size; the same seed gives the same assignment.
        left_out: (n,) bool, images kept out of every split (None: none).

    Returns:
        Assignment: split (n,) int8 (-1 where left out), the split names and fractions.
    """
    names = list(fractions)
    target = np.array([fractions[k] for k in names], np.float64)
    keep = np.ones(len(group), bool) if left_out is None else ~np.asarray(left_out, bool)
    kept = np.flatnonzero(keep)
    _, g = np.unique(group[kept], return_inverse=True)  # the groups of the kept images, 0..G-1
    g = g.reshape(-1)
    sizes = np.bincount(g).astype(np.float64)
    renumber = np.full(len(group), -1, np.int64)
    renumber[kept] = np.arange(len(kept))
    rows = keep[label_image] if len(label_image) else np.zeros(0, bool)
    offsets, classes, counts = group_class_counts(g, renumber[label_image[rows]], label_class[rows])
    total_images = max(float(sizes.sum()), 1.0)
    class_total = np.bincount(classes, weights=counts, minlength=int(classes.max()) + 1 if len(classes) else 0)
    present = class_total > 0
    image_weight = 4 * max(int(present.sum()), 1)  # the image share counts four times every class together
    inv2 = np.where(present, 1.0 / np.maximum(class_total, 1.0) ** 2, 0.0)
    goal = target[:, None] * class_total[None, :]  # (S, C) objects each split should hold
    held = np.zeros_like(goal)
    images = np.zeros(len(names), np.float64)
    image_goal = target * total_images

    rng = split_rng(seed)
    order = np.lexsort((rng.permutation(len(sizes)), -sizes))  # largest first, ties in the seed's order
    where = np.empty(len(sizes), np.int8)
    for k in order.tolist():
        size = sizes[k]
        cs, xs = classes[offsets[k]:offsets[k + 1]], counts[offsets[k]:offsets[k + 1]]
        miss = held[:, cs] - goal[:, cs]  # (S, c)
        cost = ((2 * miss + xs) * xs * inv2[cs]).sum(1)  # change of sum (miss + x)^2 - miss^2, per split
        cost += image_weight * (2 * (images - image_goal) + size) * size / total_images ** 2
        full = images >= image_goal
        if not full.all():  # a split that holds its share of the images takes no more while another has room
            cost[full] = np.inf
        s = int(np.argmin(cost))
        where[k] = s
        held[s, cs] += xs
        images[s] += size
    split = np.full(len(group), -1, np.int8)
    split[kept] = where[g]
    return Assignment(split, names, target)


def shares(split: np.ndarray, names: Sequence[str], label_image: np.ndarray, label_class: np.ndarray, nc: int):
    """(images (S,), objects (S, nc)) each split holds; images left out (-1) count nowhere."""
    images = np.bincount(split[split >= 0], minlength=len(names))
    rows = split[label_image] if len(label_image) else np.zeros(0, np.int8)
    ok = rows >= 0
    objects = np.zeros((len(names), nc), np.int64)
    np.add.at(objects, (rows[ok].astype(np.int64), label_class[ok]), 1)
    return images, objects
