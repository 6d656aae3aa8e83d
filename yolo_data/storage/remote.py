"""Datasets in S3-compatible object storage (AWS S3, GCS's S3 interface, R2, Ceph, MinIO, SeaweedFS):
the one place that speaks to a bucket.

A remote path is a URL ``s3://bucket/key``; everything else in the package keeps it as a ``str`` (never a
``Path``, which would fold its ``//``).  What the rest of the package asks of a bucket:

    list_folder(url)       every object under a folder, remembered with its size and ETag
    stat(url)              (size, tag, type) for the label cache's fingerprint, from what was listed
    read(url)              an object's bytes (an image, a label file, a list, a yaml)
    (remotefile.py: an object as a seekable file over ranged reads, for an image's header in the scan)
    read_many(urls)        several objects at once (a batch's images), bounded
    write(url, data)       only where the user asked for it (``yolo-data-cache --publish``)

Every request is retried with exponential backoff and jitter on throttling (503 SlowDown, 429), server
errors (5xx), timeouts and dropped or cut connections; what still fails is an ``OSError`` naming the
URL, so a missing or unreadable object is handled as a missing or unreadable local file.

Where and as whom: the endpoint is ``endpoint_url`` (``configure``, the ``endpoint_url`` setting), else
``$AWS_ENDPOINT_URL_S3`` or ``$AWS_ENDPOINT_URL``, else AWS (``s3.amazonaws.com``).  Credentials come
the usual way: ``$AWS_ACCESS_KEY_ID`` / ``$AWS_SECRET_ACCESS_KEY`` / ``$AWS_SESSION_TOKEN``, then the
profile ``$AWS_PROFILE`` (or ``profile``, else ``default``) of the shared credentials file, then, on
AWS only, the instance or container role; none: anonymous requests (a public bucket).  Credentials are
never printed, logged or written.

The client library is MinIO's (``pip install "yolo-data[remote]"``), imported when a remote path is
first used.  Each process makes its own client: a DataLoader worker forked from a process that already
made requests never shares that process's connections.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import posixpath
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .s3client import RemoteUnavailable
from . import s3client

LOGGER = logging.getLogger("yolo_data")

SCHEME = "s3://"
REGULAR = 8  # a regular file's type as cache._stats records it (st_mode >> 12)
MISSING = (-1, -1, -1)  # cache._MISSING: what stat() says of an object that is not there


class ListingError(OSError):
    """A listing that the server's answers cannot complete: an answer that is not S3's XML (a proxy's
    login page), or pages that bring no new key.  Never retried: the same server answers the same way."""


def is_remote(path) -> bool:
    """Whether ``path`` names an object in a bucket (``s3://...``)."""
    return isinstance(path, str) and path.startswith(SCHEME)


def split_url(url: str) -> Tuple[str, str]:
    """``s3://bucket/a/b.jpg`` -> ('bucket', 'a/b.jpg').  ValueError for a URL without a bucket."""
    if not is_remote(url):
        raise ValueError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{url}: no bucket name after s3://")
    return bucket, key


def join(folder: str, relative: str) -> str:
    """``relative`` (a key with ``./`` or ``../`` parts, or a whole URL) taken from the folder URL
    ``folder`` (the yaml's ``path:``, a list's lines)."""
    if is_remote(relative):
        return relative
    bucket, key = split_url(folder)
    joined = posixpath.normpath(posixpath.join("/" + key, relative)).lstrip("/")
    return f"{SCHEME}{bucket}/{joined}"


def parent(url: str) -> str:
    """The folder URL of ``url`` (``s3://b/a/x.jpg`` -> ``s3://b/a``)."""
    bucket, key = split_url(url)
    return f"{SCHEME}{bucket}/{posixpath.dirname(key.rstrip('/'))}".rstrip("/")


# -- where and as whom -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteOptions:
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


BACKOFF_CAP_S = 5.0
_options = RemoteOptions()
_lock = threading.Lock()


def configure(**changes) -> RemoteOptions:
    """Change how this process (and the DataLoader workers it forks later) reaches the buckets, e.g.
    ``configure(endpoint_url="http://127.0.0.1:8333")``; returns the options in force.  Nothing is read
    from the environment here: that happens when a client is made."""
    global _options
    with _lock:
        _options = replace(_options, **changes)
        _clients.clear()
        _object_caches.clear()
    return _options


def options() -> RemoteOptions:
    return _options


# -- the client --------------------------------------------------------------------------------------
_clients: Dict[int, object] = {}  # pid -> that process's MinIO client


def _client():
    """This process's MinIO client (made on first use, and again in a forked child)."""
    pid = os.getpid()
    c = _clients.get(pid)
    if c is not None:
        return c
    with _lock:
        c = _clients.get(pid)
        if c is None:
            _clients.clear()  # a parent's client: its pool's sockets belong to the parent
            c = _clients[pid] = s3client.make_client(_options)
    return c


# -- retries -----------------------------------------------------------------------------------------
_TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                              "TooManyRequests", "InternalError", "ServiceUnavailable", "RequestTimeout",
                              "RequestTimeTooSkewed", "OperationAborted"})
