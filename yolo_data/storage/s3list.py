"""A folder's objects from S3's ListObjectsV2: its requests, its XML answers, and a folder of many pages
listed in ranges of its keys at once.

S3 answers a listing a page (at most 1,000 keys) at a time; the next page is asked for after the
last key (a continuation token, or ``start-after`` any key).  So a folder's keys are cut into ranges
(keyspace.py guesses where) and several ranges are listed at once.

An answer is read here with ElementTree for the four fields the label cache's fingerprint uses (key,
size, ETag, modification time): about 25 us of CPU a key in all (request, answer, fingerprint tag), where
the client library's objects of every field cost about 100 us, which made the client's CPU, not the
server, the limit of a warm start.  The request
goes through the MinIO client's signed-request method (``Minio._execute``, not public: MinIO's own
listing calls it); where a client lacks it, the public ``list_objects`` lists the folder in one range.

Every listing ends: an answer that is not a ListObjectsV2 result (a proxy's HTML login page), a
continuation token that comes again in one range, or IDLE_PAGES pages in a row that bring no key or
sub-folder past the last one while the server says more follow, is a ``ListingError`` naming
the folder's URL (never retried).  The fallback's pages are the client library's, so it is bounded
on the answers it receives (``s3client.watch_requests``).

A listing is made for one S3 backend (s3.py), and asks it for what a request needs: its client
(``backend.client()``), its retries (``backend.retrying(url, request)``) and its request counter
(``backend.count('list')``).
"""
from __future__ import annotations

import logging
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Dict, List, NamedTuple, Optional
from urllib.parse import unquote_plus

from . import keyspace, s3client
from .base import ListingError, ObjectInfo, text_tag

LOGGER = logging.getLogger("yolo_data")
SCHEME = "s3://"

PAGE = 1000  # keys of a page (S3's most)
STREAMS = 8  # ranges of one folder listed at once
CUT_PAGES = 4  # a range is cut only after it listed this many pages: each range costs part of a page more
PROGRESS_S = 10.0  # a long listing says how far it is this often
RAW_PAGES = True  # False: every listing through the client's public list_objects (one range)
# Pages in a row without a new key or sub-folder before a listing is called endless: S3 may send an
# empty page that says more follow (directory buckets do), never a hundred in a row.
IDLE_PAGES = 100


class Entry(NamedTuple):
    key: str
    size: int
    etag: str
    modified: str


class Page(NamedTuple):
    entries: List[Entry]  # the objects (not the sub-folders of a one-level listing), in key order
    truncated: bool
    token: Optional[str]  # for the next page
    last_folder: Optional[str] = None  # the last sub-folder (CommonPrefixes) of a one-level listing


