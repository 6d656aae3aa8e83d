"""``YoloDataLoader``: torch's DataLoader whose persistent workers start early and whose position in the
epoch can be saved and resumed (the loader every entry point builds, see build.py)."""
from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from typing import Callable, Iterable, List, Optional

import numpy as np
from torch.utils.data import DataLoader

from ..runtime import torch_private
from ..sampling.sampler import YoloSampler, digest

LOGGER = logging.getLogger("yolo_data")
STATE_VERSION = 1  # of YoloDataLoader.state_dict()
MAX_EPOCH = 2**62  # the epoch is kept in an int64 and mixed into seeds


class YoloDataLoader(DataLoader):
    """A DataLoader whose persistent workers start, and begin on the first pass's batches, when it is
    built, as YOLOv5's InfiniteDataLoader does: the first batches are ready when training starts, instead
    of costing their full time at the first ``iter`` (about 1.7 s on YOLOv5's first validation pass).

    The early pass is handed out by the first ``iter`` only if nothing that decides it changed since:
    the epoch (``sampler.set_epoch`` to another one), the sampler's weights or resume point,
    ``dataset.indices``, the dataset's ``item_settings()`` (its hyp, ``mosaic``, ``close_mosaic()``).
    Otherwise it is dropped (torch's reset discards what the workers had fetched) and the pass is made
    anew with the new settings, exactly as without the early start.
    ``early_start=False``: the workers start at the first ``iter``, as with a plain DataLoader.

    ``state_dict()`` / ``load_state_dict(state)`` (torchdata's StatefulDataLoader convention): where
    the loader stands in its epoch, as a small JSON-serialisable dict; after loading it, the loader
    yields exactly the batches the saved run would have yielded next, on any number of ranks with the
    same global batch (see sampler.py).

    Args:
        *args: torch's DataLoader arguments (``dataset``, ``batch_size``, ...), as build.py passes them.
        early_start: start the persistent workers on the first pass now (only with workers, persistent
            workers and a YoloSampler); False: at the first ``iter``.
        **kwargs: torch's DataLoader keyword arguments (``sampler``, ``collate_fn``, ``num_workers``,
            ``persistent_workers``, ...).
    """

    def __init__(self, *args, early_start: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        # what each batch goes through on its way out: device.stage.DeviceStage for Settings(device=...)
        self.device_stage: Optional[Callable] = None
        self._early = None  # (what decided the early pass, its iterator)
        self._yielded = 0  # batches handed out by the current pass
        self._expect = None  # (what, digest) a resumed pass checks before it starts
        self._digest = None  # of the dataset's names and labels, for state_dict
        if (early_start and self.num_workers > 0 and self.persistent_workers
                and isinstance(self.sampler, YoloSampler)):
            # persistent workers: torch makes the iterator it keeps between passes, forking them, and
            # returns it; the sampler starts its pass
            it = DataLoader.__iter__(self)
            self._early = (self._settings(), it)

    @property
    def _index_sampler(self):
        """What torch's iterators draw the batches' keys from (a private torch property, see
        torch_private.py): for a dataset that reads ahead (images in a bucket), each batch's keys
        carry the keys of the batch the same process is given next (BatchKeys)."""
        batches = torch_private.index_sampler(self)
        if ("index_sampler" not in torch_private.PRIVATE or self.batch_sampler is None
                or not getattr(self.dataset, "reads_ahead", False)):
            return batches
        return LookAhead(batches, max(self.num_workers, 1))

    def discard_early_pass(self) -> None:
        """Drop the pass the workers began at construction: the next ``iter`` makes its pass anew, with
        whatever changed since (what ``__iter__`` does itself for the epoch, weights and indices; call
        this after changing something else those batches depend on, e.g. ``dataset.close_mosaic()``)."""
        if self._early is not None:
            self._early = None
            self.sampler.forget_pass()

    def _settings(self):
        items = getattr(self.dataset, "item_settings", None)  # also takes in a hyp dict changed in place
        # any sampler may drive the loader (ShardSampler under DDP evaluation, a script's own): only the
        # YoloSampler has an epoch and a version
        return (getattr(self.sampler, "epoch", None), getattr(self.sampler, "version", None),
                getattr(self.dataset, "indices_version", 0), items() if items is not None else None)

    def __iter__(self):
        early, self._early = self._early, None
        now = self._settings()  # at every pass start: a hyp dict changed in place is taken in here
        if self._expect is not None:
            self._check_resumed()
        if early is not None:
            started, it = early
            if now[1:] == started[1:] and self.sampler.keep_started_pass(started[0]):
                return _Counted(it, self)
            self.sampler.forget_pass()  # the reset below makes the pass the script asked for
        return _Counted(super().__iter__(), self)

    # -- resuming ------------------------------------------------------------------------------------
    def _fixed(self) -> dict:
        """What must be equal for a saved state to mean the same batches here."""
        s = self.sampler
        # repeat factors (class balance) decide the epoch's draws and length; a state saved without the
        # key had none, which compares equal to a loader without them (None)
        return {"images": s.n, "dataset": self._dataset_digest(), "global_batch": s.global_batch,
                "seed": s.seed, "shuffle": bool(s.shuffle), "rect": bool(s.rect), "group": s.group,
                "drop_last": bool(s.drop_last), "repeat_factors": digest(getattr(s, "repeat_factors", None))}

    def _dataset_digest(self) -> Optional[str]:
        """The images' names and labels (store.names_digest), computed once; None for another dataset."""
        if self._digest is None:
            store = getattr(self.dataset, "store", None)
            self._digest = store.names_digest() if hasattr(store, "names_digest") else ""
        return self._digest or None

    def _varying(self) -> dict:
        """Digests of what a training script sets per epoch (checked when the resumed pass starts)."""
        indices = getattr(self.dataset, "indices", None)
        identity = indices is None or np.array_equal(indices, np.arange(len(indices)))
        return {"weights": digest(self.sampler.weights), "indices": None if identity else digest(indices)}

    def state_dict(self) -> dict:
        """Where the loader stands in its epoch.  Take it after the step's batch was used (e.g. with the
        model's checkpoint).

        Returns:
            {'epoch', 'step' (global steps handed out in that epoch), ...}: JSON-serialisable, a few
            hundred bytes, with what must match on resuming (images, dataset digest, global batch, seed,
            shuffle, rect, partner group, drop_last, repeat factors) and digests of the weights and indices.

        Raises:
            TypeError: the loader's sampler is not its own YoloSampler.
        """
        if not isinstance(self.sampler, YoloSampler):
            raise TypeError("state_dict needs the loader's own YoloSampler")
        epoch, step = self.sampler.position(self._yielded)
        return {"yolo_data_loader": STATE_VERSION, "epoch": epoch, "step": step,
                **self._fixed(), **self._varying()}

    def load_state_dict(self, state: dict) -> None:
        """Go on from ``state`` (see state_dict): the next pass is the saved epoch from the saved step
        (or the next epoch when that one was done).  Image weights and ``dataset.indices`` are set by the
        training script each epoch: the resumed pass checks that they equal the saved run's when it starts.

        Args:
            state: a dict from ``state_dict()`` (after a JSON round trip too).

        Raises:
            ValueError: ``state`` is not a loader state of this version, or was made by a loader that
                would give other batches (other images, global batch, seed, shuffle, rect, repeat factors).
        """
        if not isinstance(state, dict) or state.get("yolo_data_loader") != STATE_VERSION:
            raise ValueError(f"not a yolo_data loader state (version {STATE_VERSION}): {str(state)[:200]}")
        steps = self.sampler.layout.steps
        for key, top in (("epoch", MAX_EPOCH), ("step", steps)):
            value = state.get(key)
            if type(value) is not int or not 0 <= value <= top:  # bool, float, text: a damaged state
                raise ValueError(f"loader state: '{key}' must be a whole number in 0..{top}"
                                 f"{' (steps per epoch here)' if key == 'step' else ''}, got {value!r}")
        here = self._fixed()
        if "dataset" not in state:  # made before states named their dataset: compared by size alone
            here.pop("dataset")
        differ = [f"{k} {state.get(k)!r} -> {v!r}" for k, v in here.items() if state.get(k) != v and k != "group"]
        if state.get("group") != here["group"] and not differ:  # the same images, other mosaic partners
            LOGGER.warning(f"resuming with partner groups of {here['group']} where the saved run had "
                           f"{state.get('group')}: the remaining steps have the saved run's images, but their "
                           "mosaics differ (see Settings' partner_group)")
        if differ:
            raise ValueError("this loader would give other batches than the saved one: " + ", ".join(differ)
                             + " (resuming needs the same dataset, seed, settings and global batch = "
                             "per-rank batch x world size; 'dataset' is a digest of the image names and labels, "
                             "'repeat_factors' of the class-balance factors)")
        self.sampler.resume_at(int(state["epoch"]), int(state["step"]))
        self._expect = {"weights": state.get("weights"), "indices": state.get("indices")}
        self._yielded = 0

    def _check_resumed(self) -> None:
        expect, self._expect = self._expect, None
        now = self._varying()
        for what, fix in (("weights", "sampler.set_weights"), ("indices", "dataset.indices")):
            if now[what] != expect[what]:
                raise ValueError(f"resumed pass: the {what} differ from the saved run's (set them with {fix} "
                                 "as that run had them for this epoch before iterating)")


class BatchKeys(list):
    """A batch's keys, as a list, and in ``ahead`` the keys of the batch the same process is given next
    (None at the end of a pass): the dataset fetches that batch's images while it makes this one."""
    ahead: Optional[list] = None


class LookAhead:
    """The batches of ``batches`` as BatchKeys, each told the batch ``ahead`` places later: torch's
    DataLoader hands batches to its ``ahead`` workers in turn (in order, one worker after the other),
    so that is the batch the same worker is given next (with 0 workers, ``ahead`` = 1: the next one).
    A wrong guess (another dispatch) costs fetches, never a different batch."""

    def __init__(self, batches: Iterable[List], ahead: int):
        self.batches, self.ahead = batches, ahead

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        it = iter(self.batches)
        window = deque(islice(it, self.ahead))
        for later in it:
            keys = BatchKeys(window.popleft())
            keys.ahead = later
            window.append(later)
            yield keys
        yield from map(BatchKeys, window)


class _Counted:
    """The loader's iterator, counting the batches it hands out (for ``state_dict``)."""

    def __init__(self, it, loader: YoloDataLoader):
        self._it, self._loader = it, loader
        loader._yielded = 0

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._it)
        self._loader._yielded += 1
        stage = self._loader.device_stage
        return batch if stage is None else stage(batch)

    def __len__(self) -> int:
        return len(self._it)
