"""The storage interface every backend follows, the values backends share, and URLs as strings.

A backend reads one kind of place: local disk (local.py), an S3-compatible bucket (s3.py), or whatever
a user registers for a URL scheme (``yolo_data.storage.register``).  What the package asks of one:

    read(url, start, length)   an object's bytes, whole or a range
    stat(url)                  ObjectInfo (size, tag) or None for an object that is not there
    list(url, recursive)       every object under a folder, sorted by key
    exists(url)                stat(url) is not None

and, with defaults here that a backend may improve: ``read_many`` (a batch's images at once),
``ensure_listed`` (list the folders of many URLs so that ``stat`` needs no request per object),
``forget`` (drop what listings remembered), ``write`` (only where a user asks: a published cache),
``counts`` (requests made so far) and ``concurrency`` (threads a scan of this place uses).

The contract:

- **URLs are strings.**  A URL is ``scheme://place/key``; the package never makes a ``Path`` of one
  (that would fold its ``//``).  Keys are ``/``-separated; ``join_url`` and ``parent_url`` work on them.
- **A tag** is a non-negative int64 that changes whenever an object's content may have: an ETag
  folded to a number (``text_tag``), a generation number, a file's modification time in ns.  The label
  cache's fingerprint takes (size, tag) for each object, so a backend whose tag does not change with
  its content gives stale labels.
- **Errors are OSErrors naming the URL**: FileNotFoundError for an object or place that is not there,
  PermissionError for one refused, any other OSError for the rest (a network failure after the
  backend's own retries).  A missing object is then handled as a missing local file.  ``ListingError``
  is a listing that cannot complete; ``stat`` of a missing object is None, not an error.
- **Thread safety**: every method may be called from many threads at once (a scan's, a batch's).
- **Processes**: a backend is pickled into spawned DataLoader workers and inherited by forked ones; a
  connection or client is made again, lazily, in the process that uses it (never shared across a
  fork), and ``counts`` are the requests of this process.
"""
from __future__ import annotations

import hashlib
import posixpath
import re
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Union

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")  # two letters at least: C:// is a Windows drive


@dataclass(frozen=True)
class ObjectInfo:
    """An object as a listing or a stat shows it: its ``url``, ``size`` in bytes and ``tag`` (see the
    module's docstring: the fingerprint's stand-in for a file's modification time)."""
    url: str
    size: int
    tag: int


class ListingError(OSError):
    """A listing that the server's answers cannot complete: an answer that is not a listing (a proxy's
    login page), or pages that bring no new key.  Never retried: the same server answers the same way."""


@dataclass(frozen=True)
class StorageOptions:
    """What a dataset's settings say about where its bytes come from (``Settings.source``), handed to
    every backend factory; a backend takes what concerns it and ignores the rest.
    ``endpoint_url``: the S3-compatible server of ``s3://`` URLs (None: the S3 backend's default).
    ``object_cache_bytes``: keep up to this many bytes of fetched objects in ``object_dir`` (0: none;
    objectcache.py).  None, for each: the backend's default."""
    endpoint_url: Optional[str] = None
    object_cache_bytes: Optional[int] = None
    object_dir: Optional[str] = None


def scheme_of(path) -> str:
    """The URL scheme of ``path`` in lower case (``s3`` of ``s3://b/k``); '' for a local path."""
    m = _URL.match(path) if isinstance(path, str) else None
    return m.group(1).lower() if m else ""


def is_url(path) -> bool:
    """Whether ``path`` is a URL (``scheme://...``, a string), read through its scheme's backend."""
    return scheme_of(path) != ""


def join_url(folder: str, relative: str) -> str:
    """``relative`` (a key with ``./`` or ``../`` parts, or a whole URL) taken from the folder URL
    ``folder`` (a yaml's ``path:``, a list's lines); never above the folder's place."""
    if is_url(relative):
        return relative
    head, _, rest = folder.partition("://")
    place, _, key = rest.partition("/")
    joined = posixpath.normpath(posixpath.join("/" + key, relative)).lstrip("/")
    return f"{head}://{place}/{joined}"


def parent_url(url: str) -> str:
    """The folder URL of ``url`` (``s3://b/a/x.jpg`` -> ``s3://b/a``)."""
    head, _, rest = url.partition("://")
    place, _, key = rest.partition("/")
    return f"{head}://{place}/{posixpath.dirname(key.rstrip('/'))}".rstrip("/")


def text_tag(text: str) -> int:
    """A version's text (an ETag, a generation) folded to a non-negative int64 tag."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big")


class Backend(ABC):
    """One place bytes are read from (see the module's docstring for the contract).  A subclass
    implements ``read``, ``stat`` and ``list``; the rest has working defaults."""

    concurrency: int = 8  # requests in flight at once, per process, that a scan or a batch makes here

    @abstractmethod
    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        """The bytes of the object ``url``: whole, or ``length`` > 0 bytes from ``start`` (fewer at its
        end).  ``cached``: an image read for training, which a backend with a local copy of recently
        read objects may serve from it.  Raises FileNotFoundError, PermissionError or OSError."""

    @abstractmethod
    def stat(self, url: str) -> Optional[ObjectInfo]:
        """The object's size and tag; None when it is not there.  Raises OSError when that cannot be
        told (refused credentials, a network failure)."""

    @abstractmethod
    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        """Every object under the folder ``url`` (below it at any depth, or directly in it), sorted by
        key; empty for a folder with nothing in it.  Raises FileNotFoundError for a place (a bucket)
        that does not exist, ListingError or OSError."""

    def exists(self, url: str) -> bool:
        return self.stat(url) is not None

    def read_many(self, urls: Sequence[str], threads: Optional[int] = None) -> List[Union[bytes, OSError]]:
        """The bytes of each URL (a batch's images: ``read(url, cached=True)``), ``threads`` at a time
        (default ``concurrency``); an object that cannot be read gives its OSError in its place."""
        def one(url: str):
            try:
                return self.read(url, cached=True)
            except OSError as e:
                return e

        if len(urls) <= 1:
            return [one(u) for u in urls]
        with ThreadPoolExecutor(min(len(urls), threads or self.concurrency)) as pool:
            return list(pool.map(one, urls))

    def ensure_listed(self, urls: Iterable[str]) -> None:
        """Prepare ``stat`` of many URLs at once (a backend that remembers listings lists their
        folders); by default nothing: each stat asks for itself."""

    def forget(self) -> None:
        """Forget what earlier listings showed (the next stat asks again); by default nothing is kept."""

    def write(self, url: str, data: bytes) -> None:
        """Put ``data`` at ``url`` whole (``yolo-data-cache --publish`` only).  Raises OSError."""
        raise PermissionError(13, f"{type(self).__name__} does not write", url)

    def counts(self) -> Dict[str, int]:
        """Requests this backend made in this process so far, by kind (S3's: 'get', 'head', 'list',
        'put', 'retries', 'failed', 'cached'); empty where nothing is counted."""
        return {}
