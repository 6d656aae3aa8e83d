"""Rank, world size, local rank and the ranks of this node, asked of ``torch.distributed`` (or the
environment) when a function is called, never at import.

The number of ranks on this node comes from $LOCAL_WORLD_SIZE (torchrun) or, where the launcher does
not set it (srun, mpirun), from the process group: every rank registers its host in the store once per
group (see :func:`node_ranks`).
"""
from __future__ import annotations

import logging
import os
import socket
import time
import weakref
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from . import keys
from .keys import ZeroFirstError

LOGGER = logging.getLogger("yolo_data")

_nodes = weakref.WeakKeyDictionary()  # process group -> NodeRanks: learnt once, and gone with the group


def is_initialized() -> bool:
    """Whether torch.distributed is available and its default process group initialised, now."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """Global rank, or -1 when torch.distributed is not initialised."""
    return dist.get_rank() if is_initialized() else -1


def get_world_size() -> int:
    """The number of ranks, or 1 when torch.distributed is not initialised."""
    return dist.get_world_size() if is_initialized() else 1


def get_local_rank(default: int = -1) -> int:
    """LOCAL_RANK as torchrun sets it, read now; ``default`` when absent."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value not in (None, "") else default


@dataclass(frozen=True)
class NodeRanks:
    """This process's place among the ranks of its node (host): ``local_world_size`` ranks there, of
    which this one is number ``local_rank`` (the node's global ranks in increasing order); ``leader``:
    the node's lowest global rank (its local rank 0)."""
    local_rank: int
    local_world_size: int
    leader: int = 0


def _host_id() -> str:
    """Names the node: the host name, and the kernel's boot id so that two machines given the same
    host name (containers started alike) are not taken for one."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def node_ranks() -> NodeRanks:
    """The ranks of this node as the process group knows them, asked now.

    Every rank counts itself under its host's key in the group's store, then waits (no time limit:
    another node may still be starting) until all world-size ranks have, and reads its host's list.
    The first call for a process group must be made by every rank (``create_dataloader`` does, with any
    rank but -1); later calls return the answer kept for that group without a round trip.  A store and
    not a collective: ranks reach ``create_dataloader`` at different times, and a collective would time
    out.  The store key is named 'process group' and its occurrence is the number of process groups this
    process asked about before (a store may outlive its group: a new group in the same processes can get
    the same store back).

    Returns:
        NodeRanks; (0, 1) without an initialised process group; without its store, the environment's
        LOCAL_RANK / LOCAL_WORLD_SIZE (else 0, 1).
    """
    if not is_initialized():
        return NodeRanks(0, 1)
    group = dist.group.WORLD
    known = _nodes.get(group)
    if known is not None:
        return known
    store = keys.default_store()
    if store is None:
        return NodeRanks(get_local_rank(0), int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    rank, world = dist.get_rank(), dist.get_world_size()
    key = keys.named_key("node", "process group")
    host = f"{key}/host/{_host_id()}"
    try:
        # counters, not one key per rank read by every rank: O(ranks on this node) round trips each
        slot = store.add(f"{host}/count", 1) - 1
        store.set(f"{host}/{slot}", str(rank))
        registered = store.add(f"{key}/registered", 1)
        pause, start, last_log = keys.POLL_SECONDS[0], time.monotonic(), time.monotonic()
        while registered < world:
            time.sleep(pause)
            pause = min(pause * 2, keys.POLL_SECONDS[1])
            registered = store.add(f"{key}/registered", 0)
            if time.monotonic() - last_log >= keys.LOG_EVERY_SECONDS:
                last_log = time.monotonic()
                LOGGER.info(f"rank {rank}: {registered} of {world} ranks have said which node they run on; "
                            f"waiting for the others ({time.monotonic() - start:.0f} s)")
        count = store.add(f"{host}/count", 0)
        ranks = sorted(int(store.get(f"{host}/{i}")) for i in range(count))
    except (RuntimeError, OSError) as e:
        raise ZeroFirstError(f"rank {rank} lost the process group's store while counting the ranks of "
                             f"its node ({e})") from None
    known = _nodes[group] = NodeRanks(ranks.index(rank), count, ranks[0])
    return known


def known_node_ranks() -> Optional[NodeRanks]:
    """What :func:`node_ranks` learnt for the current process group, or None when it has not been asked
    (asking needs a round of the store that the other ranks may never join)."""
    return _nodes.get(dist.group.WORLD) if is_initialized() else None


def local_world_size() -> int:
    """The number of ranks on this node, now: $LOCAL_WORLD_SIZE where the launcher sets it (torchrun),
    else asked of the process group (:func:`node_ranks`), else 1 without one."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    if value not in (None, ""):
        return int(value)
    return node_ranks().local_world_size


def known_local_world_size() -> Optional[int]:
    """$LOCAL_WORLD_SIZE, or what :func:`node_ranks` learnt for this group; None when that needs a
    round of the store that the other ranks may never join."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    if value not in (None, ""):
        return int(value)
    known = known_node_ranks()
    return known.local_world_size if known is not None else None
