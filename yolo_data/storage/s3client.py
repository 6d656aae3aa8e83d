"""The S3 client a process uses, made from s3.S3Options: the endpoint (``endpoint_url``, else
``$AWS_ENDPOINT_URL_S3`` or ``$AWS_ENDPOINT_URL``, else AWS), the region, the first credentials provider
that has credentials, and urllib3's connection pool, whose answers a thread can watch
(``watch_requests``); what an error of a request means (``classify``), and request counters
(``RequestCounts``).  The S3 backend (s3.py) owns when a client is made (one per backend and process)
and every request sent through it; MinIO's client library is imported only here, when the first
``s3://`` path is used.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import urlsplit

# S3's error codes of a passing condition: throttling, a busy or failing server, a clock off by a moment
TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                             "TooManyRequests", "InternalError", "ServiceUnavailable", "RequestTimeout",
                             "RequestTimeTooSkewed", "OperationAborted"})


class RemoteUnavailable(ImportError):
    """A remote path was given and the client library is not installed."""


def endpoint(opts) -> Tuple[Optional[str], bool]:
    """(host[:port], https?) of the endpoint; (None, True) for AWS."""
    url = opts.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return None, True
    parts = urlsplit(url if "://" in url else "https://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint_url {url!r}: expected http://host[:port] or https://host[:port]")
    return parts.netloc.rpartition("@")[2], parts.scheme == "https"  # never a user:password@ part


def credentials(opts, aws: bool):
    """The first credentials provider that has credentials (see the module's docstring), or None."""
    from minio import credentials as mc

    profile = opts.profile or os.environ.get("AWS_PROFILE") or "default"
    chain = [mc.EnvAWSProvider(), mc.AWSConfigProvider(profile=profile)]
    if aws:  # the instance or container role answers on a link-local address of AWS only
        chain.append(mc.IamAwsProvider())
    for provider in chain:
        try:
            provider.retrieve()
            return provider
        except Exception:  # noqa: BLE001 - a provider without credentials raises; try the next
            continue
    return None


def make_client(opts):
    """A MinIO client for ``opts`` (s3.S3Options): its endpoint, region and credentials, and an HTTP
    pool without retries of its own (the caller retries) whose answers watch_requests can see."""
    try:
        import urllib3
        from minio import Minio
    except ImportError:
        raise RemoteUnavailable('reading s3:// paths needs the MinIO client: pip install "yolo-data[remote]"') from None
    host, secure = endpoint(opts)
    region = opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if host is not None and region is None:
        region = "us-east-1"  # what S3-compatible servers expect; spares asking the bucket's region
    # Retries are ours (S3Backend.retrying): urllib3's would not cover an answer cut in the middle of its body.
    http = _watched_pool(urllib3)(timeout=urllib3.Timeout(connect=opts.timeout_s, read=opts.timeout_s),
                                  maxsize=max(10, opts.concurrency), retries=False,
                                  ca_certs=os.environ.get("SSL_CERT_FILE") or _certifi())
    return Minio(host or "s3.amazonaws.com", secure=secure, region=region, http_client=http,
                 credentials=credentials(opts, host is None))


_watch = threading.local()  # .hook: this thread's watch_requests


@contextlib.contextmanager
def watch_requests(hook: Callable[[str, object], None]):
    """Meanwhile, ``hook(url, response)`` sees each request this thread sends (its URL, query included)
    and its answer (a urllib3 response) before the client library reads it, and may raise to end what
    sent it: the one way to bound the client library's own page loop (s3list's fallback listing)."""
    _watch.hook = hook
    try:
        yield
    finally:
        _watch.hook = None


def _watched_pool(urllib3):
    """urllib3's PoolManager, with answers shown to the thread's watch_requests hook."""
    class WatchedPool(urllib3.PoolManager):
        def urlopen(self, method, url, redirect=True, **kw):
            response = super().urlopen(method, url, redirect=redirect, **kw)
            hook = getattr(_watch, "hook", None)
            if hook is not None:
                hook(url, response)
            return response

    return WatchedPool


def _certifi() -> Optional[str]:
    try:
        import certifi
        return certifi.where()
    except ImportError:
        return None


def _status_of(e: Exception) -> Optional[int]:
    for attr in ("status_code", "_code"):
        v = getattr(e, attr, None)
        if isinstance(v, int):
            return v
    return None


def classify(e: Exception, url: str) -> Tuple[bool, OSError]:
    """(worth another try, the OSError naming ``url`` to raise when not) for an error of a request."""
    from minio.error import S3Error

    if isinstance(e, S3Error):
        code = e.code or ""
        if code in ("NoSuchKey", "NoSuchBucket", "NotFound"):
            what = "bucket" if code == "NoSuchBucket" else "object"
            return False, FileNotFoundError(2, f"no such {what} ({code})", url)
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"):
            return False, PermissionError(13, f"access denied ({code}: check the credentials and the "
                                              "bucket's policy)", url)
        return code in TRANSIENT_CODES, OSError(f"{url}: {code}: {e.message}")
    status = _status_of(e)
    if status is not None:
        return status in (429, 500, 502, 503, 504), OSError(f"{url}: HTTP {status} from the server")
    # urllib3's timeouts, refused, reset and cut connections, short bodies; the OS's socket errors
    return True, OSError(f"{url}: {type(e).__name__}: {e}")


class RequestCounts:
    """Requests by kind, counted from many threads; ``also``: another RequestCounts that counts them
    too (the process's total over every S3 backend)."""

    def __init__(self, also: Optional["RequestCounts"] = None):
        self.also, self.lock, self.counts = also, threading.Lock(), {}

    def add(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n
        if self.also is not None:
            self.also.add(what, n)

    def get(self) -> Dict[str, int]:
        return dict(self.counts)

    def renew_lock(self) -> None:
        """In a forked child: a fresh lock (a thread of the parent may have held this one at the fork)."""
        self.lock = threading.Lock()
