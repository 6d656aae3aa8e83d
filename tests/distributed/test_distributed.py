"""Rank 0 first with real processes (gloo on loopback)."""
import hashlib
import multiprocessing
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as tmp

from conftest import ended
from procs import free_port, init, run
from yolo_data import ZeroFirstError, torch_distributed_zero_first, wait_for_the_master


def _loader_worker(rank, world, port, yaml, out_dir):
    os.environ["LOCAL_RANK"] = str(rank)  # what torchrun would set; single node
    init(rank, world, port)
    try:
        from yolo_data import create_dataloader
        loader, ds = create_dataloader(yaml, 64, 2, 32, rank=rank, workers=0, split="train")
        h = hashlib.sha256()
        for k, a in ds.store.arrays().items():
            h.update(k.encode() + a.tobytes())
        batch_paths = [p for _, _, paths, _ in loader for p in paths]
        cache = ds.split_labels.cache_file
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "built": ds.split_labels.built, "cache": str(cache), "labels": h.hexdigest(),
            "mtime": os.stat(cache).st_mtime_ns, "paths": batch_paths}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_three_ranks_only_local_rank_0_scans_and_all_get_the_same_labels(small_dataset, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run(_loader_worker, 3, str(small_dataset), str(out))
    res = [json.loads((out / f"{r}.json").read_text()) for r in range(3)]
    assert [r["built"] for r in res] == [True, False, False]
    assert len({r["cache"] for r in res}) == 1 and len({r["labels"] for r in res}) == 1
    assert len({r["mtime"] for r in res}) == 1  # nobody rewrote the file after rank 0
    seen = [p for r in res for p in r["paths"]]
    assert len(seen) == 6 and len(set(seen)) == 6  # DistributedSampler: disjoint shares of 6 images


def _until_waiting(ranks, what: str) -> None:
    """In a rank: return once each of ``ranks`` has said (``_say_waiting``) that it waits."""
    from datetime import timedelta
    from yolo_data.distributed import keys
    keys.default_store().wait([f"test/{what}/{r}" for r in ranks], timedelta(seconds=120))


def _say_waiting(what: str, when: str) -> None:
    """In a rank: set the store key ``_until_waiting`` waits for as yolo_data.distributed begins to wait
    for another rank: at the first pause of its clock (``when='sleep'``) or the start of its poll of the
    store (``'poll'``)."""
    import types
    from yolo_data.distributed import keys, ranks
    key = f"test/{what}/{dist.get_rank()}"

    def said(fn):
        told = []

        def first_says(*args):
            if not told:
                told.append(keys.default_store().set(key, "waiting"))
            return fn(*args)
        return first_says

    if when == "poll":
        keys.poll = said(keys.poll)
    else:
        ranks.time = types.SimpleNamespace(sleep=said(time.sleep), monotonic=time.monotonic)


def _failing_rank0_worker(rank, world, port, out_dir):
    init(rank, world, port, timeout_s=60)
    outcome = "passed"
    if rank:
        _say_waiting("zero_first", "poll")
    try:
        with torch_distributed_zero_first(rank):
            if rank == 0:
                _until_waiting(range(1, world), "zero_first")  # the others wait for rank 0 when it fails
                raise OSError("disk full while writing the cache")
    except ZeroFirstError as e:
        outcome = f"ZeroFirstError: {e}"
    except OSError as e:
        outcome = f"own error: {e}"  # rank 0's script catches it and carries on
    Path(out_dir, f"{rank}.json").write_text(json.dumps({"outcome": outcome}))
    dist.barrier()  # later collectives still line up
    dist.destroy_process_group()


def test_failing_rank_0_makes_the_others_raise_promptly(tmp_path):
    """Promptly: by rank 0's report, while they wait for it; a wait without end (no report) fails the
    test at run's timeout, the group's own timeout (60 s) being no limit on that wait."""
    run(_failing_rank0_worker, 3, str(tmp_path))
    res = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    assert res[0]["outcome"] == "own error: disk full while writing the cache"
    for r in res[1:]:
        assert r["outcome"].startswith("ZeroFirstError") and "disk full while writing the cache" in r["outcome"]


def test_no_op_without_torch_distributed(monkeypatch):
    ran = []
    with torch_distributed_zero_first(0):
        ran.append(1)
    with torch_distributed_zero_first(-1):
        ran.append(2)
    monkeypatch.setenv("LOCAL_RANK", "1")  # read at call time; still a no-op without a process group
    with wait_for_the_master():
        ran.append(3)
    assert ran == [1, 2, 3]


def _slow_rank0_worker(rank, world, port, out_dir, work_s):
    import logging
    import yolo_data.distributed as yd
    yd.keys.LOG_EVERY_SECONDS = 1.0  # so the test sees the waiting ranks' progress lines
    handler = logging.FileHandler(Path(out_dir, f"{rank}.log"))
    logging.getLogger("yolo_data").addHandler(handler)
    logging.getLogger("yolo_data").setLevel(logging.INFO)
    init(rank, world, port, timeout_s=5)  # far shorter than rank 0's work
    t0 = time.monotonic()
    if rank:
        _say_waiting("slow", "poll")
    with torch_distributed_zero_first(rank):
        if rank == 0:
            _until_waiting(range(1, world), "slow")  # so each of the others waits the whole work
            total = 10_000
            for done in range(0, total + 1, 500):
                yd.report_progress(f"scanning {done:,}/{total:,}")
                time.sleep(work_s / 20)
    waited = time.monotonic() - t0
    dist.barrier()  # the group is still usable afterwards
    Path(out_dir, f"{rank}.json").write_text(json.dumps({"waited": waited}))
    dist.destroy_process_group()


def test_slow_rank_0_longer_than_the_group_timeout(tmp_path):
    run(_slow_rank0_worker, 3, str(tmp_path), 12.0)
    res = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    assert all(r["waited"] >= 12 for r in res)  # ranks 1 and 2 waited the whole 12 s, past the 5 s timeout
    log = (tmp_path / "1.log").read_text()
    assert "waiting for local rank 0" in log and "scanning" in log and "/10,000" in log


def _rank0_dies_worker(rank, world, port, out_dir):
    init(rank, world, port, timeout_s=60)
    if rank:
        _say_waiting("dies", "poll")
    try:
        with torch_distributed_zero_first(rank):
            if rank == 0:
                _until_waiting(range(1, world), "dies")  # the others wait for rank 0 when it dies
                raise ValueError("labels folder vanished")  # not caught: the process dies
    except ZeroFirstError as e:
        Path(out_dir, f"{rank}.json").write_text(json.dumps({"error": str(e)}))


def test_rank_0_dying_in_the_block_stops_the_others_promptly(tmp_path):
    # Plain processes: torchrun and start_processes would kill the others as soon as rank 0 dies,
    # hiding whether they would have noticed on their own.
    ctx, port = multiprocessing.get_context("fork"), free_port()
    procs = [ctx.Process(target=_rank0_dies_worker, args=(r, 3, port, str(tmp_path))) for r in range(3)]
    with ended(procs):
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [1, 0, 0]
    for r in (1, 2):
        res = json.loads((tmp_path / f"{r}.json").read_text())
        assert "ValueError: labels folder vanished" in res["error"]  # by rank 0's report, not a timeout


def _late_file_worker(rank, world, port, yaml, out_dir):
    """Local rank 0 adds an image right after writing the cache, before the others read: they must
    use rank 0's label set anyway (before: rank 1 rescanned, got 7 images and one step more)."""
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    init(rank, world, port)
    try:
        from yolo_data import create_dataloader
        from yolo_data.labels import split
        if rank == 0:
            real = split.load_or_scan

            def then_add_a_file(*a, **k):
                s = real(*a, **k)
                src = Path(yaml).parent / "images" / "train" / "a.jpg"
                (src.parent / "zz_late.jpg").write_bytes(src.read_bytes())
                return s
            split.load_or_scan = then_add_a_file
        loader, ds = create_dataloader(yaml, 64, 2, 32, rank=rank, workers=0, split="train")
        Path(out_dir, f"{rank}.json").write_text(json.dumps({
            "n": len(ds), "steps": len(loader), "built": ds.split_labels.built,
            "cache": str(ds.split_labels.cache_file)}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_every_local_rank_trains_on_the_label_set_rank_0_wrote(small_dataset, tmp_path):
    run(_late_file_worker, 2, str(small_dataset), str(tmp_path))
    r0, r1 = (json.loads((tmp_path / f"{k}.json").read_text()) for k in range(2))
    assert (Path(small_dataset).parent / "images" / "train" / "zz_late.jpg").exists()
    assert r0["built"] and not r1["built"] and r0["cache"] == r1["cache"]
    assert r0["n"] == r1["n"] == 6 and r0["steps"] == r1["steps"]


def _two_nodes_worker(rank, world, port, yamls, out_dir):
    """Each rank is local rank 0 of its own node, with its own copy of the dataset: rank 1's copy has
    an extra image.  Both must fail before the first batch, saying what differs."""
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    init(rank, world, port)
    try:
        from yolo_data import RanksDisagreeError, create_dataloader
        try:
            create_dataloader(yamls[rank], 64, 2, 32, rank=0, workers=0, split="train")
            out = {"error": None}
        except RanksDisagreeError as e:
            out = {"error": str(e)}
        Path(out_dir, f"{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def test_ranks_of_different_nodes_with_different_data_fail_at_once_saying_what_differs(tmp_path):
    from conftest import make_dataset
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    node0 = make_dataset(tmp_path / "node0", items)
    node1 = make_dataset(tmp_path / "node1", items + [("f.jpg", (64, 48), "1 0.5 0.5 0.2 0.2\n")])
    run(_two_nodes_worker, 2, [str(node0), str(node1)], str(tmp_path))
    r0, r1 = (json.loads((tmp_path / f"{k}.json").read_text()) for k in range(2))
    for r in (r0, r1):
        assert r["error"]  # before the first batch: a wait for the other rank would end at run's timeout
        assert "rank 0: 5 images, 5 boxes, 2 steps per epoch" in r["error"]
        assert "rank 1: 6 images, 6 boxes, 2 steps per epoch" in r["error"]


def test_ranks_of_different_nodes_with_the_same_data_agree(tmp_path):
    from conftest import make_dataset
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    yamls = [str(make_dataset(tmp_path / f"node{k}", items)) for k in range(2)]
    run(_two_nodes_worker, 2, yamls, str(tmp_path))
    assert all(json.loads((tmp_path / f"{k}.json").read_text())["error"] is None for k in range(2))


def _slow_reader_worker(rank, world, port, yamls, out_dir):
    """Rank 1 reads the compared values slowly; rank 0, which hosts the store, ends as soon as its
    loader is built.  Rank 1 must still get its loader, not lose the store under its feet."""
    from yolo_data.distributed import keys
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    init(rank, world, port)
    if rank == 1:
        real = keys.default_store

        class SlowGets:
            def __init__(self, store):
                self.store = store

            def __getattr__(self, name):
                return getattr(self.store, name)

            def get(self, key):
                if "/agree/" in key:
                    time.sleep(1.0)
                return self.store.get(key)

        keys.default_store = lambda: SlowGets(real())
    from yolo_data import create_dataloader
    create_dataloader(yamls[rank], 64, 2, 32, rank=0, workers=0, split="train")
    Path(out_dir, f"{rank}.json").write_text("{}")
    dist.destroy_process_group()  # rank 0 leaves at once, without a barrier


def test_rank_0_does_not_leave_while_another_rank_still_reads_the_compared_values(tmp_path):
    from conftest import make_dataset
    items = [(f"{c}.jpg", (64, 48), "0 0.5 0.5 0.2 0.2\n") for c in "abcde"]
    yamls = [str(make_dataset(tmp_path / f"node{k}", items)) for k in range(2)]
    run(_slow_reader_worker, 2, yamls, str(tmp_path))
    assert all((tmp_path / f"{k}.json").exists() for k in range(2))


# -- how many ranks share this node, where the launcher does not say (srun, mpirun) ------------------------
def _node_worker(rank, world, port, out_dir, hosts):
    """Started like srun or mpirun start ranks: MASTER_ADDR/PORT, no LOCAL_WORLD_SIZE or LOCAL_RANK.
    ``hosts``: the node each rank pretends to run on, or None for this machine's own name."""
    import faulthandler
    from datetime import timedelta
    import yolo_data.distributed as yd
    faulthandler.dump_traceback_later(120, exit=True)  # a rank stuck in the store fails the test
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(name, None)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if hosts is not None:
        yd.ranks._host_id = lambda: hosts[rank]
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        if rank == world - 1:  # arrives late: the others must wait for it, with no collective to time out
            _until_waiting(range(world - 1), "node")
        else:
            _say_waiting("node", "sleep")
        node = yd.node_ranks()
        out = {"local_world_size": yd.local_world_size(), "local_rank": node.local_rank,
               "node_size": node.local_world_size, "leader": node.leader}
        with yd.torch_distributed_zero_first(node.local_rank):  # waits for its own node's local rank 0
            out["first"] = node.local_rank == 0 or Path(out_dir, f"leader-{node.leader}").exists()
            if node.local_rank == 0:
                Path(out_dir, f"leader-{rank}").write_text("done")
        if rank == 0:  # alone, as local rank 0 reporting a failure would be: answered without the others
            out["again"] = yd.local_world_size()
        Path(out_dir, f"{rank}.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_without_local_world_size_the_process_group_says_how_many_ranks_share_the_node(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    run(_node_worker, 4, str(tmp_path), None)
    res = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(4)]
    assert [r["local_world_size"] for r in res] == [4, 4, 4, 4], res
    assert [r["node_size"] for r in res] == [4, 4, 4, 4] and res[0]["again"] == 4
    assert [r["local_rank"] for r in res] == [0, 1, 2, 3]  # the node's global ranks in order
    assert all(r["first"] for r in res) and {r["leader"] for r in res} == {0}


def test_ranks_spread_over_two_nodes_each_count_their_own(tmp_path):
    """srun's cyclic distribution: ranks 0 and 2 on one node, 1 and 3 on the other."""
    run(_node_worker, 4, str(tmp_path), ["node-a", "node-b", "node-a", "node-b"])
    res = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(4)]
    assert [r["local_world_size"] for r in res] == [2, 2, 2, 2], res
    assert [r["local_rank"] for r in res] == [0, 0, 1, 1]
    assert [r["leader"] for r in res] == [0, 1, 0, 1]  # rank 3 waits for rank 1, not for rank 2
    assert all(r["first"] for r in res)  # torch_distributed_zero_first ran each node's rank 0 first


def test_local_world_size_set_by_torchrun_is_taken_as_it_is(monkeypatch):
    from yolo_data.distributed import local_world_size
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # read at call time, no process group needed
    assert local_world_size() == 8
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert local_world_size() == 1


def _sharded_eval_worker(rank, world, port, yaml, out_dir):
    os.environ["LOCAL_RANK"] = str(rank)
    init(rank, world, port)
    try:
        from yolo_data import Settings
        from yolo_data.build import build_loader
        loader = build_loader(yaml, Settings.evaluation(img_size=64, batch_size=3, rect=True, each_image_once=True, split="train",
                                                        workers=0), rank=rank)
        passes = [[p for _, _, paths, _ in loader for p in paths] for _ in range(2)]  # two epochs' validation
        Path(out_dir, f"{rank}.json").write_text(json.dumps(passes))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_evaluation_under_ddp_gives_each_image_once_to_one_rank_every_pass(small_dataset, tmp_path):
    """Settings.evaluation(each_image_once=True) under 2 gloo ranks: each rank's whole batches, every image
    exactly once over the ranks, on every pass (Ultralytics' validator runs one per epoch)."""
    out = tmp_path / "out"
    out.mkdir()
    run(_sharded_eval_worker, 2, str(small_dataset), str(out))
    passes = [json.loads((out / f"{r}.json").read_text()) for r in range(2)]
    from yolo_data import Settings, YoloDataset
    every = sorted(YoloDataset(str(small_dataset), Settings.evaluation(img_size=64, split="train")).im_files)
    for k in range(2):
        seen = passes[0][k] + passes[1][k]
        assert sorted(seen) == every and passes[0][k] and passes[1][k]
        assert passes[0][k] == passes[0][0] and passes[1][k] == passes[1][0]
