"""Ultralytics' trainer on data held in memory, in the benchmark environment.

    python benchmarks/compat/ultralytics_memory.py     # in the benchmark environment

The bundled sample's images (their JPEG bytes) and labels (as the YOLO reader reads them) are put in two
``MemorySource``s, train and val, and handed to ``YOLO("yolo11n.yaml").train(trainer=YoloDataTrainer,
data=memory_data(train, val))``: one epoch from scratch at imgsz 64, mosaic on.  Then the same on a local
copy of the files, and checks:

- the in-memory run trained and validated (its metrics are there) on images named memory://;
- the next train batch of both trainers (the second epoch's first) is the same: images and boxes;
- the data string Ultralytics saved in its arguments is the memory_data string (no object in args.yaml).

Ultralytics' settings go to a temporary folder, offline.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

sys.path.insert(0, str(HERE))
from ultralytics_s3 import same_batch, sample_copy, train  # noqa: E402  (beside this script)


def held(images: Path, names):
    """The split of ``images`` as a MemorySource: each image's bytes, its labels and polygons as the YOLO
    reader reads its .txt file."""
    import cv2
    import numpy as np
    from yolo_data import MemorySource
    from yolo_data.formats.yolotxt import YoloReader
    pixels, labels = [], []
    for p in sorted(images.iterdir()):
        data = p.read_bytes()
        shape = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
        lb = images.parents[1] / "labels" / images.name / (p.stem + ".txt")
        rows, segments = YoloReader(len(names)).read(str(lb), shape)[:2]
        pixels.append(data)
        labels.append(rows if segments is None else (rows, segments))
    return MemorySource(pixels, labels, names)


def main() -> None:
    common.require("ultralytics_memory.py", "ultralytics")
    tmp = Path(tempfile.mkdtemp(prefix="ultra_memory_"))
    common.isolate_environment(tmp, "ultralytics_memory")
    local = sample_copy(tmp)
    try:
        from yolo_data.integrations.ultralytics import memory_data
        names = ["circle", "rectangle", "triangle"]
        data = memory_data(held(local / "sample" / "images" / "train", names),
                           held(local / "sample" / "images" / "val", names))
        memory_trainer = train(data, tmp, "memory")
        local_trainer = train(str(local / "sample.yaml"), tmp, "local")
        a, b = next(iter(memory_trainer.train_loader)), next(iter(local_trainer.train_loader))
        saved = (tmp / "runs" / "memory" / "args.yaml").read_text()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    metrics = memory_trainer.metrics or {}
    files = list(memory_trainer.train_loader.dataset.im_files)
    print(f"memory run: {len(files)} train images, first {files[0]}, data {data}, metrics {sorted(metrics)[:3]}")
    ok_trained = files[0].startswith("memory://") and "metrics/mAP50(B)" in metrics
    ok_batch = same_batch(a, b)
    ok_args = f"data: {data}" in saved
    print(f"trained and validated from memory: {ok_trained}")
    print(f"next train batch equals the local copy's: {ok_batch}")
    print(f"args.yaml names the data by its string: {ok_args}")
    sys.exit(0 if ok_trained and ok_batch and ok_args else 1)


if __name__ == "__main__":
    main()
