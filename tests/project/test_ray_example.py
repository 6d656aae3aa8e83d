"""tools/train_ray_example.py end to end: a Ray of its own (one node, 2 CPU workers, gloo), the bundled
sample, 2 epochs."""
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from conftest import run_all

pytest.importorskip("ray.train", reason="the [dev] extra installs ray[train]")
ROOT = Path(__file__).resolve().parents[2]
SECRET = "not-to-be-seen-3f9c1e"


@pytest.fixture
def ray_temp():
    """Ray's temporary folder for the run: a short path of its own (its sockets live there, and a socket's
    path is limited to 107 bytes), never /tmp/ray, which another Ray on this machine may use."""
    folder = tempfile.mkdtemp(prefix="rayx")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="2 Ray workers of 1 CPU each need 2 CPUs")
def test_two_workers_train_two_epochs_and_leave_a_checkpoint_to_go_on_from(tmp_path, ray_temp, monkeypatch):
    shutil.copytree(ROOT / "data", tmp_path / "data", ignore=shutil.ignore_patterns("*.cache"))
    env = dict(os.environ, RAY_TMPDIR=ray_temp, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               RAY_AUTH_MODE="disabled",  # else Ray writes a token to ~/.ray, which later `ray start`s then require
               RAY_USAGE_STATS_ENABLED="0", RAY_DEDUP_LOGS="0", OMP_NUM_THREADS="1",
               AWS_ACCESS_KEY_ID="example-key", AWS_SECRET_ACCESS_KEY=SECRET)
    cmd = [sys.executable, str(ROOT / "tools" / "train_ray_example.py"), "--workers", "2", "--epochs", "2",
           "--data", str(tmp_path / "data" / "sample.yaml"), "--storage", str(tmp_path / "runs"), "--name", "run",
           "--report-every", "2", "--loader-workers", "0", "--imgsz", "64"]
    r = run_all(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert SECRET not in out
    # 16 images, global batch 8: 2 steps an epoch, a checkpoint at the end of each
    done = re.search(r"^done: 4 steps, epoch 1; last checkpoint (\S+)$", r.stdout, re.M)
    assert done, r.stdout[-3000:]
    for epoch in (0, 1):  # the epoch's mean over both workers' images, logged by world rank 0
        assert re.search(rf"epoch {epoch}: train loss [0-9.]+ \(mean over 16 images\)", out), out[-3000:]
    assert "resumed after" not in out
    last = Path(done.group(1))
    assert last.parent == tmp_path / "runs" / "run"
    loader = json.loads((last / "yolo_data_loader.json").read_text())
    assert (loader["epoch"], loader["step"]) == (1, 2)
    state = torch.load(last / "state.pt", weights_only=True)
    assert state["done"] == 4
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    from train_ddp_example import tiny_model
    tiny_model().load_state_dict(state["model"])
