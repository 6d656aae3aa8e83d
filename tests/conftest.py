"""Shared fixtures: tiny datasets written into tmp_path, and copies of ../shared datasets."""
from __future__ import annotations

import contextlib
import hashlib
import shutil
import signal
from pathlib import Path

import cv2
import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


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
