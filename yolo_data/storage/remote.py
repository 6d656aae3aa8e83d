"""The ``s3://`` functions of earlier versions, kept as they were called: each one asks the S3 backend
(s3.py) of the storage in use (``yolo_data.storage.current_storage()``: the process's default one,
or the dataset's own while a dataset is built).  The package itself reads through the registry
(``yolo_data.storage.backend_for``); these stay for scripts, benchmarks and tests.

A remote path is a URL ``s3://bucket/key``; everything else in the package keeps it as a ``str`` (never
a ``Path``, which would fold its ``//``).

    list_folder(url)       every object under a folder, remembered with its size and ETag
    stat(url)              (size, tag, type) for the label cache's fingerprint, from what was listed
    read(url)              an object's bytes (an image, a label file, a list, a yaml)
    read_many(urls)        several objects at once (a batch's images), bounded
    write(url, data)       only where the user asked for it (``yolo-data-cache --publish``)
    configure(**changes)   the defaults of S3 backends made afterwards
    counts()               requests this process made to buckets, every S3 backend together

Where and as whom: see s3.py and s3client.py.  The client library is MinIO's
(``pip install "yolo-data[remote]"``), imported when a remote path is first used.
"""
from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import current_storage, default_storage
from . import s3
from .base import ListingError, ObjectInfo, join_url, parent_url  # noqa: F401 - the names this module always had
from .s3 import SCHEME, S3Backend, split_url  # noqa: F401
from .s3client import RemoteUnavailable  # noqa: F401

LOGGER = logging.getLogger("yolo_data")

REGULAR = 8  # a regular file's type as the label cache's fingerprint records it (st_mode >> 12)
MISSING = (-1, -1, -1)  # what stat() says of an object that is not there, as the fingerprint records it
RemoteOptions = s3.S3Options  # the name of earlier versions


def is_remote(path) -> bool:
    """Whether ``path`` names an object in a bucket (``s3://...``)."""
    return isinstance(path, str) and path.startswith(SCHEME)


join = join_url  # ``relative`` taken from the folder URL ``folder`` (base.join_url, any scheme)
parent = parent_url  # the folder URL of ``url`` (``s3://b/a/x.jpg`` -> ``s3://b/a``)


def configure(**changes) -> s3.S3Options:
    """Change the defaults of the S3 backends made from now on, e.g.
    ``configure(endpoint_url="http://127.0.0.1:8333")``: the process's default one (made anew, with a
    new client) and those of datasets built afterwards, where their settings say nothing (a dataset's
    ``endpoint_url`` and ``object_cache_gb`` settings win).  Returns the defaults in force.  Nothing is
    read from the environment here: that happens when a client is made.  Building a dataset never
    calls this."""
    opts = s3.set_defaults(**changes)
    default_storage().renew("s3")
    return opts


def options() -> s3.S3Options:
    """The defaults of S3 backends made from now on (see configure)."""
    return s3.defaults()


def counts() -> Dict[str, int]:
    """Requests made by this process so far, through every S3 backend: 'get', 'head', 'list' (pages),
    'put'; 'retries', and 'failed': requests that still failed after every try (network, throttling,
    server errors); 'cached': objects read from the local object cache instead.  One backend's (a
    dataset's): ``dataset.storage.counts()``."""
    return s3.TOTALS.get()


def backend() -> S3Backend:
    """The S3 backend of the storage in use."""
    return current_storage().backend_for(SCHEME)


def read(url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
    """The bytes of the object ``url`` (``length`` > 0: that many from ``start``).  Raises
    FileNotFoundError, PermissionError or OSError naming the URL.  ``cached``: see S3Backend.read."""
    return current_storage().backend_for(url).read(url, start, length, cached)


def read_many(urls: Sequence[str], threads: Optional[int] = None) -> List[Union[bytes, OSError]]:
    """The bytes of each URL, ``threads`` at a time (default: the ``concurrency`` option); an object
    that cannot be read gives its OSError in its place."""
    return current_storage().backend_for(urls[0]).read_many(urls, threads) if len(urls) else []


def write(url: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """Put ``data`` at ``url`` (whole: S3 never shows half an object).  Raises OSError."""
    target = current_storage().backend_for(url)
    if isinstance(target, S3Backend):
        target.write(url, data, content_type)
    else:
        target.write(url, data)


def list_folder(url: str, recursive: bool = True) -> List[ObjectInfo]:
    """Every object under the folder ``url``, sorted by key, remembered for ``stat``.  Raises
    FileNotFoundError for a bucket that does not exist."""
    return current_storage().backend_for(url).list(url, recursive)


def ensure_listed(urls: Iterable[str]) -> None:
    """List the folders of ``urls`` not yet listed, so that ``stat`` knows every one of them."""
    current_storage().ensure_listed(urls)


def stat(url: str) -> Tuple[int, int, int]:
    """(size, tag, REGULAR) of an object, MISSING for one that is not there (see S3Backend.stat)."""
    info = current_storage().backend_for(url).stat(url)
    return MISSING if info is None else (info.size, info.tag, REGULAR)


def exists(url: str) -> bool:
    return current_storage().backend_for(url).exists(url)


def forget() -> None:
    """Forget every listing of the storage in use (the next ``stat`` asks again): for a new start of a
    long-lived process."""
    current_storage().forget()
