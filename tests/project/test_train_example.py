"""tools/train_ddp_example.py under torchrun with 2 CPU processes (gloo)."""
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from conftest import run_all

ROOT = Path(__file__).resolve().parents[2]


def run_example(nproc, data, out, *args):
    """(rank 0's stdout, what each rank wrote) of the example on ``nproc`` CPU processes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(ROOT / "tools" / "train_ddp_example.py"), "--data", str(data), "--out", str(out), "--imgsz", "64",
           *args]
    r = run_all(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout, [json.loads((out / f"seen_rank{i}.json").read_text()) for i in range(nproc)]


def torchrun(nproc, data, out, *args):
    return run_example(nproc, data, out, *args)[1]


def global_steps(ranks):
    """{epoch: [paths of all ranks in one step, in rank order]}"""
    return {e: [sum((r["seen"][e][s] for r in ranks), []) for s in range(len(ranks[0]["seen"][e]))]
            for e in ranks[0]["seen"]}


def test_stopped_on_one_rank_and_resumed_on_two_the_run_sees_the_same_batches(tmp_path):
    shutil.copytree(ROOT / "data", tmp_path / "data")
    data = tmp_path / "data" / "sample.yaml"
    args = ("--epochs", "2", "--batch-size", "8", "--workers", "1")
    whole = global_steps(torchrun(1, data, tmp_path / "whole", *args))
    steps = len(whole["0"])
    assert steps == 2 and len(whole) == 2  # 16 images
    stop = steps + 1  # in the middle of the second epoch
    first = global_steps(torchrun(1, data, tmp_path / "preempted", *args, "--stop-after", str(stop)))
    rest = global_steps(torchrun(2, data, tmp_path / "preempted", *args, "--resume"))
    assert first["0"] == whole["0"] and first["1"] == whole["1"][:1]
    assert list(rest) == ["1"] and rest["1"] == whole["1"][1:]
    assert len(rest["1"][0]) == 8  # global batch 8: 4 images on each of 2 ranks


def test_the_train_loss_printed_is_the_epoch_mean_over_all_ranks(tmp_path):
    """Same weights (rank 0's, broadcast), same global batches, gradients averaged over the ranks: one
    rank and two make the same steps, so the epoch's mean loss over all images is the same number; one
    rank's last step is not (4 images of 8 on two ranks, and only the last of the epoch's steps)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    data = tmp_path / "data" / "sample.yaml"
    args = ("--epochs", "2", "--batch-size", "8", "--workers", "1")
    out1, one = run_example(1, data, tmp_path / "one", *args)
    out2, two = run_example(2, data, tmp_path / "two", *args)
    assert global_steps(one) == global_steps(two)  # the same batches
    printed = [[float(x) for x in re.findall(r"train loss ([0-9.]+)", out)] for out in (out1, out2)]
    assert len(printed[0]) == 2 and printed[0] == pytest.approx(printed[1], abs=1.5e-3)  # (3 decimals printed)
    assert out1.count("(mean over 16 images)") == out2.count("(mean over 16 images)") == 2
    assert two[0]["train_loss"] == two[1]["train_loss"]  # all-reduced: every rank has the mean
    for epoch in ("0", "1"):
        assert one[0]["train_loss"][epoch] == pytest.approx(two[0]["train_loss"][epoch], rel=1e-4)
    assert printed[0] == pytest.approx([one[0]["train_loss"][e] for e in ("0", "1")], abs=5e-4)


def test_two_process_training_sees_disjoint_shares_and_writes_a_loadable_checkpoint(tmp_path):
    shutil.copytree(ROOT / "data", tmp_path / "data")  # caches are written beside the copy's labels
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "tools" / "train_ddp_example.py"), "--data", str(tmp_path / "data" / "sample.yaml"),
           "--out", str(out), "--epochs", "3", "--workers", "1", "--imgsz", "96"]
    r = run_all(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "epoch 2: train loss" in r.stdout and "over 8 images" in r.stdout
    ranks = [json.loads((out / f"seen_rank{i}.json").read_text()) for i in range(2)]
    n = ranks[0]["train_images"]
    shares = []
    for epoch in ("0", "1", "2"):
        a, b = ([p for step in r["seen"][epoch] for p in step] for r in ranks)
        assert len(a) == len(b) == n // 2
        assert not set(a) & set(b) and len(set(a) | set(b)) == n  # disjoint, and together everything
        shares.append(frozenset(a))
    assert len(set(shares)) > 1  # the split between ranks changes with set_epoch
    ckpt = torch.load(out / "last.pt", weights_only=True)
    sys.path.insert(0, str(ROOT / "tools"))
    from train_ddp_example import tiny_model
    tiny_model().load_state_dict(ckpt["model"])
    assert ckpt["loader"]["epoch"] == 2 and ckpt["loader"]["step"] == 2  # 16 images, global batch 8: both steps done
