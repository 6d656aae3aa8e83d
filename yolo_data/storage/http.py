"""Images named by ``http://`` and ``https://`` URLs in a dataset file the user named (an NDJSON export's
``url`` fields, signed or not): the backend of those two schemes, over the standard library's HTTP client.

Not a general URL reader.  A URL is fetched only once a label format has *admitted* it
(:meth:`HttpBackend.admit`: formats/ndjson.py admits the URLs its file lists, in every process that
reads the dataset); any other http(s) URL a path, yaml or list line names is refused with a
PermissionError, without a request.

Credentials stay out of sight.  Above this backend an image is named by its *public* URL: scheme, host
and path, without the query (a signed URL's ``X-Amz-Signature``, ``X-Amz-Credential``, ``Signature``,
``token``, ``sig``, ...), without a fragment and without a ``user:password@`` part (:func:`public_url`).
The backend keeps the full URL beside it, in memory only, and sends it; every message and exception
names the public URL.  So the label cache, the image caches' and object cache's file names, logs and
problems hold no secret, and a re-exported file with fresh signatures maps onto the same names.

What it answers (base.Backend's contract):

    read(url, start, length)   GET of the admitted URL (a Range header for a part); retried
    stat(url)                  an admitted URL's version: its tag is a hash of the full URL (a new
                               signature or content name is a new version); its size is asked (a GET
                               of its first byte: a signed URL is signed for GET alone, not HEAD) only
                               for a URL admitted without the image's size (``sized=False``), else 0:
                               the dataset file vouches for it and nothing is requested
    read_many(urls)            a batch's images at once: those the object cache holds read in the
                               calling thread, the others fetched ``concurrency`` at a time
    list(url)                  refused: plain HTTP has no listings

Every request is retried with exponential backoff and jitter on 429, 5xx, timeouts and dropped or cut
connections, as the S3 backend's are (``attempts`` tries); what still fails is an ``OSError`` naming the
public URL: FileNotFoundError for 404 and 410, PermissionError for 401 and 403.  An image read for
training (``cached=True``) is served from, and kept in, the bounded object cache (objectcache.py) where
the dataset asks for one, under its public URL and its tag.
"""
from __future__ import annotations

import http.client
import os
import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit, urlunsplit

from . import objectcache
from .base import Backend, ObjectInfo, StorageOptions, text_tag
from .s3client import RequestCounts

SCHEMES = ("http", "https")
BACKOFF_CAP_S = 5.0
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_SIZE_KEY = "\0size"  # the object cache's entry holding an object's size (its bytes' entry needs it)
_jitter = random.Random()  # waits only: never seeded, never used for data
_live: "weakref.WeakSet[HttpBackend]" = weakref.WeakSet()  # backends whose locks a fork renews


def public_url(url: str) -> str:
    """``url`` as messages, caches and the label store name it: scheme, host (and port) and path; no
    query, fragment or ``user:password@``.

    Args:
        url: an ``http://`` or ``https://`` URL, signed or not.

    Returns:
        The URL without what may hold a credential (``https://host/a/b.jpg``).
    """
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme.lower(), host, parts.path, "", ""))


@dataclass(frozen=True)
class HttpOptions:
    """How to fetch.  ``concurrency``: requests in flight at once per process (a batch's); ``attempts``:
    tries per request; ``timeout_s``: to connect, and between two reads of an answer; ``backoff_s``: the
    first retry's largest wait, doubled each retry up to BACKOFF_CAP_S.  ``object_cache_bytes`` and
    ``object_dir``: objectcache.py (0: none)."""
    concurrency: int = 32
    attempts: int = 6
    timeout_s: float = 20.0
    backoff_s: float = 0.1
    object_cache_bytes: int = 0
    object_dir: Optional[str] = None


