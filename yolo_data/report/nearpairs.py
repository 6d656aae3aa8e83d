"""Near-identical 64-bit hashes among many: pairs within two Hamming bounds, found by multi-index hashing
(bucketed by exact bit fields) rather than by comparing all pairs, so that a million pictures cost a few
sorts.  ``find_duplicates`` (dedupe.py) links the pictures these pairs name."""
from __future__ import annotations

import logging
from typing import List, Tuple

import numpy as np

LOGGER = logging.getLogger("yolo_data")

MAX_DISTANCE = 6  # DCT-hash bits that may differ (of 64); measured bounds in find_duplicates
MAX_DHASH_DISTANCE = 6  # gradient-hash bits that may differ (of 64)
BUCKET_CAP = 64  # neighbours compared per item in an overfull bucket; see _bucket_pairs


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits that differ between uint64 arrays ``a`` and ``b`` (broadcast), as uint8."""
    x = np.bitwise_xor(a, b)
    if hasattr(np, "bitwise_count"):  # NumPy >= 2
        return np.bitwise_count(x)
    return _BYTE_BITS[np.ascontiguousarray(x).view(np.uint8).reshape(*x.shape, 8)].sum(-1, dtype=np.uint8)


_BYTE_BITS = np.array([bin(v).count("1") for v in range(256)], np.uint8)


def _chunks(parts: int) -> List[Tuple[int, int]]:
    """(shift, width) of ``parts`` bit fields that cover 64 bits, as even as can be."""
    widths = [64 // parts + (k < 64 % parts) for k in range(parts)]
    shifts = np.cumsum([0] + widths[:-1])
    return [(int(s), w) for s, w in zip(shifts, widths)]


def _field(h: np.ndarray, shift: int, width: int) -> np.ndarray:
    return (h >> np.uint64(shift)) & np.uint64((1 << width) - 1)


def _bucket_pairs(keys: np.ndarray, cap: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Pairs of items with equal ``keys`` ((n,) unsigned ints), as (order, a, b, overfull): ``order``
    sorts the keys, and each pair is sorted positions (a[p], b[p]), a < b.  All pairs of a bucket of at
    most ``cap + 1`` items come out; in a larger one (``overfull`` counts them) each item is paired with
    its ``cap`` successors only, so the work stays linear in n.

    Pairs come out k apart in the sorted order for k = 1, 2, ...: each round is one vectorised step over
    the items whose bucket still holds a partner k places on, so a table of small buckets costs a few
    passes over n and no Python loop over items."""
    order = np.argsort(keys)  # not stable: which of equal keys comes first does not matter
    sk = keys[order]
    n = len(sk)
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if n else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, n])
    end = np.repeat(starts + sizes, sizes)  # one past the last position of each item's bucket
    pos = np.flatnonzero(end - np.arange(n) > 1)  # items with at least one successor in their bucket
    out_a, out_b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    k = 1
    while len(pos) and k <= cap:
        out_a.append(pos)
        out_b.append(pos + k)
        k += 1
        pos = pos[end[pos] - pos > k]
    return order, np.concatenate(out_a), np.concatenate(out_b), int((sizes > cap + 1).sum())


def near_pairs(phash: np.ndarray, dhash: np.ndarray, max_distance: int = MAX_DISTANCE,
               max_dhash_distance: int = MAX_DHASH_DISTANCE, cap: int = BUCKET_CAP) -> np.ndarray:
    """(p, 2) int64 index pairs (i < j) of hashes within both bounds: hamming(phash) <= max_distance and
    hamming(dhash) <= max_dhash_distance.  Meant for distinct (phash, dhash) values: equal values always match, and
    find_duplicates merges them before it asks, however many there are.

    Multi-index hashing over both hashes: cut the DCT hash into max_distance + 1 bit fields and the gradient hash into
    max_dhash_distance + 1; a pair within both bounds agrees exactly on at least one field of each (pigeonhole), so it
    shares a bucket keyed by some (DCT field, gradient field) pair.  A key of one field of each hash (18 bits with the
    default bounds) makes buckets small enough that a million random hashes give about 2 million candidates per table,
    checked in a vectorised step; each of the (max_distance + 1) * (max_dhash_distance + 1) tables is one sort.  A
    bucket of over ``cap + 1`` items (many distinct but almost equal pictures) is only searched among sorted
    neighbours, and a warning says so."""
    phash = np.asarray(phash, np.uint64)
    dhash = np.asarray(dhash, np.uint64)
    found, overfull = [np.zeros((0, 2), np.int64)], 0
    for ps, pw in _chunks(max_distance + 1):
        for ds, dw in _chunks(max_dhash_distance + 1):
            key = (_field(phash, ps, pw) << np.uint64(dw)) | _field(dhash, ds, dw)
            if pw + dw <= 32:
                key = key.astype(np.uint32)  # sorts in about half the time of uint64
            order, a, b, over = _bucket_pairs(key, cap)
            overfull += over
            # compare in sorted order: both sides of most pairs are then near in memory
            sp, sd = phash[order], dhash[order]
            keep = (hamming(sp[a], sp[b]) <= max_distance) & (hamming(sd[a], sd[b]) <= max_dhash_distance)
            if keep.any():
                found.append(np.sort(np.stack([order[a[keep]], order[b[keep]]], 1), 1))
    if overfull:
        LOGGER.warning(f"duplicates: {overfull} hash buckets held over {cap + 1} pictures; near matches in "
                       f"them were sought among {cap} neighbours each (identical hashes are always grouped)")
    return np.unique(np.concatenate(found), axis=0)
