"""DataLoader workers: forked without OpenCV's thread pool, and never outliving the training process."""
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(REPO / "data" / "sample.yaml")

# Registered before yolo_data is imported, so its 'before' hook runs after yolo_data's (Python calls
# them in reverse order): it sees the process exactly as the fork copies it.
FORK_THREADS = r"""
import os, sys, threading
seen = []
def os_threads_not_python():  # OpenCV's pool threads are not Python threads
    return len(os.listdir("/proc/self/task")) - threading.active_count()
os.register_at_fork(before=lambda: seen.append(os_threads_not_python()))
import numpy as np, cv2, torch
from yolo_data import create_dataloader
torch.ones(512, 512).sum()  # torch's own thread pool, if any, starts now and stays
create_dataloader(sys.argv[1], 64, 4, 32, workers=0, split="val")  # whatever a first build starts
cv2.setNumThreads(1)
before_pool = os_threads_not_python()
cv2.setNumThreads(4)
cv2.resize(np.zeros((1080, 1920, 3), np.uint8), (640, 360))  # OpenCV's pool: 3 threads beside this one
with_pool = os_threads_not_python()
loader, _ = create_dataloader(sys.argv[1], 64, 4, 32, workers=1, split="val")  # forks its worker now
next(iter(loader))
print(before_pool, with_pool, seen[-1], cv2.getNumThreads())
"""


def test_the_loader_forks_its_workers_with_opencvs_thread_pool_down_and_sets_it_back():
    r = subprocess.run([sys.executable, "-c", FORK_THREADS, SAMPLE], capture_output=True, text=True, timeout=300,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    before_pool, with_pool, at_fork, threads_after = map(int, r.stdout.split()[-4:])
    assert with_pool == before_pool + 3  # the pool was up when the loader was built
    assert at_fork == before_pool  # no pool thread (nor a mutex one of them holds) is copied into the worker
    assert threads_after == 4  # the user's setting is back


ORPHAN = r"""
import os, signal, sys
from yolo_data import create_dataloader
# the training process dies right after forking its worker, before the worker's loop has begun
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGKILL))
create_dataloader(sys.argv[1], 64, 4, 32, workers=1, split="val", cache="ram")
"""


def marked(token: str):
    """pids of the processes whose environment holds ``token``."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    if token.encode() in f.read():
                        pids.append(int(p))
            except OSError:
                continue
    return pids


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_a_worker_whose_training_process_died_before_its_loop_began_exits(tmp_path):
    token = f"YOLO_DATA_ORPHAN_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, **dict([token.split("=")]))
    with open(tmp_path / "log", "w+") as log:  # a file, not a pipe: a surviving worker would hold a pipe open
        rc = subprocess.run([sys.executable, "-c", ORPHAN, SAMPLE], stdout=log, stderr=log, timeout=300,
                            cwd=REPO, env=env).returncode
    assert rc == -9, (tmp_path / "log").read_text()[-3000:]  # killed as planned, after the fork
    deadline = time.monotonic() + 10
    while marked(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked(token)
    for pid in left:  # never leave it running, whatever the outcome
        os.kill(pid, 9)
    assert not left, "a DataLoader worker outlived its training process"