class _Transient(Exception):
    """A failure worth another try; ``error`` is what to raise after the last one."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


def _renew_locks() -> None:
    for backend in list(_live):
        backend.renew_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks)


class HttpBackend(Backend):
    """The ``http://`` and ``https://`` backend (see the module's docstring) with ``options``: the URLs
    admitted so far (public URL -> full URL), their sizes once known, request counters.  Thread-safe;
    pickled with its admitted URLs (a spawned DataLoader worker reads what its parent admitted)."""

    def __init__(self, options: Optional[HttpOptions] = None):
        self.options = options or HttpOptions()
        self._full: Dict[str, str] = {}
        self._vouched: set = set()
        self._start()
        o = self.options
        if o.object_cache_bytes > 0 and o.object_dir:  # checked here, so forked workers inherit its one warning
            objectcache.prepare(Path(o.object_dir))

    def _start(self) -> None:
        self.concurrency = self.options.concurrency
        self._lock = threading.Lock()
        self._counts = RequestCounts()
        self._sizes: Dict[str, int] = {}
        self._cache = objectcache.ProcessCache()
        _live.add(self)

    def __getstate__(self):
        return {"options": self.options, "full": self._full, "vouched": self._vouched}

    def __setstate__(self, state) -> None:
        self.options, self._full, self._vouched = state["options"], state["full"], state["vouched"]
        self._start()

    def __repr__(self) -> str:
        return f"HttpBackend({len(self._full)} URLs admitted)"

    def renew_locks(self) -> None:
        self._lock = threading.Lock()
        self._counts.renew_lock()

    # -- what may be fetched --------------------------------------------------------------------------
    def admit(self, urls: Iterable[str], sized: bool = True) -> List[str]:
        """Let these URLs be fetched: the ones a dataset file the user named lists.

        Args:
            urls: full URLs (their queries kept here, in memory, and sent).
            sized: the dataset file gives each image's size, so ``stat`` asks the server nothing.

        Returns:
            Each URL's public name (:func:`public_url`), in order: what the rest of the package calls it.

        Raises:
            ValueError: two URLs that differ only in what the public name leaves out (one name, two
                images); the message names the public URL only.
        """
        names = []
        with self._lock:
            for url in urls:
                name = public_url(url)
                known = self._full.get(name)
                if known is not None and known != url and name in names:
                    raise ValueError(f"{name} is listed twice with different queries (one name, two images)")
                self._full[name] = url
                (self._vouched.add if sized else self._vouched.discard)(name)
                names.append(name)
        return names

    def _full_url(self, url: str) -> str:
        full = self._full.get(url)
        if full is None:
            raise PermissionError(13, "not fetched: yolo_data reads http(s) URLs only where a dataset file "
                                      "the user named (an NDJSON export) lists them", public_url(url))
        return full

    # -- counters, retries ----------------------------------------------------------------------------
    def count(self, what: str, n: int = 1) -> None:
        self._counts.add(what, n)

    def counts(self) -> Dict[str, int]:
        """Requests this backend made in this process: 'get'; 'retries', and 'failed': requests
        that still failed after every try; 'cached': objects read from the local object cache instead."""
        return self._counts.get()

    def _request(self, url: str, method: str, start: int = 0, length: int = 0) -> Tuple[bytes, Dict[str, str]]:
        """One request of the full URL behind ``url``, tried up to ``attempts`` times.  Returns (body,
        headers); raises OSError naming the public URL."""
        full, shown, opts = self._full_url(url), public_url(url), self.options
        headers = {"Range": f"bytes={start}-{start + length - 1}"} if length > 0 else {}
        for attempt in range(opts.attempts):
            try:
                self.count(method.lower())
                return _send(full, shown, method, headers, opts.timeout_s)
            except _Transient as e:
                if attempt == opts.attempts - 1:
                    self.count("failed")  # the scan does not cache what a passing fault decided
                    raise OSError(f"{e.error} (after {opts.attempts} tries)") from None
                self.count("retries")
                time.sleep(_jitter.uniform(0, min(BACKOFF_CAP_S, opts.backoff_s * 2 ** attempt)))
        raise AssertionError("unreachable")

    def object_cache(self):
        """The ObjectCache the options ask for (one per process), or None."""
        return self._cache.get(self.options, self._lock)

    # -- the Backend interface ------------------------------------------------------------------------
    def read(self, url: str, start: int = 0, length: int = 0, cached: bool = False) -> bytes:
        """The bytes behind the admitted ``url`` (``length`` > 0: that many from ``start``).  Raises
        PermissionError for a URL not admitted, FileNotFoundError, PermissionError or OSError naming the
        public URL.  ``cached``: a whole image read for training, through the object cache."""
        tag = text_tag(self._full_url(url))
        local = self.object_cache() if cached and start == 0 and length == 0 else None
        if local is not None:
            data = self._cached(local, url, tag)
            if data is not None:
                return data
        data, _ = self._request(url, "GET", start, length)
        if length > 0 and len(data) > length:  # a server that ignores Range sends the whole object
            data = data[start:start + length]
        if start == 0 and length == 0:
            self._sizes[url] = len(data)
        if local is not None:  # the bytes first: a reader that finds the size finds them too
            local.put(url, len(data), tag, data)
            local.put(url + _SIZE_KEY, 8, tag, len(data).to_bytes(8, "big"))
        return data

    def _cached(self, local, url: str, tag: int) -> Optional[bytes]:
        """The admitted ``url``'s bytes from the object cache ``local``, or None where it holds no whole copy."""
        size = local.get(url + _SIZE_KEY, 8, tag)
        data = None if size is None else local.get(url, int.from_bytes(size, "big"), tag)
        if data is not None:
            self.count("cached")
        return data

    def read_many(self, urls: Sequence[str], threads: Optional[int] = None) -> List[Union[bytes, OSError]]:
        """The bytes of each URL (a batch's images, as ``read(url, cached=True)``); one that cannot be
        read gives its OSError in its place.  What the object cache holds is read here, in the calling
        thread: local files need no threads, and a batch the cache serves whole (every epoch after the
        first) starts none; only the others are fetched, ``threads`` at a time (Backend.read_many)."""
        local = self.object_cache()
        got: List[Union[bytes, OSError, None]] = [None] * len(urls)
        if local is not None:
            for k, url in enumerate(urls):
                try:
                    got[k] = self._cached(local, url, text_tag(self._full_url(url)))
                except OSError:  # (a URL not admitted) read below, which gives its error in its place
                    pass
        missing = [k for k, data in enumerate(got) if data is None]
        if missing:
            for k, data in zip(missing, super().read_many([urls[k] for k in missing], threads)):
                got[k] = data
        return got

    def stat(self, url: str) -> Optional[ObjectInfo]:
        """The admitted URL's size and tag (see the module's docstring); None when the server says it is
        not there.  Raises PermissionError for a URL not admitted, OSError when it cannot be told."""
        tag = text_tag(self._full_url(url))
        if url in self._vouched:
            return ObjectInfo(url, 0, tag)
        size = self._sizes.get(url)
        if size is None:
            # its first byte, not a HEAD: a signed URL is signed for one method, GET
            try:
                data, headers = self._request(url, "GET", 0, 1)
            except FileNotFoundError:
                return None
            total = headers.get("content-range", "").rpartition("/")[2]
            size = int(total) if total.isdigit() else len(data)  # (a server that ignores Range sent it all)
            self._sizes[url] = size
        return ObjectInfo(url, size, tag)

    def list(self, url: str, recursive: bool = True) -> List[ObjectInfo]:
        raise PermissionError(13, "http(s) URLs have no listings: an NDJSON file lists the images", public_url(url))


