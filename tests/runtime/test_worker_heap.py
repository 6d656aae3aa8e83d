"""workerheap.py: a DataLoader worker keeps the heap memory it frees, so its next batch does not page-fault
it in again; set in yolo_data's workers only, never in the training process."""
import os
import sys
from pathlib import Path

import pytest

from conftest import run_all
from yolo_data import create_dataloader
from yolo_data.runtime import workerheap, workers

REPO = Path(__file__).resolve().parents[2]

# Six "batches" of 16 arrays of about 1 MB each, made and dropped: minor page faults of each.
ROUNDS = """
import resource, sys
import numpy as np
from yolo_data.runtime.workerheap import keep_freed_heap
print(keep_freed_heap() if sys.argv[1] == "keep" else "default")
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(900_000 + 4096 * k, np.uint8) for k in range(16)]
    del arrays
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults)
"""


def rounds(mode: str):
    out = run_all([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, timeout=120,
                  cwd=REPO, check=True).stdout.split("\n")
    return out[0], [int(x) for x in out[1].split()]


def glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError):
        return False


def test_freed_memory_is_kept_for_the_next_batch():
    if not glibc():
        pytest.skip("glibc's allocator only")
    said, default = rounds("default")
    said_keep, kept = rounds("keep")
    pages = 16 * 900_000 // 4096
    assert said_keep == "True"
    assert kept[0] > pages // 2  # the first batch faults its memory in either way
    assert sum(kept[1:]) < pages // 10  # then it is kept: almost no faults
    assert sum(default[1:]) > 2 * pages  # glibc's default gives much of it back, and faults it in again


def test_yolo_datas_workers_keep_their_heap_and_the_training_process_does_not(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(workers, "keep_freed_heap", lambda: calls.append(os.getpid()))
    monkeypatch.setattr(workers.cv2, "setNumThreads", lambda n: None)  # the worker's other setting
    monkeypatch.setattr(workers, "_exit_when_orphaned", lambda parent: None)
    workers.WorkerInit(parent=os.getppid())(0)  # as in a worker, whose parent is the training process
    assert calls == [os.getpid()]
    calls.clear()
    # a real worker: it runs init_worker (the spy's calls stay in the worker, so it reports through a file)
    seen = tmp_path / "pids"
    monkeypatch.setattr(workers, "keep_freed_heap", lambda: seen.open("a").write(f"{os.getpid()}\n"))
    dl, _ = create_dataloader(str(REPO / "data" / "sample.yaml"), 64, 4, 32, workers=1, split="val")
    next(iter(dl))
    pids = seen.read_text().split()
    assert len(pids) == 1 and int(pids[0]) != os.getpid() and not calls
    del dl


def test_elsewhere_than_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(workerheap.os, "confstr", lambda name: "")  # as musl answers
    assert workerheap.keep_freed_heap() is False
