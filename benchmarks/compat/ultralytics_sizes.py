"""The Ultralytics plug-in's images against Ultralytics' own datasets, on images of awkward sizes.

    python benchmarks/compat/ultralytics_sizes.py [--imgsz 320] [--random 60]     # in the benchmark environment

Writes a temporary YOLO dataset of PNG images (lossless, so any difference is the resize's): every
side length up to 5,000 whose scaled size is not whole in floating point at ``--imgsz`` (Ultralytics
caps such a side at imgsz, YOLOv5 gives imgsz + 1), paired with several short sides and squares, plus
``--random`` images of random sizes (some smaller than imgsz: enlarged).  Then compares:

(a) validation: Ultralytics' rect val loader and ``loader_settings(cfg, 'val')``'s, batch by batch
    matched by file: pixels, classes, boxes, ori_shape, ratio_pad (benchmarks/compat/ultralytics_plugin.py's
    comparison);
(b) training's first resize: Ultralytics' training dataset's ``load_image`` and our training dataset's,
    image by image (sizes and pixels; our training reads these PNGs in full, so pixels compare too).

Ultralytics is AGPL-3.0 and installed only in the benchmark environment; this script imports it.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)


def awkward_sides(imgsz: int, limit: int = 5000):
    """Side lengths m <= limit for which ceil(m * (imgsz / m)) > imgsz in float64."""
    return [m for m in range(1, limit + 1) if math.ceil(m * (imgsz / m)) > imgsz]


def write_dataset(root: Path, imgsz: int, n_random: int, seed: int = 0) -> Path:
    """images/val + labels/val (a few boxes each) and a yaml whose train and val are both that split."""
    import cv2
    import numpy as np
    rng = np.random.default_rng(seed)
    sizes = []
    for k, m in enumerate(awkward_sides(imgsz)):
        short = max(1, int(m * (0.3, 0.55, 0.8, 1.0)[k % 4]))  # 1.0: a square, both sides awkward
        sizes.append((m, short) if k % 2 else (short, m))
    sizes += [(int(rng.integers(20, 1400)), int(rng.integers(20, 1400))) for _ in range(n_random)]
    for k, (w, h) in enumerate(sizes):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img = cv2.GaussianBlur(img, (0, 0), 3)  # smooth, so the interpolation's weights matter in every pixel
        (root / "images" / "val").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / "images" / "val" / f"im{k:04d}_{w}x{h}.png"), img)
        boxes = rng.uniform(0.1, 0.9, (3, 2))
        rows = [f"{k % 3} {x:.6f} {y:.6f} {min(x, 1 - x) / 2:.6f} {min(y, 1 - y) / 2:.6f}" for x, y in boxes]
        (root / "labels" / "val").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "val" / f"im{k:04d}_{w}x{h}.txt").write_text("\n".join(rows) + "\n")
    yaml = root / "data.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/val\nval: images/val\nnames: ['a', 'b', 'c']\n")
    return yaml


def compare_train_resize(data: Path, a) -> str:
    """Ultralytics' training dataset's load_image and ours, image by image (matched by file)."""
    import numpy as np
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset
    from yolo_data.integrations.ultralytics_args import loader_settings
    from yolo_data.integrations.ultralytics_loader import UltralyticsDataset
    with common.library_output(a.verbose):
        cfg = get_cfg(overrides={"imgsz": a.imgsz, "batch": a.batch})
        spec = check_det_dataset(str(data))
        theirs = build_yolo_dataset(cfg, spec["train"], a.batch, spec, mode="train", stride=32)
        ours = UltralyticsDataset(spec["train"], loader_settings(cfg, "train", a.batch, 32, workers=0))
    mine = {f: i for i, f in enumerate(ours.im_files)}
    sizes = pixels = 0
    for i, f in enumerate(theirs.im_files):
        t_img, t_hw0, t_hw = theirs.load_image(i)
        o_img, o_hw0, o_hw = ours.load_image(mine[f])
        sizes += tuple(t_hw) != tuple(o_hw) or tuple(t_hw0) != tuple(o_hw0)
        pixels += t_img.shape != o_img.shape or not np.array_equal(t_img, o_img)
    return f"{len(theirs.im_files)} images: sizes differ in {sizes}, pixels in {pixels}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--imgsz", type=int, default=320)
    p.add_argument("--random", type=int, default=60, help="images of random sizes besides the awkward ones")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    common.require("ultralytics_sizes.py", "ultralytics")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_sizes_"))
    common.isolate_environment(tmp, "ultralytics_sizes")
    data = write_dataset(tmp / "awkward", a.imgsz, a.random)
    import ultralytics
    from ultralytics_plugin import compare_inputs
    sides = awkward_sides(a.imgsz)
    print(f"ultralytics {ultralytics.__version__}; imgsz {a.imgsz}; {len(sides)} awkward side lengths up to 5000 "
          f"({', '.join(map(str, sides[:6]))}, ...) and {a.random} random sizes")
    print(f"(a) rect val, pad 0.5: {compare_inputs(data, a.imgsz, a.batch, a.verbose)}")
    print(f"(b) training's first resize: {compare_train_resize(data, a)}")
    print("\n" + common.footer())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
