"""The seeding rules: how a seed is checked, and which random generator each decision draws from.

Every random decision of a run (the epoch's order, an item's augmentation, the quad collate's coin)
comes from its own NumPy generator, made from a short list of integers that begins with the run's seed,
so results depend on neither global random state nor the number of workers and ranks.  The lists
(``e`` = :func:`seed_entropy` of the seed), one stream per row:

    epoch_rng(seed, epoch, stream)              [e, epoch, stream, 0x5A3]
        the epoch's global order (YoloSampler: stream 0)
    item_rng(seed, epoch, index)                [e, epoch, index]
    item_rng(seed, epoch, index, attempt)       [e, epoch, index, attempt]
    item_rng(seed, epoch, index, draw=d)        [e, epoch, index, 0xD5A7, d]
    item_rng(seed, epoch, index, attempt, d)    [e, epoch, index, attempt, 0xD5A7, d]
        every decision about dataset item ``index`` (a position in ``dataset.indices``): ``attempt`` > 0
        for a substitute of an image that could not be read, ``draw`` > 0 for the item's place in the
        epoch's order (an image drawn twice in an epoch is augmented independently each time); 0 adds
        no word, so a plain ``dataset[i]`` and the first place of an epoch share one generator
    quad_rng(seed, epoch, paths)                [e, epoch, crc32 of the four paths joined by NUL]
        the quad collate's coin for one group of four items
    split_rng(seed)                             [e, 0x5B1]
        the order of equal-sized groups when ``yolo-data split`` puts groups into splits (splits/assign.py)

Within one seed and epoch the words 0x5A3 and 0xD5A7 keep the sampler's and the items' streams apart
(an attempt stays below 0x5A3: a training item gives up after a few unreadable images).  The quad coin's
CRC stands where an item's index stands: when its 32 bits equal an index below n (at most n / 2**32 per
group), the coin comes from that item's draw-0 generator.  Changing any list changes every batch drawn
from it; the tests that pin batches hold them.
"""
from __future__ import annotations

import operator
import zlib
from typing import Sequence

import numpy as np

SEED_SPAN = 2**64  # seeds are taken modulo this: the entropy NumPy's SeedSequence is given is non-negative
EPOCH_TAG = 0x5A3  # ends an epoch stream's list
DRAW_TAG = 0xD5A7  # comes before an item's draw in its list
SPLIT_TAG = 0x5B1  # ends the list of yolo-data split's stream


def check_seed(seed, name: str = "seed") -> int:
    """A seed as an int, or a TypeError naming ``name``: any whole number (Python or NumPy integer,
    negative too) is a seed; a float, text or bool is refused rather than truncated or taken as 0/1.

    Args:
        seed: the value given as a seed.
        name: what the caller calls it, for the message.

    Returns:
        ``seed`` as a Python int (unchanged in value).

    Raises:
        TypeError: ``seed`` is not a whole number.
    """
    if isinstance(seed, bool):
        raise TypeError(f"{name} must be an integer, got the bool {seed!r}")
    try:
        return operator.index(seed)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(seed).__name__} {seed!r}") from None


def seed_entropy(seed: int) -> int:
    """A seed as NumPy's SeedSequence takes it (non-negative): every generator keyed by a seed goes
    through here.

    Args:
        seed: any int (check_seed).

    Returns:
        ``seed`` modulo 2**64: seeds in 0..2**64-1 are unchanged; negative ones fold onto the top of
        that range, so -1 is reproducible and differs from 0 and every small seed.
    """
    return int(seed) % SEED_SPAN


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator for one epoch's sampling decisions.

    Args:
        seed: the run's seed.
        epoch: the epoch (>= 0).
        stream: keeps unrelated uses within an epoch apart (the sampler's order: 0).

    Returns:
        A new generator; the same arguments give the same draws.
    """
    return np.random.default_rng([seed_entropy(seed), epoch, stream, EPOCH_TAG])


def item_rng(seed: int, epoch: int, index: int, attempt: int = 0, draw: int = 0) -> np.random.Generator:
    """The generator for every random decision about one dataset item in one epoch.

    Args:
        seed: the run's seed.
        epoch: the epoch (>= 0).
        index: the item's position in ``dataset.indices``.
        attempt: > 0 for a substitute of an item whose image could not be read.
        draw: the item's place in the epoch's global order (ItemKey.draw), so an image drawn twice in an
            epoch is augmented independently each time; 0 for a plain ``dataset[i]``.

    Returns:
        A new generator; the same arguments give the same draws, in any worker.
    """
    return np.random.default_rng([seed_entropy(seed), epoch, index] + ([attempt] if attempt else [])
                                 + ([DRAW_TAG, draw] if draw else []))


def quad_rng(seed: int, epoch: int, paths: Sequence[str]) -> np.random.Generator:
    """The generator for the quad collate's coin of one group of four items.

    Args:
        seed: the run's seed.
        epoch: the epoch (>= 0).
        paths: the group's four image paths, in batch order.

    Returns:
        A new generator keyed by the group's paths, so the coin is the same whichever worker collates.
    """
    key = zlib.crc32("\0".join(paths).encode("utf-8", "surrogateescape"))
    return np.random.default_rng([seed_entropy(seed), epoch, key])


def split_rng(seed: int) -> np.random.Generator:
    """The generator of ``yolo-data split``'s draws (the order of groups of one size).

    Args:
        seed: the split's seed.

    Returns:
        A new generator; the same seed gives the same draws.
    """
    return np.random.default_rng([seed_entropy(seed), SPLIT_TAG])
