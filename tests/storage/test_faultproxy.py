"""The fault proxy (tests/faultproxy.py) against the real SeaweedFS fixture:
it passes S3 traffic through unchanged (signatures still check out), and each
fault does to a client what it claims. Skips where weed is not installed."""
from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import faultproxy
import s3server
from faultproxy import FaultProxy, Rule

# The fixtures, which pytest finds by name in the module.
s3_server = s3server.s3_server
fault_proxy = faultproxy.fault_proxy

urllib3 = pytest.importorskip("urllib3")
minio = pytest.importorskip("minio")
from minio import Minio  # noqa: E402
from minio.error import S3Error  # noqa: E402
from urllib3.exceptions import ProtocolError, ReadTimeoutError  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]


def _netloc(url: str) -> str:
    return url.split("://", 1)[1]


def _minio(endpoint_url, srv, secret=None, **http):
    """A minio client; ``http`` given: its own urllib3 pool with those
    settings (retries=False to see each response as it comes)."""
    client = urllib3.PoolManager(**http) if http else None
    return Minio(_netloc(endpoint_url), access_key=srv.access_key, secret_key=secret or srv.secret_key,
                 secure=False, region="us-east-1", http_client=client)


def _raw(read_s=10.0):
    """urllib3 without retries: each test sees exactly what the proxy sent."""
    return urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=read_s))


def _xml_code(data: bytes) -> str:
    return ET.fromstring(data).findtext("Code")


@pytest.fixture(scope="module")
def _module_bucket(s3_server):
    # One bucket for the module: each bucket costs the session's server volumes.
    name = "faultproxy-" + uuid.uuid4().hex[:12]
    _minio(s3_server.endpoint_url, s3_server).make_bucket(name)
    return name


@pytest.fixture
def bucket(s3_server, _module_bucket):
    """The module's bucket with its objects removed directly on the server
    (so the proxy's counters start at 0); folders may remain."""
    direct = _minio(s3_server.endpoint_url, s3_server)
    for o in direct.list_objects(_module_bucket, recursive=True):
        direct.remove_object(_module_bucket, o.object_name)
    return _module_bucket


@pytest.fixture
def via(fault_proxy, s3_server):
    """A minio client that goes through the proxy, with minio's own retries."""
    return _minio(fault_proxy.endpoint_url, s3_server)


def _put(client, bucket, key, data: bytes):
    client.put_object(bucket, key, _Reader(data), len(data))


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def read(self, n=-1):
        n = len(self.data) - self.pos if n is None or n < 0 else n
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def _get(client, bucket, key) -> bytes:
    r = client.get_object(bucket, key)
    try:
        return r.read()
    finally:
        r.close()
        r.release_conn()


# -- passing through --------------------------------------------------------------------
def test_put_get_list_byte_identical(fault_proxy, s3_server, via, bucket):
    direct = _minio(s3_server.endpoint_url, s3_server)
    bodies = {"empty": b"", "small.txt": b"0 0.5 0.5 0.1 0.1\n",
              "images/100k.jpg": os.urandom(100_000),
              # Over minio's 5 MiB part size: a multipart upload (POST, PUT parts, POST).
              "images/big.bin": os.urandom(6 * 1024 * 1024 + 123)}
    for key, data in bodies.items():
        _put(via, bucket, key, data)
    for key, data in bodies.items():
        assert _get(via, bucket, key) == data, key
        assert _get(direct, bucket, key) == data, key  # stored as sent, not just echoed back
    listed = sorted(o.object_name for o in via.list_objects(bucket, recursive=True))
    assert listed == sorted(bodies)
    counts = fault_proxy.counts
    assert counts[("POST", "/%s/images/big.bin" % bucket)] == 2  # initiate + complete
    assert counts[("PUT", "/%s/images/big.bin" % bucket)] == 2  # two parts
    assert counts[("GET", "/%s/images/100k.jpg" % bucket)] == 1
    assert fault_proxy.faults_served == {}