_jitter = random.Random()  # waits only: never seeded, never used for data


def _status_of(e: Exception) -> Optional[int]:
    for attr in ("status_code", "_code"):
        v = getattr(e, attr, None)
        if isinstance(v, int):
            return v
    return None


def _classify(e: Exception, url: str) -> Tuple[bool, OSError]:
    """(worth another try, the OSError to raise when not)."""
    from minio.error import S3Error

    if isinstance(e, S3Error):
        code = e.code or ""
        if code in ("NoSuchKey", "NoSuchBucket", "NotFound"):
            what = "bucket" if code == "NoSuchBucket" else "object"
            return False, FileNotFoundError(2, f"no such {what} ({code})", url)
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"):
            return False, PermissionError(13, f"access denied ({code}: check the credentials and the "
                                              "bucket's policy)", url)
        return code in _TRANSIENT_CODES, OSError(f"{url}: {code}: {e.message}")
    status = _status_of(e)
    if status is not None:
        return status in (429, 500, 502, 503, 504), OSError(f"{url}: HTTP {status} from the server")
    # urllib3's timeouts, refused, reset and cut connections, short bodies; the OS's socket errors
    return True, OSError(f"{url}: {type(e).__name__}: {e}")


def _retrying(url: str, request):
    """``request()``, tried up to ``attempts`` times (see the module's docstring).  Raises OSError."""
    opts = _options
    for attempt in range(opts.attempts):
        try:
            return request()
        except Exception as e:  # noqa: BLE001 - sorted by _classify
            if isinstance(e, (RemoteUnavailable, ValueError, ListingError)):
                raise
            transient, error = _classify(e, url)
            if not transient or attempt == opts.attempts - 1:
                if transient:
                    _count("failed")  # the scan does not cache what a passing fault decided
                    error = OSError(f"{error} (after {opts.attempts} tries)")
                raise error from None
            _count("retries")
            time.sleep(_jitter.uniform(0, min(BACKOFF_CAP_S, opts.backoff_s * 2 ** attempt)))
    raise AssertionError("unreachable")


# -- requests ----------------------------------------------------------------------------------------
_counts: Dict[str, int] = {}
_count_lock = threading.Lock()


def _new_locks() -> None:
    """In a forked child: fresh locks (a thread of the parent may have held one at the fork, and no
    thread of the child would ever release it)."""
    global _lock, _count_lock
    _lock, _count_lock = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks)


def _count(what: str, n: int = 1) -> None:
    with _count_lock:
        _counts[what] = _counts.get(what, 0) + n


def counts() -> Dict[str, int]:
    """Requests made by this process so far: 'get', 'head', 'list' (pages), 'put'; 'retries', and
    'failed': requests that still failed after every try (network, throttling, server errors);
    'cached': objects read from the local object cache instead."""
    return dict(_counts)


_object_caches: Dict[int, object] = {}


def _object_cache():
    """The ObjectCache the options ask for (one per process), or None."""
    opts = _options
    if opts.object_cache_bytes <= 0 or not opts.object_dir:
        return None
    c = _object_caches.get(os.getpid())  # a forked worker makes its own (its lock, its count)
    if c is None:
        from .objectcache import ObjectCache
        with _lock:  # one per process: a batch's fetching threads ask at once
            c = _object_caches.get(os.getpid())
            if c is None:
                _object_caches.clear()
                c = _object_caches[os.getpid()] = ObjectCache(opts.object_dir, opts.object_cache_bytes)
    return c


