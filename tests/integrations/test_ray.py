"""yolo_data.integrations.ray on a real Ray cluster (tests/raycluster.py: a head and a second node on
loopback, CPU, gloo), each run a TorchTrainer started by tests/ray_driver.py, compared with torchrun
running the same loop: the same batches at every step, one scan per job for a bucket, one RAM cache per
node, and a worker killed mid-epoch resumed at the next batch."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

import s3server
from procs import alive, free_port, run_all
from raycluster import ray_cluster

pytest.importorskip("ray.train", reason='Ray Train is the "ray" extra (in "dev")')

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "ray_driver.py"
SAMPLE = ROOT / "data"
s3_server = s3server.s3_server  # the fixtures, in this module's namespace
store = s3server.store
GONE_S = 60  # how long Ray gets to end the processes of a failed attempt


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster() as c:
        yield c


@pytest.fixture
def sample(tmp_path):
    """A copy of the bundled sample (16 training images), without label caches."""
    shutil.copytree(SAMPLE / "sample", tmp_path / "data" / "sample", ignore=shutil.ignore_patterns("*.cache"))
    shutil.copy(SAMPLE / "sample.yaml", tmp_path / "data" / "sample.yaml")
    return tmp_path / "data" / "sample.yaml"


def ray_run(cluster, out: Path, *args, env=None) -> dict:
    """A TorchTrainer run of the driver on the cluster; its summary line (fit_s, error).  Ray's run is
    named after ``out`` unless ``--name`` is given: a run of the same name and storage goes on from
    that run's last checkpoint."""
    name = [] if "--name" in args else ["--name", out.name]
    cmd = [sys.executable, str(DRIVER), "ray", "--address", cluster.address, "--out", str(out),
           "--storage", str(out.parent / "ray_storage"), *name, *args]
    r = run_all(cmd, timeout=300, capture_output=True, text=True, env={**(env or os.environ), **cluster.env})
    assert r.returncode == 0, r.stderr[-4000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["error"] is None, summary["error"]
    return summary


def torchrun(out: Path, world: int, *args) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(DRIVER), "torchrun", "--out", str(out), *args]
    r = run_all(cmd, timeout=240, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-4000:]


def records(out: Path) -> list:
    """Every step record of every rank: dicts with rank, pid, epoch, step, resumed, items."""
    found = []
    for f in sorted(out.glob("rank*.jsonl")):
        rank, pid = (int(x) for x in f.stem[len("rank"):].split("-"))
        found += [{"rank": rank, "pid": pid, **json.loads(line)} for line in f.read_text().splitlines()]
    return found


def places(out: Path) -> list:
    return sorted((json.loads(f.read_text()) for f in out.glob("place*.json")), key=lambda p: p["world_rank"])


def global_steps(recs: list, key=lambda item: item) -> dict:
    """{(epoch, step): the step's items over all ranks in rank order}, each rank's record of a step taken
    from its last attempt (a resumed attempt makes again the steps after its checkpoint)."""
    last = {}
    for r in sorted(recs, key=lambda r: (r["resumed"], r["t"])):
        last[(r["epoch"], r["step"], r["rank"])] = r
    steps = defaultdict(list)
    for (epoch, step, rank), r in sorted(last.items()):
        steps[(epoch, step)] += [key(item) for item in r["items"]]
    return dict(steps)


LOOP = ["--global-batch", "8", "--partner-group", "2", "--epochs", "2", "--img-size", "64"]


def test_ray_workers_get_the_batches_of_torchrun_with_one_ram_cache_per_node(cluster, sample, tmp_path):
    runs = {}
    for workers in (2, 4):
        ray_out, ddp_out = tmp_path / f"ray{workers}", tmp_path / f"torchrun{workers}"
        ray_run(cluster, ray_out, "--workers", str(workers), "--data", str(sample), "--cache", "ram", *LOOP)
        torchrun(ddp_out, workers, "--data", str(sample), *LOOP)
        got, want = records(ray_out), records(ddp_out)
        assert len(got) == len(want) == workers * 2 * 2  # every rank, 2 epochs of 2 steps (16 images, 8 a step)
        # rank by rank and step by step: the same images, pixels and targets
        assert {(r["rank"], r["epoch"], r["step"]): r["items"] for r in got} == \
               {(r["rank"], r["epoch"], r["step"]): r["items"] for r in want}
        runs[workers] = global_steps(got)
        # spread over both nodes; the workers of a node read one RAM cache, each node its own
        ps = places(ray_out)
        assert [p["world_rank"] for p in ps] == list(range(workers)) and {p["node_rank"] for p in ps} == {0, 1}
        caches = defaultdict(set)
        for p in ps:
            assert p["local_world_size"] == workers // 2
            caches[p["node_rank"]].add(tuple(p["image_cache"]))
        assert all(len(c) == 1 for c in caches.values()) and caches[0] != caches[1]
    # the same global steps on 2 and 4 workers, every image of the epoch once
    assert runs[2] == runs[4]
    assert sorted(i["path"] for i in runs[2][(0, 0)] + runs[2][(0, 1)]) == \
           sorted(str(p) for p in (sample.parent / "sample" / "images" / "train").iterdir())


