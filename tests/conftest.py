"""Shared fixtures: tiny datasets written into tmp_path, copies of ../shared datasets, and running
commands whose every process is ended with the test."""
from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import importlib.util
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import cv2
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"


def _load_bench_common():
    """benchmarks/common.py, which the benchmark scripts use to end their torchrun runs: one sweep for
    both.  Loaded under a name of its own, without putting benchmarks/ on sys.path."""
    spec = importlib.util.spec_from_file_location("yolo_data_bench_common", ROOT / "benchmarks" / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_common = _load_bench_common()


@pytest.fixture(autouse=True)
def user_cache_dir(tmp_path_factory, monkeypatch):
    """Keep the per-user cache folder inside the test's temp area, never in the real home."""
    d = tmp_path_factory.mktemp("user_cache")
    monkeypatch.setenv("YOLO_DATA_CACHE_DIR", str(d))
    return d


def write_image(path: Path, w: int, h: int, seed: int = 0, ext: str = None) -> Path:
    """A noisy colour image of w x h written with OpenCV (format from the suffix)."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(ext or path.suffix, img)
    assert ok
    path.write_bytes(buf.tobytes())
    return path


def make_dataset(root: Path, items, split: str = "train", names=("a", "b", "c")) -> Path:
    """Write images/<split>/<name> and labels/<split>/<stem>.txt, plus data.yaml; returns the yaml.

    items: list of (name, (w, h), label_text or None for no label file).
    """
    for i, (name, (w, h), text) in enumerate(items):
        write_image(root / "images" / split / name, w, h, seed=i)
        if text is not None:
            lb = root / "labels" / split / (name.rsplit(".", 1)[0] + ".txt")
            lb.parent.mkdir(parents=True, exist_ok=True)
            lb.write_text(text)
    yaml = root / "data.yaml"
    yaml.write_text(f"path: .\n{split}: images/{split}\nnames: {list(names)}\n")
    return yaml


def tree_digest(root: Path) -> dict:
    """{relative path: sha256} of every file under root (to show a dataset is left byte-for-byte as is)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def small_dataset(tmp_path):
    """6 images: 4 labelled (one with a polygon), one background without label file, one empty label."""
    items = [
        ("a.jpg", (64, 48), "0 0.5 0.5 0.25 0.5\n1 0.25 0.25 0.1 0.1\n"),
        ("b.jpg", (48, 64), "2 0.5 0.5 0.5 0.5\n"),
        ("c.png", (80, 40), "1 0.1 0.1 0.9 0.1 0.5 0.9\n0 0.5 0.5 0.2 0.2\n"),
        ("d.jpg", (50, 50), "0 0.3 0.3 0.2 0.2\n"),
        ("e.jpg", (40, 60), None),
        ("f.jpg", (60, 40), ""),
    ]
    return make_dataset(tmp_path / "ds", items)


def copy_shared(name: str, dst: Path) -> Path:
    """Copy ../shared/datasets/<name> into dst (tests never write into ../shared); skip if absent."""
    src = SHARED / name
    if not src.is_dir():
        pytest.skip(f"{src} is not available (a clone without ../shared)")
    shutil.copytree(src, dst / name)
    return dst / name


@pytest.fixture
def coco128(tmp_path):
    return copy_shared("coco128", tmp_path)


class Overran(Exception):
    """Not an OSError (as TimeoutError is): os.walk swallows those, so the limit would never show."""


@contextlib.contextmanager
def hard_limit(seconds: int):
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""
    def expire(signum, frame):
        raise Overran(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- processes: a test that starts processes ends all of them ---------------------------------------
# subprocess.run(timeout=...) kills only the command: torchrun's ranks (a session of their own) and
# their DataLoader workers would run on, and a hung one holds the machine and the test's files.  The
# commands below are marked through their environment, which every process they start inherits
# whatever its session or parent; when the command returns, times out or the test is interrupted,
# every marked process is killed (benchmarks/common.py, run_tree, says more).
def _overran(e: subprocess.TimeoutExpired, tail: int = 4000):
    out, err = bench_common.as_text(e.stdout), bench_common.as_text(e.stderr)
    pytest.fail(f"{e.cmd} still running after {e.timeout} s; it and every process it started were killed. "
                f"Output so far:\n--- stdout ---\n{out[-tail:]}\n--- stderr ---\n{err[-tail:]}", pytrace=False)


def run_all(cmd, timeout: float, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, timeout=timeout, **kw)`` that ends every process the command started, and
    fails the test with the output so far when the command outlives ``timeout``."""
    try:
        return bench_common.run_tree(cmd, timeout, **kw)
    except subprocess.TimeoutExpired as e:
        _overran(e)


@contextlib.contextmanager
def popen_all(cmd, **kw):
    """``subprocess.Popen(cmd, **kw)`` for a with-block: on leaving it, the command and every process it
    started are ended; a TimeoutExpired out of the block (``communicate(timeout=...)``) fails the test
    with the output so far."""
    try:
        with bench_common.popen_tree(cmd, **kw) as proc:
            yield proc
    except subprocess.TimeoutExpired as e:
        _overran(e)


@contextlib.contextmanager
def ended(processes):
    """For processes forked from the test process itself (multiprocessing, torch's start_processes),
    which inherit no marker /proc can show (a fork's /proc/<pid>/environ is the environment its program
    was started with): on leaving, those still alive are killed together with their descendants (a
    rank's DataLoader workers), found while they are still children, and joined.  Workers of a process
    that had already died are no longer below it: yolo_data's workers end themselves when their parent
    is gone (yolo_data.workers)."""
    try:
        yield processes
    finally:
        alive = [p.pid for p in processes if p.pid is not None and p.is_alive()]
        doomed = alive + [d for pid in alive for d in bench_common.descendants(pid)]
        for pid in doomed:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for p in processes:
            if p.pid is not None:
                p.join(30)
        # SIGKILL takes effect when the process next runs; the descendants are not ours to join
        deadline = time.monotonic() + bench_common.SWEEP_S
        while [pid for pid in doomed if bench_common._alive(pid)]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {doomed} still alive {bench_common.SWEEP_S:.0f} s after SIGKILL")
            time.sleep(0.02)


# -- looking for leftovers without the helpers above (their tests) ----------------------------------
def alive(pid: int) -> bool:
    """A process that runs (a zombie has ended: only its exit status waits for a parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def tagged_env():
    """(name, os.environ plus that variable): a tag of the test's own, found by ``holding``."""
    tag = f"YOLO_DATA_TEST_TAG_{uuid.uuid4().hex}"
    return tag, dict(os.environ, **{tag: "1"})


def holding(var: str):
    """Live processes whose environment holds ``var``, read here rather than through bench_common."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if (var + "=").encode() in f.read():
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return [p for p in found if alive(p)]


def as_nobody(fn, *args):
    """Run fn(*args) in a forked child as user nobody (tests of what other users can do); returns what it
    returns, or its error's repr.  Skips where this process cannot switch users (not root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user")
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()

    def child():
        try:
            os.setgid(65534)
            os.setuid(65534)
            q.put(fn(*args))
        except BaseException as e:
            q.put(f"error: {e!r}")

    p = ctx.Process(target=child)
    with ended([p]):
        p.start()
        out = q.get()
        p.join(60)
    return out
