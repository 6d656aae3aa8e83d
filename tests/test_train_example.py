"""tools/train_ddp_example.py under torchrun with 2 CPU processes (gloo)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_two_process_training_sees_disjoint_shares_and_writes_a_loadable_checkpoint(tmp_path):
    shutil.copytree(ROOT / "data", tmp_path / "data")  # caches are written beside the copy's labels
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "tools" / "train_ddp_example.py"), "--data", str(tmp_path / "data" / "sample.yaml"),
           "--out", str(out), "--epochs", "3", "--workers", "1", "--imgsz", "96"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "epoch 2: train loss" in r.stdout and "over 8 images" in r.stdout
    ranks = [json.loads((out / f"seen_rank{i}.json").read_text()) for i in range(2)]
    n = ranks[0]["train_images"]
    shares = []
    for epoch in ("0", "1", "2"):
        a, b = ranks[0]["seen"][epoch], ranks[1]["seen"][epoch]
        assert len(a) == len(b) == n // 2
        assert not set(a) & set(b) and len(set(a) | set(b)) == n  # disjoint, and together everything
        shares.append(frozenset(a))
    assert len(set(shares)) > 1  # the split between ranks changes with set_epoch
    ckpt = torch.load(out / "last.pt", weights_only=True)
    sys.path.insert(0, str(ROOT / "tools"))
    from train_ddp_example import tiny_model
    tiny_model().load_state_dict(ckpt["model"])
    assert ckpt["epoch"] == 2
