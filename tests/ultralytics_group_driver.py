"""Run by torchrun in tests: a process group set up first (gloo), then Ultralytics imported and
YoloDataTrainer trained for one epoch in it, as in a Ray Train worker; each rank writes what it saw.

    python -m torch.distributed.run --nproc_per_node 2 tests/ultralytics_group_driver.py --data YAML --out DIR
"""
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def digest(model) -> str:
    """Of the parameters only: each DDP rank keeps its own BatchNorm statistics."""
    h = hashlib.sha256()
    for _, p in model.named_parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(Path(args.out, "config")))
    from ultralytics import YOLO  # after the group: what a Ray Train worker's training function does
    from ultralytics.utils.torch_utils import unwrap_model
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    from yolo_data.report.checkpoint import read_record

    seen = {}
    model = YOLO("yolov8n.yaml")
    model.add_callback("on_train_start", lambda t: seen.update(
        start=digest(unwrap_model(t.model)), world_size=t.world_size, model=type(t.model).__name__,
        per_rank=len(t.train_loader.sampler), batch=t.train_loader.batch_size,
        digests={name: loader.dataset.split_labels.store.names_digest()
                 for name, loader in (("train", t.train_loader), ("val", t.test_loader))}))
    model.add_callback("on_train_epoch_end", lambda t: seen.update(end=digest(unwrap_model(t.model)),
                                                                   loss=float(t.loss)))
    model.train(data=args.data, trainer=YoloDataTrainer, epochs=1, imgsz=64, batch=8, workers=0, device="cpu",
                pretrained=False, plots=False, seed=0, project=str(Path(args.out, "runs")), name="group",
                exist_ok=True, verbose=False)
    seen["last_pt"] = model.trainer.last.exists()
    seen["record"] = read_record(model.trainer.last) if rank == 0 else None  # written by rank 0 (and read after it)
    Path(args.out, f"{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
