"""The process group's key-value store as this folder uses it: keys that callers name, waits without a
time limit, and the error every wait raises when the store or rank 0 fails.

Every key is ``yolo_data/<purpose>/<digest of a name>/<occurrence>``.  The name is given by the caller
and says what the key is for (a split, a loader, a user's block); the occurrence counts how many times
this process has used that name for that purpose before (0 the first time).  So the k-th use of a name
on one rank pairs with the k-th use of the same name on the others, whatever else each rank did in
between or in which order: two ranks that build two datasets in opposite orders still pair each
dataset with itself.  Names are digested so that any text (a path with slashes) makes one key segment.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Callable

from ..runtime import torch_private

LOGGER = logging.getLogger("yolo_data")

POLL_SECONDS = (0.01, 0.5)  # first and longest pause between store checks
LOG_EVERY_SECONDS = 30.0
ACK_SECONDS = 10.0  # how long a failing rank 0 waits for the others to read its error

_uses = {}  # (purpose, name) -> how many keys this process made for it: the occurrence of the next one
_uses_lock = threading.Lock()


class ZeroFirstError(RuntimeError):
    """Local rank 0 failed inside ``torch_distributed_zero_first`` (or the process group's store went
    away while a rank waited on it); the message says how."""


def default_store():
    """The store torch.distributed was initialised with, or None."""
    return torch_private.default_store()


def named_key(purpose: str, name: str) -> str:
    """The next key for ``name`` under ``purpose`` (e.g. 'zero_first', 'agree'): the same string on every
    rank that uses the same name as often before.

    Args:
        purpose: what kind of exchange the key serves; one segment, no slashes.
        name: what the caller exchanges, the same text on every rank that takes part (any text).

    Returns:
        ``yolo_data/<purpose>/<16 hex digits of the name's SHA-256>/<occurrence>``.
    """
    with _uses_lock:
        occurrence = _uses.get((purpose, name), 0)
        _uses[(purpose, name)] = occurrence + 1
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"yolo_data/{purpose}/{digest}/{occurrence}"


def poll(store, key: str, waiting: Callable[[float], str]) -> None:
    """Return once ``key`` is in ``store``: no time limit, pauses growing from POLL_SECONDS[0] to
    POLL_SECONDS[1], and ``waiting(seconds so far)`` logged every LOG_EVERY_SECONDS."""
    pause, start, last_log = POLL_SECONDS[0], time.monotonic(), time.monotonic()
    while not store.check([key]):
        time.sleep(pause)
        pause = min(pause * 2, POLL_SECONDS[1])
        if time.monotonic() - last_log >= LOG_EVERY_SECONDS:
            last_log = time.monotonic()
            LOGGER.info(waiting(time.monotonic() - start))


def await_acks(store, key: str, others: int) -> None:
    """Wait (at most ACK_SECONDS) until ``others`` ranks have added 1 to ``key + '/ack'``: a failing
    process that hosts the store keeps it up until the others have read its error."""
    deadline = time.monotonic() + ACK_SECONDS
    while store.add(key + "/ack", 0) < others and time.monotonic() < deadline:
        time.sleep(0.05)
