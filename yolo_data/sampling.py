"""Which images each rank loads in which order, per epoch: shuffling, DDP shares, rect batches,
image weights.  Everything is drawn from a generator seeded with (seed, epoch), so every rank
computes the same global order and takes its own disjoint part of it."""
from __future__ import annotations

from typing import Callable, Iterator, List, Optional

import numpy as np
from torch.utils.data import Sampler

from . import distributed


class SharedEpoch:
    """An epoch number in shared memory: set in the main process (by the sampler), read by persistent
    DataLoader workers (by the dataset and the quad collate), so workers need no restart per epoch."""

    def __init__(self, epoch: int = 0):
        import torch
        self._value = torch.full((1,), int(epoch), dtype=torch.int64).share_memory_()

    def get(self) -> int:
        return int(self._value[0])

    def set(self, epoch: int) -> None:
        self._value[0] = int(epoch)


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator for one epoch's sampling decisions (``stream`` keeps unrelated uses apart)."""
    return np.random.default_rng([seed, epoch, stream, 0x5A3])


class YoloSampler(Sampler[int]):
    """Dataset indices for this rank, one epoch at a time.

    - ``shuffle``: a new permutation every epoch.
    - ``batch_index`` (rect): (n,) batch of each index; batches are kept whole (same images, same
      shape) and only their order is shuffled; a partial batch always comes last, so the DataLoader's
      chunks of ``batch_size`` never mix two rect batches.
    - DDP (``world_size`` > 1): every rank gets the same number of items, disjoint within an epoch
      (padded by repeating the first items/batches when the total does not divide), and the split
      changes every epoch when shuffling.
    - image weights (``set_weights``): each epoch draws n indices with replacement, weighted.
    - ``draw_tokens``: hand out ``place * n + index`` (place: the item's position in the epoch's global
      order) instead of ``index``; :class:`~yolo_data.dataset.YoloDataset` splits it again and keys the
      item's randomness by both, so an image drawn twice in an epoch is augmented independently.
    - epoch: ``set_epoch(e)`` as with DistributedSampler; without it each new pass advances the
      epoch by one, so augmentation differs between epochs in single-process training too.
      ``on_epoch(e)`` is called before the first index of a pass is produced (before any worker
      fetches an item of that pass).
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool = False, seed: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 batch_index: Optional[np.ndarray] = None, drop_last: bool = False,
                 on_epoch: Optional[Callable[[int], None]] = None, draw_tokens: bool = False):
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        # rank and world size are asked now (at construction), never at import
        self.rank = distributed.get_rank() if rank is None else rank
        self.world_size = distributed.get_world_size() if world_size is None else world_size
        self.rank = max(self.rank, 0)
        self.batch_index = batch_index
        self.drop_last = drop_last
        self.on_epoch = on_epoch
        self.draw_tokens = draw_tokens
        self.weights: Optional[np.ndarray] = None
        self.weights_version = 0  # counts set_weights calls (the loader's early start compares it)
        self.epoch = 0
        self._explicit = False
        self._started = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self._explicit = True

    def set_weights(self, weights: Optional[np.ndarray]) -> None:
        """(n,) non-negative image weights (e.g. labels_to_image_weights), or None for uniform."""
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != (self.n,) or (weights < 0).any() or weights.sum() <= 0:
                raise ValueError(f"image weights must be {self.n} non-negative numbers, not all zero")
        self.weights = weights
        self.weights_version += 1

    def keep_started_pass(self, epoch: int) -> bool:
        """For a pass started at ``epoch`` but not yet handed out (the loader's early start): whether it
        is still the pass to make, i.e. no ``set_epoch`` to another epoch since (one to the same epoch
        then counts as used)."""
        if self._explicit and self.epoch != epoch:
            return False
        self._explicit = False
        return True

    def forget_pass(self) -> None:
        """Undo the bookkeeping of a pass that was started but never handed out (the loader's early
        start, when the training script changed something before its first pass)."""
        self._started = False

    # -- the global order for an epoch ---------------------------------------------------------------
    def _batches(self) -> List[np.ndarray]:
        """The epoch's list of batches (rect) or of single items, before splitting between ranks."""
        rng = epoch_rng(self.seed, self.epoch)
        if self.weights is not None:
            order = rng.choice(self.n, size=self.n, p=self.weights / self.weights.sum())
        else:
            order = rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        if self.batch_index is None:
            return [order]
        nb = int(self.batch_index.max()) + 1
        groups = [np.flatnonzero(self.batch_index == b) for b in range(nb)]
        full = [g for g in groups if len(g) == self.batch_size]
        partial = [g for g in groups if len(g) != self.batch_size]
        if self.shuffle:
            full = [full[i] for i in rng.permutation(len(full))]
        return full + partial

    def _indices(self) -> np.ndarray:
        return self._plan()[0]

    def _plan(self):
        """(this rank's indices, their places in the epoch's global order, padding included)."""
        w, r = self.world_size, self.rank
        parts = self._batches()
        if self.batch_index is None:
            order = parts[0]
            if self.drop_last:
                per_rank = len(order) // w
            else:
                per_rank = -(-len(order) // w)
                order = np.resize(order, per_rank * w)  # repeats from the start to divide evenly
            return order[r:per_rank * w:w], np.arange(r, per_rank * w, w, dtype=np.int64)
        full = [g for g in parts if len(g) == self.batch_size]
        partial = [g for g in parts if len(g) != self.batch_size]
        if self.drop_last:
            batches = full[:len(full) // w * w]
        else:
            # Pad with repeated batches so every rank takes the same number of steps (DDP would hang
            # otherwise), inserted before the partial batch so that one stays last.
            pool = full or partial
            pads = [pool[i % len(pool)] for i in range(-(len(full) + len(partial)) % w)]
            batches = full + pads + partial
        starts = np.cumsum([0] + [len(b) for b in batches])
        mine = batches[r::w]
        places = [np.arange(starts[b], starts[b] + len(batches[b]), dtype=np.int64) for b in range(r, len(batches), w)]
        empty = np.zeros(0, np.int64)
        return np.concatenate(mine + [empty]).astype(np.int64), np.concatenate(places + [empty])

    def __iter__(self) -> Iterator[int]:
        if self._started and not self._explicit:
            self.epoch += 1
        self._started, self._explicit = True, False
        indices, places = self._plan()
        if self.on_epoch is not None:
            self.on_epoch(self.epoch)
        if self.draw_tokens:  # the dataset keys each item's randomness by image and place in the epoch
            return iter((places * self.n + indices).tolist())
        return iter(indices.tolist())

    def __len__(self) -> int:
        return len(self._indices())
