"""benchmarks/bench_million.py on a tiny set: yolo_data only (the benchmark environment with YOLOv5 is
not part of CI), every row of the report present and filled."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_million.py"
SHARED = REPO.parent / "shared" / "datasets" / "coco128" / "images" / "train2017"

ROWS = ["scan from scratch (label cache absent) + construction, 300 images",
        "warm construction, training loader (300 images)", "first batch after construction",
        "**warm construction + first batch**", "construction, rect loader",
        "`iter(loader.sampler)` consumed, shuffled training", "`len(loader)`, shuffled training",
        "`iter(loader.sampler)` consumed, rect", "`len(loader)`, rect", "PSS main process after 2 batches",
        "PSS worker 0", "PSS worker 0, anonymous part", "PSS worker 1", "PSS worker 1, anonymous part",
        "PSS main process, 100 images", "PSS worker 0, 100 images", "PSS worker 0, anonymous part, 100 images",
        "PSS worker 1, 100 images", "PSS worker 1, anonymous part, 100 images"]


def test_bench_million_smoke(tmp_path):
    if not SHARED.is_dir():  # a user's clone without ../shared: the only reason to skip
        pytest.skip(f"{SHARED} is not available")
    root = tmp_path / "million"
    env = dict(os.environ)
    env.pop("YOLO_DATA_PEER_PYTHON", None)
    cmd = [sys.executable, str(SCRIPT), "--root", str(root), "--images", "300", "--small-images", "100",
           "--sources", str(SHARED), "--no-peer", "--repeats", "1", "--batches", "2", "--timeout", "120",
           "--remove"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("| ") and not line.startswith("| measurement"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    assert list(rows) == ROWS, p.stdout
    for label, cells in rows.items():
        assert len(cells) == 1 and cells[0] not in ("-", "") and "failed" not in cells[0], (label, cells)
        assert cells[0].endswith((" s", "ms", "µs", "MiB")), (label, cells)
    assert "300 images (128 distinct photos" in p.stdout
    assert "cache fresh: True" in p.stdout and "yolo_data 19 / 300" in p.stdout
    assert not root.exists()  # --remove
