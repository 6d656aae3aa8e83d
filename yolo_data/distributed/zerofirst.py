"""Rank 0 first: one process per node does the work, the others wait and then read its result.

Waiting uses the process group's key-value store rather than a barrier: a barrier is a collective
with the group's timeout (30 min by default, often 5-10 s in tests), which a long scan of a large
dataset exceeds; and a barrier cannot tell the waiting ranks that rank 0 failed.  Local rank 0 writes
``done`` or ``error: ...`` under the block's key for its node; the others poll for it with no time
limit, log progress now and then, and raise at once if rank 0 failed.

The block's key is named by the caller (``key=``, see keys.py): the package names each of its blocks
by what it builds, so the k-th block of a name on one local rank waits for the k-th block of the same
name on local rank 0, whatever other blocks either entered.  Blocks without a key (YOLOv5's
``torch_distributed_zero_first(local_rank)`` in a user's script) pair by their order among the blocks
without a key, as in YOLOv5.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from . import keys, ranks
from .keys import ZeroFirstError

NO_KEY = ""  # the name of every block without a key: they pair by their order among themselves

_active = threading.local()  # .block: the innermost block this thread is in, or None


@dataclass
class Block:
    """The block a thread is in: the store, the block's key for this node, this process's local rank,
    the name the caller gave it, and when local rank 0 last reported progress."""
    store: object
    key: str
    local_rank: int
    name: str
    last_report: float = 0.0


def current_block() -> Optional[Block]:
    """The innermost ``torch_distributed_zero_first`` block this thread is in, with a store; else None."""
    return getattr(_active, "block", None)


def _barrier() -> None:
    if dist.get_backend() == "nccl":
        import torch  # device ids only for a backend that takes them
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def report_progress(text: str) -> None:
    """Called by local rank 0 inside a block (the scan does): waiting ranks log ``text``."""
    block = current_block()
    if block is None or block.local_rank != 0:
        return
    now = time.monotonic()
    if now - block.last_report >= 1.0:  # a store round trip per second at most
        block.last_report = now
        try:
            block.store.set(block.key + "/progress", text)
        except Exception:
            pass


def share_from_local_rank_0(tag: str, make):
    """Inside ``torch_distributed_zero_first``: local rank 0 calls ``make()`` and publishes the string
    it returns under ``tag`` for this block and node; the other local ranks (which run after it) get
    that string without calling ``make``.  Outside a block, or without a store: ``make()`` everywhere.

    Args:
        tag: names what is shared (the split's labels, an image cache), the same text on every rank.
        make: () -> str, called on local rank 0 only.

    Returns:
        (value, made_here).  The image cache uses it to hand its descriptor to the other ranks.
    """
    block = current_block()
    if block is None:
        return make(), True
    if block.local_rank == 0:
        value = make()
        block.store.set(f"{block.key}/share/{tag}", value)
        return value, True
    return block.store.get(f"{block.key}/share/{tag}").decode("utf-8"), False


def _wait_for(store, key: str, local_rank: int) -> None:
    def waiting(waited: float) -> str:
        progress = ""
        if store.check([key + "/progress"]):
            progress = ": " + store.get(key + "/progress").decode("utf-8", "replace")
        return f"local rank {local_rank}: waiting for local rank 0 ({waited:.0f} s){progress}"

    try:
        keys.poll(store, key, waiting)
        value = store.get(key).decode("utf-8", "replace")
    except (RuntimeError, OSError) as e:  # DistStoreError: the store went away with its host process
        raise ZeroFirstError(f"rank {dist.get_rank()} lost the process group's store while waiting for "
                             f"local rank 0, whose process has probably ended ({e})") from None
    if value != "done":
        store.add(key + "/ack", 1)  # tells rank 0 the error arrived, so it may exit now
        raise ZeroFirstError(f"local rank 0 failed inside torch_distributed_zero_first, so rank "
                             f"{dist.get_rank()} stops too: {value[len('error: '):]}")


def _report_failure(store, key: str, error: BaseException) -> None:
    """Publish rank 0's error, then wait (briefly) until the other local ranks have read it: if this
    process exits at once it may take the store down with it before they look."""
    try:
        store.set(key, f"error: {type(error).__name__}: {error}")
        # only local rank 0 is here, so it cannot ask the others (node_ranks); at worst the world's
        # size, and then it waits the whole ACK_SECONDS
        keys.await_acks(store, key, (ranks.known_local_world_size() or dist.get_world_size()) - 1)
    except (RuntimeError, OSError):  # the store went away (global rank 0 ended): the error itself is raised
        pass


@contextmanager
def torch_distributed_zero_first(local_rank: int, key: Optional[str] = None):
    """Run the block on local rank 0 of each node first; the other local ranks wait, then run it.

    A no-op when torch.distributed is not initialised or ``local_rank`` is -1.  If local rank 0 raises
    inside the block, the others raise :class:`ZeroFirstError` with its message instead of running
    the block.  Works for any backend (gloo, NCCL) and needs no collective.

    Args:
        local_rank: this process's rank on its node (LOCAL_RANK), or -1 outside DDP.
        key: names what the block does (e.g. the dataset it builds), the same text on every local rank
            of a node.  The k-th block of a key on a rank waits for the k-th block of that key on its
            node's local rank 0, whatever other blocks either entered in between.  None (YOLOv5's
            signature): the block pairs by its order among the blocks without a key, so every local
            rank must enter those in the same order, as YOLOv5's train.py does; the package's own
            blocks all have keys and do not count among them.

    Yields:
        None, once this rank may run the block: at once on local rank 0 (and outside DDP), after local
        rank 0 finished its block on the other local ranks.

    Raises:
        ZeroFirstError: on a local rank other than 0, when local rank 0 raised inside its block or the
            process group's store went away while this rank waited.
    """
    if local_rank is None or local_rank < 0 or not ranks.is_initialized():
        yield
        return
    store = keys.default_store()
    if store is None:  # fall back to YOLOv5's two barriers
        if local_rank != 0:
            _barrier()
        yield
        if local_rank == 0:
            _barrier()
        return
    name = NO_KEY if key is None else str(key)
    # torchrun numbers ranks node by node; srun may place them cyclically (node 0: ranks 0, 2, 4), and
    # then the node's ranks were counted through the store (create_dataloader asks before coming here)
    known = ranks.known_node_ranks() if not os.environ.get("LOCAL_WORLD_SIZE") else None
    leader = known.leader if known is not None else dist.get_rank() - local_rank
    block = Block(store, f"{keys.named_key('zero_first', name)}/{leader}", local_rank, name)
    outer = current_block()
    if local_rank != 0:
        _wait_for(store, block.key, local_rank)
    _active.block = block
    try:
        yield
    except BaseException as e:
        if local_rank == 0:
            _report_failure(store, block.key, e)
        raise
    else:
        if local_rank == 0:
            store.set(block.key, "done")
    finally:
        _active.block = outer


@contextmanager
def wait_for_the_master(local_rank: Optional[int] = None, key: Optional[str] = None):
    """YOLOX's name for :func:`torch_distributed_zero_first`: local rank 0 of each node runs the block
    first, the other local ranks wait, then run it.

    Args:
        local_rank: this process's rank on its node; None: $LOCAL_RANK read now (0 if unset).
        key: names what the block does, as in :func:`torch_distributed_zero_first`.

    Yields:
        None, once this rank may run the block.

    Raises:
        ZeroFirstError: local rank 0 failed inside its block (on the other local ranks).
    """
    with torch_distributed_zero_first(ranks.get_local_rank(0) if local_rank is None else local_rank, key=key):
        yield
