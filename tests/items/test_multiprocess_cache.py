"""Many writers at once: two torchrun 'nodes' on one shared folder, and six independent jobs."""
import contextlib
import json
import multiprocessing
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from yolo_data.labels.split import load_split
from conftest import ended, make_dataset, popen_all
from procs import free_port

HERE = Path(__file__).resolve().parents[1]


def dataset(root, n=60):
    items = [(f"{i:03d}.jpg", (40 + i % 7, 32), f"{i % 3} 0.5 0.5 0.{1 + i % 8} 0.2\n") for i in range(n)]
    return make_dataset(root, items)


def launch_two_nodes(yaml, out):
    port = free_port()
    with contextlib.ExitStack() as stack:  # both nodes and all their ranks end with the block
        procs = [stack.enter_context(popen_all(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=2",
             "--master_addr=127.0.0.1", f"--master_port={port}", str(HERE / "ddp_build_labels.py"), "--data",
             str(yaml), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            for node in (0, 1)]
        logs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    return [json.loads((out / f"{r}.json").read_text()) for r in range(4)]


def test_two_nodes_on_one_shared_folder(tmp_path):
    yaml = dataset(tmp_path / "ds")
    (tmp_path / "run1").mkdir()
    res = launch_two_nodes(yaml, tmp_path / "run1")
    assert len({r["labels"] for r in res}) == 1 and {r["n"] for r in res} == {60}
    assert not any(r["built"] for r in res if r["local_rank"] != 0)  # only local rank 0s may scan
    cache = Path(res[0]["cache"])
    mtime = cache.stat().st_mtime_ns
    assert not list(cache.parent.glob("*.tmp"))
    (tmp_path / "run2").mkdir()
    again = launch_two_nodes(yaml, tmp_path / "run2")
    assert not any(r["built"] for r in again)  # the later run reuses the cache...
    assert cache.stat().st_mtime_ns == mtime  # ...without rewriting it
    assert {r["labels"] for r in again} == {res[0]["labels"]}


def _job(img_dir, start_at, out):
    time.sleep(max(0.0, start_at - time.time()))
    s = load_split(img_dir, nc=3)
    np.save(out, np.concatenate([s.store.labels.ravel(), s.store.shapes_hw.ravel().astype(np.float32)]))


def test_six_jobs_start_together_on_a_fresh_dataset(tmp_path):
    yaml = dataset(tmp_path / "ds", n=200)
    img_dir = str(yaml.parent / "images" / "train")
    ctx = multiprocessing.get_context("fork")
    start_at = time.time() + 1.0
    procs = [ctx.Process(target=_job, args=(img_dir, start_at, str(tmp_path / f"{i}.npy"))) for i in range(6)]
    with ended(procs):
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
    assert [p.exitcode for p in procs] == [0] * 6
    results = [np.load(tmp_path / f"{i}.npy") for i in range(6)]
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert not load_split(img_dir, nc=3).built and not list((yaml.parent / "labels").glob("*.tmp"))
