"""Rank 0 first: one process per node does the work, the others wait and then read its result.

Rank, world size and local rank are asked of ``torch.distributed`` (or the environment) when a
function is called, never at import.  The number of ranks on this node comes from $LOCAL_WORLD_SIZE
(torchrun) or, where the launcher does not set it (srun, mpirun), from the process group: every rank
registers its host in the store once per group (see :func:`node_ranks`).

Waiting uses the process group's key-value store rather than a barrier: a barrier is a collective
with the group's timeout (30 min by default, often 5-10 s in tests), which a long scan of a large
dataset exceeds; and a barrier cannot tell the waiting ranks that rank 0 failed.  Local rank 0 writes
``done`` or ``error: ...`` under a key for this block and node; the others poll for it with no time
limit, log progress now and then, and raise at once if rank 0 failed.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Tuple

import torch.distributed as dist

from ..runtime import torch_private

LOGGER = logging.getLogger("yolo_data")

_block_ids = itertools.count()  # every rank enters the blocks in the same order, so ids agree
_check_ids = itertools.count()  # likewise for check_ranks_agree
_node_ids = itertools.count()  # likewise for node_ranks (once per process group)
_nodes = weakref.WeakKeyDictionary()  # process group -> NodeRanks: learnt once, and gone with the group
_active = threading.local()  # the key local rank 0 reports progress under, while inside a block
POLL_SECONDS = (0.01, 0.5)  # first and longest pause between store checks
LOG_EVERY_SECONDS = 30.0
READ_ACK_SECONDS = 30.0  # how long rank 0 waits for the others to have read the values compared
ACK_SECONDS = 10.0  # how long a failing rank 0 waits for the others to read its error


class ZeroFirstError(RuntimeError):
    """Local rank 0 failed inside ``torch_distributed_zero_first``; the message says how."""


class RanksDisagreeError(RuntimeError):
    """The ranks built different datasets (other files on other nodes, or files changed in between);
    training would hang at the first collective.  The message says which ranks differ and how."""


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """Global rank, or -1 when torch.distributed is not initialised."""
    return dist.get_rank() if is_initialized() else -1


def get_world_size() -> int:
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
    """The ranks of this node as the process group knows them, asked now: every rank counts itself
    under its host's key in the group's store, then waits (no time limit: another node may still be
    starting) until all world-size ranks have, and reads its host's list.  The first call for a
    process group must be made by every rank (``create_dataloader`` does, with any rank but -1); later
    calls return the answer kept for that group without a round trip.  A store and not a collective:
    ranks reach ``create_dataloader`` at different times, and a collective would time out.

    (0, 1) without an initialised process group; without its store, the environment's
    LOCAL_RANK / LOCAL_WORLD_SIZE (else 0, 1)."""
    if not is_initialized():
        return NodeRanks(0, 1)
    group = dist.group.WORLD
    known = _nodes.get(group)
    if known is not None:
        return known
    store = _default_store()
    if store is None:
        return NodeRanks(get_local_rank(0), int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    rank, world = dist.get_rank(), dist.get_world_size()
    key = f"yolo_data/node/{next(_node_ids)}"
    host = f"{key}/host/{_host_id()}"
    try:
        # counters, not one key per rank read by every rank: O(ranks on this node) round trips each
        slot = store.add(f"{host}/count", 1) - 1
        store.set(f"{host}/{slot}", str(rank))
        registered = store.add(f"{key}/registered", 1)
        pause, start, last_log = POLL_SECONDS[0], time.monotonic(), time.monotonic()
        while registered < world:
            time.sleep(pause)
            pause = min(pause * 2, POLL_SECONDS[1])
            registered = store.add(f"{key}/registered", 0)
            if time.monotonic() - last_log >= LOG_EVERY_SECONDS:
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


def local_world_size() -> int:
    """The number of ranks on this node, now: $LOCAL_WORLD_SIZE where the launcher sets it (torchrun),
    else asked of the process group (:func:`node_ranks`), else 1 without one."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    if value not in (None, ""):
        return int(value)
    return node_ranks().local_world_size


