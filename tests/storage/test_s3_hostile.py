"""Listings against a hostile S3-compatible endpoint (a small HTTP server on 127.0.0.1 in this module):
pages that never end and answers that are not S3 listings are an OSError naming the folder, through
the ranged listing and through the client library's own listing alike, and never a listing without end."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

import pytest

from yolo_data import create_dataloader
from yolo_data.storage import remote, s3list

pytest.importorskip("minio")

KEYS = [f"data/images/{i:05d}.jpg" for i in range(3000)]  # what the honest part of the server lists
# The server answers this many listing requests at most, then refuses (403) every request: a listing
# that would not end on its own ends there, so a test fails on a wrong verdict, never by hanging.
MOST_REQUESTS = 1000
HANG_S = 120  # the bound on a listing's thread if even the refusals did not end it
LOGIN = (b'<!DOCTYPE html>\n<html><head><title>Sign in</title></head>'
         b'<body><form action="/login" method="post"></form></body></html>')
YAML = b"path: s3://bucket/data\ntrain: images\nval: images\nnames: {0: a}\n"


def page_xml(keys, truncated, token=None, folders=()) -> bytes:
    parts = ['<?xml version="1.0" encoding="UTF-8"?>'
             '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name>',
             f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
    if token is not None:
        parts.append(f"<NextContinuationToken>{escape(token)}</NextContinuationToken>")
    parts += [f"<Contents><Key>{escape(k)}</Key><Size>1</Size><ETag>&quot;e{i}&quot;</ETag>"
              f"<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>" for i, k in enumerate(keys)]
    parts += [f"<CommonPrefixes><Prefix>{escape(f)}</Prefix></CommonPrefixes>" for f in folders]
    return "".join(parts + ["</ListBucketResult>"]).encode()


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are written apart: no 40 ms wait for an ACK each

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        parts = urlsplit(self.path)
        if parts.path == "/bucket/data.yaml":
            return self.answer(200, "application/octet-stream", YAML)
        q = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if "list-type" not in q:
            return self.do_HEAD()
        with srv.lock:
            srv.requests += 1
            n = srv.requests
        if n > MOST_REQUESTS:
            return self.answer(403, "application/xml", b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
                                                       b"AccessDenied</Code><Message>enough</Message></Error>")
        self.answer(200, *srv.mode(q, n))

    def do_HEAD(self):
        if urlsplit(self.path).path == "/bucket/data.yaml":
            return self.answer(200, "application/octet-stream", YAML, head=True)
        self.answer(404, "application/xml", b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code>'
                                            b"<Message>no such key</Message></Error>", head=self.command == "HEAD")

    def answer(self, status, content_type, body, head=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"yaml"')
        self.send_header("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT")
        self.end_headers()
        if not head:
            self.wfile.write(body)


def honest(q, n, size=1000):
    """ListObjectsV2 over KEYS (tokens are the last key listed)."""
    after = q.get("continuation-token") or q.get("start-after") or ""
    keys = [k for k in KEYS if k.startswith(q.get("prefix", "")) and k > after]
    return keys[:size], len(keys) > size, keys[size - 1] if len(keys) > size else None


def same_token(q, n):
    return "application/xml", page_xml(KEYS[:3], True, "stuck")


def empty_pages(q, n):
    return "application/xml", page_xml([], True, f"token-{n}")


def first_page_again(q, n):  # a new token each time, but the first page's keys
    return "application/xml", page_xml(KEYS[:3], True, f"token-{n}")


def login_page(q, n):
    return "text/html; charset=utf-8", LOGIN


def garbage(q, n):
    return "application/octet-stream", b"\x00\x01\x02 not xml at all \xff" * 4


def one_range_repeats(q, n):
    """Pages of 100 keys; a range that starts after a key gets its first page, then the same token forever."""
    if q.get("continuation-token") == "stuck":
        return "application/xml", page_xml([], True, "stuck")
    keys, more, token = honest(q, n, 100)
    return "application/xml", page_xml(keys, more, "stuck" if "start-after" in q else token)


def honest_pages(q, n):
    keys, more, token = honest(q, n)
    return "application/xml", page_xml(keys, more, token)


def folders_only(q, n):
    """A one-level listing of 400 sub-folders and no key, 2 folders a page: all progress."""
    folders = [f"data/{i:04d}/" for i in range(400)]
    after = q.get("continuation-token") or ""
    rest = [f for f in folders if f > after]
    return "application/xml", page_xml([], len(rest) > 2, rest[1] if len(rest) > 2 else None, rest[:2])


@pytest.fixture
def endpoint(monkeypatch):
    """The hostile server (``endpoint.mode`` answers each listing request) and the client pointed at it."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    srv.daemon_threads = True
    srv.lock, srv.requests = threading.Lock(), 0
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    before = remote.options()
    remote.configure(endpoint_url=f"http://127.0.0.1:{srv.server_port}", attempts=2, backoff_s=0.01, timeout_s=5.0)
    remote.forget()
    yield srv
    remote.configure(**before.__dict__)
    remote.forget()
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=30)