def test_a_bucket_is_scanned_once_per_job_by_rank_0_without_a_shared_cache_folder(cluster, store, sample, tmp_path):
    srv = store[0]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": srv.access_key, "AWS_SECRET_ACCESS_KEY": srv.secret_key}
    out = tmp_path / "ray"
    caches = tmp_path / "caches"  # caches/node<k>: each node its own folder, as on machines sharing no disk
    ray_run(cluster, out, "--workers", "4", "--data", "s3://data/sample.yaml", "--endpoint", srv.endpoint_url,
            "--cache-root", str(caches), *LOOP, env=env)
    ps = places(out)
    assert [p["built"] for p in ps] == [True, False, False, False]  # global rank 0 alone scanned
    assert ps[0]["requests"]["list"] >= 1
    for p in ps[1:]:  # the others listed nothing and read no label: the yaml at most
        assert p["requests"].get("list", 0) == 0 and p["requests"].get("get", 0) <= 1, p
        assert p["cache_file"].startswith(str(caches / f"node{p['node_rank']}"))
    assert {p["node_rank"] for p in ps} == {0, 1}
    # the batches of a local copy of the same data, under torchrun
    local = tmp_path / "local"
    torchrun(local, 4, "--data", str(sample), *LOOP)
    name = lambda item: (item["path"].rsplit("/", 1)[1], item["img"], item["targets"])  # noqa: E731
    assert global_steps(records(out), name) == global_steps(records(local), name)


def _gone(pids) -> list:
    deadline = time.monotonic() + GONE_S
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_a_worker_killed_mid_epoch_resumes_at_the_next_batch_with_the_batches_of_a_run_without_the_kill(
        cluster, sample, tmp_path):
    shm_before = set(os.listdir("/dev/shm"))
    out = tmp_path / "ray"
    loop = ["--global-batch", "4", "--partner-group", "2", "--epochs", "2", "--img-size", "64", "--every", "2",
            "--loader-workers", "1", "--cache", "ram"]
    # world rank 1 is killed with SIGKILL after the batch of epoch 0 step 2, once Ray registered the
    # checkpoint made after step 1
    ray_run(cluster, out, "--workers", "2", "--data", str(sample), "--kill", "0:2", *loop)
    killed = int((out / "killed").read_text())
    recs = records(out)
    first = [r for r in recs if not r["resumed"]]
    resumed = [r for r in recs if r["resumed"]]
    assert killed in {r["pid"] for r in first if r["rank"] == 1}
    # the second attempt went on from the checkpoint: its first step is the one after step 1
    for rank in (0, 1):
        steps = [(r["epoch"], r["step"]) for r in resumed if r["rank"] == rank]
        assert steps == [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)], steps
    assert all(p["resumed"] == {"done": 2} for p in places(out) if p["pid"] not in {r["pid"] for r in first})
    # a run without the kill gives the same batches, step by step
    plain = tmp_path / "plain"
    torchrun(plain, 2, "--data", str(sample), *loop)
    assert global_steps(recs) == global_steps(records(plain))
    # the first attempt's workers and their DataLoader workers are gone; nothing was left in /dev/shm
    first_pids = {r["pid"] for r in first}
    dead = [pid for p in places(out) if p["pid"] in first_pids for pid in [p["pid"], *p["children"]]]
    assert len(dead) == 4 and _gone(dead) == []
    assert set(os.listdir("/dev/shm")) - shm_before == set()


def test_a_run_stopped_on_2_workers_goes_on_on_4_with_the_batches_of_an_uninterrupted_run(cluster, sample, tmp_path):
    out = tmp_path / "ray"
    loop = [*LOOP, "--every", "1"]
    # the same run name and storage: Ray's next run starts from the last checkpoint of the first
    ray_run(cluster, out, "--workers", "2", "--data", str(sample), "--stop-after", "1", "--name", "elastic", *loop)
    ray_run(cluster, out, "--workers", "4", "--data", str(sample), "--name", "elastic", *loop)
    recs = records(out)
    assert sorted({(r["epoch"], r["step"]) for r in recs if r["resumed"]}) == [(0, 1), (1, 0), (1, 1)]
    assert {r["rank"] for r in recs if r["resumed"]} == {0, 1, 2, 3}
    plain = tmp_path / "plain"
    torchrun(plain, 2, "--data", str(sample), *loop)
    assert global_steps(recs) == global_steps(records(plain))


def test_without_ray_the_message_names_the_extra(monkeypatch):
    from yolo_data.integrations import ray as ray_integration
    monkeypatch.setitem(sys.modules, "ray.train", None)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r'pip install "yolo-data\[ray\]"'):
        ray_integration.ray_place()


def test_a_worker_whose_ranks_are_not_rays_is_refused_naming_them(monkeypatch, sample):
    from yolo_data import Settings
    from yolo_data.integrations import ray as ray_integration
    settings = Settings.training(img_size=64, batch_size=4, workers=0)
    monkeypatch.setattr(ray_integration, "ray_place", lambda: ray_integration.RayPlace(0, 1, 0, 2, 0))
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with pytest.raises(RuntimeError, match=r"LOCAL_WORLD_SIZE='1' \(Ray: 2\)"):
        ray_integration.build_ray_loader(str(sample), settings)
    monkeypatch.setattr(ray_integration, "ray_place", lambda: ray_integration.RayPlace(1, 2, 0, 1, 1))
    with pytest.raises(RuntimeError, match="worker 1 of 2 has no torch.distributed process group"):
        ray_integration.build_ray_loader(str(sample), settings)
    # one worker, as Ray gives it: the loader of a single process
    monkeypatch.setattr(ray_integration, "ray_place", lambda: ray_integration.RayPlace(0, 1, 0, 1, 0))
    assert len(ray_integration.build_ray_loader(str(sample), settings).dataset) == 16


def test_a_batch_that_does_not_split_over_the_workers_is_refused():
    from yolo_data.integrations.ray import RayPlace
    assert RayPlace(0, 4, 0, 2, 0).per_rank(16) == 4
    with pytest.raises(ValueError, match="global batch of 6 does not split over 4 Ray workers"):
        RayPlace(0, 4, 0, 2, 0).per_rank(6)
