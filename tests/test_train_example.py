"""tools/train_ddp_example.py under torchrun with 2 CPU processes (gloo)."""
import json
import shutil
import sys
from pathlib import Path

import torch

from conftest import run_all

ROOT = Path(__file__).resolve().parents[1]


def torchrun(nproc, data, out, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(ROOT / "tools" / "train_ddp_example.py"), "--data", str(data), "--out", str(out), "--imgsz", "64",
           *args]
    r = run_all(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return [json.loads((out / f"seen_rank{i}.json").read_text()) for i in range(nproc)]


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