def read(url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
    """The bytes of the object ``url`` (``length`` > 0: that many from ``start``).  Raises
    FileNotFoundError, PermissionError or OSError naming the URL.  ``cached`` (an image read for
    training): a whole object a listing showed is served from, and kept in, the local object cache
    where one is configured (objectcache.py)."""
    known = _known.get(url) if cached and start == 0 and length == 0 else None
    local = _object_cache() if known is not None else None
    if local is not None:
        data = local.get(url, known.size, known.tag)
        if data is not None:
            _count("cached")
            return data
    data = _fetch(url, start, length)
    if local is not None:
        local.put(url, known.size, known.tag, data)
    return data


def _fetch(url: str, start: int, length: int) -> bytes:
    bucket, key = split_url(url)

    def get() -> bytes:
        _count("get")
        r = _client().get_object(bucket, key, offset=start, length=length)
        try:
            want = r.headers.get("content-length")
            data = r.read()  # urllib3 raises when fewer bytes come than the answer announced
            if want is not None and len(data) != int(want):
                raise OSError(f"{len(data)} of {want} bytes")
            return data
        finally:
            r.close()
            r.release_conn()

    return _retrying(url, get)


def read_many(urls: Sequence[str], threads: Optional[int] = None) -> List[Union[bytes, OSError]]:
    """The bytes of each URL (images for training: the object cache serves and keeps them), fetched
    ``threads`` at a time (default: the ``concurrency`` option); an object that cannot be read gives
    its OSError in its place."""
    def one(url):
        try:
            return read(url, cached=True)
        except OSError as e:
            return e

    if len(urls) <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(min(len(urls), threads or _options.concurrency)) as pool:
        return list(pool.map(one, urls))


def write(url: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """Put ``data`` at ``url`` (whole: S3 never shows half an object).  Raises OSError."""
    bucket, key = split_url(url)

    def put():
        _count("put")
        _client().put_object(bucket, key, io.BytesIO(data), len(data), content_type=content_type)

    _retrying(url, put)


# -- what was listed ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectInfo:
    """An object as a listing shows it: ``tag`` is its ETag folded to a non-negative int64 (the
    fingerprint's stand-in for a file's modification time: a new version of an object has a new ETag)."""
    url: str
    size: int
    tag: int


def _tag(etag: Optional[str], modified) -> int:
    text = (etag or "").strip('"') or str(modified)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big")


_known: Dict[str, ObjectInfo] = {}
_listed: Dict[str, bool] = {}  # folder URL (no trailing /) -> listed recursively


def list_folder(url: str, recursive: bool = True) -> List[ObjectInfo]:
    """Every object under the folder ``url`` (keys sorted as S3 sorts them: by their UTF-8 bytes),
    remembered for ``stat``.  Raises FileNotFoundError for a bucket that does not exist.  A folder of
    more than a few pages is listed in ranges of its keys at once (s3list.py)."""
    from . import s3list  # which imports this module
    bucket, key = split_url(url)
    prefix = key.rstrip("/") + "/" if key.strip("/") else ""
    found = s3list.list_objects(url, bucket, prefix, recursive)
    with _lock:
        head = url.rstrip("/") + "/"
        for gone in [u for u in _known if u.startswith(head)]:  # deleted since an earlier listing
            if recursive or "/" not in gone[len(head):]:
                del _known[gone]
        _known.update((o.url, o) for o in found)
        folder = url.rstrip("/")
        _listed[folder] = _listed.get(folder, False) or recursive
    return found


def ensure_listed(urls: Iterable[str]) -> None:
    """List (concurrently, one level each) the folders of ``urls`` not yet listed, so that ``stat``
    knows every one of them, present or not, without a request per object."""
    folders = sorted({parent(u) for u in urls if is_remote(u)})
    todo = [f for f in folders if not _covered(f)]
    if todo:
        with ThreadPoolExecutor(min(len(todo), _options.concurrency)) as pool:
            list(pool.map(lambda f: list_folder(f, recursive=False), todo))


def _covered(folder: str) -> bool:
    """Whether a listing already showed every object directly in ``folder``."""
    if folder in _listed:
        return True
    f = folder
    while f.count("/") > 2:  # s3://bucket is the top
        f = f.rpartition("/")[0]
        if _listed.get(f):
            return True
    return False


def stat(url: str) -> Tuple[int, int, int]:
    """(size, tag, REGULAR) of an object a listing showed, MISSING for one it showed absent.  An
    object in a folder that was never listed is asked for (one HEAD request: MISSING when the server
    says it is not there; any other failure is an OSError, e.g. PermissionError for refused credentials)."""
    o = _known.get(url)
    if o is not None:
        return o.size, o.tag, REGULAR
    if _covered(parent(url)):
        return MISSING
    bucket, key = split_url(url)

    def head():
        _count("head")
        s = _client().stat_object(bucket, key)
        return ObjectInfo(url, int(s.size or 0), _tag(s.etag, s.last_modified))

    try:
        o = _retrying(url, head)
    except FileNotFoundError:
        return MISSING
    _known[url] = o
    return o.size, o.tag, REGULAR


def exists(url: str) -> bool:
    return stat(url) != MISSING


def forget() -> None:
    """Forget every listing (the next ``stat`` asks again): for a new start of a long-lived process."""
    with _lock:
        _known.clear()
        _listed.clear()


# -- a seekable object -------------------------------------------------------------------------------
