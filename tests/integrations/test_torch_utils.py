import os
import platform
import random
import sys

import numpy as np
import pytest
import torch

import yolo_data
from conftest import run_all
from yolo_data import init_torch_seeds, select_device, time_synchronized
from yolo_data.integrations.torch_utils import device_line


def test_cpu_and_default_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    env = dict(os.environ)
    assert select_device("cpu") == torch.device("cpu")
    assert select_device("") == torch.device("cpu")
    with pytest.raises(ValueError, match="requested but 0 CUDA device"):
        select_device("0")
    with pytest.raises(ValueError, match="requested but 0 CUDA device"):
        select_device("cuda:1")
    with pytest.raises(ValueError, match="invalid device"):
        select_device("gpu")
    assert dict(os.environ) == env  # never sets CUDA_VISIBLE_DEVICES or anything else


def test_mps_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("yolo_data.integrations.torch_utils._mps_available", lambda: False)
    with pytest.raises(ValueError, match="mps"):
        select_device("mps")


def test_gpu_ids_and_batch_size_check_with_two_visible_gpus(monkeypatch):
    class Props:
        name, total_memory = "FakeGPU", 8 << 30
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    assert select_device("cuda:1") == torch.device("cuda:1")
    assert select_device("0,1", batch_size=16) == torch.device("cuda:0")
    assert select_device("") == torch.device("cuda:0")
    with pytest.raises(ValueError, match="not a multiple of the 2 GPUs"):
        select_device("0,1", batch_size=15)
    with pytest.raises(ValueError, match="'0,2' requested but 2"):
        select_device("0,2")
    line = device_line(torch.device("cuda:0"), [0, 1])  # YOLOv5's layout: one GPU a line, aligned
    head = f"yolo_data {yolo_data.__version__} Python-{platform.python_version()} torch-{torch.__version__} "
    assert line == head + "CUDA:0 (FakeGPU, 8192MiB)\n" + " " * len(head) + "CUDA:1 (FakeGPU, 8192MiB)"


@pytest.mark.parametrize("local_rank", [None, "0", "1"])
def test_the_printing_rank_logs_one_device_line_without_logging_configured(local_rank):
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    if local_rank is not None:
        env["LOCAL_RANK"] = local_rank
    r = run_all([sys.executable, "-c", "from yolo_data import select_device; select_device('cpu')"],
                capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout == ""
    head = f"yolo_data {yolo_data.__version__} Python-{platform.python_version()} torch-{torch.__version__} "
    assert r.stderr == ("" if local_rank == "1" else head + "CPU\n")


def test_init_torch_seeds_seeds_everything_and_sets_cudnn_flags():
    init_torch_seeds(3)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    init_torch_seeds(3)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a
    init_torch_seeds(0)
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_time_synchronized_is_seconds():
    t0 = time_synchronized()
    assert 0 <= time_synchronized() - t0 < 1
