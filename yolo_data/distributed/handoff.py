"""The job-wide hand-off: global rank 0 gives one result (a split's label cache) to the other nodes' local
ranks 0, which share no filesystem with it, through the process group's store.

The key is named by the caller's tag (e.g. the split's), not by the block it is made in: a node may
name its dataset's block by a path that differs between nodes (each its own copy), while the tag of a
split in a bucket is the same on every node.
"""
from __future__ import annotations

import json
from typing import Optional, Tuple

import torch.distributed as dist

from . import keys, ranks, zerofirst
from .keys import ZeroFirstError

JOB_CHUNK = 8 << 20  # bytes per store value: the store holds a value whole, in the memory of its host


def job_share_key(tag: str) -> Optional[str]:
    """The key under which global rank 0 hands a result to the other nodes' local ranks 0
    (``job_publish`` / ``job_receive``).

    Args:
        tag: names the result (the split's labels), the same text on every node; the k-th call with a
            tag on one node pairs with the k-th call with it on the others.

    Returns:
        The key, inside ``torch_distributed_zero_first`` on a node's local rank 0 when the job spans
        several nodes; None otherwise (one node: its local rank 0 is rank 0).
    """
    block = zerofirst.current_block()
    if block is None or block.local_rank != 0 or not ranks.is_initialized():
        return None
    world = dist.get_world_size()
    if world < 2 or ranks.local_world_size() >= world:
        return None
    return keys.named_key("job", tag)


def nodes_in_job() -> int:
    """The number of nodes: world size over the ranks of this node."""
    return max(1, dist.get_world_size() // max(1, ranks.local_world_size()))


def job_publish(key: str, meta: dict, data: Optional[bytes]) -> None:
    """Global rank 0: hand ``meta`` (JSON-able) and ``data`` to the other nodes' local ranks 0, in
    chunks of JOB_CHUNK; the last node to read them removes them from the store."""
    store = keys.default_store()
    chunks = [] if data is None else [data[i:i + JOB_CHUNK] for i in range(0, len(data), JOB_CHUNK)] or [b""]
    for i, c in enumerate(chunks):
        store.set(f"{key}/chunk/{i}", c)
    store.set(key, json.dumps({"meta": meta, "chunks": len(chunks), "bytes": -1 if data is None else len(data)}))


def job_publish_error(key: str, error: BaseException) -> None:
    """Global rank 0 failed: the other nodes' local ranks 0 raise ZeroFirstError with its message.
    Waits (at most ACK_SECONDS) until they have read it: this process hosts the store, and if it
    exits at once they would find the store gone instead of the error."""
    store = keys.default_store()
    store.set(key, json.dumps({"error": f"{type(error).__name__}: {error}"}))
    keys.await_acks(store, key, nodes_in_job() - 1)


def job_receive(key: str) -> Tuple[dict, Optional[bytes]]:
    """(meta, data) that global rank 0 published under ``key``, waited for with no time limit (it may
    be scanning a large dataset), logging now and then.  Raises ZeroFirstError when rank 0 failed."""
    store = keys.default_store()
    try:
        keys.poll(store, key, lambda waited: f"rank {dist.get_rank()}: waiting for rank 0's label cache ({waited:.0f} s)")
        head = json.loads(store.get(key).decode("utf-8"))
        if "error" in head:
            store.add(f"{key}/ack", 1)  # tells rank 0 the error arrived, so it may exit now
            raise ZeroFirstError(f"rank 0 failed, so rank {dist.get_rank()} stops too: {head['error']}")
        data = None if head["bytes"] < 0 else b"".join(store.get(f"{key}/chunk/{i}") for i in range(head["chunks"]))
        if store.add(f"{key}/read", 1) >= nodes_in_job() - 1:  # the last reader frees the store's memory
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