def outcome(call):
    """What ``call()`` returned or raised, from a thread bounded by HANG_S."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - what it raised is the verdict
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"the listing did not end within {HANG_S} s"
    return box


@pytest.fixture(params=["ranged", "fallback"])
def path(request, monkeypatch):
    """Both listings: s3list's own pages, and the client library's public list_objects."""
    if request.param == "fallback":
        monkeypatch.setattr(s3list, "RAW_PAGES", False)
    return request.param


IDLE = "the listing does not end: 100 pages in a row brought no new key"
TWICE = "the listing does not end: the server sent the continuation token 'stuck' twice"


# the client library's listing shows no tokens: a page sent again is pages without a new key
@pytest.mark.parametrize("mode, why", [(same_token, {"ranged": TWICE, "fallback": IDLE}),
                                       (empty_pages, {"ranged": IDLE, "fallback": IDLE}),
                                       (first_page_again, {"ranged": IDLE, "fallback": IDLE})])
def test_pages_that_never_end_are_an_error_naming_the_folder(endpoint, path, mode, why):
    endpoint.mode = mode
    got = outcome(lambda: remote.list_folder("s3://bucket/data"))
    error = got.get("error")
    assert isinstance(error, OSError), got
    assert str(error).startswith(f"s3://bucket/data: {why[path]}"), str(error)
    assert endpoint.requests <= s3list.IDLE_PAGES + 1  # never retried: the server answers the same way


@pytest.mark.parametrize("mode, shows", [(login_page, "Content-Type text/html; charset=utf-8, begins "
                                                      "'<!DOCTYPE html> <html><head><title>Sign in"),
                                         (garbage, "Content-Type application/octet-stream, begins")])
def test_an_answer_that_is_not_an_s3_listing_says_so(endpoint, path, mode, shows):
    endpoint.mode = mode
    error = outcome(lambda: remote.list_folder("s3://bucket/data")).get("error")
    assert isinstance(error, OSError), error
    assert str(error).startswith("s3://bucket/data: the server's answer is not an S3 listing (HTTP 200, ")
    assert shows in str(error) and "\n" not in str(error)
    assert endpoint.requests == 1


def test_a_dataset_whose_listing_is_a_login_page_names_it_instead_of_an_empty_folder(endpoint):
    endpoint.mode = login_page
    error = outcome(lambda: create_dataloader("s3://bucket/data.yaml", 64, 4, 32, workers=0)).get("error")
    assert isinstance(error, OSError) and "does not exist or is empty" not in str(error), error
    assert "s3://bucket/data/images: the server's answer is not an S3 listing" in str(error)


def test_a_range_that_repeats_its_token_ends_the_listing_of_several_ranges(endpoint, monkeypatch):
    monkeypatch.setattr(s3list, "PAGE", 100)
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)
    started, listing_range = [], s3list._Listing._range

    def spied(self, after, upto):
        started.append(after)
        return listing_range(self, after, upto)

    monkeypatch.setattr(s3list._Listing, "_range", spied)
    endpoint.mode = one_range_repeats
    error = outcome(lambda: remote.list_folder("s3://bucket/data")).get("error")
    assert isinstance(error, OSError), error
    assert str(error).startswith(f"s3://bucket/data: {TWICE}") and len(started) >= 2
    assert endpoint.requests < MOST_REQUESTS


def test_pages_of_sub_folders_only_are_progress(endpoint, path):
    endpoint.mode = folders_only
    got = outcome(lambda: remote.list_folder("s3://bucket/data", recursive=False))
    assert got == {"value": []} and endpoint.requests == 200  # more pages than IDLE_PAGES, none with a key


def test_an_honest_listing_is_listed_whole(endpoint, path, monkeypatch):
    monkeypatch.setattr(s3list, "CUT_PAGES", 1)
    endpoint.mode = honest_pages
    got = outcome(lambda: remote.list_folder("s3://bucket/data"))
    assert [o.url for o in got["value"]] == [f"s3://bucket/{k}" for k in KEYS]
