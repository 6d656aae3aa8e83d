"""Rank agreement: before the first batch every rank compares its numbers (images, boxes, steps per
epoch) with all the others' through the process group's store, and all raise at once when they differ.

A comparison is a meeting of every rank, keyed by the name the caller gives it (keys.py), so a rank
compares loader A with the other ranks' loader A.  Ranks that build their loaders in different orders
could never meet (each would wait in its own comparison for the others); every rank also claims the
n-th comparison it makes under one key, and when two ranks claim it for different names, all raise at
once saying so instead of waiting for ever.
"""
from __future__ import annotations

import json
import logging
import time
from typing import List, Optional

import torch.distributed as dist

from . import keys, ranks
from .keys import ZeroFirstError

LOGGER = logging.getLogger("yolo_data")

READ_ACK_SECONDS = 30.0  # how long rank 0 waits for the others to have read the values compared


class RanksDisagreeError(RuntimeError):
    """The ranks built different datasets (other files on other nodes, or files changed in between), or
    built the loaders they compare in different orders; training would hang at the first collective.
    The message says which ranks differ and how."""


def _describe(values: dict) -> str:
    return ", ".join(f"{v:,} {k}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def _claim(store, order: str, mine: dict) -> dict:
    """Who made this process's n-th comparison first, and for what: ``mine`` when this rank was first
    (or the store cannot compare and set: then nothing is checked)."""
    text = json.dumps(mine)
    try:
        got = store.compare_set(order, "", text)
    except (AttributeError, NotImplementedError):
        return mine
    return json.loads(got.decode("utf-8") if isinstance(got, bytes) else got)


def _out_of_order(store, order: str, message: str, rank: int, world: int) -> RanksDisagreeError:
    """The error every rank raises when the ranks' n-th comparisons differ; rank 0, which usually hosts
    the store, first waits (briefly) until the others have read it."""
    if rank == 0:
        keys.await_acks(store, order, world - 1)
    else:
        store.add(order + "/ack", 1)
    return RanksDisagreeError(message)


def _wait_for_all(store, names: List[str], order: str, what: str) -> Optional[str]:
    """Wait (no time limit) until every key of ``names`` is in the store; the message when, meanwhile,
    a rank said that the ranks compare in different orders, else None."""
    rank = dist.get_rank()
    pause, start, last_log = keys.POLL_SECONDS[0], time.monotonic(), time.monotonic()
    while not store.check(names):
        if store.check([order + "/differs"]):
            return store.get(order + "/differs").decode("utf-8", "replace")
        time.sleep(pause)
        pause = min(pause * 2, keys.POLL_SECONDS[1])
        if time.monotonic() - last_log >= keys.LOG_EVERY_SECONDS:
            last_log = time.monotonic()
            missing = [r for r, k in enumerate(names) if not store.check([k])]
            LOGGER.info(f"rank {rank}: waiting for ranks {missing[:8]} to build {what} "
                        f"({time.monotonic() - start:.0f} s)")
    return None


def check_ranks_agree(values: dict, what: str, key: Optional[str] = None) -> None:
    """Every rank publishes ``values`` in the process group's store and waits for all the others' (no
    time limit: a node may still be scanning).  A no-op without an initialised process group or its
    store.

    Args:
        values: a small JSON-able dict, e.g. images and steps per epoch.
        what: what is compared, for the messages (e.g. 'train: data/coco.yaml').
        key: names the comparison, the same text on every rank (a path that differs between nodes, each
            with its own copy, does not belong in it); the k-th comparison of a key on one rank meets
            the k-th of that key on the others.  None: ``what``.

    Raises:
        RanksDisagreeError: on every rank at once, when any rank's values differ from rank 0's (naming
            the ranks and their values), or when the ranks make their comparisons in different orders.
    """
    if not ranks.is_initialized() or ranks.get_world_size() < 2:
        return
    store = keys.default_store()
    if store is None:
        return
    base = keys.named_key("agree", what if key is None else str(key))
    order = keys.named_key("agree_order", "comparisons")  # this process's n-th comparison
    rank, world = dist.get_rank(), dist.get_world_size()
    names = [f"{base}/{r}" for r in range(world)]
    try:
        first = _claim(store, order, {"rank": rank, "what": what, "key": base})
        differs = None
        if first["key"] != base:
            differs = (f"the ranks compare their loaders in different orders: rank {first['rank']} compares "
                       f"{first['what']} where rank {rank} compares {what} (each rank's comparison number "
                       f"{int(order.rsplit('/', 1)[1]) + 1}). Every rank must build the loaders it compares in the same order: each "
                       "comparison waits for every rank, so ranks in different ones would wait for ever.")
            store.set(order + "/differs", differs)
        else:
            store.set(f"{base}/{rank}", json.dumps(values))
            differs = _wait_for_all(store, names, order, what)
        if differs is not None:
            raise _out_of_order(store, order, differs, rank, world)
        got = [json.loads(store.get(k).decode("utf-8")) for k in names]
        # Rank 0 usually hosts the store: if it went on and ended (a short script, a failing check)
        # while another rank was still reading, that rank would lose the store.  So every rank says
        # it has read, and rank 0 waits for those words, briefly (they follow within a round trip).
        store.add(f"{base}/read", 1)
        if rank == 0:
            deadline = time.monotonic() + READ_ACK_SECONDS
            while store.add(f"{base}/read", 0) < world and time.monotonic() < deadline:
                time.sleep(keys.POLL_SECONDS[0])
    except (RuntimeError, OSError) as e:
        if isinstance(e, RanksDisagreeError):
            raise
        raise ZeroFirstError(f"rank {rank} lost the process group's store while comparing {what} "
                             f"with the other ranks ({e})") from None
    differ = [r for r in range(1, world) if got[r] != got[0]]
    if differ:
        shown = "; ".join(f"rank {r}: {_describe(got[r])}" for r in differ[:4])
        more = f" (and {len(differ) - 4} more ranks)" if len(differ) > 4 else ""
        raise RanksDisagreeError(
            f"the ranks built different datasets for {what}: rank 0: {_describe(got[0])}; {shown}{more}. "
            "Every rank must see the same files: on several nodes give each the same copy of the dataset "
            "(same files, same labels); on one node do not change files while the job starts.")
