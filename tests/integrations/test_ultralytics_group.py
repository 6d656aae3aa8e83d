"""The plug-in's trainer in a process group set up before it (a Ray Train worker, torchrun with the
caller's init_process_group): ultralytics_group's count of the group's ranks, its checks, and its CPU
wrap, in real gloo groups of forked processes (no Ultralytics needed).

With Ultralytics installed (the benchmark environment): YoloDataTrainer trains an epoch as 2 ranks of a
group that torchrun's processes opened before importing Ultralytics, and both ranks end with the same
parameters, which the epoch changed, and rank 0's last.pt records the splits every rank read
(benchmarks/compat/ultralytics_ray.py does it in Ray Train workers).
"""
import json
import os
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from yolo_data.integrations.ultralytics_group import group_size, wrap_cpu_model

from procs import free_port, init, run, run_all

ROOT = Path(__file__).resolve().parents[2]


def _count_ranks(rank, world, port):
    init(rank, world, port)
    try:
        if world == 1:  # a group of one is no DDP: Ultralytics' own choices stand
            assert group_size(-1, -1, "0,1") == 1
            return
        assert group_size(rank, 0, "cpu") == world
        assert group_size(rank, 0, "cuda:0") == world
        with pytest.raises(RuntimeError, match=rf"rank {rank} of a process group of 2, but Ultralytics read RANK=-1"):
            group_size(-1, -1, "cpu")  # imported before the launcher set RANK
        with pytest.raises(RuntimeError, match="import ultralytics after RANK"):
            group_size(1 - rank, 0, "cpu")
        with pytest.raises(ValueError, match="names several devices"):
            group_size(rank, 0, "0,1")
    finally:
        dist.destroy_process_group()


def test_a_group_set_up_before_the_trainer_is_counted_and_its_ranks_checked():
    assert group_size(-1, -1, "cpu") == 1  # no group at all
    run(_count_ranks, 1)
    run(_count_ranks, 2)


def _gathered(t: torch.Tensor, world: int) -> list:
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    return out


def _one_step(rank, world, port):
    # forked from pytest, whose earlier tests may have started OpenMP's threads: a forked child's first
    # parallel region (the convolutions below) would wait for them forever
    torch.set_num_threads(1)
    init(rank, world, port)
    try:
        torch.manual_seed(rank)  # each rank makes a model of its own, as Ultralytics seeds each rank
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 2, 1))
        ddp = wrap_cpu_model(model, compiled=False)
        assert ddp.device_ids is None and ddp.find_unused_parameters
        flat = lambda ts: torch.cat([t.detach().flatten() for t in ts])  # noqa: E731
        start = _gathered(flat(model.parameters()), world)
        assert all(torch.equal(start[0], s) for s in start)  # rank 0's parameters on every rank
        ddp(torch.full((2, 3, 8, 8), float(rank + 1))).square().mean().backward()  # each rank its own batch
        grads = _gathered(flat(p.grad for p in model.parameters()), world)
        assert all(torch.equal(grads[0], g) for g in grads)  # averaged over the ranks
        ddp.eval()
        ddp(torch.ones(1, 3, 8, 8))  # a forward that would synchronise the buffers first
        stats = _gathered(model[1].running_mean.clone(), world)
        assert not torch.equal(stats[0], stats[1])  # BatchNorm statistics stay each rank's, as in Ultralytics
    finally:
        dist.destroy_process_group()


def test_a_cpu_model_is_wrapped_with_its_gradients_averaged_over_the_ranks():
    run(_one_step, 2)


@pytest.mark.skipif(find_spec("ultralytics") is None, reason="needs Ultralytics (the benchmark environment)")
def test_the_trainer_is_one_ddp_rank_of_a_group_opened_before_ultralytics(tmp_path):
    shutil.copytree(ROOT / "data", tmp_path / "data", ignore=shutil.ignore_patterns("*.cache"))
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    r = run_all([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
                 str(ROOT / "tests" / "ultralytics_group_driver.py"), "--data", str(tmp_path / "data" / "sample.yaml"),
                 "--out", str(out)], 600, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    ranks = [json.loads((out / f"{rank}.json").read_text()) for rank in range(2)]
    for seen in ranks:
        # the global batch of 8 split over 2 ranks, each on 8 of the 16 images, the model in DDP
        assert (seen["world_size"], seen["model"], seen["per_rank"], seen["batch"]) == (2, "DistributedDataParallel", 8, 4)
        assert seen["loss"] > 0  # Ultralytics alone multiplies it by its CPU world size, 0
    assert ranks[0]["start"] == ranks[1]["start"] != ranks[0]["end"] == ranks[1]["end"]
    assert ranks[0]["last_pt"]
    # rank 0's checkpoint records the splits as every rank read them (whole: the sampler shares them out)
    assert ranks[0]["digests"] == ranks[1]["digests"]
    assert ranks[0]["record"]["splits"] == {"train": {"digest": ranks[0]["digests"]["train"], "images": 16},
                                            "val": {"digest": ranks[0]["digests"]["val"], "images": 8}}