def parse_page(xml: bytes) -> Page:
    """A ListObjectsV2 answer (keys URL-encoded or not, as its EncodingType says).  ValueError for
    an answer that is not one."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"not XML ({e})") from None
    ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag[len(ns):] != "ListBucketResult":
        raise ValueError(f"<{root.tag[len(ns):]}>, not <ListBucketResult>")
    url = (root.findtext(ns + "EncodingType") or "").lower() == "url"
    key, size, etag, modified = ns + "Key", ns + "Size", ns + "ETag", ns + "LastModified"
    entries = []
    for c in root.iterfind(ns + "Contents"):
        name = c.findtext(key) or ""
        entries.append(Entry(unquote_plus(name) if url else name, int(c.findtext(size) or 0),
                             c.findtext(etag) or "", c.findtext(modified) or ""))
    truncated = (root.findtext(ns + "IsTruncated") or "").lower() == "true"
    folders = [p.findtext(ns + "Prefix") or "" for p in root.iterfind(ns + "CommonPrefixes")]
    last = max((unquote_plus(p) if url else p for p in folders), default=None)
    return Page(entries, truncated, root.findtext(ns + "NextContinuationToken"), last)


def not_a_listing(url: str, response) -> ListingError:
    """The error for an answer (a urllib3 response) that is not a listing: its status, type and first bytes."""
    head = " ".join((response.data or b"")[:60].decode("utf-8", "replace").split())
    return ListingError(f"{url}: the server's answer is not an S3 listing (HTTP {response.status}, "
                               f"Content-Type {response.headers.get('content-type') or 'none'}, begins "
                               f"{head!r}): is endpoint_url an S3 endpoint?")


def request_page(backend, url: str, bucket: str, prefix: str, recursive: bool, start_after: Optional[str],
                 token: Optional[str]) -> Page:
    """One ListObjectsV2 request through ``backend``'s client (no retries: the caller's) for the folder
    ``url``."""
    query = {"list-type": "2", "delimiter": "" if recursive else "/", "encoding-type": "url",
             "max-keys": str(PAGE), "prefix": prefix}
    if token:
        query["continuation-token"] = token
    elif start_after:
        query["start-after"] = start_after
    response = backend.client()._execute("GET", bucket, query_params=query)
    try:
        return parse_page(response.data)
    except ValueError:
        raise not_a_listing(url, response) from None


def etag_tag(etag: Optional[str], modified) -> int:
    """An object's tag: its ETag (else its modification time) folded to a non-negative int64."""
    return text_tag((etag or "").strip('"') or str(modified))


def object_info(bucket: str, key: str, size: int, etag: Optional[str], modified) -> ObjectInfo:
    """The ObjectInfo of ``s3://bucket/key`` as a listing or a HEAD request shows it."""
    return ObjectInfo(f"{SCHEME}{bucket}/{key}", int(size or 0), etag_tag(etag, modified))


def list_objects(backend, url: str, bucket: str, prefix: str, recursive: bool) -> List[ObjectInfo]:
    """Every object under ``prefix`` (every level, or the first with ``recursive=False``), in key
    order, listed through ``backend`` (an s3.S3Backend)."""
    if RAW_PAGES and hasattr(backend.client(), "_execute"):
        return _Listing(backend, url, bucket, prefix, recursive).run()

    def listing():
        out, seen, idle = [], set(), [0]

        def answered(request: str, response):  # before the client reads the page
            if "list-type=2" not in request:
                return  # another request of the client's (a bucket's region)
            backend.count("list")
            if 200 <= response.status < 300 and b"ListBucketResult" not in response.data[:4096]:
                raise not_a_listing(url, response)
            idle[0] += 1
            if idle[0] >= IDLE_PAGES:
                raise idle_listing(url)

        with s3client.watch_requests(answered):
            for o in backend.client().list_objects(bucket, prefix=prefix, recursive=recursive):
                if o.object_name in seen:
                    continue  # a page sent again
                seen.add(o.object_name)
                idle[0] = 0
                if not (o.is_dir or o.object_name.endswith("/")):
                    out.append(object_info(bucket, o.object_name, o.size, o.etag, o.last_modified))
        return out

    return backend.retrying(url, listing)


def endless(url: str, why: str) -> ListingError:
    return ListingError(f"{url}: the listing does not end: {why}; is endpoint_url an S3 endpoint "
                               "(no caching proxy in between)?")


def idle_listing(url: str, last: Optional[str] = None) -> ListingError:
    """The error for IDLE_PAGES pages in a row without a new key (``last``: the last key listed)."""
    after = f" (after {last!r})" if last else ""
    return endless(url, f"{IDLE_PAGES} pages in a row brought no new key{after}, each saying more follow")


