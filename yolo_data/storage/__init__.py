"""Where bytes live: storage backends chosen by URL scheme (local disk, S3 buckets, any registered
one), the local object cache, and the file container of every cache with its trust rule.

Modules, in the order data flows through them:

    base         the storage interface (read, ranged read, stat, list, exists) and its contract
    local        local disk as a backend: plain paths and file:// URLs
    s3           the s3:// backend: an object holding its options, client, listings and counters
    http         http:// and https:// URLs a dataset file lists (an NDJSON export's), nothing else
    s3client     the S3 client: endpoint, credentials, what an error means, request counters
    s3list       a folder's listing in pages, in key ranges at once
    keyspace     where to cut a folder's keys into ranges
    remotefile   an object as a read-only seekable file over ranged reads
    parquetrows  rows of Parquet tables as objects (parquet+file://, parquet+s3://), a row group at a time
    remote       the s3:// functions of earlier versions, over the storage in use
    objectcache  fetched objects kept on local disk, bounded in size
    trust        who must own a cache file or folder and who may write it
    container    the file format of every cache: layout, checksum, checks, reserved atomic writes

The registry: a scheme (``s3``, ``file``; '' for a plain path) names a factory, ``factory(options) ->
Backend`` (``options``: a StorageOptions).  Adding a scheme is one module with a Backend subclass and
one call, ``register("gs", GcsBackend)``; every dataset path, yaml entry and list line of that scheme
is then read through it.

A :class:`Storage` is the backends one dataset reads through, each made on first use from the
dataset's StorageOptions (its endpoint, its object cache): building a dataset makes its own Storage
and changes nothing process-wide.  While a dataset is built, ``using(storage)`` makes it the storage
in use for this thread (a context variable), which :func:`backend_for` asks; a thread pool's tasks
take it along with :func:`carried`.  Outside, the process's default Storage answers.  A dataset's
image reads go through the Storage it holds, so its DataLoader workers (forked, or spawned with a
pickled copy) use the same backends.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Dict, Iterable, Iterator, List, Optional

from .base import (Backend, ListingError, ObjectInfo, StorageOptions, is_url, join_url, parent_url, scheme_of,
                   text_tag)
from .container import CacheError, NoSpaceError, check_trust
from .keyspace import cut_after
from .http import HttpBackend, http_backend, public_url
from .local import LocalBackend, local_backend, write_whole
from .objectcache import ObjectCache
from .parquetrows import parquet_rows_backend
from .s3 import S3Backend, S3Options, s3_backend

__all__ = ["write_whole", "Backend", "ObjectInfo", "ListingError", "StorageOptions", "Storage", "LocalBackend", "S3Backend",
           "S3Options", "HttpBackend", "public_url", "register", "unregister", "schemes", "backend_for", "using", "current_storage",
           "default_storage", "carried", "ensure_listed", "is_url", "join_url", "parent_url", "scheme_of",
           "text_tag", "cut_after", "ObjectCache", "CacheError", "NoSpaceError", "check_trust"]

Factory = Callable[[StorageOptions], Backend]
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]+$")


def _parquet_rows(options: StorageOptions) -> Backend:
    """Rows of Parquet tables, each table read through a Storage of the same options (parquetrows.py)."""
    return parquet_rows_backend(options, Storage(options).backend_for)


# http and https read only the URLs a label format admitted (http.py), never any URL a path names
_factories: Dict[str, Factory] = {"": local_backend, "file": local_backend, "s3": s3_backend, "http": http_backend,
                                  "https": http_backend, "parquet+file": _parquet_rows, "parquet+s3": _parquet_rows}


def register(scheme: str, factory: Factory) -> None:
    """Read ``scheme://`` URLs through backends that ``factory`` makes; replaces what the scheme had.
    Storages that already made a backend of this scheme keep it.

    Args:
        scheme: the URL scheme, e.g. ``"gs"`` for ``gs://bucket/key`` (case-insensitive).
        factory: ``factory(options) -> Backend``, called once per Storage (per dataset) with its
            StorageOptions: a Backend subclass, or any callable.

    Raises:
        ValueError: a scheme that is not one (letters, digits, ``+-.``, two characters at least).
    """
    scheme = scheme.lower()
    if not _SCHEME.match(scheme):
        raise ValueError(f"storage scheme {scheme!r}: letters, digits, '+', '-' or '.', starting with a "
                         "letter, two characters at least")
    _factories[scheme] = factory


def unregister(scheme: str) -> None:
    """Forget the factory of ``scheme`` (a test's own backend, afterwards)."""
    _factories.pop(scheme.lower(), None)


def schemes() -> List[str]:
    """The URL schemes with a backend ('' is a plain path)."""
    return sorted(_factories)


class Storage:
    """The backends one dataset reads through: for each scheme, the backend its factory made from
    ``options`` (a StorageOptions), on first use.  Picklable (a spawned DataLoader worker gets the
    backends made so far, which make their connections anew there)."""

    def __init__(self, options: Optional[StorageOptions] = None):
        self.options = options or StorageOptions()
        self._made: Dict[str, Backend] = {}

    def backend_for(self, url) -> Backend:
        """The backend that reads ``url``, made on first use of its scheme.

        Args:
            url: a URL (``s3://bucket/key``) or a local path.

        Returns:
            The Backend of the URL's scheme (local disk for a plain path).

        Raises:
            ValueError: a scheme nobody registered (the message names the registered ones).
        """
        scheme = scheme_of(url)
        backend = self._made.get(scheme)
        if backend is None:
            factory = _factories.get(scheme)
            if factory is None:
                known = ", ".join(f"{s}://" for s in schemes() if s)
                raise ValueError(f"{url}: no storage backend reads {scheme}:// URLs (registered: {known}); "
                                 "yolo_data.storage.register adds one")
            # made outside any lock (a fork could inherit it held); two threads at once keep the first
            backend = self._made.setdefault(scheme, factory(self.options))
        return backend

    def renew(self, scheme: str) -> None:
        """Drop the backend of ``scheme``: the next use makes it again (with the defaults of then)."""
        self._made.pop(scheme, None)

    def ensure_listed(self, urls: Iterable) -> None:
        """Let each backend prepare the stats of its URLs among ``urls`` (Backend.ensure_listed)."""
        by_scheme: Dict[str, list] = {}
        for u in urls:
            if is_url(u):
                by_scheme.setdefault(scheme_of(u), []).append(u)
        for group in by_scheme.values():
            self.backend_for(group[0]).ensure_listed(group)

    def forget(self) -> None:
        """Every backend forgets its listings (a new start of a split: objects may have changed)."""
        for backend in list(self._made.values()):
            backend.forget()

    def counts(self) -> Dict[str, int]:
        """Requests made through these backends in this process, by kind, summed over the backends."""
        total: Dict[str, int] = {}
        for backend in list(self._made.values()):
            for k, v in backend.counts().items():
                total[k] = total.get(k, 0) + v
        return total

    def __repr__(self) -> str:
        return f"Storage({self.options}, made={sorted(self._made)})"


_default = Storage()
_in_use: ContextVar[Optional[Storage]] = ContextVar("yolo_data_storage", default=None)


def default_storage() -> Storage:
    """The Storage of this process where no dataset's is in use (``remote``'s functions, a
    ``load_split`` of its own)."""
    return _default


def current_storage() -> Storage:
    """The Storage in use in this thread: the one a ``using`` block names, else the default."""
    return _in_use.get() or _default


@contextmanager
def using(storage: Storage) -> Iterator[Storage]:
    """Meanwhile, in this thread, paths and URLs are read through ``storage`` (what a dataset does
    while it is built); afterwards the storage in use is what it was.

    Args:
        storage: the Storage to read through.

    Returns:
        A context manager that gives ``storage``.
    """
    token = _in_use.set(storage)
    try:
        yield storage
    finally:
        _in_use.reset(token)


def carried(fn: Callable) -> Callable:
    """``fn``, reading through the Storage in use here when a thread pool runs it in another thread."""
    storage = _in_use.get()
    if storage is None:
        return fn

    def run(*args, **kwargs):
        with using(storage):
            return fn(*args, **kwargs)

    return run


def backend_for(url) -> Backend:
    """The backend that reads ``url``, of the Storage in use (Storage.backend_for).

    Args:
        url: a URL (``s3://bucket/key``, any registered scheme) or a local path.

    Returns:
        The Backend that reads it.
    """
    return current_storage().backend_for(url)


def ensure_listed(urls: Iterable) -> None:
    """Storage.ensure_listed of the Storage in use."""
    current_storage().ensure_listed(urls)