def _send(full: str, shown: str, method: str, headers: Dict[str, str], timeout: float) -> Tuple[bytes, Dict[str, str]]:
    """One request; raises _Transient for what is worth another try, else the OSError to raise.  No
    exception raised here holds ``full`` (urllib's errors carry the URL: they are not chained)."""
    error: Optional[OSError] = None
    try:
        request = urllib.request.Request(full, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as r:
            data = r.read() if method == "GET" else b""
            want = r.headers.get("content-length")
            if method == "GET" and want is not None and want.isdigit() and len(data) != int(want):
                error = _Transient(OSError(f"{shown}: {len(data)} of {want} bytes"))
            else:
                return data, {k.lower(): v for k, v in r.headers.items()}
    except ValueError:  # (http.client.InvalidURL too) its text would show the whole URL
        error = FileNotFoundError(2, "not a URL the HTTP client can request", shown)
    except urllib.error.HTTPError as e:
        status = e.code
        e.close()
        if status in (404, 410):
            error = FileNotFoundError(2, f"HTTP {status} from the server", shown)
        elif status in (401, 403):
            error = PermissionError(13, f"HTTP {status} from the server (an expired or refused signed URL: "
                                        "export the dataset again)", shown)
        elif status in TRANSIENT_STATUS:
            error = _Transient(OSError(f"{shown}: HTTP {status} from the server"))
        else:
            error = OSError(f"{shown}: HTTP {status} from the server")
    except urllib.error.URLError as e:
        if isinstance(e.reason, ssl.SSLCertVerificationError):  # the same answer every time: not retried
            error = OSError(f"{shown}: {_strerror(e.reason)}")
        else:  # refused, reset, timed out, a name that did not resolve (yet)
            error = _Transient(OSError(f"{shown}: {_strerror(e.reason)}"))
    except (http.client.HTTPException, socket.timeout, ConnectionError, TimeoutError, OSError) as e:
        error = _Transient(OSError(f"{shown}: {_strerror(e)}"))
    raise error from None


def _strerror(e) -> str:
    """An error's kind and text without a URL: OSErrors by their strerror (their filename may be the
    full URL), any other text cut before a query."""
    if isinstance(e, str):
        text = e
    elif isinstance(e, OSError) and e.strerror:
        return f"{type(e).__name__}: {e.strerror}"
    else:
        text = f"{type(e).__name__}: {e}"
    return text.partition("?")[0] if "://" in text else text


def http_backend(options: StorageOptions) -> HttpBackend:
    """The factory the registry holds for ``http://`` and ``https://``: the defaults, with the object
    cache that ``options`` (a dataset's settings) asks for."""
    changes = {k: v for k, v in (("object_cache_bytes", options.object_cache_bytes),
                                 ("object_dir", options.object_dir)) if v is not None}
    return HttpBackend(replace(HttpOptions(), **changes))