def test_signatures_are_checked_through_the_proxy(fault_proxy, s3_server, via, bucket):
    # The good client above succeeds only because Host reaches the server as the
    # client signed it (127.0.0.1:<proxy port>); this one must still be refused.
    _put(via, bucket, "a", b"x")
    bad = _minio(fault_proxy.endpoint_url, s3_server, secret="not-the-secret", retries=False)
    with pytest.raises(S3Error) as e:
        _get(bad, bucket, "a")
    assert e.value.code == "SignatureDoesNotMatch"
    # A presigned URL signs the host too.
    url = via.presigned_get_object(bucket, "a")
    assert _raw().request("GET", url).data == b"x"
    assert _raw().request("GET", url.replace("X-Amz-Signature=", "X-Amz-Signature=0")).status == 403


def test_chunked_put_and_connection_reuse(fault_proxy, s3_server, via, bucket):
    data = os.urandom(300_000)
    url = via.presigned_put_object(bucket, "chunked.bin")
    pieces = (data[i:i + 70_000] for i in range(0, len(data), 70_000))
    r = _raw().request("PUT", url, body=pieces, chunked=True)  # Transfer-Encoding: chunked
    assert r.status == 200, r.data
    assert _get(via, bucket, "chunked.bin") == data

    keys = ["k%d" % i for i in range(8)]
    for k in keys:
        _put(via, bucket, k, k.encode() * 1000)
    fault_proxy.reset_counts()
    errors = []

    def reader(k):
        try:
            for _ in range(10):
                assert _get(via, bucket, k) == k.encode() * 1000
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert fault_proxy.requests == 80
    # minio's pool keeps its connections alive: far fewer connections than requests.
    assert 1 <= fault_proxy.connections <= 10


def _expect_put(proxy, url, body: bytes):
    """PUT with ``Expect: 100-continue`` (boto3 sends it with large bodies) on a
    raw socket: the head, then the body only if a 100 Continue comes. Returns
    (the start of the first answer, the final response, its body)."""
    u = urllib3.util.parse_url(url)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(("PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n"
                   % (u.request_uri, u.netloc, len(body))).encode())
        first = s.recv(64, socket.MSG_PEEK)  # left on the socket for HTTPResponse
        while 0 < len(first) < 12:
            time.sleep(0.01)
            first = s.recv(64, socket.MSG_PEEK)
        if first.startswith(b"HTTP/1.1 100 "):
            s.sendall(body)
        r = http.client.HTTPResponse(s)
        r.begin()  # skips the interim 100
        return first, r, r.read()


def test_expect_100_continue(fault_proxy, via, bucket):
    data = os.urandom(150_000)
    url = via.presigned_put_object(bucket, "expect.bin")
    first, r, _ = _expect_put(fault_proxy, url, data)
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert r.status == 200
    assert _get(via, bucket, "expect.bin") == data
    # A throttled PUT is answered at once: no 100, no body sent, connection closed.
    fault_proxy.faults.throttle(times=1, method="PUT")
    first, r, body = _expect_put(fault_proxy, url, b"other")
    assert (r.status, r.getheader("Connection"), _xml_code(body)) == (503, "close", "SlowDown")
    assert _get(via, bucket, "expect.bin") == data


# -- faults -----------------------------------------------------------------------------
def test_latency_is_added_to_each_request(fault_proxy, via, bucket):
    _put(via, bucket, "a", b"x")
    fault_proxy.faults.latency_s = 0.1
    t0 = time.monotonic()
    for _ in range(5):
        via.stat_object(bucket, "a")
    slow = time.monotonic() - t0
    fault_proxy.faults.latency_s = 0
    t0 = time.monotonic()
    for _ in range(5):
        via.stat_object(bucket, "a")
    fast = time.monotonic() - t0
    assert slow >= 0.5
    assert fast < slow - 0.3


