import shutil
import sys
from pathlib import Path

import cv2
import torch

from conftest import run_all
from yolo_data.report.plots import class_colour, draw_batch

ROOT = Path(__file__).resolve().parents[2]


def test_draw_batch_puts_boxes_in_class_colours():
    imgs = torch.zeros((4, 3, 100, 100), dtype=torch.uint8)
    targets = torch.tensor([[2, 5, 0.5, 0.5, 0.4, 0.4]])
    grid = draw_batch(imgs, targets, ["a.jpg"] * 4, names=[str(i) for i in range(6)])
    assert grid.shape == (200, 200, 3)
    # image 2 is bottom-left; its box's left edge runs at x=30, from y=100+30 to 100+70
    assert tuple(grid[100 + 60, 30]) == class_colour(5)
    assert grid[100 + 50, 50].max() == 0  # inside the box the image is untouched


def test_show_batch_tool_writes_a_picture(tmp_path):
    shutil.copytree(ROOT / "data", tmp_path / "data")
    out = tmp_path / "batch.jpg"
    r = run_all([sys.executable, str(ROOT / "tools" / "show_batch.py"), str(tmp_path / "data" / "sample.yaml"),
                 "--out", str(out), "--imgsz", "160", "--batch-size", "4", "--seed", "2"],
                capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "4 images of (160, 160)" in r.stdout and cv2.imread(str(out)).shape == (320, 320, 3)