def _known_local_world_size() -> Optional[int]:
    """$LOCAL_WORLD_SIZE, or what :func:`node_ranks` learnt for this group; None when that needs a
    round of the store that the other ranks may never join."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    if value not in (None, ""):
        return int(value)
    known = _nodes.get(dist.group.WORLD) if is_initialized() else None
    return known.local_world_size if known is not None else None


def _default_store():
    return torch_private.default_store()  # the store torch.distributed was initialised with, or None


def _barrier() -> None:
    if dist.get_backend() == "nccl":
        import torch  # device ids only for a backend that takes them
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def report_progress(text: str) -> None:
    """Called by local rank 0 inside a block (the scan does): waiting ranks log ``text``."""
    key = getattr(_active, "key", None)
    store = getattr(_active, "store", None)
    if key is None or store is None:
        return
    now = time.monotonic()
    if now - getattr(_active, "last", 0.0) >= 1.0:  # a store round trip per second at most
        _active.last = now
        try:
            store.set(key + "/progress", text)
        except Exception:
            pass


def share_from_local_rank_0(tag: str, make):
    """Inside ``torch_distributed_zero_first``: local rank 0 calls ``make()`` and publishes the string
    it returns under ``tag`` for this block and node; the other local ranks (which run after it) get
    that string without calling ``make``.  Outside a block, or without a store: ``make()`` everywhere.

    Returns (value, made_here).  The image cache uses it to hand its descriptor to the other ranks."""
    block = getattr(_active, "block", None)
    if block is None:
        return make(), True
    store, key, local_rank = block
    if local_rank == 0:
        value = make()
        store.set(f"{key}/share/{tag}", value)
        return value, True
    return store.get(f"{key}/share/{tag}").decode("utf-8"), False


# -- one result per job ------------------------------------------------------------------------------
JOB_CHUNK = 8 << 20  # bytes per store value: the store holds a value whole, in the memory of its host


def job_share_key(tag: str) -> Optional[str]:
    """Inside ``torch_distributed_zero_first`` on a node's local rank 0, when the job spans several
    nodes: the key under which global rank 0 hands a result to the other nodes' local ranks 0
    (``job_publish`` / ``job_receive``).  None otherwise (one node: its local rank 0 is rank 0)."""
    block = getattr(_active, "block", None)
    key = getattr(_active, "job_key", None)
    if block is None or key is None or block[2] != 0 or not is_initialized():
        return None
    world = dist.get_world_size()
    if world < 2 or local_world_size() >= world:
        return None
    return f"{key}/{tag}"


def _nodes_in_job() -> int:
    return max(1, dist.get_world_size() // max(1, local_world_size()))


def job_publish(key: str, meta: dict, data: Optional[bytes]) -> None:
    """Global rank 0: hand ``meta`` (JSON-able) and ``data`` to the other nodes' local ranks 0, in
    chunks of JOB_CHUNK; the last node to read them removes them from the store."""
    store = _default_store()
    chunks = [] if data is None else [data[i:i + JOB_CHUNK] for i in range(0, len(data), JOB_CHUNK)] or [b""]
    for i, c in enumerate(chunks):
        store.set(f"{key}/chunk/{i}", c)
    store.set(key, json.dumps({"meta": meta, "chunks": len(chunks), "bytes": -1 if data is None else len(data)}))


def job_publish_error(key: str, error: BaseException) -> None:
    """Global rank 0 failed: the other nodes' local ranks 0 raise ZeroFirstError with its message.
    Waits (at most ACK_SECONDS) until they have read it: this process hosts the store, and if it
    exits at once they would find the store gone instead of the error."""
    store = _default_store()
    store.set(key, json.dumps({"error": f"{type(error).__name__}: {error}"}))
    _await_acks(store, key, _nodes_in_job() - 1)


def _await_acks(store, key: str, others: int) -> None:
    deadline = time.monotonic() + ACK_SECONDS
    while store.add(key + "/ack", 0) < others and time.monotonic() < deadline:
        time.sleep(0.05)


def job_receive(key: str) -> Tuple[dict, Optional[bytes]]:
    """(meta, data) that global rank 0 published under ``key``, waited for with no time limit (it may
    be scanning a large dataset), logging now and then.  Raises ZeroFirstError when rank 0 failed."""
    store = _default_store()
    try:
        _poll(store, key, lambda waited: f"rank {dist.get_rank()}: waiting for rank 0's label cache ({waited:.0f} s)")
        head = json.loads(store.get(key).decode("utf-8"))
        if "error" in head:
            store.add(f"{key}/ack", 1)  # tells rank 0 the error arrived, so it may exit now
            raise ZeroFirstError(f"rank 0 failed, so rank {dist.get_rank()} stops too: {head['error']}")
        data = None if head["bytes"] < 0 else b"".join(store.get(f"{key}/chunk/{i}") for i in range(head["chunks"]))
        if store.add(f"{key}/read", 1) >= _nodes_in_job() - 1:  # the last reader frees the store's memory
            for i in range(head["chunks"]):
                store.delete_key(f"{key}/chunk/{i}")
    except (RuntimeError, OSError) as e:
        if isinstance(e, ZeroFirstError):
            raise
        raise ZeroFirstError(f"rank {dist.get_rank()} lost the process group's store while waiting for "
                             f"rank 0's label cache ({e})") from None
    if data is not None and len(data) != head["bytes"]:
        raise ZeroFirstError(f"rank 0's label cache arrived with {len(data)} of {head['bytes']} bytes")
    return head["meta"], data


def _describe(values: dict) -> str:
    return ", ".join(f"{v:,} {k}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def check_ranks_agree(values: dict, what: str) -> None:
    """Every rank publishes ``values`` (a small JSON-able dict, e.g. images and steps per epoch) in the
    process group's store and waits for all the others' (no time limit: a node may still be scanning).
    Raises :class:`RanksDisagreeError` on every rank at once when any differs from rank 0's, naming the
    ranks and their values.  A no-op without an initialised process group or its store."""
    if not is_initialized() or get_world_size() < 2:
        return
    store = _default_store()
    if store is None:
        return
    key = f"yolo_data/agree/{next(_check_ids)}"
    rank, world = dist.get_rank(), dist.get_world_size()
    store.set(f"{key}/{rank}", json.dumps(values))
    keys = [f"{key}/{r}" for r in range(world)]
    pause, start, last_log = POLL_SECONDS[0], time.monotonic(), time.monotonic()
    try:
        while not store.check(keys):
            time.sleep(pause)
            pause = min(pause * 2, POLL_SECONDS[1])
            if time.monotonic() - last_log >= LOG_EVERY_SECONDS:
                last_log = time.monotonic()
                missing = [r for r, k in enumerate(keys) if not store.check([k])]
                LOGGER.info(f"rank {rank}: waiting for ranks {missing[:8]} to build {what} "
                            f"({time.monotonic() - start:.0f} s)")
        got = [json.loads(store.get(k).decode("utf-8")) for k in keys]
        # Rank 0 usually hosts the store: if it went on and ended (a short script, a failing check)
        # while another rank was still reading, that rank would lose the store.  So every rank says
        # it has read, and rank 0 waits for those words, briefly (they follow within a round trip).
        store.add(f"{key}/read", 1)
        if rank == 0:
            deadline = time.monotonic() + READ_ACK_SECONDS
            while store.add(f"{key}/read", 0) < world and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS[0])
    except (RuntimeError, OSError) as e:
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


def _poll(store, key: str, waiting) -> None:
    """Return once ``key`` is in ``store``: no time limit, pauses growing from POLL_SECONDS[0] to
    POLL_SECONDS[1], and ``waiting(seconds so far)`` logged every LOG_EVERY_SECONDS."""
    pause, start, last_log = POLL_SECONDS[0], time.monotonic(), time.monotonic()
    while not store.check([key]):
        time.sleep(pause)
        pause = min(pause * 2, POLL_SECONDS[1])
        if time.monotonic() - last_log >= LOG_EVERY_SECONDS:
            last_log = time.monotonic()
            LOGGER.info(waiting(time.monotonic() - start))


def _wait_for(store, key: str, local_rank: int) -> None:
    def waiting(waited: float) -> str:
        progress = ""
        if store.check([key + "/progress"]):
            progress = ": " + store.get(key + "/progress").decode("utf-8", "replace")
        return f"local rank {local_rank}: waiting for local rank 0 ({waited:.0f} s){progress}"

    try:
        _poll(store, key, waiting)
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
        _await_acks(store, key, (_known_local_world_size() or dist.get_world_size()) - 1)
    except (RuntimeError, OSError):  # the store went away (global rank 0 ended): the error itself is raised
        pass


@contextmanager
def torch_distributed_zero_first(local_rank: int):
    """Run the block on local rank 0 of each node first; the other local ranks wait, then run it.

    A no-op when torch.distributed is not initialised or ``local_rank`` is -1.  If local rank 0 raises
    inside the block, the others raise :class:`ZeroFirstError` with its message instead of running
    the block.  Works for any backend (gloo, NCCL) and needs no collective.
    """
    if local_rank is None or local_rank < 0 or not is_initialized():
        yield
        return
    block = next(_block_ids)
    store = _default_store()
    if store is None:  # fall back to YOLOv5's two barriers
        if local_rank != 0:
            _barrier()
        yield
        if local_rank == 0:
            _barrier()
        return
    # torchrun numbers ranks node by node; srun may place them cyclically (node 0: ranks 0, 2, 4), and
    # then the node's ranks were counted through the store (create_dataloader asks before coming here)
    known = _nodes.get(dist.group.WORLD) if not os.environ.get("LOCAL_WORLD_SIZE") else None
    leader = known.leader if known is not None else dist.get_rank() - local_rank
    key = f"yolo_data/zero_first/{block}/{leader}"
    _active.job_key = f"yolo_data/job/{block}"  # the same on every node: job_share's keys
    if local_rank != 0:
        _wait_for(store, key, local_rank)
        _active.block = (store, key, local_rank)
        try:
            yield
        finally:
            _active.block = None
        return
    _active.key, _active.store, _active.last = key, store, 0.0
    _active.block = (store, key, 0)
    try:
        yield
    except BaseException as e:
        _report_failure(store, key, e)
        raise
    else:
        store.set(key, "done")
    finally:
        _active.key = _active.store = _active.block = _active.job_key = None


@contextmanager
def wait_for_the_master(local_rank: Optional[int] = None):
    """YOLOX's name for the same thing; ``local_rank`` defaults to $LOCAL_RANK read now (0 if unset)."""
    with torch_distributed_zero_first(get_local_rank(0) if local_rank is None else local_rank):
        yield