def test_throttle_next_n_matching(fault_proxy, s3_server, via, bucket):
    _put(via, bucket, "images/a.jpg", b"a")
    _put(via, bucket, "images/b.jpg", b"b")
    url_a = via.presigned_get_object(bucket, "images/a.jpg")
    url_b = via.presigned_get_object(bucket, "images/b.jpg")
    http = _raw()
    rule = fault_proxy.faults.throttle(times=2, method="GET", path=r"/a\.jpg$")
    assert http.request("GET", url_b).data == b"b"  # another path: untouched
    assert via.stat_object(bucket, "images/a.jpg").size == 1  # HEAD: untouched
    for _ in range(2):
        r = http.request("GET", url_a)
        assert r.status == 503
        assert r.headers["Content-Type"] == "application/xml"
        assert _xml_code(r.data) == "SlowDown"
    assert http.request("GET", url_a).data == b"a"  # budget spent
    assert rule.served == 2 and rule.remaining == 0
    assert fault_proxy.faults_served == {"throttle": 2}

    # minio-py sees an S3Error when its pool does not retry ...
    fault_proxy.faults.throttle(times=1, path=r"/a\.jpg$")
    no_retry = _minio(fault_proxy.endpoint_url, s3_server, retries=False)
    with pytest.raises(S3Error) as e:
        _get(no_retry, bucket, "images/a.jpg")
    assert e.value.code == "SlowDown"
    # ... while its default pool (urllib3 Retry, status_forcelist 500-504) retries by itself.
    fault_proxy.faults.throttle(times=2, path=r"/a\.jpg$")
    fault_proxy.reset_counts()
    assert _get(via, bucket, "images/a.jpg") == b"a"
    assert fault_proxy.counts[("GET", "/%s/images/a.jpg" % bucket)] == 3


def test_throttle_by_query(fault_proxy, s3_server, via, bucket):
    _put(via, bucket, "q/a", b"a")
    no_retry = _minio(fault_proxy.endpoint_url, s3_server, retries=False)
    fault_proxy.faults.throttle(times=None, query=r"(^|&)list-type=2(&|$)")  # ListObjectsV2, until removed
    for _ in range(2):
        with pytest.raises(S3Error) as e:
            list(no_retry.list_objects(bucket, prefix="q/"))
        assert e.value.code == "SlowDown"
    assert _get(no_retry, bucket, "q/a") == b"a"
    fault_proxy.faults.clear()
    assert [o.object_name for o in no_retry.list_objects(bucket, prefix="q/")] == ["q/a"]


def test_error_statuses(fault_proxy, s3_server, via, bucket):
    _put(via, bucket, "a", b"a")
    url = via.presigned_get_object(bucket, "a")
    http = _raw()
    fault_proxy.faults.error(times=1)
    fault_proxy.faults.error(times=1, status=502, code=None)
    r = http.request("GET", url)
    assert (r.status, r.headers["Content-Type"], _xml_code(r.data)) == (500, "application/xml", "InternalError")
    r = http.request("GET", url)
    assert (r.status, r.headers["Content-Type"]) == (502, "text/plain")
    assert http.request("GET", url).data == b"a"
    assert fault_proxy.faults_served == {"error": 2}

    # A failed PUT never reaches the server; its body is read off the connection,
    # which stays usable for the next request.
    no_retry = _minio(fault_proxy.endpoint_url, s3_server, retries=False)
    fault_proxy.faults.error(times=1, method="PUT")
    with pytest.raises(S3Error) as e:
        _put(no_retry, bucket, "b", os.urandom(200_000))
    assert e.value.code == "InternalError"
    with pytest.raises(S3Error) as e:
        no_retry.stat_object(bucket, "b")
    assert e.value.code == "NoSuchKey"
    before = fault_proxy.connections
    _put(no_retry, bucket, "b", b"b")
    assert _get(no_retry, bucket, "b") == b"b"
    assert fault_proxy.connections == before


def test_cut_gives_a_short_body(fault_proxy, s3_server, via, bucket):
    data = os.urandom(200_000)
    _put(via, bucket, "a", data)
    url = via.presigned_get_object(bucket, "a")
    http = _raw()
    fault_proxy.faults.cut(times=1, method="GET", after_bytes=1000)
    with pytest.raises(ProtocolError, match="IncompleteRead"):
        http.request("GET", url)
    assert http.request("GET", url).data == data

    # minio-py returns the response, then its read fails (no retry mid-body).
    fault_proxy.faults.cut(times=1, method="GET", after_bytes=0)
    with pytest.raises(ProtocolError, match="IncompleteRead"):
        _get(via, bucket, "a")
    assert _get(via, bucket, "a") == data
    assert fault_proxy.faults_served == {"cut": 2}


