"""A real Ray cluster for the tests: a head node and a second node on loopback, CPU only.

The nodes take the addresses 127.0.0.2 and 127.0.0.3 (Ray replaces 127.0.0.1 by the machine's own
address; other loopback addresses it keeps), so Ray Train sees two nodes, with their own node ranks,
local ranks and LOCAL_WORLD_SIZE, as on two machines, while nothing leaves the machine.  Each node is a
``ray start --block`` started with ``popen_all`` in a session of its own: it and every process Ray
starts (raylet, agents, workers, the workers' DataLoader processes) carry the command's mark or stay in
its session (Ray's agents and workers set their process title, which blanks the mark), and all are
killed when the fixture ends.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from procs import free_port, popen_all

HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"
CPUS_PER_NODE = 2  # Ray's logical CPUs: with one a worker, 2 workers a node
START_TIMEOUT_S = 90
STARTED = "This command will now block forever"  # what `ray start --block` prints once its node runs


@dataclass(frozen=True)
class RayCluster:
    """``address``: the head's GCS, for ``ray.init(address=...)``; ``env``: what a client's environment
    needs besides (the cluster's token); ``logs``: the nodes' output."""
    address: str
    env: dict
    logs: Path


def _wait_started(proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the Ray {what} did not start within {START_TIMEOUT_S} s:\n"
                        f"{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        time.sleep(0.1)


@contextlib.contextmanager
def ray_cluster():
    """A running two-node cluster (a RayCluster), ended with every process it started."""
    ray = str(Path(sys.executable).with_name("ray"))
    port = free_port()
    # Ray turns token authentication on by itself where a token file exists (~/.ray/auth_token): the
    # cluster gets a token of its own, so it never depends on what the home folder holds
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    # a short folder: Ray's Unix sockets live in it, and a socket's path holds at most 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="yolo_data_ray_"))
    common = ["--block", "--num-cpus", str(CPUS_PER_NODE), "--object-store-memory", str(200 * 2 ** 20)]
    head_cmd = [ray, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--temp-dir", str(temp),
                "--include-dashboard=false", "--disable-usage-stats", *common]
    node_cmd = [ray, "start", "--address", f"{HEAD_IP}:{port}", "--node-ip-address", NODE_IP, *common]
    try:
        with contextlib.ExitStack() as stack:
            for name, cmd in (("head", head_cmd), ("node", node_cmd)):
                log = temp / f"{name}.log"
                out = stack.enter_context(open(log, "wb"))
                proc = stack.enter_context(popen_all(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                     start_new_session=True, env={**os.environ, **auth}))
                _wait_started(proc, log, name)
            yield RayCluster(f"{HEAD_IP}:{port}", auth, temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
