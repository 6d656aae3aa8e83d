"""Datasets in S3-compatible object storage (AWS S3, GCS's S3 interface, R2, Ceph, MinIO, SeaweedFS):
the backend of ``s3://bucket/key`` URLs, an object that holds its own options, client, listings and
request counters.

What it answers (base.Backend's contract):

    list(url)              every object under a folder, remembered with its size and ETag
    stat(url)              size and tag for the label cache's fingerprint, from what was listed
    read(url)              an object's bytes (an image, a label file, a list, a yaml), or a range of them
    read_many(urls)        several objects at once (a batch's images), bounded
    write(url, data)       only where the user asked for it (``yolo-data-cache --publish``)

Every request is retried with exponential backoff and jitter on throttling (503 SlowDown, 429), server
errors (5xx), timeouts and dropped or cut connections; what still fails is an ``OSError`` naming the
URL, so a missing or unreadable object is handled as a missing or unreadable local file.

Where and as whom: the endpoint is ``S3Options.endpoint_url``, else ``$AWS_ENDPOINT_URL_S3`` or
``$AWS_ENDPOINT_URL``, else AWS (``s3.amazonaws.com``); credentials as s3client.py finds them.  A
backend made for a dataset takes its endpoint and object cache from the dataset's settings
(``StorageOptions``) and everything else from the defaults (``set_defaults``, which
``remote.configure`` calls): building a dataset changes no default.

Processes: the client is made on first use in each process (a DataLoader worker forked from a process
that already made requests never shares its connections); a pickled backend (a spawned worker's) keeps
its options and makes its client, object cache and listings anew.
"""
from __future__ import annotations

import io
import os
import random
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from . import objectcache, s3client, s3list
from .base import Backend, ListingError, ObjectInfo, StorageOptions, parent_url
from .s3client import RemoteUnavailable, RequestCounts

SCHEME = "s3://"
BACKOFF_CAP_S = 5.0


def split_url(url: str) -> Tuple[str, str]:
    """``s3://bucket/a/b.jpg`` -> ('bucket', 'a/b.jpg').  ValueError for a URL without a bucket."""
    if not (isinstance(url, str) and url.startswith(SCHEME)):
        raise ValueError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{url}: no bucket name after s3://")
    return bucket, key


@dataclass(frozen=True)
class S3Options:
    """How to reach the buckets.  ``endpoint_url``: an S3-compatible server (``http://host:9000``);
    None: ``$AWS_ENDPOINT_URL_S3``, ``$AWS_ENDPOINT_URL``, else AWS.  ``region``: None:
    ``$AWS_REGION``, ``$AWS_DEFAULT_REGION``, else us-east-1 for another server and the bucket's own on AWS.
    ``profile``: the shared credentials file's profile (None: ``$AWS_PROFILE``, else ``default``).
    ``concurrency``: requests in flight at once per process (a scan's, a batch's).  ``attempts``: tries
    per request; ``timeout_s``: to connect, and between two reads of an answer (a stalled answer is
    retried after it)."""
    endpoint_url: Optional[str] = None
    region: Optional[str] = None
    profile: Optional[str] = None
    concurrency: int = 32
    attempts: int = 6
    timeout_s: float = 20.0
    backoff_s: float = 0.1  # the first retry's largest wait; doubled each retry, up to BACKOFF_CAP_S
    # objectcache.py: keep up to this many bytes of fetched objects in ``object_dir`` (0: none)
    object_cache_bytes: int = 0
    object_dir: Optional[str] = None


_defaults = S3Options()
TOTALS = RequestCounts()  # every S3 backend's requests in this process, together
_live: "weakref.WeakSet[S3Backend]" = weakref.WeakSet()  # backends whose locks a fork renews
_jitter = random.Random()  # waits only: never seeded, never used for data


def defaults() -> S3Options:
    """The options of S3 backends made from now on, where a dataset's settings say nothing."""
    return _defaults


def set_defaults(**changes) -> S3Options:
    """Change the defaults of S3 backends made from now on (``remote.configure``); returns them."""
    global _defaults
    _defaults = replace(_defaults, **changes)
    return _defaults


