"""Shared fixtures: tiny datasets written into tmp_path, copies of ../shared datasets, and running
commands whose every process is ended with the test (procs.py; the run's leftovers are checked at its
end)."""
from __future__ import annotations

import gc
import hashlib
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

# the process helpers live in procs.py; the names many tests import from here stay importable from here
from procs import (Overran, SessionWatch, alive, as_nobody, ended, hard_limit, holding,  # noqa: F401
                   popen_all, run_all, tagged_env)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"


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


# -- what the run leaves behind: every process ended, nothing of ours in /dev/shm ----------------------
# A test that starts processes ends them (procs.py); this is the net under it.  Processes the run
# started that still run at its end fail the run and are killed; shared memory its processes left in
# /dev/shm fails it too, and is left for the user to look at (other runs on this machine may use it).
def pytest_configure(config):
    config.yolo_data_watch = SessionWatch()


def pytest_sessionfinish(session, exitstatus):
    watch = getattr(session.config, "yolo_data_watch", None)
    if watch is None:
        return
    # pytest keeps the last failure's traceback (for post-mortem debugging), and with it the frames of
    # that test: its loader, whose workers would otherwise count as left running
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    left = watch.leftovers()
    watch.close()
    session.config.yolo_data_leftovers = left
    if (left.processes or left.shm) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left = getattr(config, "yolo_data_leftovers", None)
    if left is None:
        return
    if left.processes:
        terminalreporter.section("processes left running by the tests (now killed)", red=True, bold=True)
        for line in left.processes:
            terminalreporter.line(line, red=True)
    if left.shm:
        terminalreporter.section("shared memory left in /dev/shm by the tests' processes (not removed)",
                                 red=True, bold=True)
        for name in left.shm:
            terminalreporter.line(f"/dev/shm/{name}", red=True)
    if left.other:
        terminalreporter.line(f"note: {len(left.other)} other new entries in /dev/shm during the run, from no "
                              f"process this run forked (another run on this machine, or a command's child): "
                              f"{', '.join(left.other[:5])}{' ...' if len(left.other) > 5 else ''}", yellow=True)
