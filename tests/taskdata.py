"""Small pose and oriented-box datasets whose keypoints and boxes are drawn in colour, so a test can
find them in the batch's pixels (used by the task, class and Ultralytics tests)."""
from pathlib import Path

import cv2
import numpy as np


COLOURS = [(0, 0, 255), (0, 255, 0), (255, 0, 0)]  # BGR: keypoint 0 red, 1 green, 2 blue


FLIP_IDX = [1, 0, 2]  # 0 and 1 swap sides in a mirror image (left and right eye), 2 stays


def write_yaml(root: Path, extra: str = "", split: str = "train") -> Path:
    yaml = root / "data.yaml"
    yaml.write_text(f"path: .\n{split}: images/{split}\nval: images/{split}\nnames: ['a', 'b']\n{extra}")
    return yaml


def pose_dataset(root: Path, n: int = 6, ndim: int = 2, flip_idx=FLIP_IDX) -> Path:
    """n PNG images, each with two objects of 3 keypoints drawn as dots of COLOURS (radius 7 px)."""
    rng = np.random.default_rng(0)
    for k in range(n):
        w, h = 160 + 16 * k, 120 + 8 * k
        if k % 2:  # portrait: its letterbox pads left and right
            w, h = h, w
        img = np.full((h, w, 3), 90, np.uint8)
        rows = []
        for obj in range(2):
            x0, x1 = (0.1, 0.45) if obj == 0 else (0.55, 0.9)
            pts = np.stack([rng.uniform(x0 + 0.05, x1 - 0.05, 3), rng.uniform(0.2, 0.8, 3)], 1)
            for (px, py), colour in zip(pts, COLOURS):
                cv2.circle(img, (int(round(px * w)), int(round(py * h))), 7, colour, -1)
            box = [(x0 + x1) / 2, 0.5, x1 - x0, 0.8]
            kp = [f"{px:.6f} {py:.6f}" + (" 2" if ndim == 3 else "") for px, py in pts]
            rows.append(f"{obj} " + " ".join(f"{v:.6f}" for v in box) + " " + " ".join(kp))
        (root / "images" / "train").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / "images" / "train" / f"p{k}.png"), img)
        (root / "labels" / "train" / f"p{k}.txt").write_text("\n".join(rows) + "\n")
    extra = f"kpt_shape: [3, {ndim}]\n" + (f"flip_idx: {list(flip_idx)}\n" if flip_idx else "")
    return write_yaml(root, extra)


def obb_dataset(root: Path, n: int = 6) -> Path:
    """n PNG images, each with two filled rotated rectangles: red (class 0) and green (class 1)."""
    rng = np.random.default_rng(1)
    for k in range(n):
        w, h = 200 + 12 * k, 150 + 10 * k
        img = np.zeros((h, w, 3), np.uint8)
        rows = []
        for obj, cx in enumerate((0.3, 0.7)):
            rect = ((cx * w, rng.uniform(0.4, 0.6) * h), (rng.uniform(30, 50), rng.uniform(12, 20)),
                    float(rng.uniform(0, 180)))
            corners = cv2.boxPoints(rect)
            cv2.fillPoly(img, [np.round(corners).astype(np.int32)], COLOURS[obj])
            rows.append(f"{obj} " + " ".join(f"{x / w:.6f} {y / h:.6f}" for x, y in corners))
        (root / "images" / "train").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / "images" / "train" / f"o{k}.png"), img)
        (root / "labels" / "train" / f"o{k}.txt").write_text("\n".join(rows) + "\n")
    return write_yaml(root)