def _renew_locks() -> None:
    """In a forked child: fresh locks (a thread of the parent may have held one at the fork, and no
    thread of the child would ever release it)."""
    TOTALS.renew_lock()
    for backend in list(_live):
        backend.renew_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks)


class S3Backend(Backend):
    """The ``s3://`` backend (see the module's docstring) with ``options``: its own client (one per
    process), retries, listings and request counters (``counts()``; the process's total over every
    backend: ``TOTALS``).  Thread-safe."""

    def __init__(self, options: Optional[S3Options] = None):
        self.options = options or defaults()
        self.concurrency = self.options.concurrency
        self._start()
        o = self.options
        if o.object_cache_bytes > 0 and o.object_dir:  # checked here, so forked workers inherit its one warning
            objectcache.prepare(Path(o.object_dir))

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._counts = RequestCounts(also=TOTALS)
        self._client: Tuple[int, object] = (-1, None)  # (pid, that process's MinIO client)
        self._cache = objectcache.ProcessCache()
        self._known: Dict[str, ObjectInfo] = {}
        self._listed: Dict[str, bool] = {}  # folder URL (no trailing /) -> listed recursively
        _live.add(self)

    def __getstate__(self):  # a spawned worker's copy: the options only
        return {"options": self.options}

    def __setstate__(self, state) -> None:
        self.options = state["options"]
        self.concurrency = self.options.concurrency
        self._start()

    def __repr__(self) -> str:
        return f"S3Backend(endpoint_url={self.options.endpoint_url!r})"

    def renew_locks(self) -> None:
        self._lock = threading.Lock()
        self._counts.renew_lock()

    # -- the client, retries, counters ------------------------------------------------------------------
    def client(self):
        """This process's MinIO client (made on first use, and again in a forked child)."""
        pid, c = self._client
        if pid == os.getpid():
            return c
        with self._lock:
            pid, c = self._client
            if pid != os.getpid():  # (a parent's client: its pool's sockets belong to the parent)
                c = s3client.make_client(self.options)
                self._client = (os.getpid(), c)
        return c

    def count(self, what: str, n: int = 1) -> None:
        self._counts.add(what, n)

    def counts(self) -> Dict[str, int]:
        """Requests this backend made in this process: 'get', 'head', 'list' (pages), 'put'; 'retries',
        and 'failed': requests that still failed after every try (network, throttling, server errors);
        'cached': objects read from the local object cache instead."""
        return self._counts.get()

    def retrying(self, url: str, request):
        """``request()``, tried up to ``attempts`` times (see the module's docstring).  Raises OSError."""
        opts = self.options
        for attempt in range(opts.attempts):
            try:
                return request()
            except Exception as e:  # noqa: BLE001 - sorted by s3client.classify
                if isinstance(e, (RemoteUnavailable, ValueError, ListingError)):
                    raise
                transient, error = s3client.classify(e, url)
                if not transient or attempt == opts.attempts - 1:
                    if transient:
                        self.count("failed")  # the scan does not cache what a passing fault decided
                        error = OSError(f"{error} (after {opts.attempts} tries)")
                    raise error from None
                self.count("retries")
                time.sleep(_jitter.uniform(0, min(BACKOFF_CAP_S, opts.backoff_s * 2 ** attempt)))
        raise AssertionError("unreachable")

    def object_cache(self):
        """The ObjectCache the options ask for (one per process: its lock, its count), or None."""
        return self._cache.get(self.options, self._lock)

    # -- reading and writing ----------------------------------------------------------------------------
    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        """The bytes of the object ``url`` (``length`` > 0: that many from ``start``).  Raises
        FileNotFoundError, PermissionError or OSError naming the URL.  ``cached`` (an image read for
        training): a whole object a listing showed is served from, and kept in, the local object cache
        where the options ask for one (objectcache.py)."""
        known = self._known.get(url) if cached and start == 0 and length == 0 else None
        local = self.object_cache() if known is not None else None
        if local is not None:
            data = local.get(url, known.size, known.tag)
            if data is not None:
                self.count("cached")
                return data
        data = self._fetch(url, start, length)
        if local is not None:
            local.put(url, known.size, known.tag, data)
        return data

    def _fetch(self, url: str, start: int, length: int) -> bytes:
        bucket, key = split_url(url)

        def get() -> bytes:
            self.count("get")
            r = self.client().get_object(bucket, key, offset=start, length=length)
            try:
                want = r.headers.get("content-length")
                data = r.read()  # urllib3 raises when fewer bytes come than the answer announced
                if want is not None and len(data) != int(want):
                    raise OSError(f"{len(data)} of {want} bytes")
                return data
            finally:
                r.close()
                r.release_conn()

        return self.retrying(url, get)

    def write(self, url: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Put ``data`` at ``url`` (whole: S3 never shows half an object).  Raises OSError."""
        bucket, key = split_url(url)

        def put():
            self.count("put")
            self.client().put_object(bucket, key, io.BytesIO(data), len(data), content_type=content_type)

        self.retrying(url, put)

    # -- what was listed --------------------------------------------------------------------------------
    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        """Every object under the folder ``url`` (keys sorted as S3 sorts them: by their UTF-8 bytes),
        remembered for ``stat``.  Raises FileNotFoundError for a bucket that does not exist.  A folder
        of more than a few pages is listed in ranges of its keys at once (s3list.py)."""
        bucket, key = split_url(url)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""
        found = s3list.list_objects(self, url, bucket, prefix, recursive)
        with self._lock:
            head = url.rstrip("/") + "/"
            for gone in [u for u in self._known if u.startswith(head)]:  # deleted since an earlier listing
                if recursive or "/" not in gone[len(head):]:
                    del self._known[gone]
            self._known.update((o.url, o) for o in found)
            folder = url.rstrip("/")
            self._listed[folder] = self._listed.get(folder, False) or recursive
        return found

    def ensure_listed(self, urls: Iterable[str]) -> None:
        """List (concurrently, one level each) the folders of ``urls`` not yet listed, so that ``stat``
        knows every one of them, present or not, without a request per object."""
        folders = sorted({parent_url(u) for u in urls if isinstance(u, str) and u.startswith(SCHEME)})
        todo = [f for f in folders if not self._covered(f)]
        if todo:
            with ThreadPoolExecutor(min(len(todo), self.concurrency)) as pool:
                list(pool.map(lambda f: self.list(f, recursive=False), todo))

    def _covered(self, folder: str) -> bool:
        """Whether a listing already showed every object directly in ``folder``."""
        if folder in self._listed:
            return True
        f = folder
        while f.count("/") > 2:  # s3://bucket is the top
            f = f.rpartition("/")[0]
            if self._listed.get(f):
                return True
        return False

    def stat(self, url: str) -> Optional[ObjectInfo]:
        """The size and tag of an object a listing showed, None for one it showed absent.  An object in
        a folder that was never listed is asked for (one HEAD request: None when the server says it is
        not there; any other failure is an OSError, e.g. PermissionError for refused credentials)."""
        o = self._known.get(url)
        if o is not None:
            return o
        if self._covered(parent_url(url)):
            return None
        bucket, key = split_url(url)

        def head():
            self.count("head")
            s = self.client().stat_object(bucket, key)
            return s3list.object_info(bucket, key, s.size, s.etag, s.last_modified)

        try:
            o = self.retrying(url, head)
        except FileNotFoundError:
            return None
        self._known[url] = o
        return o

    def forget(self) -> None:
        """Forget every listing (the next ``stat`` asks again): for a new start of a long-lived process."""
        with self._lock:
            self._known.clear()
            self._listed.clear()


def s3_backend(options: StorageOptions) -> S3Backend:
    """The factory the registry holds for ``s3://``: the defaults, with what ``options`` (a dataset's
    settings) says of the endpoint and the object cache."""
    changes = {k: v for k, v in (("endpoint_url", options.endpoint_url),
                                 ("object_cache_bytes", options.object_cache_bytes),
                                 ("object_dir", options.object_dir)) if v is not None}
    return S3Backend(replace(defaults(), **changes))
