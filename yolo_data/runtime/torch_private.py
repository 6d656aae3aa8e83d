"""Every private torch API yolo_data uses, each behind one function here, with the torch versions it
was checked on and what happens without it.

torch may rename or drop any of these in a release.  Each function tries the private call and, where it
is missing or fails, takes the public way (slower, or giving up an optimisation), never a wrong result.
``PRIVATE`` (a set of the names below) says which are used now; tests remove names from it to run each
fallback.

Checked on torch 2.15.0 (all but the index sampler, added later) and 2.14.1 (all but the second mapping
and the sharing record):

* ``UntypedStorage._new_shared(nbytes)``: shared memory allocated directly.  Fallback: a tensor made in
  private memory and moved there with ``share_memory_()`` (one copy more).
* ``UntypedStorage._share_fd_cpu_()`` / ``_share_filename_cpu_()`` and ``_new_shared_fd_cpu`` /
  ``_new_shared_filename_cpu``, ``torch.multiprocessing.reductions.fd_id`` and ``shared_cache``: how torch's
  own pickling names a shared storage, maps it again, and records the storages it sent to another
  process.  Fallback: None (batches are written through their mapping; a pooled buffer whose holders
  cannot be followed is never reused).
* ``torch._C._disabled_torch_function_impl``: a Tensor subclass whose operations give plain tensors.
  Fallback: the same done in Python.
* ``torch.distributed.distributed_c10d._get_default_store()``: the process group's key-value store.
  Fallback: None (rank-0-first falls back to barriers; the other store users do without).
* ``_MultiProcessingDataLoaderIter._shutdown_workers()``: end persistent workers now.  Fallback: drop
  the iterator (torch ends its workers when it is freed).
* ``DataLoader._index_sampler``: the property torch's iterators take each batch's keys from;
  YoloDataLoader overrides it to tell each batch the next one of the same worker (loader.LookAhead),
  over what torch's own property gives (``index_sampler``).  Fallback: the batch sampler itself (a
  torch that stopped asking the property never calls the override): a bucket's images are then
  fetched when their batch is made, not while the one before is; torch's own answer is then read from
  the public ``batch_sampler`` and ``sampler``, as torch defines it.
* ``DataLoader._iterator``: the iterator a loader with persistent workers keeps from pass to pass.
  ``take_iterator`` takes it away, so that its workers can be ended now and the next pass starts new
  ones.  Fallback: None (the workers stay until the loader is freed, and the next pass reuses them).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch.utils.data import DataLoader

PRIVATE = {"new_shared", "share_names", "disabled_torch_function", "default_store", "shutdown_workers",
           "index_sampler", "loader_iterator"}


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """Uninitialised shared memory of ``nbytes`` (what torch hands between processes)."""
    if "new_shared" in PRIVATE:
        try:
            return torch.UntypedStorage._new_shared(nbytes)
        except (AttributeError, RuntimeError, TypeError):
            pass
    return torch.empty(nbytes, dtype=torch.uint8).share_memory_().untyped_storage()


def shared_fd(storage: torch.UntypedStorage) -> Optional[int]:
    """The file descriptor a shared storage keeps (torch's 'file_descriptor' sharing), else None."""
    if "share_names" in PRIVATE:
        try:
            return storage._share_fd_cpu_()[0]
        except (AttributeError, RuntimeError, TypeError):
            pass
    return None


def second_mapping(storage: torch.UntypedStorage) -> Optional[Tuple[object, torch.UntypedStorage]]:
    """(torch's key for ``storage`` in its record of shared storages, a new storage mapping the same
    shared memory) as torch's unpickling makes it, under the sharing strategy in force; None where that
    cannot be done.  Nothing new is allocated: the storage is already shared."""
    if "share_names" not in PRIVATE:
        return None
    try:
        from torch.multiprocessing.reductions import fd_id
        if torch.multiprocessing.get_sharing_strategy() == "file_system":
            manager, key, size = storage._share_filename_cpu_()
            return key, torch.UntypedStorage._new_shared_filename_cpu(manager, key, size)
        fd, size = storage._share_fd_cpu_()
        return fd_id(fd), torch.UntypedStorage._new_shared_fd_cpu(fd, size)
    except Exception:  # any change of these internals: the caller does without
        return None


def sharing_record(key) -> object:
    """What torch's pickling last recorded under ``key`` (a new object each time it shares the storage
    with another process); a fresh object, equal to nothing, where that record cannot be read."""
    if "share_names" in PRIVATE:
        try:
            from torch.multiprocessing.reductions import shared_cache
            return shared_cache.get(key)
        except Exception:
            pass
    return object()


def _plain_results(cls, func, types, args=(), kwargs=None):
    """``__torch_function__`` of a subclass whose operations give plain tensors (the public way: torch's
    own dispatch, asked as for a plain tensor)."""
    return torch.Tensor.__torch_function__(func, (torch.Tensor,), args, kwargs or {})


def disabled_torch_function():
    """The ``__torch_function__`` to give a Tensor subclass so that operations on it give plain tensors."""
    if "disabled_torch_function" in PRIVATE:
        impl = getattr(getattr(torch, "_C", None), "_disabled_torch_function_impl", None)
        if impl is not None:
            return impl
    return classmethod(_plain_results)


def default_store():
    """The key-value store torch.distributed was initialised with, or None."""
    if "default_store" in PRIVATE:
        try:
            from torch.distributed.distributed_c10d import _get_default_store
            return _get_default_store()
        except Exception:
            pass
    return None


def shutdown_workers(iterator) -> None:
    """End a DataLoader iterator's workers now (else they end when the iterator is freed)."""
    if "shutdown_workers" in PRIVATE and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()


def index_sampler(loader):
    """What torch's own ``DataLoader._index_sampler`` gives for ``loader`` (a DataLoader or a subclass
    that overrides the property): the batch sampler when the loader batches, else the sampler."""
    if "index_sampler" in PRIVATE:
        prop = getattr(DataLoader, "_index_sampler", None)
        if isinstance(prop, property):
            return prop.fget(loader)
    return loader.batch_sampler if loader.batch_sampler is not None else loader.sampler


def take_iterator(loader):
    """The iterator a DataLoader with persistent workers keeps between passes, taken from it (the
    loader's next pass makes a new one), or None where it has none or it cannot be read."""
    it = getattr(loader, "_iterator", None) if "loader_iterator" in PRIVATE else None
    if it is not None:
        loader._iterator = None
    return it