class _Listing:
    """One folder's listing, in ranges of its keys listed at once.  The first range is the whole
    folder.  Whenever a range has listed a full page, and CUT_PAGES pages at least, and fewer than
    STREAMS ranges are being listed, it keeps the keys up to a cut (keyspace.cut_after) and a new
    range lists those after it.  The range that runs to the folder's end keeps 4, 8, 16, ... pages'
    worth at each cut (how many keys are left is not known); a bounded range is cut halfway.  A range
    stops at a key past its end, so the last page it fetched is partly the next range's: a folder of
    fewer than CUT_PAGES pages is listed in one range.  Each range is retried on its own, from its last
    key; an error that outlasts the retries ends the listing."""

    def __init__(self, backend, url: str, bucket: str, prefix: str, recursive: bool):
        self.backend, self.url, self.bucket, self.prefix, self.recursive = backend, url, bucket, prefix, recursive
        self.found: Dict[str, ObjectInfo] = {}
        self.lock = threading.Lock()
        self.ranges: list = []  # the futures of every range started, in order
        self.busy, self.reach = 1, float(CUT_PAGES)

    def run(self) -> List[ObjectInfo]:
        t0, said = time.monotonic(), 0.0
        with ThreadPoolExecutor(STREAMS, thread_name_prefix="yolo_data-list") as self.pool:
            self.ranges.append(self.pool.submit(self._range, None, None))
            i = 0
            try:
                while i < len(self.ranges):  # a range starts others only while it runs: they are appended first
                    if wait([self.ranges[i]], timeout=PROGRESS_S).done:
                        self.ranges[i].result()
                        i += 1
                    elif time.monotonic() - t0 > said + PROGRESS_S:
                        said = time.monotonic() - t0
                        LOGGER.info(f"listing {self.url}: {len(self.found):,} objects so far ({said:.0f} s)")
            except BaseException:
                for f in self.ranges:
                    f.cancel()
                raise
        return [self.found[k] for k in sorted(self.found)]

    def _range(self, after: Optional[str], upto: Optional[str]) -> None:
        """List the keys in (after, upto] (None: from the start, to the end)."""
        cursor = [after, upto]

        def pages():
            token, pages_done, tokens, idle, folder = None, 0, set(), 0, None
            while True:
                self.backend.count("list")
                page = request_page(self.backend, self.url, self.bucket, self.prefix, self.recursive, cursor[0], token)
                keys = []
                for e in page.entries:
                    if cursor[1] is not None and e.key > cursor[1]:
                        return  # the next range's
                    if cursor[0] is not None and e.key <= cursor[0]:
                        continue  # listed already (a server that sends a page again)
                    if not e.key.endswith("/"):
                        info = object_info(self.bucket, e.key, e.size, e.etag, e.modified)
                        with self.lock:
                            self.found[e.key] = info
                    cursor[0] = e.key
                    keys.append(e.key)
                if not page.truncated:
                    return
                new_folder = page.last_folder is not None and (folder is None or page.last_folder > folder)
                folder = page.last_folder if new_folder else folder
                idle = 0 if keys or new_folder else idle + 1
                if idle >= IDLE_PAGES:
                    raise idle_listing(self.url, cursor[0])
                if page.token in tokens:
                    raise endless(self.url, f"the server sent the continuation token {page.token[:40]!r} twice")
                if page.token:  # else the next page is asked for after the last key
                    tokens.add(page.token)
                token, pages_done = page.token, pages_done + 1
                if pages_done >= CUT_PAGES and len(keys) > 1:
                    self._share(cursor, keys)

        try:
            self.backend.retrying(self.url, pages)
        finally:
            with self.lock:
                self.busy -= 1

    def _share(self, cursor: list, page: List[str]) -> None:
        """After a full ``page`` of keys: hand the keys after a cut to a new range when fewer than
        STREAMS ranges are being listed."""
        with self.lock:
            if self.busy >= STREAMS:
                return
            upto = cursor[1]
            m = keyspace.cut_after(page, self.reach if upto is None else float("inf"), upto)
            if m is None:
                return
            self.ranges.append(self.pool.submit(self._range, m, upto))
            cursor[1] = m  # only once the keys after it have their range
            self.busy += 1
            if upto is None:
                self.reach *= 2
