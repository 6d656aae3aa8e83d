"""Which images each rank loads in which order, per epoch: shuffling, rect batches, image weights,
class-balanced repeats, the split between ranks, and resuming mid-epoch.

The epoch is first laid out as one *global* order, drawn from a generator seeded with (seed, epoch)
(seeds.epoch_rng), that no rank count enters: global step ``s`` is places ``[s * B, (s + 1) * B)`` of
that order, ``B`` being the global batch (per-rank batch x world size).  Rank ``r`` of ``w`` takes the
``r``-th slice of ``b = B / w`` places of each step.  So for a fixed seed and global batch every step has the same images
on 1, 2 or 8 ranks, and a run stopped after step ``k`` can go on from step ``k`` on any of them.
With repeat factors (class balance, balance.py) the order is the epoch's repeat draws, shuffled:
``floor(sum r_i)`` places every epoch instead of n.

Places are also cut into *partner groups* of ``group`` consecutive places (mosaic and mixup partners
are drawn within an item's group, see ``YoloDataset.__getitems__``); every rank takes whole groups
when ``group`` divides ``b``, which is what keeps the mosaics equal across world sizes too.

Everything here is O(n) array arithmetic, computed once per epoch; ``len()`` is O(1).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from itertools import repeat
from typing import Iterator, NamedTuple, Optional, Tuple

import numpy as np
from torch.utils.data import Sampler

from .. import distributed
from .balance import epoch_length, repeat_draws
from .seeds import check_seed, epoch_rng


class SharedEpoch:
    """An epoch number in shared memory, written in the main process by one owner (a loader's
    YoloSampler when each pass starts; ``dataset.set_epoch`` for a dataset used without one) and read by
    persistent DataLoader workers (the dataset's items, the quad collate), so workers need no restart
    per epoch."""

    def __init__(self, epoch: int = 0):
        import torch
        self._value = torch.full((1,), int(epoch), dtype=torch.int64).share_memory_()

    def get(self) -> int:
        return int(self._value[0])

    def set(self, epoch: int) -> None:
        self._value[0] = int(epoch)


class ItemKey(NamedTuple):
    """What a YoloSampler hands the dataset for one item: ``position`` (0..n-1, an entry of
    ``dataset.indices``) and ``draw``, the item's place in the epoch's global order (0 for a plain
    ``dataset[i]``).  The dataset keys the item's randomness by image and draw, so an image drawn twice
    in an epoch is augmented independently, the same on any number of ranks and workers."""
    position: int
    draw: int = 0


def global_order(n: int, rng: np.random.Generator, shuffle: bool, weights: Optional[np.ndarray] = None,
                 rect_batch: int = 0) -> np.ndarray:
    """The epoch's global order of dataset positions.

    Args:
        n: the dataset's length.
        rng: the epoch's generator (seeds.epoch_rng).
        shuffle: a new order every epoch; False keeps dataset order (or rect batches in order).
        weights: (n,) non-negative image weights: draw n positions with replacement (ignored with
            ``rect_batch``).
        rect_batch: > 0: positions come in rect batches of that many consecutive positions (the
            dataset sorted them by aspect ratio); batches stay whole, full ones are shuffled (with
            ``shuffle``), a partial one stays last.

    Returns:
        (n,) int64 positions: weighted draws, a permutation (``shuffle``) or the identity.
    """
    if weights is not None and not rect_batch:
        return weighted_draws(weights, n, rng)
    if rect_batch:
        full = n // rect_batch
        first = rng.permutation(full) if shuffle else np.arange(full)
        whole = (first[:, None] * rect_batch + np.arange(rect_batch)).ravel()
        return np.concatenate([whole, np.arange(full * rect_batch, n)]).astype(np.int64)
    return (rng.permutation(n) if shuffle else np.arange(n)).astype(np.int64)


def weighted_draws(weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions drawn independently with probability weights / weights.sum().

    Inverse CDF on sorted uniforms, then a shuffle: the same distribution as k independent draws
    (a random order of a sorted iid sample is an iid sample), and about 6x faster than
    ``rng.choice(p=...)`` at a million, where unsorted lookups miss the cache (0.34 s -> 0.055 s).

    Args:
        weights: (n,) non-negative, not all zero.
        k: how many to draw.
        rng: the generator to draw from.

    Returns:
        (k,) int64 positions in [0, n), never one of zero weight.
    """
    cdf = np.cumsum(weights, dtype=np.float64)
    u = rng.random(k) * cdf[-1]
    u.sort()
    out = np.searchsorted(cdf, u, side="right")  # never a zero-weight position: its CDF step is empty
    np.minimum(out, np.flatnonzero(weights)[-1], out=out)  # u rounded up to the total
    rng.shuffle(out)
    return out.astype(np.int64)


def balanced_order(factors: np.ndarray, length: int, rng: np.random.Generator, shuffle: bool) -> np.ndarray:
    """The epoch's order under repeat factors (class balance).

    Args:
        factors: (n,) float64 repeat factors r_i >= 1 (balance.repeat_factors).
        length: the epoch's number of draws (balance.epoch_length: floor(sum r_i)).
        rng: the epoch's generator.
        shuffle: a random order; False sorts them (each image's draws together, in dataset order).

    Returns:
        (length,) int64 positions: the epoch's repeat draws (balance.repeat_draws).
    """
    draws = repeat_draws(factors, length, rng)
    if shuffle:
        rng.shuffle(draws)
    else:
        draws.sort()
    return draws


def _checked_factors(factors, n: int, rect: bool) -> Optional[np.ndarray]:
    """``factors`` as a read-only (n,) float64 array of finite numbers >= 1, or None; a ValueError otherwise."""
    if factors is None:
        return None
    if rect:
        raise ValueError("repeat factors (class balance) and rect batches do not go together: repeated images "
                         "would break the batches' shapes")
    r = np.array(factors, dtype=np.float64)
    if r.shape != (n,) or not np.isfinite(r).all() or (r < 1).any():
        raise ValueError(f"repeat factors must be {n} finite numbers >= 1 (one per image), got shape {r.shape}")
    r.flags.writeable = False
    return r


@dataclass(frozen=True)
class StepLayout:
    """How a global order of ``length`` places is cut into steps and shared between ``world`` ranks.

    Full steps: rank r takes places ``[s*B + r*b, s*B + (r+1)*b)``.  The last step, when the order does
    not fill it (``length % B`` places, dropped with ``drop_last``), is shared in whole groups of
    ``group`` places, as evenly as they go; when it has fewer groups than ranks, the ranks left without
    one repeat a group from the start of the epoch (their places come after ``length``, so their items
    are augmented as new draws), because every rank must take the same number of steps.
    """
    length: int
    rank_batch: int
    world: int
    group: int = 1
    drop_last: bool = False

    @property
    def global_batch(self) -> int:
        return self.rank_batch * self.world

    @property
    def full_steps(self) -> int:
        return self.length // self.global_batch

    @property
    def rest(self) -> int:
        """Places in the last, partial step (0 when there is none)."""
        return 0 if self.drop_last else self.length - self.full_steps * self.global_batch

    @property
    def steps(self) -> int:
        return self.full_steps + (1 if self.rest else 0)

    def _last_step(self, rank: int) -> Tuple[np.ndarray, np.ndarray]:
        """(places, sources) of ``rank`` in the partial step: ``sources`` index the global order."""
        if not self.rest:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        start, g = self.full_steps * self.global_batch, self.group
        units = -(-self.rest // g)
        if units >= self.world:
            lo, hi = rank * units // self.world, (rank + 1) * units // self.world
            places = np.arange(start + lo * g, min(start + hi * g, self.length), dtype=np.int64)
            return places, places
        if rank < units:
            places = np.arange(start + rank * g, min(start + (rank + 1) * g, self.length), dtype=np.int64)
            return places, places
        k = rank - units  # a padding group: the epoch's k-th group again, at places after the order
        base = -(-self.length // g) * g + k * g
        return base + np.arange(g, dtype=np.int64), (k * g + np.arange(g, dtype=np.int64)) % self.length

    def rank_items(self, rank: int, start_step: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """(places, sources), (m,) int64 each, of ``rank`` from global step ``start_step`` on, in order."""
        if start_step > self.full_steps:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        b, steps = self.rank_batch, np.arange(start_step, self.full_steps, dtype=np.int64)
        places = (steps[:, None] * self.global_batch + rank * b + np.arange(b)).ravel()
        last_places, last_sources = self._last_step(rank)
        return np.concatenate([places, last_places]), np.concatenate([places, last_sources])

    def rank_length(self, rank: int) -> int:
        """Items of ``rank`` in a whole epoch (O(1) but for the last step's few groups)."""
        return self.full_steps * self.rank_batch + len(self._last_step(rank)[0])


def digest(values: Optional[np.ndarray]) -> Optional[str]:
    """A short fingerprint of an array for a resume state.

    Args:
        values: an array (image weights, ``dataset.indices``), or None.

    Returns:
        The first 32 hex digits of the sha256 of its dtype and bytes, or None for None.
    """
    if values is None:
        return None
    a = np.ascontiguousarray(values)
    return hashlib.sha256(a.dtype.str.encode() + a.tobytes()).hexdigest()[:32]


def partner_group_size(wanted: int, batch_size: int) -> int:
    """The partner-group size a sampler uses.

    Args:
        wanted: the group size asked for (``partner_group``).
        batch_size: the per-rank batch.

    Returns:
        ``wanted`` when it divides the batch (every rank then takes whole groups), else ``batch_size``.
    """
    return wanted if wanted > 0 and batch_size % wanted == 0 else batch_size


class YoloSampler(Sampler[ItemKey]):
    """This rank's items, one epoch at a time, as ItemKeys (see the module's docstring).

    - image weights (``set_weights``): each epoch draws n positions with replacement, weighted.
    - epoch: ``set_epoch(e)`` as with DistributedSampler; without it each new pass advances the
      epoch by one.
    - ``resume_at(epoch, step)``: the next pass of ``epoch`` starts at global step ``step``.

    Args:
        n: the dataset's length (positions 0..n-1).
        batch_size: per rank; the global batch is ``batch_size * world_size``.
        shuffle: a new global order every epoch.
        seed: with the epoch, seeds the epoch's order (seeds.epoch_rng).
        rank: this process's global rank; None: asked of torch.distributed now (0 outside DDP).
        world_size: the number of ranks; None: asked of torch.distributed now (1 outside DDP).
        rect: positions come in rect batches of one global batch each (``dataset.batch``); a step
            is one rect batch, so all ranks' images of a step share its shape.
        drop_last: leave out the last, partial step.
        shared_epoch: the run's SharedEpoch, which only this sampler writes, before the first key of a
            pass is produced (before any worker fetches an item of that pass).
        group: partner-group size; one that does not divide ``batch_size`` becomes ``batch_size``
            (ranks always take whole groups).  1: every item its own group.
        repeat_factors: (n,) float64 r_i >= 1 (balance.repeat_factors): each epoch is ``floor(sum r_i)``
            draws, image i about r_i times (balance.repeat_draws), shuffled; fixed for the sampler's life
            (the epoch's length depends on them).  Not with rect or image weights.

    Raises:
        TypeError: a seed that is not a whole number (seeds.check_seed).
        ValueError: repeat factors that are not n finite numbers >= 1, or that come with ``rect``.
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool = False, seed: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None, rect: bool = False,
                 drop_last: bool = False, shared_epoch: Optional[SharedEpoch] = None, group: int = 1,
                 repeat_factors: Optional[np.ndarray] = None):
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, check_seed(seed)
        self.repeat_factors = _checked_factors(repeat_factors, n, rect)
        # rank and world size are asked now (at construction), never at import
        self.rank = max(distributed.get_rank() if rank is None else rank, 0)
        self.world_size = distributed.get_world_size() if world_size is None else world_size
        self.rect = rect
        self.drop_last = drop_last
        self.shared_epoch = shared_epoch
        self.group = partner_group_size(group, batch_size)
        length = n if self.repeat_factors is None else epoch_length(self.repeat_factors)
        self.layout = StepLayout(length, batch_size, self.world_size, self.group, drop_last)
        self.weights: Optional[np.ndarray] = None
        self.version = 0  # counts set_weights and resume_at calls (the loader's early start compares it)
        self.epoch = 0
        self.start_step = 0  # of the next pass (resume_at)
        self.pass_start = 0  # the global step the current pass started at
        self._explicit = False
        self._started = False
        self._order: Optional[Tuple[tuple, np.ndarray]] = None  # (key, global order) of the last epoch used

    @property
    def global_batch(self) -> int:
        """Images per global step: the per-rank batch times the world size."""
        return self.batch_size * self.world_size

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (as DistributedSampler.set_epoch); a resume point of another
        epoch is dropped.

        Args:
            epoch: the epoch, 0-based; with the seed it decides the epoch's order and every item's draws.
        """
        if int(epoch) != self.epoch:
            self.start_step = 0  # a resume point belongs to its own epoch
        self.epoch = int(epoch)
        self._explicit = True

    def set_weights(self, weights: Optional[np.ndarray]) -> None:
        """Weight the draws of the following passes (YOLOv5's ``--image-weights``).

        Args:
            weights: (n,) non-negative image weights, not all zero (e.g. labels_to_image_weights), or
                None for uniform.

        Raises:
            ValueError: weights of another shape, negative, not finite or all zero, or a sampler with
                repeat factors.
        """
        if weights is not None:
            if self.repeat_factors is not None:
                raise ValueError("image weights and repeat factors (class balance) both weight the draws; "
                                 "this sampler has repeat factors")
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != (self.n,) or not np.isfinite(weights).all() or (weights < 0).any() \
                    or weights.sum() <= 0:
                raise ValueError(f"image weights must be {self.n} non-negative numbers, not all zero")
        self.weights = weights
        self.version += 1

    def resume_at(self, epoch: int, step: int) -> None:
        """Make the next pass epoch ``epoch`` from global step ``step`` (a pass whose every step was
        done counts as finished: the next pass is then ``epoch + 1``, as after a whole pass).

        Args:
            epoch: the saved epoch.
            step: global steps of it already done, 0..``layout.steps``.
        """
        self.version += 1
        self._started = False
        if step >= self.layout.steps:
            self.epoch, self.start_step, self._explicit = int(epoch) + 1, 0, False
        else:
            self.epoch, self.start_step, self._explicit = int(epoch), int(step), True

    def position(self, yielded: int) -> Tuple[int, int]:
        """Where the run stands, for a resume state.

        Args:
            yielded: batches the loader handed out in the current pass.

        Returns:
            (epoch, global step) after ``yielded`` steps of the current pass; before any pass, after
            ``resume_at``, or once ``set_epoch`` was called since the pass began (a checkpoint taken at
            the start of an epoch, before its first batch), where the next pass begins.
        """
        if not self._started or self._explicit:
            return self.epoch, self.start_step
        return self.epoch, self.pass_start + yielded

    def keep_started_pass(self, epoch: int) -> bool:
        """For a pass started at ``epoch`` but not yet handed out (the loader's early start): whether it
        is still the pass to make.

        Args:
            epoch: the epoch the pass was started for.

        Returns:
            True when no ``set_epoch`` to another epoch came since (one to the same epoch then counts
            as used).
        """
        if self._explicit and self.epoch != epoch:
            return False
        self._explicit = False
        return True

    def forget_pass(self) -> None:
        """Undo the bookkeeping of a pass that was started but never handed out (the loader's early
        start, when the training script changed something before its first pass)."""
        self._started = False
        self.start_step = self.start_step or self.pass_start

    # -- the global order for an epoch ---------------------------------------------------------------
    def order(self) -> np.ndarray:
        """The current epoch's global order (computed once per epoch).

        Returns:
            (layout.length,) int64 dataset positions: n of them, or floor(sum r_i) with repeat factors.
        """
        key = (self.epoch, self.version if self.weights is not None else -1)
        if self._order is None or self._order[0] != key:
            rng = epoch_rng(self.seed, self.epoch)
            if self.repeat_factors is not None:
                order = balanced_order(self.repeat_factors, self.layout.length, rng, self.shuffle)
            else:
                order = global_order(self.n, rng, self.shuffle, self.weights, self.global_batch if self.rect else 0)
            self._order = key, order
        return self._order[1]

    def _plan(self, start_step: int = 0):
        """(this rank's positions, their places in the epoch's global order), from ``start_step`` on."""
        places, sources = self.layout.rank_items(self.rank, start_step)
        return self.order()[sources], places

    def __iter__(self) -> Iterator[ItemKey]:
        if self._started and not self._explicit:
            self.epoch += 1
            self.start_step = 0
        self._started, self._explicit = True, False
        self.pass_start, self.start_step = self.start_step, 0
        positions, places = self._plan(self.pass_start)
        if self.shared_epoch is not None:
            self.shared_epoch.set(self.epoch)
        # tuple.__new__ builds each ItemKey in C: the NamedTuple's own __new__ is Python code, which at
        # a million items per epoch cost twice as long (0.67 s against 0.30 s on 2 cores)
        return map(tuple.__new__, repeat(ItemKey), zip(positions.tolist(), places.tolist()))

    def __len__(self) -> int:
        """This rank's items in a whole epoch (the same number of steps on every rank)."""
        return self.layout.rank_length(self.rank)


class ShardSampler(Sampler[int]):
    """Evaluation under DDP: rank ``rank`` of ``world`` takes a contiguous run of whole batches, every
    image exactly once (no padding: evaluation needs no equal step counts, and an image seen twice
    would count twice in the metrics).  The first ``nb % world`` ranks take one batch more.  Keeps
    rect batches whole, so each keeps its one shape."""

    def __init__(self, n: int, batch_size: int, rank: int, world: int):
        nb = math.ceil(n / batch_size)
        per, extra = divmod(nb, world)
        first = rank * per + min(rank, extra)
        count = per + (1 if rank < extra else 0)
        self.start = min(n, first * batch_size)
        self.stop = min(n, (first + count) * batch_size)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.stop - self.start

    def set_epoch(self, epoch: int) -> None:  # evaluation order does not change
        pass