def test_reset_drops_the_connection(fault_proxy, s3_server, via, bucket):
    _put(via, bucket, "a", b"a")
    url = via.presigned_get_object(bucket, "a")
    http = _raw()
    fault_proxy.faults.reset(times=1)
    with pytest.raises(ProtocolError, match="Connection aborted|reset"):
        http.request("GET", url)
    assert http.request("GET", url).data == b"a"
    # minio's default pool retries a GET whose connection was reset.
    fault_proxy.faults.reset(times=2)
    fault_proxy.reset_counts()
    assert _get(via, bucket, "a") == b"a"
    assert fault_proxy.requests == 3
    assert fault_proxy.faults_served == {"reset": 2}


def test_stall_hits_the_read_timeout(fault_proxy, via, bucket):
    _put(via, bucket, "a", b"a" * 100_000)
    url = via.presigned_get_object(bucket, "a")
    http = _raw(read_s=1.0)
    fault_proxy.faults.stall(times=1, stall_s=30)
    t0 = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        http.request("GET", url)
    assert 0.9 < time.monotonic() - t0 < 3
    # Headers through, then the body stalls: the read timeout fires on the body.
    fault_proxy.faults.stall(times=1, stall_s=30, send_headers=True)
    t0 = time.monotonic()
    r = http.request("GET", url, preload_content=False)
    assert r.status == 200
    with pytest.raises((ReadTimeoutError, ProtocolError)):
        r.read()
    assert 0.9 < time.monotonic() - t0 < 3
    assert http.request("GET", url).data == b"a" * 100_000


def test_close_is_prompt_during_a_stall(s3_server, bucket):
    direct = _minio(s3_server.endpoint_url, s3_server)
    _put(direct, bucket, "a", b"a")
    proxy = FaultProxy(s3_server.endpoint_url)
    url = _minio(proxy.endpoint_url, s3_server).presigned_get_object(bucket, "a")
    proxy.faults.stall(times=None, stall_s=60)
    outcome = []

    def client():
        try:
            _raw(read_s=60).request("GET", url)
            outcome.append("answered")
        except Exception as e:  # the test checks which
            outcome.append(e)

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while proxy.faults_served["stall"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.faults_served["stall"] == 3
    t0 = time.monotonic()
    proxy.close()
    assert time.monotonic() - t0 < 2
    for t in threads:
        t.join(5)
    assert len(outcome) == 3 and all(isinstance(o, ProtocolError) for o in outcome), outcome
    assert not [t for t in threading.enumerate() if t.name.startswith("faultproxy-")]
    assert proxy._socks == set()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()


def test_counters_per_method_and_path(fault_proxy, via, bucket):
    _put(via, bucket, "a", b"a")
    _get(via, bucket, "a")
    _get(via, bucket, "a")
    via.stat_object(bucket, "a")
    fault_proxy.faults.error(times=1, method="HEAD", status=503, code="SlowDown")
    fault_proxy.faults.throttle(times=1, path="/nothing-matches-this$")
    assert via.stat_object(bucket, "a").size == 1  # minio retried past the 503
    c = fault_proxy.counts
    assert c == {("PUT", "/%s/a" % bucket): 1, ("GET", "/%s/a" % bucket): 2, ("HEAD", "/%s/a" % bucket): 3}
    assert fault_proxy.requests == 6
    assert fault_proxy.faults_served == {"error": 1}
    fault_proxy.reset_counts()
    assert (fault_proxy.requests, fault_proxy.counts, fault_proxy.faults_served) == (0, {}, {})
    _get(via, bucket, "a")
    assert fault_proxy.counts == {("GET", "/%s/a" % bucket): 1}


def test_rule_validation():
    with pytest.raises(ValueError, match="action"):
        Rule("explode")
    assert Rule("cut", method="get").matches("GET", "/b/k", "")
    assert not Rule("cut", path="^/x/").matches("GET", "/b/k", "")


def test_importable_without_pytest():
    code = "import sys; sys.modules['pytest'] = None; import faultproxy; print(hasattr(faultproxy, 'fault_proxy'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
